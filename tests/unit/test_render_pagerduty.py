"""PagerDuty Events API v2 rendering: keys, summary, severity, evidence, limits."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from fault_responder.domain import (
    Alert,
    Classification,
    DrainAttribution,
    DrainCause,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    Severity,
    TimelineEntry,
)
from fault_responder.render.pagerduty import render_alert_trigger, render_resolve, render_trigger
from sandbox.standins import event_errors

ROUTING_KEY = "0123456789abcdef0123456789abcdef"
OPENED = datetime(2026, 4, 11, 0, 48, 53, tzinfo=UTC)
INSTANCE = InstanceRef(
    region="us-west-2",
    account="123456789012",
    cluster_arn="arn:aws:ecs:us-west-2:123456789012:cluster/gpu-training",
    container_instance_arn="arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-training/a1b2c3d4e5f6",
    ec2_instance_id="i-0abcdef1234567890",
    capacity_provider="p5-training",
)
CONSOLE_URL = (
    "https://us-west-2.console.aws.amazon.com/ecs/v2/clusters/gpu-training"
    "/infrastructure/container-instances/a1b2c3d4e5f6?region=us-west-2"
)


def an_incident(
    *, severity: Severity = Severity.CRITICAL, title: str = "XID 79: GPU has fallen off the bus"
) -> Incident:
    return Incident(
        fingerprint="gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE",
        instance=INSTANCE,
        check_type="ACCELERATED_COMPUTE",
        status="OPEN",
        classification=Classification(FaultClass.XID_CRITICAL, severity, title, xid=79, reason="XID_79"),
        opened_at=OPENED,
        phase="IMPAIRED",
        last_status_change=OPENED,
        timeline=[TimelineEntry(OPENED, "evt-impaired", "IMPAIRED", "ACCELERATED_COMPUTE IMPAIRED: XID_79")],
    )


def draining(incident: Incident) -> Incident:
    at = OPENED + timedelta(minutes=1)
    return dataclasses.replace(
        incident,
        phase="DRAINING",
        last_status_change=at,
        drain=DrainAttribution(DrainCause.ECS_AUTO_REPAIR, "ECS auto-repair (XID 79)", "INSTANCE_HEALTH"),
        timeline=[*incident.timeline, TimelineEntry(at, "evt-draining", "DRAINING", "ECS set the instance DRAINING")],
    )


def an_alert() -> Alert:
    return Alert(
        event_id="evt-spot",
        kind=EventKind.TASK_STOPPED,
        instance=INSTANCE,
        severity=Severity.WARNING,
        title="Task stopped by a Spot interruption",
        text="trainer-7 stopped: Spot interruption",
        at=OPENED,
        fault_class=FaultClass.TASK_INTERRUPTION,
        details={"task": "trainer-7"},
    )


def test_trigger_targets_the_incident_alert_by_fingerprint() -> None:
    event = render_trigger(an_incident(), ROUTING_KEY)

    assert event["event_action"] == "trigger"
    assert event["routing_key"] == ROUTING_KEY
    assert event["dedup_key"] == "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE"


def test_trigger_is_a_valid_events_v2_event() -> None:
    assert event_errors(render_trigger(draining(an_incident()), ROUTING_KEY), frozenset({ROUTING_KEY})) == []


def test_summary_names_the_fault_instance_cluster_and_phase() -> None:
    summary = render_trigger(an_incident(), ROUTING_KEY)["payload"]["summary"]

    assert summary == "XID 79: GPU has fallen off the bus on i-0abcdef1234567890 in cluster gpu-training (IMPAIRED)"


def test_summary_of_a_draining_incident_names_the_drain_attribution() -> None:
    summary = render_trigger(draining(an_incident()), ROUTING_KEY)["payload"]["summary"]

    assert summary.endswith("(DRAINING, ECS auto-repair (XID 79))")


def test_summary_is_truncated_to_1024_characters() -> None:
    summary = render_trigger(an_incident(title="XID 79: " + "z" * 2000), ROUTING_KEY)["payload"]["summary"]

    assert len(summary) == 1024
    assert summary.endswith("…")


@pytest.mark.parametrize("severity", list(Severity))
def test_payload_severity_is_the_classification_severity(severity: Severity) -> None:
    assert render_trigger(an_incident(severity=severity), ROUTING_KEY)["payload"]["severity"] == severity.value


def test_payload_names_source_component_group_class_and_time() -> None:
    payload = render_trigger(draining(an_incident()), ROUTING_KEY)["payload"]

    assert payload["source"] == "i-0abcdef1234567890"
    assert payload["component"] == "ACCELERATED_COMPUTE"
    assert payload["group"] == "p5-training"
    assert payload["class"] == "xid_critical"
    assert payload["timestamp"] == "2026-04-11T00:49:53+00:00"


def test_source_falls_back_to_the_container_instance_and_group_is_omitted() -> None:
    instance = dataclasses.replace(INSTANCE, ec2_instance_id=None, capacity_provider=None)

    payload = render_trigger(dataclasses.replace(an_incident(), instance=instance), ROUTING_KEY)["payload"]

    assert payload["source"] == "a1b2c3d4e5f6"
    assert "group" not in payload


def test_custom_details_carry_the_evidence() -> None:
    details = render_trigger(draining(an_incident()), ROUTING_KEY)["payload"]["custom_details"]

    assert details["xid"] == 79
    assert details["reason"] == "XID_79"
    assert details["cluster_arn"] == INSTANCE.cluster_arn
    assert details["container_instance_arn"] == INSTANCE.container_instance_arn
    assert details["capacity_provider"] == "p5-training"
    assert details["phase"] == "DRAINING"
    assert details["drain_cause"] == "ecs_auto_repair"
    assert details["drain_label"] == "ECS auto-repair (XID 79)"
    assert details["drain_reason"] == "INSTANCE_HEALTH"
    assert details["opened_at"] == "2026-04-11T00:48:53+00:00"
    assert details["fingerprint"] == "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE"
    assert [step["phase"] for step in details["timeline"]] == ["IMPAIRED", "DRAINING"]


def test_custom_details_keep_only_the_last_five_steps() -> None:
    incident = an_incident()
    incident.timeline = [TimelineEntry(OPENED, f"evt-{i}", f"STEP_{i}", "step") for i in range(12)]

    timeline = render_trigger(incident, ROUTING_KEY)["payload"]["custom_details"]["timeline"]

    assert [step["phase"] for step in timeline] == ["STEP_7", "STEP_8", "STEP_9", "STEP_10", "STEP_11"]


def test_trigger_links_to_the_console() -> None:
    event = render_trigger(an_incident(), ROUTING_KEY)

    assert event["links"] == [
        {"href": CONSOLE_URL, "text": "ECS container instance a1b2c3d4e5f6 in cluster gpu-training"}
    ]
    assert event["client"] == "GPU Fault Responder"
    assert event["client_url"] == CONSOLE_URL


def test_resolve_carries_only_the_key_pair() -> None:
    assert render_resolve(an_incident(), ROUTING_KEY) == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE",
    }


def test_dedup_key_longer_than_255_characters_is_refused() -> None:
    incident = dataclasses.replace(an_incident(), fingerprint="f" * 256)

    with pytest.raises(ValueError, match="dedup_key"):
        render_trigger(incident, ROUTING_KEY)
    with pytest.raises(ValueError, match="dedup_key"):
        render_resolve(incident, ROUTING_KEY)


def test_alert_trigger_uses_the_given_key_and_the_alert_severity() -> None:
    event = render_alert_trigger(an_alert(), ROUTING_KEY, "standalone/evt-spot")

    assert event["dedup_key"] == "standalone/evt-spot"
    assert event["payload"]["severity"] == "warning"
    assert event["payload"]["class"] == "task_interruption"
    assert event["payload"]["component"] == "task_stopped"
    assert event["payload"]["custom_details"]["details"] == {"task": "trainer-7"}
    assert event_errors(event, frozenset({ROUTING_KEY})) == []


def test_alert_trigger_refuses_a_dedup_key_longer_than_255_characters() -> None:
    with pytest.raises(ValueError, match="dedup_key"):
        render_alert_trigger(an_alert(), ROUTING_KEY, "k" * 256)


def test_long_untrusted_detail_strings_are_clipped() -> None:
    incident = an_incident()
    incident.classification = dataclasses.replace(incident.classification, reason="r" * 100_000)

    details = render_trigger(incident, ROUTING_KEY)["payload"]["custom_details"]

    assert len(details["reason"]) == 1024
