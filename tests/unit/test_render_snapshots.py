"""Reviewed snapshots of every rendered Slack and PagerDuty payload: a formatting change is a diff.

Regenerate with `UPDATE_SNAPSHOTS=1 pytest tests/unit/test_render_snapshots.py`, then read the diff
as a reviewer would: these files are what on-call sees.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fault_responder.core.domain import DRILL_MARK, Alert, EntryKind, FaultClass, Incident, Severity
from fault_responder.events.cloudwatch import AlarmContributorStateChangeEvent, AlarmStateChangeEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import FOUND_BY_SWEEP, InstanceRecord
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.pagerduty import render_alert_trigger, render_resolve, render_trigger
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
from fault_responder.routing.router import Router, RouteRunbook, load_routing
from fault_responder.routing.runbooks import runbook_for
from tests.builders import (
    OPENED,
    RECOVERED,
    RESOLVED_AT,
    ROUTING_KEY,
    XID_79_TITLE,
    an_alert,
    an_incident,
    draining,
    resolved,
    step,
)
from tests.conftest import load_event

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots" / "render"
DASHBOARD_URL = (
    "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2#dashboards/dashboard/gfr-us-west-2"
)
"""What DASHBOARD_URL is for a stack named gfr: every message at the top of a channel links to it."""


def xid79_draining() -> Incident:
    return draining(
        an_incident(),
        at=OPENED + timedelta(minutes=1, seconds=4),
        text="ECS set the instance DRAINING; tasks are being stopped",
    )


def xid79_resolved() -> Incident:
    replaced = step(RESOLVED_AT, "evt-inactive", "INACTIVE", "The instance left the cluster; a replacement is running")
    return resolved(xid79_draining(), by=replaced, reason="instance replaced by ECS auto-repair")


def xid79_with_a_route_runbook() -> Incident:
    override = RouteRunbook(
        url="https://wiki.example.com/gpu/xid-79",
        action="Follow the GPU team's XID 79 runbook; page #gpu-hardware if more than one host is hit.",
    )
    return dataclasses.replace(an_incident(), runbook=runbook_for(FaultClass.XID_CRITICAL, 79, override=override))


def xid79_with_a_long_history() -> Incident:
    """Tasks stopped one after another, then the drain: more steps than the root repeats and PagerDuty lists."""
    incident = an_incident()
    stopped = [
        step(
            OPENED + timedelta(seconds=5 * n),
            f"evt-task-{n}",
            "TASK_STOPPED",
            f"Task trainer-{n} stopped",
            EntryKind.TASK,
        )
        for n in range(1, 9)
    ]
    incident = dataclasses.replace(incident, timeline=[*incident.timeline, *stopped])
    return draining(incident, at=OPENED + timedelta(minutes=1))


def xid79_with_long_untrusted_text() -> Incident:
    """A title too long for a header and a reason too long for a field: both cut, each saying so."""
    reason = "XID_79 " + "GPU 0000:8A:00.0 has fallen off the bus; " * 60
    title = "XID 79: GPU has fallen off the bus (" + "reported again by the driver, " * 5 + "see the reason)"
    return an_incident(reason=reason, title=title)


def alarm_incident(*samples: str) -> Incident:
    """The incident the sample alarm state changes make, derived as the router derives it."""
    record: InstanceRecord | None = None
    for sample in samples:
        event = parse_ecs_event(load_event(sample))
        assert isinstance(event, AlarmStateChangeEvent | AlarmContributorStateChangeEvent)
        facts = lifecycle.facts_from_event(event)
        assert facts is not None
        record = record or InstanceRecord(facts.instance.container_instance_arn, facts.instance)
        record.add(facts)
    assert record is not None
    [incident] = lifecycle.derive(record, lifecycle.Settings(), Router(load_routing("default.yaml")).route).incidents
    return incident


def xid79_found_by_the_sweep() -> Incident:
    """No event announced it: the reconciliation sweep found it in ECS's answer (its facts carry the run's id)."""
    incident = an_incident()
    timeline = [dataclasses.replace(entry, event_id="reconcile:2026-04-11T01:05:00Z") for entry in incident.timeline]
    return dataclasses.replace(incident, found=FOUND_BY_SWEEP, timeline=timeline)


def xid79_drill() -> Incident:
    """A synthetic drill (docs/drills.md) run by alice: its title says DRILL, its facts are kept under `#drill`, its
    dedup key begins with `drill/`, as the router derives them."""
    incident = an_incident()
    instance = dataclasses.replace(
        incident.instance, container_instance_arn=incident.instance.container_instance_arn + DRILL_MARK, drill=True
    )
    fingerprint = f"drill/{incident.fingerprint}"
    return dataclasses.replace(
        incident,
        id=incident.id.replace(incident.fingerprint, fingerprint),
        fingerprint=fingerprint,
        instance=instance,
        classification=dataclasses.replace(incident.classification, title=f"DRILL: {XID_79_TITLE}"),
        route="drills",
        started_by="alice",
    )


def xid79_drill_resolved() -> Incident:
    ok = dataclasses.replace(RECOVERED, at=OPENED + timedelta(seconds=3))
    return resolved(xid79_drill(), by=ok)


def slack(message: SlackMessage) -> dict[str, Any]:
    return {"text": message.text, "blocks": message.blocks}


def incident_payloads(incident: Incident) -> dict[str, Any]:
    latest = incident.timeline[-1]
    pagerduty = (
        render_trigger(incident, ROUTING_KEY) if incident.is_open else render_resolve(incident.dedup_key, ROUTING_KEY)
    )
    return {
        "slack_root": slack(render_incident_root(incident, dashboard_url=DASHBOARD_URL)),
        "slack_thread_reply": slack(render_timeline_reply(incident, latest)),
        "slack_webhook": slack(render_webhook_step(incident, latest, dashboard_url=DASHBOARD_URL)),
        "pagerduty": pagerduty,
    }


def alert_payloads(alert: Alert) -> dict[str, Any]:
    return {
        "slack_alert": slack(render_alert(alert, dashboard_url=DASHBOARD_URL)),
        "slack_corrected_in_place": slack(
            render_superseded_alert(alert, xid79_draining(), dashboard_url=DASHBOARD_URL)
        ),
        "pagerduty": render_alert_trigger(alert, ROUTING_KEY, f"standalone/{alert.event_id}"),
    }


CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "xid79_opened": lambda: incident_payloads(an_incident()),
    "xid79_draining_auto_repair": lambda: incident_payloads(xid79_draining()),
    "xid79_resolved": lambda: incident_payloads(xid79_resolved()),
    "xid79_route_runbook": lambda: incident_payloads(xid79_with_a_route_runbook()),
    "xid79_found_by_the_sweep": lambda: incident_payloads(xid79_found_by_the_sweep()),
    "xid79_long_history": lambda: incident_payloads(xid79_with_a_long_history()),
    "xid79_long_untrusted_text": lambda: incident_payloads(xid79_with_long_untrusted_text()),
    "xid79_drill": lambda: incident_payloads(xid79_drill()),
    "xid79_drill_resolved": lambda: incident_payloads(xid79_drill_resolved()),
    "xid79_drill_naming_nobody": lambda: incident_payloads(dataclasses.replace(xid79_drill(), started_by=None)),
    "manual_drain_alert": lambda: alert_payloads(
        an_alert(event_id="evt-manual-drain", details={"status": "DRAINING", "running tasks": "3"})
    ),
    "xid13_restart_app_warning": lambda: incident_payloads(
        an_incident(
            fault_class=FaultClass.XID_RESTART_APP,
            severity=Severity.WARNING,
            title="XID 13: Graphics Engine Exception (restart the application)",
            xid=13,
            reason="XID_13",
        ),
    ),
    "xid999_unknown": lambda: incident_payloads(
        an_incident(
            fault_class=FaultClass.XID_UNKNOWN,
            severity=Severity.ERROR,
            title="XID 999: unknown XID",
            xid=999,
            reason="XID_999",
        ),
    ),
    "gpu_temperature_alarm": lambda: incident_payloads(alarm_incident("alarm/gpu-temperature-alarm.json")),
    "gpu_temperature_alarm_ok": lambda: incident_payloads(
        alarm_incident("alarm/gpu-temperature-alarm.json", "alarm/gpu-temperature-ok.json")
    ),
    "gpu_temperature_contributor": lambda: incident_payloads(
        alarm_incident("alarm/gpu-temperature-contributor-alarm.json")
    ),
    "gpu_temperature_contributor_ok": lambda: incident_payloads(
        alarm_incident("alarm/gpu-temperature-contributor-alarm.json", "alarm/gpu-temperature-contributor-ok.json")
    ),
    "daemon_unhealthy": lambda: incident_payloads(
        an_incident(
            check_type="DAEMON",
            fault_class=FaultClass.DAEMON,
            severity=Severity.ERROR,
            title="Daemon task unhealthy",
            xid=None,
            reason="Daemon task: EXAMPLE-4af2-4b3c-b9c1-EXAMPLEb2bbf is unhealthy",
        ),
    ),
}


def updating() -> bool:
    return os.environ.get("UPDATE_SNAPSHOTS") == "1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_the_reviewed_snapshot(case: str) -> None:
    # Given a fixed domain object, When it is rendered for Slack and PagerDuty
    rendered = json.loads(json.dumps(CASES[case]()))
    path = SNAPSHOTS / f"{case}.json"

    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rendered, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    # Then it is exactly what was reviewed
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1 and review the new file")
    assert rendered == json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", ["xid79_drill", "xid79_drill_resolved"])
def test_a_drill_snapshot_says_drill_first_that_no_action_is_needed_and_who_started_it_when(case: str) -> None:
    # Given the reviewed snapshot of a drill's messages
    snapshot = json.loads((SNAPSHOTS / f"{case}.json").read_text(encoding="utf-8"))
    root, reply = snapshot["slack_root"], snapshot["slack_thread_reply"]
    started = "alice, <!date^1775868533^{date_short_pretty} {time_secs}|2026-04-11 00:48:53 UTC>"

    # Then the root's fallback, its header and each thread reply begin with DRILL, and the root says nobody is to act,
    # who started it and when, and (while open) what ends it; a real fault's action is framed as such
    for message in (root, reply):
        assert message["text"].startswith("DRILL")
        assert "no action needed" in message["text"]
    assert root["blocks"][0]["text"]["text"].startswith("DRILL · ")
    drill_section = root["blocks"][1]["text"]["text"]
    assert drill_section.startswith("*DRILL — no action needed:* this is an exercise, not a real fault.")
    assert f"*Started by:* {started}" in drill_section
    assert reply["blocks"][0]["text"]["text"].startswith("*DRILL — no action needed* · ")
    assert f"Drill started by {started}" in reply["blocks"][1]["elements"][0]["text"]
    assert "What to do" not in json.dumps(root)
    if case == "xid79_drill":
        assert "*How it ends:* By itself: the `fault-responder drill` that started it sends" in drill_section
        assert "*In a real fault, not this drill:* The GPU fell off the bus" in root["blocks"][2]["text"]["text"]

        # And its page's summary begins with DRILL and says the same, and so do its details, first
        payload = snapshot["pagerduty"]["payload"]
        assert payload["summary"].startswith("DRILL: XID 79")
        assert (
            "no action needed: this is an exercise, not a real fault, started by alice at 2026-04-11T00:48:53"
            in (payload["summary"])
        )
        details = payload["custom_details"]
        assert next(iter(details.items())) == (
            "drill",
            "DRILL — no action needed: this is an exercise, not a real fault",
        )
        assert (details["drill_started_by"], details["drill_started_at"]) == ("alice", "2026-04-11T00:48:53+00:00")
        assert details["drill_how_it_ends"].startswith("By itself: the `fault-responder drill` that started it")
        assert "what_to_do" not in details and details["in_a_real_fault"].startswith("The GPU fell off the bus")


def test_every_snapshot_file_belongs_to_a_case() -> None:
    orphans = sorted(path.stem for path in SNAPSHOTS.glob("*.json") if path.stem not in CASES)

    assert orphans == [], f"snapshots with no case (delete them or add the case): {orphans}"
