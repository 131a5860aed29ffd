"""What the auto-resume workflow tells people, and how it reaches Slack and PagerDuty."""

from __future__ import annotations

import json
from datetime import timedelta

from fault_responder.core.domain import Severity
from fault_responder.notification.buttons import approval_id
from fault_responder.resume.budget import Ledger, plan_job
from fault_responder.resume.checkpoints import SkippedFolder, SkipReason
from fault_responder.resume.config import Mode, ResumeConfig
from fault_responder.resume.fault import Guards, GuardVerdict, ProviderInfo, Quarantine
from fault_responder.resume.jobs import FoundJobs, TaskSummary
from fault_responder.resume.notices import NoticeKind, NoticeRequest, PagerDutyAction, build_notice, pagerduty_dedup_key
from fault_responder.resume.notify import trigger_dedup_key
from fault_responder.resume.relaunch import Launch, LaunchState
from fault_responder.resume.watch import TaskWatch, WatchState
from fault_responder.routing.router import Grouping
from sandbox.standins import SANDBOX_ROUTING_KEY, block_errors, change_event_errors, event_errors
from tests.notice_renders import (
    render_change_event,
    render_resume_reply,
    render_resume_standalone,
    render_resume_trigger,
)
from tests.unit.test_resume_domain import NOW, URI, a_fault, a_job, attempt, checkpoint, search

CONFIG = ResumeConfig()
KEYS = frozenset({SANDBOX_ROUTING_KEY})


def request(kind: NoticeKind, **fields: object) -> NoticeRequest:
    return NoticeRequest.model_validate(
        {
            "kind": kind,
            "execution": "arn:aws:states:us-east-1:123456789012:execution:ResumeTraining:run-1",
            "state": "Notify",
            "fault": a_fault(),
            "config": CONFIG,
            **fields,
        }
    )


def resumable_plan(**changes: object):
    skipped = SkippedFolder(uri=f"{URI}step-000300/", step=300, reason=SkipReason.NO_MARKER, detail="no _COMPLETE")
    plan = plan_job(a_job(), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(200), skipped))
    return plan.model_copy(update=changes)


def launch(**changes: object) -> Launch:
    values = {
        "state": LaunchState.STARTED,
        "attempt": 1,
        "in_budget": 1,
        "max_attempts": 3,
        "launched": 2,
        "expected": 2,
        "checkpoint": checkpoint(200, written_ago=timedelta(minutes=23)),
        "launched_at": NOW,
    }
    return Launch.model_validate({**values, **changes})


def test_the_resumed_notice_says_from_where_how_much_work_was_lost_where_which_attempt_and_how_soon() -> None:
    # Given a fault at 10:00, a job resumed at 12:00 from step 200 (saved at 09:37, 23 minutes before the fault)
    # on two hosts, with a newer folder skipped
    watch = TaskWatch(state=WatchState.DONE, total=2, ready=2, hosts=("i-a", "i-b"))
    saved = launch(checkpoint=checkpoint(200, written_ago=timedelta(hours=2, minutes=23)))
    notice_request = request(NoticeKind.RESUMED, job=a_job(), plan=resumable_plan(), launch=saved, watch=watch)

    # When the notice is built
    notice = build_notice(notice_request, NOW)

    # Then it reads like the contract (the work lost is what was trained between the save and the fault; the time
    # to training again runs from the fault), goes to PagerDuty as a change event and pages nobody
    assert notice.title == "Resumed llm from step 200, attempt 1 of 3"
    assert notice.text.startswith(
        "Resumed llm from step 200 (saved 23m 00s before the fault, so about 23m 00s of work lost) on i-a, i-b, "
        "attempt 1 of 3 (2 task(s), RESUME_ATTEMPT=1). Back in training 2h 00m after the fault."
    )
    assert notice.details["recovery"] == {
        "fault_at": "2026-11-29T10:00:00+00:00",
        "training_again_at": "2026-11-29T12:00:00+00:00",
        "fault_to_training_seconds": 7200.0,
        "resumed_from_step": 200,
        "checkpoint_saved_at": "2026-11-29T09:37:00+00:00",
        "work_lost_seconds": 1380.0,
        "checkpoint_now_request": None,
        "checkpoint_now": None,
        "spare": None,
    }
    assert "Skipped newer incomplete checkpoints: step 300: no_marker (no _COMPLETE)." in notice.text
    assert (notice.pagerduty, notice.pages, notice.severity) == (PagerDutyAction.CHANGE, False, Severity.INFO)


