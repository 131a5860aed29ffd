"""PagerDuty Events API v2 rendering: keys, summary, severity, evidence, limits."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fault_responder.core.domain import EventKind, FaultClass, Severity
from fault_responder.notification.render.pagerduty import (
    MAX_EVENT_BYTES,
    render_alert_trigger,
    render_resolve,
    render_trigger,
)
from fault_responder.routing.router import RouteRunbook
from fault_responder.routing.runbooks import CLASS_RUNBOOKS, NVIDIA_XID_CATALOG, XID_RUNBOOKS, runbook_for
from sandbox.standins import event_errors
from tests.builders import INSTANCE, OPENED, ROUTING_KEY, an_alert, an_incident, draining, step

CONSOLE_URL = (
    "https://us-west-2.console.aws.amazon.com/ecs/v2/clusters/gpu-training"
    "/infrastructure/container-instances/a1b2c3d4e5f6?region=us-west-2"
)
SPOT_INTERRUPTION = an_alert(
    event_id="evt-spot",
    kind=EventKind.TASK_STOPPED,
    severity=Severity.WARNING,
    title="Task stopped by a Spot interruption",
    text="trainer-7 stopped: Spot interruption",
    fault_class=FaultClass.TASK_INTERRUPTION,
    drain=None,
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


def test_a_long_title_is_shortened_in_the_summary_which_still_says_where_and_is_whole_in_the_details() -> None:
    # Given a title of 1,000 characters: with where it is, more than PagerDuty's summary holds
    title = "XID 79: " + "z" * 992

    # When the trigger is rendered
    payload = render_trigger(an_incident(title=title), ROUTING_KEY)["payload"]

    # Then the summary is 1,024 characters: the title cut saying so, then the instance, cluster and phase
    assert len(payload["summary"]) == 1024
    assert payload["summary"].endswith("z… (shortened) on i-0abcdef1234567890 in cluster gpu-training (IMPAIRED)")
    assert payload["custom_details"]["title"] == title


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
    incident.timeline = [step(OPENED, f"evt-{i}", f"STEP_{i}", "step") for i in range(12)]

    timeline = render_trigger(incident, ROUTING_KEY)["payload"]["custom_details"]["timeline"]

    assert [step["phase"] for step in timeline] == ["STEP_7", "STEP_8", "STEP_9", "STEP_10", "STEP_11"]


def test_custom_details_count_the_steps_they_leave_out_and_say_where_they_are() -> None:
    incident = an_incident()
    incident.timeline = [step(OPENED, f"evt-{i}", f"STEP_{i}", "step") for i in range(12)]

    details = render_trigger(incident, ROUTING_KEY)["payload"]["custom_details"]

    assert details["timeline_not_listed"] == "7 earlier steps: the Slack thread has each one"


def test_custom_details_of_a_short_timeline_leave_nothing_out() -> None:
    details = render_trigger(draining(an_incident()), ROUTING_KEY)["payload"]["custom_details"]

    assert "timeline_not_listed" not in details


def test_trigger_links_to_the_console_and_the_runbook() -> None:
    event = render_trigger(an_incident(), ROUTING_KEY)

    assert event["links"] == [
        {"href": CONSOLE_URL, "text": "ECS container instance a1b2c3d4e5f6 in cluster gpu-training"},
        {"href": NVIDIA_XID_CATALOG, "text": "NVIDIA Xid catalog: Xid 79"},
    ]
    assert event["client"] == "GPU Fault Responder"
    assert event["client_url"] == CONSOLE_URL


def test_resolve_carries_only_the_key_pair() -> None:
    assert render_resolve(an_incident().dedup_key, ROUTING_KEY) == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE",
    }


def test_dedup_key_longer_than_255_characters_is_refused() -> None:
    incident = dataclasses.replace(an_incident(), fingerprint="f" * 256)

    with pytest.raises(ValueError, match="dedup_key"):
        render_trigger(incident, ROUTING_KEY)
    with pytest.raises(ValueError, match="dedup_key"):
        render_resolve(incident.dedup_key, ROUTING_KEY)


def test_alert_trigger_uses_the_given_key_and_the_alert_severity() -> None:
    event = render_alert_trigger(SPOT_INTERRUPTION, ROUTING_KEY, "standalone/evt-spot")

    assert event["dedup_key"] == "standalone/evt-spot"
    assert event["payload"]["severity"] == "warning"
    assert event["payload"]["class"] == "task_interruption"
    assert event["payload"]["component"] == "task_stopped"
    assert event["payload"]["custom_details"]["details"] == {"task": "trainer-7"}
    assert event_errors(event, frozenset({ROUTING_KEY})) == []


def test_alert_trigger_refuses_a_dedup_key_longer_than_255_characters() -> None:
    with pytest.raises(ValueError, match="dedup_key"):
        render_alert_trigger(SPOT_INTERRUPTION, ROUTING_KEY, "k" * 256)


def test_long_untrusted_detail_strings_are_clipped() -> None:
    incident = an_incident()
    incident.classification = dataclasses.replace(incident.classification, reason="r" * 100_000)

    details = render_trigger(incident, ROUTING_KEY)["payload"]["custom_details"]

    assert len(details["reason"]) == 1024
    assert details["reason"].endswith("r… (shortened)")


# --- Runbooks --------------------------------------------------------------------------------------------------------


def test_trigger_says_what_to_do_first_in_the_custom_details() -> None:
    details = render_trigger(an_incident(), ROUTING_KEY)["payload"]["custom_details"]

    assert next(iter(details)) == "what_to_do"
    assert details["what_to_do"] == XID_RUNBOOKS[79].action


def test_a_route_runbook_is_the_trigger_link_and_what_to_do() -> None:
    override = RouteRunbook(url="https://wiki.example.com/gpu", action="Page the hardware team.")
    incident = dataclasses.replace(an_incident(), runbook=runbook_for(FaultClass.XID_CRITICAL, 79, override=override))

    event = render_trigger(incident, ROUTING_KEY)

    assert event["links"][1] == {"href": "https://wiki.example.com/gpu", "text": "Runbook (wiki.example.com)"}
    assert event["payload"]["custom_details"]["what_to_do"] == "Page the hardware team."
    assert event_errors(event, frozenset({ROUTING_KEY})) == []


def test_a_notice_trigger_links_to_its_runbook_and_says_what_to_do() -> None:
    event = render_alert_trigger(SPOT_INTERRUPTION, ROUTING_KEY, "standalone/evt-spot")

    runbook = CLASS_RUNBOOKS[FaultClass.TASK_INTERRUPTION]
    assert event["links"] == [
        {"href": CONSOLE_URL, "text": "ECS container instance a1b2c3d4e5f6 in cluster gpu-training"},
        {"href": runbook.url, "text": "ECS: stopped task errors"},
    ]
    assert event["payload"]["custom_details"]["what_to_do"] == runbook.action


def test_a_trigger_without_a_runbook_links_only_to_the_console() -> None:
    event = render_trigger(dataclasses.replace(an_incident(), runbook=None), ROUTING_KEY)

    assert [link["href"] for link in event["links"]] == [CONSOLE_URL]
    assert "what_to_do" not in event["payload"]["custom_details"]


# --- Nothing left out in silence, nothing over a limit ---------------------------------------------------------------


def test_a_notice_with_more_details_than_an_event_lists_counts_the_rest() -> None:
    alert = dataclasses.replace(SPOT_INTERRUPTION, details={f"key-{i}": f"value-{i}" for i in range(80)})

    details = render_alert_trigger(alert, ROUTING_KEY, "standalone/evt-spot")["payload"]["custom_details"]

    assert list(details["details"]) == [f"key-{i}" for i in range(50)]
    assert details["details_not_listed"] == (
        "30 more details, left out to keep the event small: ECS event evt-spot has them"
    )


def test_detail_keys_are_cut_too_and_two_that_cut_alike_both_stay() -> None:
    alert = dataclasses.replace(SPOT_INTERRUPTION, details={"k" * 5000 + "1": "one", "k" * 5000 + "2": "two"})

    listed = render_alert_trigger(alert, ROUTING_KEY, "standalone/evt-spot")["payload"]["custom_details"]["details"]

    assert list(listed.values()) == ["one", "two"]
    assert all(len(key) <= 1024 and "… (shortened)" in key for key in listed)


def test_an_event_of_long_escaped_text_is_built_again_with_shorter_strings_to_stay_within_512_kb() -> None:
    # Given a notice whose 50 details each have a key and a value of 1,024 characters that JSON escapes to 12 bytes
    wide = "\U0001f680" * 1100
    alert = dataclasses.replace(SPOT_INTERRUPTION, details={f"{i}{wide}": wide for i in range(50)})

    # When its trigger is rendered
    event = render_alert_trigger(alert, ROUTING_KEY, "standalone/evt-spot")

    # Then it is within PagerDuty's limit as sent, every detail still listed, each string saying it was cut
    assert len(json.dumps(event).encode()) <= MAX_EVENT_BYTES
    listed = event["payload"]["custom_details"]["details"]
    assert len(listed) == 50
    assert all(value.endswith("… (shortened)") and len(value) == 256 for value in listed.values())
    assert event_errors(event, frozenset({ROUTING_KEY})) == []


def test_source_component_and_group_are_names_of_at_most_255_characters() -> None:
    instance = dataclasses.replace(INSTANCE, ec2_instance_id="i-" + "0" * 600, capacity_provider="p" * 600)
    incident = dataclasses.replace(an_incident(check_type="C" * 600), instance=instance, fingerprint="f")

    payload = render_trigger(incident, ROUTING_KEY)["payload"]

    assert [len(payload[name]) for name in ("source", "component", "group")] == [255, 255, 255]
    assert all(payload[name].endswith("… (shortened)") for name in ("source", "component", "group"))


def test_an_instance_arn_with_no_id_still_gives_pagerduty_a_source() -> None:
    # Given a container instance ARN ending in "/" (it passes the event's validation) and no EC2 instance id
    arn = "arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-training/"
    instance = dataclasses.replace(INSTANCE, container_instance_arn=arn, ec2_instance_id=None)

    # When the trigger is rendered
    event = render_trigger(dataclasses.replace(an_incident(), instance=instance), ROUTING_KEY)

    # Then PagerDuty gets the ARN as the source rather than a blank one it would refuse
    assert event["payload"]["source"] == arn
    assert event_errors(event, frozenset({ROUTING_KEY})) == []
