"""Teams Workflows cards (notification/receivers/teams): each incident step, alerts, fleets and resume notices are
messages Teams posts (the stand-in's checker: envelope, Adaptive Card schema 1.5, size), name their incident and step,
and say what they left out to fit."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta
from typing import Any

import pytest

from fault_responder.core.domain import FleetMember, FleetSummary, Incident, InstanceRef
from fault_responder.notification.receivers.teams import (
    MESSAGE_BUDGET,
    TeamsMessage,
    TeamsTarget,
    fleet_steps_that_fit,
    render_alert,
    render_fleet,
    render_fleet_steps,
    render_incident,
    render_notice,
    render_resolved,
)
from fault_responder.notification.receivers.teams.card import escape_markdown
from fault_responder.notification.render.marks import SHORTENED
from fault_responder.resume.notices import NoticeKind, build_notice
from fault_responder.resume.watch import TaskWatch, WatchState
from sandbox.standin_teams import MAX_REQUEST_BYTES, card_errors, message_errors
from tests.builders import INSTANCE, OPENED, RECOVERED, an_alert, an_incident, draining, resolved, step
from tests.unit.test_resume_domain import NOW, a_fault, a_job
from tests.unit.test_resume_notices import approval_notice, launch, request, resumable_plan

DASHBOARD = "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/gfr"


def posted(message: TeamsMessage) -> dict[str, Any]:
    """The message as Teams receives it: valid, within its size limit and the renderers' budget."""
    body = json.dumps(message.payload, allow_nan=False).encode()
    assert message_errors(json.loads(body)) == []
    assert len(body) == message.size <= MESSAGE_BUDGET < MAX_REQUEST_BYTES
    return message.card