def test_a_give_up_pages_critical_with_the_evidence() -> None:
    # Given a job whose budget is spent
    plan = plan_job(
        a_job(max_attempts=1),
        a_fault(),
        CONFIG,
        Ledger(job_key="k", attempts=(attempt(1, 200),)),
        search(checkpoint(200)),
    )

    # When the give-up notice is built
    notice = build_notice(request(NoticeKind.GIVE_UP, job=a_job(), plan=plan), NOW)

    # Then it pages, critical, and carries the fault, the checkpoint and the attempts
    assert notice.title == "llm NOT resumed: its resume budget is exhausted"
    assert (notice.pagerduty, notice.severity) == (PagerDutyAction.TRIGGER, Severity.CRITICAL)
    assert notice.details["fault"]["label"] == "XID 79"
    assert notice.details["checkpoint"]["step"] == 200
    assert [a["number"] for a in notice.details["attempts"]] == [1]
    assert "Attempts since the last progress: #1 from step 200: failed." in notice.text


def test_the_approval_request_carries_an_opaque_id_and_never_the_token() -> None:
    token = "AAAtask-token-bbb"
    notice = build_notice(
        request(NoticeKind.APPROVAL_REQUEST, job=a_job(mode=Mode.APPROVE), plan=resumable_plan(), task_token=token),
        NOW,
    )
    assert notice.approval_id == approval_id(token) and len(notice.approval_id) == 32
    assert token not in notice.model_dump_json()
    assert "within 1h 00m" in notice.text and "buttons below" in notice.text and notice.pagerduty is None


def test_a_mass_fault_pages_once_per_fault_not_per_job() -> None:
    guards = Guards(
        verdict=GuardVerdict.MASS_FAULT,
        provider=ProviderInfo(name="p5-training", type="EC2_AUTOSCALING", auto_repair=None),
        impaired=3,
        instances=10,
        allowed=2,
    )
    notice = build_notice(request(NoticeKind.MASS_FAULT, guards=guards), NOW)
    assert notice.text.startswith("3 of 10 instances of capacity provider p5-training went IMPAIRED within 30 minutes")
    assert notice.subject == "mass-fault" and notice.pages


def test_a_mass_fault_pages_as_the_fleet_incident_of_its_group() -> None:
    guards = Guards(
        verdict=GuardVerdict.MASS_FAULT,
        provider=ProviderInfo(name="p5-training", type="EC2_AUTOSCALING", auto_repair=None),
        impaired=3,
        instances=5,
        allowed=1,
    )
    notice = build_notice(request(NoticeKind.MASS_FAULT, guards=guards), NOW)
    fault = a_fault()
    # The default grouping: the fleet of the fault's cluster, provider and check, whichever execution sends it
    key = trigger_dedup_key(notice, fault, Grouping())
    assert key == f"fleet/{fault.cluster_name}/{fault.capacity_provider}/{fault.check_type}"
    other_host = fault.model_copy(update={"ec2_instance_id": "i-0another", "container_instance_arn": "x/other"})
    assert trigger_dedup_key(notice, other_host, Grouping()) == key
    # Another grouping names another fleet; with grouping off, one alert per provider
    assert trigger_dedup_key(notice, fault, Grouping(by=["cluster", "xid"])) == f"fleet/{fault.cluster_name}/79"
    assert trigger_dedup_key(notice, fault, Grouping(enabled=False)) == pagerduty_dedup_key(fault, "mass-fault")
    # The trigger carries that key; a job's page keeps its own
    assert render_resume_trigger(notice, fault, SANDBOX_ROUTING_KEY, NOW, key)["dedup_key"] == key
    give_up = build_notice(request(NoticeKind.GIVE_UP, job=a_job(), plan=resumable_plan()), NOW)
    assert trigger_dedup_key(give_up, fault, Grouping()) == pagerduty_dedup_key(fault, "llm")


def test_the_jobs_found_notice_lists_untouched_tasks_and_is_slack_only() -> None:
    found = FoundJobs(
        jobs=(a_job(),),
        untouched=(TaskSummary(task_arn="arn:task/gpu/0123456789abcdef", group="family:lab", note="no tags"),),
        untouched_count=3,
    )
    notice = build_notice(request(NoticeKind.JOBS_FOUND, quarantine=Quarantine(quarantined=True), found=found), NOW)
    assert notice.text.splitlines() == [
        "Quarantined i-faulty (DRAINING, so nothing new lands there).",
        "Resumable jobs: llm (1 task on i-faulty, mode auto).",
        "Not touched: 3 other task(s) on it: 0123456789ab (family:lab: no tags) and 2 more.",
    ]
    assert notice.pagerduty is None


def test_a_notice_key_is_stable_for_a_retry_and_differs_per_attempt() -> None:
    def key(attempt_number: int) -> str:
        fields = {"job": a_job(), "plan": resumable_plan(), "launch": launch(attempt=attempt_number)}
        return build_notice(request(NoticeKind.RESUMED, **fields), NOW).key

    assert key(1) == key(1) == "run-1/Notify/llm/1"
    assert key(2) == "run-1/Notify/llm/2"


