"""A move's checkpoint-now request, the domain and the steps around it (fault_responder.resume.checkpoint_now,
ResumeSteps.request_checkpoint / check_checkpoint): when a move asks, how its wait ends, and what the thread says.
The workflow itself runs these through the real definition in tests/workflow/test_checkpoint_now_moves.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from fault_responder.events.ecs import InstanceStateEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.resume.budget import Plan, PlanAction
from fault_responder.resume.checkpoint_now import (
    CheckpointRequest,
    MoveAsk,
    MoveCheckpoint,
    Placed,
    StoredRequest,
    judge_answer,
    skip_reason,
)
from fault_responder.resume.checkpoints import Checkpoint, CheckpointStoreError, MarkerKind, S3Location
from fault_responder.resume.config import Mode, ResumeConfig
from fault_responder.resume.fault import (
    PLANNED_DRAIN,
    PLANNED_MOVE,
    Fault,
    MoveRequest,
    NotResumableError,
    drain_from_event,
    fault_from_event,
    move_event,
    move_from_event,
)
from fault_responder.resume.notices import Notice, NoticeKind, build_notice
from fault_responder.resume.recovery import steps_lost
from fault_responder.resume.steps import ResumeSteps
from tests.conftest import load_event
from tests.unit.test_checkpoint_now import NOW, checkpoint
from tests.unit.test_resume_domain import check, health_event
from tests.unit.test_resume_notices import a_job, launch, request

ASKED = MoveCheckpoint(
    state=MoveAsk.ASKED,
    request_id="cn-1",
    requested_at=NOW,
    deadline=NOW + timedelta(minutes=5),
    hold_until=NOW + timedelta(minutes=16),
    stored_at=NOW.replace(microsecond=0),
    before_step=200,
)


@pytest.mark.parametrize(
    ("fault_class", "seconds", "asks"),
    [("xid_restart_app", 300, True), ("xid_critical", 300, False), ("xid_restart_app", 0, False)],
)
def test_a_move_asks_only_after_a_fault_the_job_can_save_through(fault_class: str, seconds: int, asks: bool) -> None:
    # Given the stack's defaults for which faults ask, and a wait of `seconds`
    faults = ResumeConfig().checkpoint_now_faults

    # When a move after such a fault decides
    reason = skip_reason(fault_class, "XID 13", seconds, faults)

    # Then it asks after a RESTART_APP XID only, and only when the stack waits at all; a skip says why
    assert (reason is None) == asks
    if not asks:
        assert reason and ("0" in reason if seconds == 0 else fault_class in reason)


def test_the_wait_ends_answered_when_the_newest_checkpoint_names_the_request() -> None:
    # Given a pending request and a checkpoint saved for it 40 s later
    answer = checkpoint(257, NOW + timedelta(seconds=40), answers="cn-1")

    # When one search finds it
    judged, resume_from = judge_answer(ASKED, answer, NOW + timedelta(seconds=41))

    # Then the move resumes from it, and the request says where and when
    assert resume_from == answer
    assert (judged.state, judged.answered_step, judged.answered_uri) == (MoveAsk.ANSWERED, 257, answer.uri)
    assert judged.waited_seconds == 41 and judged.searches == 1


def test_a_checkpoint_of_the_same_second_as_the_request_does_not_answer_it() -> None:
    # Given a periodic save that S3 stamped in the same second as the request (it may have begun before)
    same_second = checkpoint(250, ASKED.stored_at)

    # When a search finds it before the deadline
    judged, resume_from = judge_answer(ASKED, same_second, NOW + timedelta(seconds=3))

    # Then the wait goes on
    assert judged.state == MoveAsk.ASKED and resume_from is None


def test_at_the_deadline_the_move_falls_back_to_the_newest_complete_checkpoint() -> None:
    # Given a request nobody answered, and a periodic save older than the request
    periodic = checkpoint(240, NOW - timedelta(seconds=30))

    # When the search at the deadline finds only that
    judged, resume_from = judge_answer(ASKED, periodic, NOW + timedelta(minutes=5))

    # Then the request timed out and the move resumes from the newest complete checkpoint
    assert judged.state == MoveAsk.TIMED_OUT and judged.waited_seconds == 300
    assert resume_from == periodic


def test_periodic_saves_during_the_wait_neither_end_it_nor_answer_and_the_move_falls_back_to_the_newest() -> None:
    # Given a job that ignores the request and saves with the helper every 30 s (manifests naming no request)
    periodic = [
        checkpoint(200 + 30 * n, NOW + timedelta(seconds=30 * n)).model_copy(update={"marker": MarkerKind.MANIFEST})
        for n in range(1, 11)
    ]

    # When the wait searches every 30 s, up to the deadline
    asked = ASKED
    for n, newest in enumerate(periodic[:-1], start=1):
        asked, resume_from = judge_answer(asked, newest, NOW + timedelta(seconds=30 * n, milliseconds=500))
        # Then no periodic save ends the wait
        assert (asked.state, resume_from) == (MoveAsk.ASKED, None), newest.step
    asked, resume_from = judge_answer(asked, periodic[-1], NOW + timedelta(minutes=5))

    # And at the deadline the request timed out, and the move resumes from the newest periodic save
    assert (asked.state, asked.answered_step, asked.waited_seconds) == (MoveAsk.TIMED_OUT, None, 300)
    assert resume_from == periodic[-1] and asked.searches == 10


class _Requests:
    """The request port: places as asked, or fails as S3 may."""

    def __init__(self, error: Exception | None = None, joined: CheckpointRequest | None = None) -> None:
        self.error, self.joined = error, joined
        self.placed: list[CheckpointRequest] = []
        self.withdrawn: list[str] = []

    def place(self, location: S3Location, request: CheckpointRequest, moment: datetime) -> Placed:
        if self.error is not None:
            raise self.error
        self.placed.append(request)
        chosen = self.joined or request
        return Placed(
            chosen, StoredRequest(b"{}", '"e"', moment.replace(microsecond=0)), joined=self.joined is not None
        )

    def withdraw(self, location: S3Location, request_id: str) -> bool:
        self.withdrawn.append(request_id)
        return True


class _S3Down:
    """A checkpoint store whose every call fails, as S3 throttled past its retries."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: object, **kwargs: object) -> Any:
            raise CheckpointStoreError(f"S3 {name} failed: SlowDown")

        return fail