def texts(card: dict[str, Any]) -> str:
    """Everything the card shows, as one string (its texts, facts, buttons)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("text", "title", "value", "url"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(card["body"])
    walk(card.get("actions", []))
    return "\n".join(found)


def facts(card: dict[str, Any]) -> dict[str, str]:
    sets = [element for element in card["body"] if element["type"] == "FactSet"]
    return {fact["title"]: fact["value"] for fact_set in sets for fact in fact_set["facts"]}


def test_the_opening_card_names_the_incident_and_carries_what_on_call_needs() -> None:
    incident = an_incident()

    card = posted(render_incident(incident, incident.timeline[0], dashboard_url=DASHBOARD))

    shown = texts(card)
    assert "CRITICAL · XID 79: GPU has fallen off the bus" in shown
    assert f"**Opened** · incident {escape_markdown(incident.id)}" in shown
    assert "**What to do:**" in shown and incident.runbook is not None and incident.runbook.url in shown
    assert facts(card)["Cluster"] == "gpu-training"
    assert facts(card)["EC2 instance"] == "i-0abcdef1234567890"
    assert facts(card)["Status"] == "IMPAIRED"
    assert [action["title"] for action in card["actions"]][1:] == ["Container instance", "Dashboard"]
    assert card["version"] == "1.5" and card["fallbackText"].startswith("CRITICAL · XID 79")


def test_a_drain_is_a_follow_up_card_saying_who_drains_and_why() -> None:
    incident = draining(an_incident())

    card = posted(render_incident(incident, incident.timeline[-1]))

    shown = texts(card)
    assert f"**Drain attributed** · incident {escape_markdown(incident.id)}" in shown
    assert "**Drain:** ECS auto-repair (XID 79)" in shown
    assert "**Drain reason:** INSTANCE_HEALTH" in shown
    assert facts(card)["Status"] == "DRAINING — ECS auto-repair (XID 79)"


def test_the_resolution_is_a_follow_up_card_in_green_saying_after_how_long() -> None:
    incident = resolved(draining(an_incident()))

    for message in (render_incident(incident, RECOVERED), render_resolved(incident)):
        card = posted(message)
        shown = texts(card)
        assert card["body"][0]["style"] == "good"
        assert "RESOLVED · XID 79" in shown and f"**Resolved** · incident {escape_markdown(incident.id)}" in shown
        assert "**Resolved** after 8m 30s" in shown and "**What to do:**" not in shown
    with pytest.raises(ValueError, match="still open"):
        render_resolved(an_incident())


def test_untrusted_text_cannot_form_links_or_emphasis() -> None:
    incident = an_incident(title="[click](https://evil.example) **now**", reason="_x_ <b>")

    shown = texts(posted(render_incident(incident, incident.timeline[0])))

    assert "[click](https://evil.example)" not in shown and "\\[click\\](https://evil.example) \\*\\*now\\*\\*" in shown
    assert "\\_x\\_ \\<b\\>" in shown


def test_a_card_with_far_too_much_to_say_is_cut_to_fit_and_says_so() -> None:
    quiet = {f"receiver-{n}": f"silence {n} " + "x" * 400 for n in range(200)}
    incident = dataclasses.replace(an_incident(), muted=quiet)

    card = posted(render_incident(incident, incident.timeline[0]))

    assert SHORTENED in texts(card)


def test_an_alert_with_more_details_than_fit_counts_those_left_out() -> None:
    details = {f"detail-{n:04d}": "v" * 120 for n in range(1000)}

    card = posted(render_alert(an_alert(details=details)))

    shown = facts(card)
    listed = [title for title in shown if title.startswith("detail")]
    left_out = int(re.match(r"(\d+) more details", shown["Not shown"])[1])  # type: ignore[index]
    assert listed == [f"detail-{n:04d}" for n in range(len(listed))]
    assert len(listed) + left_out == 1000 and 0 < left_out < 1000
    assert shown["Not shown"].endswith("left out to fit Teams: ECS event evt-manual has them")


def a_fleet(hosts: int, *, open_: int | None = None, name: str = "i-{:017x}") -> Incident:
    incident = an_incident()
    members = tuple(
        FleetMember(
            instance=dataclasses.replace(
                INSTANCE, container_instance_arn=f"{INSTANCE.container_instance_arn}{n}", ec2_instance_id=name.format(n)
            ),
            incident=f"{incident.id}-{n}",
            opened_at=OPENED + timedelta(seconds=n),
            closed_at=None,
            severity=incident.classification.severity,
            fault_class=incident.classification.fault_class,
            title=incident.classification.title,
            xid=79,
            phase="IMPAIRED",
            version=1,
        )
        for n in range(hosts)
    )
    fleet = FleetSummary(
        group=(("cluster", "gpu-training"), ("capacity_provider", "p5-training")),
        threshold=3,
        window_minutes=5,
        total=open_ or hosts,
        open=open_ or hosts,
        listed=members,
        first_seen=OPENED,
        last_change=OPENED + timedelta(minutes=2),
        fault=incident.classification.title,
    )
    group = InstanceRef(INSTANCE.region, INSTANCE.account, INSTANCE.cluster_arn, "", None, "p5-training")
    return dataclasses.replace(incident, id="fleet/p5@1", fingerprint="fleet/p5", instance=group, fleet=fleet)


def member_lines(card: dict[str, Any]) -> list[str]:
    return [line for line in texts(card).splitlines() if line.startswith("- i")]


def test_a_300_host_fleet_names_every_host_within_the_limit() -> None:
    card = posted(render_fleet(a_fleet(300), dashboard_url=DASHBOARD))

    lines = member_lines(card)
    assert len(lines) == 300 and lines[0].startswith("- i-00000000000000000 · IMPAIRED since 00:48:53 UTC")
    assert "more impaired not listed" not in texts(card)
    assert "**Opened** · fleet incident fleet/p5@1" in texts(card) and facts(card)["Members"] == "300 impaired of 300"


def test_a_300_host_fleet_of_long_names_fits_and_counts_the_hosts_left_out() -> None:
    card = posted(render_fleet(a_fleet(300, name="i-{:03d}" + "h" * 180)))

    lines = member_lines(card)
    (note,) = re.findall(r"…and (\d+) more impaired not listed here, left out to fit Teams", texts(card))
    assert 0 < len(lines) < 300 and len(lines) + int(note) == 300
    assert [line[:7] for line in lines] == [f"- i-{n:03d}" for n in range(len(lines))]


def test_open_members_not_read_for_the_card_are_counted_too() -> None:
    card = posted(render_fleet(a_fleet(10, open_=1200)))

    assert len(member_lines(card)) == 10 and "…and 1190 more impaired not listed here" in texts(card)


def test_a_resolved_fleet_says_all_members_recovered() -> None:
    fleet = dataclasses.replace(a_fleet(5), status="CLOSED", phase="RESOLVED", closed_at=OPENED + timedelta(hours=1))

    card = posted(render_fleet(fleet))

    assert "RESOLVED FLEET" in texts(card) and "All 5 members recovered or left the cluster." in texts(card)
    assert member_lines(card) == []


def test_fleet_member_steps_are_follow_ups_naming_the_fleet_and_every_step_handed_to_them() -> None:
    fleet = a_fleet(3)
    entries = [
        step(OPENED + timedelta(seconds=n), f"evt-{n}", "JOINED", f"i-{n:017x} joined: XID 79") for n in range(900)
    ]

    fit = fleet_steps_that_fit(fleet, entries)
    card = posted(render_fleet_steps(fleet, entries[:fit]))

    assert 0 < fit < 900
    assert f"**{fit} updates** · fleet incident fleet/p5@1" in texts(card)
    assert len([line for line in texts(card).splitlines() if line.startswith("- ")]) == fit
    assert "not shown here" not in texts(card)


def test_a_resume_approval_request_says_where_it_is_answered() -> None:
    card = posted(render_notice(approval_notice(), a_fault(), dashboard_url=DASHBOARD))

    shown = texts(card)
    assert "Training auto-resume · " in shown and "Approve or Reject from the Slack message" in shown
    assert facts(card)["Job"] == "llm" and facts(card)["Host"] == a_fault().host
    assert "T" * 64 not in json.dumps(card)


def test_a_resumed_notice_says_where_the_job_runs_now() -> None:
    watch = TaskWatch(state=WatchState.DONE, total=2, ready=2, hosts=("i-a", "i-b"))
    notice = build_notice(
        request(NoticeKind.RESUMED, job=a_job(), plan=resumable_plan(), launch=launch(), watch=watch), NOW
    )

    card = posted(render_notice(notice, a_fault()))

    assert facts(card)["Runs now on"] == "i-a, i-b (attempt 1)"


def test_the_checker_refuses_what_teams_refuses() -> None:
    card = render_incident(an_incident()).card

    assert card_errors({**card, "msteams": {"width": "Full"}}) != []
    assert card_errors({**card, "version": "1.6"}) != []
    assert card_errors({**card, "body": [{"type": "FactSet", "facts": [{"title": "a"}]}]}) != []
    assert message_errors({"type": "message", "attachments": [{"contentType": "text/plain", "content": card}]}) != []


def test_the_routing_target_names_a_url_of_the_secret_and_nothing_else() -> None:
    assert TeamsTarget.model_validate({"webhook": "oncall"}).webhook == "oncall"
    with pytest.raises(ValueError):
        TeamsTarget.model_validate({"webhook": "https://example.com/hook"})
    with pytest.raises(ValueError):
        TeamsTarget.model_validate({"webhook": "oncall", "url": "x"})