def test_the_dedup_key_is_per_fault_and_job_within_pagerdutys_limit() -> None:
    assert pagerduty_dedup_key(a_fault(), "llm") == "gpu-training/ci-faulty/ACCELERATED_COMPUTE/resume/llm"
    assert len(pagerduty_dedup_key(a_fault(), "j" * 400)) == 255


# --- Rendering -------------------------------------------------------------------------------------


def approval_notice():
    return build_notice(
        request(NoticeKind.APPROVAL_REQUEST, job=a_job(), plan=resumable_plan(), task_token="T" * 2048), NOW
    )


def test_slack_messages_are_valid_block_kit_with_approve_and_reject_buttons_and_no_token() -> None:
    notice = approval_notice()
    for message in (render_resume_reply(notice, a_fault()), render_resume_standalone(notice, a_fault())):
        assert block_errors(message.blocks) == []
        (actions,) = [block for block in message.blocks if block["type"] == "actions"]
        buttons = {element["action_id"]: element["value"] for element in actions["elements"]}
        assert buttons == {"resume_approve": notice.approval_id, "resume_reject": notice.approval_id}
        assert "T" * 64 not in json.dumps([message.text, message.blocks])


def test_untrusted_text_cannot_form_slack_links_or_mentions() -> None:
    fault = a_fault().model_copy(update={"title": "<!channel> <https://evil|click>"})
    message = render_resume_standalone(approval_notice(), fault)
    assert "<!channel>" not in str(message.blocks) and "&lt;!channel&gt;" in str(message.blocks)


def test_pages_are_valid_events_v2_triggers_with_the_per_job_dedup_key() -> None:
    notice = build_notice(request(NoticeKind.GIVE_UP, job=a_job(), plan=resumable_plan()), NOW)
    event = render_resume_trigger(notice, a_fault(), SANDBOX_ROUTING_KEY, NOW)
    assert event_errors(event, KEYS) == []
    assert event["dedup_key"].endswith("/resume/llm") and event["payload"]["severity"] == "critical"


def test_informational_notices_are_valid_change_events() -> None:
    notice = build_notice(request(NoticeKind.DRY_RUN, job=a_job(), plan=resumable_plan()), NOW)
    event = render_change_event(notice, a_fault(), SANDBOX_ROUTING_KEY, NOW)
    assert change_event_errors(event, KEYS) == []
    assert "event_action" not in event and event["payload"]["summary"].startswith("Dry run: would resume llm")


def test_a_checkpoint_saved_after_the_fault_began_loses_no_work_and_names_the_request_it_answered() -> None:
    # Given the job saved step 210 for a checkpoint-now request after its host's fault began (10:00), at 10:01
    saved = checkpoint(210, written_ago=timedelta(hours=1, minutes=59)).model_copy(update={"answers": "cn-1"})
    watch = TaskWatch(state=WatchState.DONE, total=2, ready=2, hosts=("i-a",))
    notice_request = request(
        NoticeKind.RESUMED, job=a_job(), plan=resumable_plan(), launch=launch(checkpoint=saved), watch=watch
    )

    notice = build_notice(notice_request, NOW)

    assert "(saved after the fault began, answering checkpoint-now request cn-1: no work lost)" in notice.text
    assert (notice.details["recovery"]["work_lost_seconds"], notice.details["recovery"]["checkpoint_now_request"]) == (
        0.0,
        "cn-1",
    )


def test_only_a_resumed_notice_carries_recovery_figures_and_a_decision_counts_the_loss_up_to_the_fault() -> None:
    # Given a dry run decided at 12:00 for a fault at 10:00, from a checkpoint saved at 09:35
    plan = plan_job(
        a_job(), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(200, timedelta(hours=2, minutes=25)))
    )

    notice = build_notice(request(NoticeKind.DRY_RUN, job=a_job(), plan=plan), NOW)

    # Then the loss is the 25 minutes before the fault, not the two hours and 25 since the save
    assert "(saved 25m 00s before the fault, so about 25m 00s of work lost)" in notice.text
    assert "recovery" not in notice.details


def test_a_loss_under_a_second_is_said_to_the_tenth_not_as_none_at_all() -> None:
    # Given a dry run for a fault at 10:00 from a checkpoint saved 0.3 s before it
    plan = plan_job(
        a_job(), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(200, timedelta(hours=2, seconds=0.3)))
    )

    notice = build_notice(request(NoticeKind.DRY_RUN, job=a_job(), plan=plan), NOW)

    # Then the thread says the 0.3 s, where whole seconds would have said "0s" of work lost
    assert "(saved 0.3s before the fault, so about 0.3s of work lost)" in notice.text