def _steps(requests: _Requests, *, at: datetime = NOW, checkpoints: Any = None) -> ResumeSteps:
    unused: Any = None
    return ResumeSteps(
        ecs=unused,
        store=unused,
        spare_records=unused,
        incidents=unused,
        fleets=unused,
        checkpoints=checkpoints,
        notifier=unused,
        config=ResumeConfig(),
        clock=lambda: at,
        requests=lambda: requests,
    )


def _plan() -> Plan:
    return Plan(action=PlanAction.RESUME, mode=Mode.AUTO, max_attempts=3, checkpoint=checkpoint(200, NOW))


def _fault() -> Fault:
    """A RESTART_APP XID (13): the job may still save."""
    return fault_from_event(health_event(check(reason="XID_13")), ["ACCELERATED_COMPUTE"])


def test_the_request_holds_the_job_past_the_wait_until_the_longest_stop_and_names_the_fault() -> None:
    # Given the stack's defaults (wait 300 s, poll 15 s, stop timeout 600 s)
    requests = _Requests()

    # When a move after a RESTART_APP XID asks
    plan = _steps(requests).request_checkpoint(_fault(), ResumeConfig(), a_job(), _plan(), "arn:aws:states:x:1:e:m:r-1")

    # Then one request is placed: answer within 300 s, then hold until the stop can have happened
    [placed] = requests.placed
    assert placed.deadline - placed.requested_at == timedelta(seconds=300)
    assert placed.hold_until is not None and placed.hold_until - placed.requested_at == timedelta(seconds=915)
    assert placed.requested_by == "fault-responder workflow r-1"
    asked = plan.checkpoint_now
    assert asked is not None and asked.state == MoveAsk.ASKED and asked.request_id == placed.id
    assert asked.before_step == 200 and not asked.joined


def test_a_request_s3_refuses_does_not_hold_the_move_up_and_says_why() -> None:
    # Given S3 refusing the request object
    requests = _Requests(error=CheckpointStoreError("S3 PutObject s3://b/k failed: AccessDenied"))

    # When the move asks
    plan = _steps(requests).request_checkpoint(_fault(), ResumeConfig(), a_job(), _plan(), "e")

    # Then the plan goes on to the stop with the failure, which the resumed notice names
    asked = plan.checkpoint_now
    assert asked is not None and asked.state == MoveAsk.FAILED and "AccessDenied" in asked.detail
    resumed = build_notice(request(NoticeKind.RESUMED, job=a_job(), plan=plan, launch=launch()), NOW)
    assert "Checkpoint now: the request could not be written (S3 PutObject" in resumed.text
    assert resumed.details["recovery"]["checkpoint_now"]["state"] == "failed"


def test_a_retry_does_not_ask_again() -> None:
    # Given a plan that replaces a failed attempt's tasks
    requests = _Requests()
    retry = _plan().model_copy(update={"replaces": 1})

    # When the move asks
    plan = _steps(requests).request_checkpoint(_fault(), ResumeConfig(), a_job(), retry, "e")

    # Then nothing is placed
    assert requests.placed == []
    assert plan.checkpoint_now is not None and plan.checkpoint_now.state == MoveAsk.SKIPPED


def test_a_joined_request_is_waited_for_no_longer_than_this_stack_waits() -> None:
    # Given an operator's request pending for another hour
    operator = CheckpointRequest("cn-op", NOW, NOW + timedelta(hours=1), None, "by hand", "alice")
    requests = _Requests(joined=operator)

    # When the move asks
    plan = _steps(requests).request_checkpoint(_fault(), ResumeConfig(), a_job(), _plan(), "e")

    # Then it waits for the operator's request, until its own deadline
    asked = plan.checkpoint_now
    assert asked is not None and asked.joined and asked.request_id == "cn-op"
    assert asked.deadline == NOW + timedelta(seconds=300)


def test_the_resumed_notice_says_how_the_request_ended() -> None:
    # Given plans whose request was answered, and one that timed out
    answered = ASKED.model_copy(update={"state": MoveAsk.ANSWERED, "answered_step": 257, "waited_seconds": 41.0})
    timed_out = ASKED.model_copy(update={"state": MoveAsk.TIMED_OUT, "waited_seconds": 300.0})

    # When the resumed notices are built
    texts = {
        asked.state: build_notice(
            request(
                NoticeKind.RESUMED,
                job=a_job(),
                plan=_plan().model_copy(update={"checkpoint_now": asked}),
                launch=launch(),
            ),
            NOW,
        )
        for asked in (answered, timed_out)
    }

    # Then each says it in one line, and the details carry the figures
    assert (
        "Checkpoint now: the job saved step 257 41s after request cn-1 and held there" in texts[MoveAsk.ANSWERED].text
    )
    assert "Checkpoint now: no answer to request cn-1 within 5m 00s" in texts[MoveAsk.TIMED_OUT].text
    figures = texts[MoveAsk.ANSWERED].details["recovery"]["checkpoint_now"]
    assert figures == {
        "state": "answered",
        "request": "cn-1",
        "answered_step": 257,
        "waited_seconds": 41.0,
        "detail": None,
    }


def _moved_without_an_answer(newest: Checkpoint, launched_after: timedelta) -> Notice:
    """The Resumed notice of a move whose request (made when step 200, written at NOW, was the newest complete
    checkpoint) timed out, resumed from `newest`, relaunched `launched_after` NOW."""
    timed_out = ASKED.model_copy(update={"state": MoveAsk.TIMED_OUT, "waited_seconds": 300.0, "before_at": NOW})
    plan = _plan().model_copy(update={"checkpoint_now": timed_out})
    moved = launch(checkpoint=newest, launched_at=NOW + launched_after)
    return build_notice(request(NoticeKind.RESUMED, fault=_fault(), job=a_job(), plan=plan, launch=moved), NOW)


def test_a_move_nobody_answered_says_how_many_steps_it_lost_and_what_the_count_rests_on() -> None:
    # Given a job that ignored the request and saved step 290 45 s after step 200 (90 steps in 45 s), and was
    # stopped and relaunched 10 s after that save
    newest = checkpoint(290, NOW + timedelta(seconds=45)).model_copy(update={"marker": MarkerKind.MANIFEST})

    # When the Resumed notice is built
    notice = _moved_without_an_answer(newest, timedelta(seconds=55))

    # Then it says no answer came, and the steps lost: 10 s at 2 steps a second, as an estimate saying its basis
    assert "Checkpoint now: no answer to request cn-1 within 5m 00s: moved from the newest complete" in notice.text
    assert (
        "Steps lost: about 20, trained in the 10s from the save of step 290 until the job was seen stopped (an "
        "estimate: the responder sees the job's checkpoints, not the step it had reached, and counts at their pace, "
        "90 steps in 45s)."
    ) in notice.text
    figures = notice.details["recovery"]["checkpoint_now"]
    assert (figures["state"], figures["answered_step"]) == ("timed_out", None)
    assert figures["steps_lost"] == {
        "estimate": 20,
        "after_step": 290,
        "trained_seconds": 10.0,
        "pace_steps": 90,
        "pace_seconds": 45.0,
    }


def test_with_ecs_time_of_the_stop_and_the_manifests_time_the_count_runs_from_the_save_to_the_stop() -> None:
    # Given a job that ignored the request and saved step 290 45.5 s after step 200 (its manifests' own times),
    # S3 keeping the second of each, and a relaunch 10 s after ECS told its task to stop, 1.25 s after that save
    saved = NOW + timedelta(seconds=45, milliseconds=500)
    newest = checkpoint(290, saved.replace(microsecond=0)).model_copy(
        update={"marker": MarkerKind.MANIFEST, "saved_at": saved}
    )
    timed_out = ASKED.model_copy(update={"state": MoveAsk.TIMED_OUT, "waited_seconds": 300.0, "before_at": NOW})
    plan = _plan().model_copy(update={"checkpoint_now": timed_out})
    told = saved + timedelta(seconds=1.25)
    moved = launch(checkpoint=newest, launched_at=told + timedelta(seconds=10), stopped_at=told)

    # When the Resumed notice is built
    notice = build_notice(request(NoticeKind.RESUMED, fault=_fault(), job=a_job(), plan=plan, launch=moved), NOW)

    # Then the steps lost are those of the 1.25 s from the save to the stop, at 90 steps in 45.5 s (not the 11 s
    # to the relaunch), to the tenth of a second, naming the times they rest on
    assert (
        "Steps lost: about 2, trained in the 1.2s from the save of step 290 (the manifest's created_at) until ECS "
        "told the job to stop (its stoppingAt): an estimate, as the responder sees the job's checkpoints, not the "
        "step it had reached, and counts that time at their pace, 90 steps in 45.5s."
    ) in notice.text
    figures = notice.details["recovery"]["checkpoint_now"]
    assert figures["steps_lost"]["estimate"] == 2 and figures["steps_lost"]["trained_seconds"] == 1.2
    assert figures["steps_lost_basis"] == {"saved": "manifest_created_at", "stopped": "ecs_stopping_at"}
    assert notice.details["recovery"]["work_lost_seconds"] == 1.2


def test_a_save_after_ecs_told_the_job_to_stop_lost_no_step() -> None:
    # Given a job that saved step 300 as it stopped (the helper's stop_on_sigterm), 0.4 s after ECS's stoppingAt
    told = NOW + timedelta(seconds=60)
    newest = checkpoint(300, told.replace(microsecond=0)).model_copy(
        update={"marker": MarkerKind.MANIFEST, "saved_at": told + timedelta(seconds=0.4)}
    )
    timed_out = ASKED.model_copy(update={"state": MoveAsk.TIMED_OUT, "waited_seconds": 300.0, "before_at": NOW})
    plan = _plan().model_copy(update={"checkpoint_now": timed_out})
    moved = launch(checkpoint=newest, launched_at=told + timedelta(seconds=5), stopped_at=told)

    notice = build_notice(request(NoticeKind.RESUMED, fault=_fault(), job=a_job(), plan=plan, launch=moved), NOW)

    assert "Steps lost: none (step 300 was saved after ECS told the job to stop)." in notice.text
    assert notice.details["recovery"]["checkpoint_now"]["steps_lost"]["estimate"] == 0


def test_without_a_checkpoint_since_the_request_the_steps_lost_are_not_known_and_it_says_so() -> None:
    # Given a job that saved nothing since the request: its checkpoints show no pace
    notice = _moved_without_an_answer(checkpoint(200, NOW), timedelta(seconds=55))

    assert (
        "Steps lost: not known: every step trained in the 55s from the save of step 200 until the job was seen "
        "stopped (the responder sees the job's checkpoints, not the step it had reached, and no two of them show "
        "its pace)."
    ) in notice.text
    assert notice.details["recovery"]["checkpoint_now"]["steps_lost"]["estimate"] is None


def test_an_answer_taken_by_its_time_does_not_claim_the_job_held() -> None:
    # Given a DCP checkpoint (.metadata, which cannot name a request) written 2 s after the request
    dcp = checkpoint(257, ASKED.stored_at + timedelta(seconds=2))

    # When the wait judges it, and the move is told
    judged, resume_from = judge_answer(ASKED, dcp, NOW + timedelta(seconds=3))
    plan = _plan().model_copy(update={"checkpoint_now": judged})
    notice = build_notice(request(NoticeKind.RESUMED, fault=_fault(), job=a_job(), plan=plan, launch=launch()), NOW)

    # Then it is the answer, said to be taken by its time, not a save the job held at
    assert (judged.state, judged.answered_named, resume_from) == (MoveAsk.ANSWERED, False, dcp)
    assert "Checkpoint now: step 257 was saved 3s after request cn-1, under a commit marker that cannot name" in (
        notice.text
    )
    assert "held there until it was stopped" not in notice.text
    assert notice.details["recovery"]["checkpoint_now"]["answered_named"] is False


def test_an_answer_is_judged_once_per_search_and_counted() -> None:
    # Given a request searched twice without an answer
    first, _ = judge_answer(ASKED, None, NOW + timedelta(seconds=1))
    second, _ = judge_answer(first, None, NOW + timedelta(seconds=2))

    # Then it is still asked, after two searches
    assert second.state == MoveAsk.ASKED and second.searches == 2
    assert ASKED.request().deadline == NOW + timedelta(minutes=5)


def _drain(status: str = "DRAINING", **detail: Any) -> InstanceStateEvent:
    event = parse_ecs_event(load_event("state/draining-manual.json"))
    assert isinstance(event, InstanceStateEvent)
    changed = event.detail.model_copy(update={"status": status, **detail})
    return event.model_copy(update={"detail": changed})


def test_a_drain_is_a_planned_move_named_by_its_reason_and_its_time() -> None:
    # Given a DRAINING state change, its reason ECS's, and one with neither reason nor provider
    with_reason = drain_from_event(_drain(status_reason="Scheduled maintenance"), None)
    bare = drain_from_event(_drain(status_reason=None, capacity_provider_name=None), "p5-training")

    # Then each is a planned move of its host, at the drain's time, with the provider ECS gave
    assert with_reason.planned and with_reason.fault_class == PLANNED_DRAIN and with_reason.label == "DRAINING"
    assert with_reason.title == "DRAINING (Scheduled maintenance)" and with_reason.severity.value == "info"
    updated = _drain().detail.updated_at
    assert updated is not None and with_reason.impaired_at == updated
    assert with_reason.fingerprint.endswith("/DRAINING") and with_reason.key.startswith(with_reason.fingerprint + "#")
    assert bare.title == "DRAINING (manual or scheduled)" and bare.capacity_provider == "p5-training"


@pytest.mark.parametrize(
    ("status", "provider", "why"),
    [("ACTIVE", "p", "the instance is ACTIVE, not DRAINING"), ("DRAINING", None, "belongs to no capacity provider")],
)
def test_what_is_not_a_planned_move_says_why(status: str, provider: str | None, why: str) -> None:
    with pytest.raises(NotResumableError, match=why):
        drain_from_event(_drain(status=status, capacity_provider_name=None), provider)


def test_a_search_that_fails_while_waiting_does_not_fail_the_move() -> None:
    # Given a move waiting for an answer, and S3 failing every call
    plan = _plan().model_copy(update={"checkpoint_now": ASKED})

    # When it searches before the deadline, and at it
    during = _steps(_Requests(), at=NOW + timedelta(seconds=30), checkpoints=_S3Down).check_checkpoint(a_job(), plan)
    after = _steps(_Requests(), at=NOW + timedelta(minutes=5), checkpoints=_S3Down).check_checkpoint(a_job(), plan)

    # Then it goes on waiting, the failure noted; at the deadline it times out and keeps the plan's checkpoint
    assert during.checkpoint_now is not None and during.checkpoint_now.state == MoveAsk.ASKED
    assert "SlowDown" in during.checkpoint_now.detail
    assert after.checkpoint_now is not None and after.checkpoint_now.state == MoveAsk.TIMED_OUT
    assert after.checkpoint == plan.checkpoint


def _move(**changes: Any) -> dict[str, Any]:
    request = MoveRequest(
        cluster_arn="arn:aws:ecs:us-east-1:123456789012:cluster/training",
        container_instance_arn="arn:aws:ecs:us-east-1:123456789012:container-instance/training/0a1b2c",
        ec2_instance_id="i-0abcdef1234567890",
        capacity_provider="p5-training",
        job_id="llm-7b",
        reason="ECC errors rising",
        requested_by="fault-responder move (alice)",
    )
    event = move_event(request, event_id="m-1", region="us-east-1", account="123456789012", at=NOW)
    return {**event, **changes}


def test_an_operators_move_is_a_planned_move_of_its_one_job() -> None:
    # When the workflow reads the event `fault-responder move` starts it with
    fault = move_from_event(_move())

    # Then it is a planned move of that job off that host, saying who asked and why
    assert fault.planned and fault.fault_class == PLANNED_MOVE and fault.job_id == "llm-7b"
    assert fault.title == "Moving llm-7b, asked by fault-responder move (alice): ECC errors rising"
    assert fault.host == "i-0abcdef1234567890" and fault.impaired_at == NOW
    assert fault.fingerprint.endswith("/MOVE/llm-7b")


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"source": "aws.ecs"}, "not an operator's move"),
        ({"detail": {"job_id": "x"}}, "cannot be read"),
        ({"detail": {**_move()["detail"], "cluster_arn": "arn:aws:ecs:us-east-1:1:cluster/x"}}, "cannot be read"),
        ({"detail": {**_move()["detail"], "extra": "field"}}, "cannot be read"),
        ({"detail": {**_move()["detail"], "reason": "x" * 300}}, "cannot be read"),
        ({"time": "yesterday"}, "cannot be read"),
        ({"time": "2026-12-02T10:00:00"}, "no UTC offset"),
    ],
)
def test_a_move_event_that_is_not_one_is_not_applicable_and_says_why(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(NotResumableError, match=why):
        move_from_event(_move(**changes))


@pytest.mark.parametrize(
    ("earlier", "newest_at", "expected"),
    [
        # 60 steps in 30 s, then 15 s trained after the newest save: about 30 steps
        ((200, NOW - timedelta(seconds=30)), NOW, (30, 60, timedelta(seconds=30))),
        # Rounded to the nearest step: 10 steps in 3 s, 15 s after the save: 50
        ((250, NOW - timedelta(seconds=3)), NOW, (50, 10, timedelta(seconds=3))),
        # No newer checkpoint than the earlier one, or both of one S3 second: no pace, so not known
        ((260, NOW), NOW, (None, None, None)),
        ((240, NOW), NOW, (None, None, None)),
        ((None, None), NOW, (None, None, None)),
    ],
)
def test_the_steps_lost_are_the_work_lost_at_the_pace_of_two_checkpoints(
    earlier: tuple[int | None, datetime | None], newest_at: datetime, expected: tuple[Any, ...]
) -> None:
    newest = checkpoint(260, newest_at)

    lost = steps_lost(
        newest, _fault(), earlier_step=earlier[0], earlier_at=earlier[1], stopped_at=NOW + timedelta(seconds=15)
    )

    assert lost is not None and (lost.after_step, lost.trained) == (260, timedelta(seconds=15))
    assert (lost.steps, lost.pace_steps, lost.pace_time) == expected


def test_no_steps_are_lost_by_a_save_made_when_the_job_stopped_and_none_are_counted_without_a_time() -> None:
    saved_at_stop = steps_lost(
        checkpoint(260, NOW), _fault(), earlier_step=200, earlier_at=NOW - timedelta(seconds=30), stopped_at=NOW
    )
    assert saved_at_stop is not None and (saved_at_stop.steps, saved_at_stop.trained) == (0, timedelta(0))
    assert steps_lost(checkpoint(260, None), _fault(), earlier_step=200, earlier_at=NOW, stopped_at=NOW) is None
    assert steps_lost(None, _fault(), earlier_step=200, earlier_at=NOW, stopped_at=NOW) is None
