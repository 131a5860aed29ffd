"""The webhook's payloads: Alertmanager's webhook format, version 4, for each incident change, within its size."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from fault_responder.core.domain import FaultClass, FleetMember, FleetSummary, Incident, Severity
from fault_responder.notification.receivers.webhook.payload import (
    MAX_BODY_BYTES,
    ZERO_TIME,
    Change,
    change_for_step,
    encode,
    render_alert,
    render_incident,
    rfc3339,
)
from sandbox.standin_webhook import payload_errors
from tests.builders import INSTANCE, OPENED, RESOLVED_AT, XID_79_TITLE, an_alert, an_incident, draining, resolved

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def _only_alert(payload: dict) -> dict:
    [alert] = payload["alerts"]
    return alert


def test_an_opened_incident_is_one_firing_alert_labelled_as_routes_match_it() -> None:
    incident = an_incident()

    payload = render_incident(incident, receiver="ops-tool", change=Change.OPENED, external_url="https://dash")

    assert payload_errors(payload) == []
    assert (payload["version"], payload["status"], payload["receiver"]) == ("4", "firing", "ops-tool")
    assert (payload["truncatedAlerts"], payload["externalURL"]) == (0, "https://dash")
    assert payload["groupLabels"] == {"alertname": "ECSInstanceHealthImpaired", "incident": incident.id}
    assert payload["groupKey"] == f'{{}}:{{alertname="ECSInstanceHealthImpaired", incident="{incident.id}"}}'
    alert = _only_alert(payload)
    assert alert["status"] == "firing"
    assert alert["startsAt"] == "2026-04-11T00:48:53Z"
    assert alert["endsAt"] == ZERO_TIME
    assert alert["generatorURL"] == INSTANCE.console_url
    assert re.fullmatch(r"[0-9a-f]{16}", alert["fingerprint"])
    labels = alert["labels"]
    assert {name: labels[name] for name in ("cluster", "instance", "xid", "severity", "account", "region")} == {
        "cluster": "gpu-training",
        "instance": "a1b2c3d4e5f6",
        "xid": "79",
        "severity": "critical",
        "account": "123456789012",
        "region": "us-west-2",
    }
    assert "drain_attribution" not in labels  # empty labels are left out, as Alertmanager treats them
    annotations = alert["annotations"]
    assert annotations["summary"].startswith(XID_79_TITLE + " on i-0abcdef1234567890 in cluster gpu-training")
    assert annotations["change"] == "opened"
    assert annotations["what_to_do"] == incident.runbook.action  # type: ignore[union-attr]
    assert annotations["runbook_url"] == incident.runbook.url  # type: ignore[union-attr]
    assert payload["commonAnnotations"] == annotations and payload["commonLabels"] == labels


def test_a_drain_attributed_says_why_the_instance_drains_and_keeps_its_alert() -> None:
    opened = render_incident(an_incident(), receiver="ops", change=Change.OPENED)
    incident = draining(an_incident())
    entry = incident.timeline[-1]

    payload = render_incident(incident, receiver="ops", change=change_for_step(incident, entry), step=entry)

    assert payload_errors(payload) == []
    alert = _only_alert(payload)
    assert alert["annotations"]["change"] == "drain_attributed"
    assert alert["annotations"]["drain"] == "ECS auto-repair (XID 79)"
    assert alert["annotations"]["drain_reason"] == "INSTANCE_HEALTH"
    assert "DRAINING: ECS set the instance DRAINING" in alert["annotations"]["step"]
    assert alert["labels"]["drain_attribution"] == "ecs_auto_repair"
    # The same alert as when it opened: a consumer updates it rather than opening another.
    assert alert["fingerprint"] == _only_alert(opened)["fingerprint"]
    assert payload["groupKey"] == opened["groupKey"]


def test_a_resolved_incident_ends_its_alert_and_no_longer_says_what_to_do() -> None:
    incident = resolved(draining(an_incident()))

    payload = render_incident(incident, receiver="ops", change=change_for_step(incident, incident.timeline[-1]))

    assert payload_errors(payload) == []
    alert = _only_alert(payload)
    assert (payload["status"], alert["status"]) == ("resolved", "resolved")
    assert alert["endsAt"] == rfc3339(RESOLVED_AT) == "2026-04-11T00:57:23Z"
    assert alert["annotations"]["change"] == "resolved"
    assert "what_to_do" not in alert["annotations"]
    assert "RESOLVED after 8m 30s" in alert["annotations"]["summary"]
    assert "Resolved at 2026-04-11T00:57:23Z: health check OK" in alert["annotations"]["description"]


def test_a_notice_is_one_firing_alert_of_its_own_group() -> None:
    payload = render_alert(an_alert(), receiver="ops")

    assert payload_errors(payload) == []
    alert = _only_alert(payload)
    assert alert["labels"]["notice"] == "drain:evt-manual"
    assert alert["annotations"]["change"] == "notice"
    assert alert["annotations"]["drain"] == "Manual or scheduled drain"


def _fleet(hosts: int, *, listed: int | None = None, open_: bool = True) -> Incident:
    """A fleet incident of `hosts` impaired instances, `listed` of them (all by default) read for its payload."""
    members = tuple(
        FleetMember(
            instance=dataclasses.replace(
                INSTANCE,
                container_instance_arn=f"{INSTANCE.container_instance_arn[:-12]}{index:012x}",
                ec2_instance_id=f"i-{index:017x}",
            ),
            incident=f"gpu-training/{index:012x}/ACCELERATED_COMPUTE@{OPENED.isoformat()}",
            opened_at=OPENED + timedelta(seconds=index),
            closed_at=None,
            severity=Severity.CRITICAL,
            fault_class=FaultClass.XID_CRITICAL,
            title=XID_79_TITLE,
            xid=79,
            phase="IMPAIRED",
            version=1,
        )
        for index in range(hosts if listed is None else listed)
    )
    summary = FleetSummary(
        group=(
            ("cluster", "gpu-training"),
            ("capacity_provider", "p5-training"),
            ("check_type", "ACCELERATED_COMPUTE"),
        ),
        threshold=3,
        window_minutes=10,
        total=hosts,
        open=hosts if open_ else 0,
        listed=members if open_ else (),
        first_seen=OPENED,
        last_change=OPENED + timedelta(seconds=hosts),
        fault=XID_79_TITLE,
    )
    where = dataclasses.replace(INSTANCE, container_instance_arn="", ec2_instance_id=None)
    incident = an_incident()
    fleet = dataclasses.replace(incident, id="fleet/p5@1", fingerprint="fleet/p5", instance=where, fleet=summary)
    if open_:
        return fleet
    return dataclasses.replace(fleet, status="CLOSED", phase="RESOLVED", closed_at=RESOLVED_AT)


def test_a_fleet_of_300_is_its_own_alert_then_one_per_host_and_max_alerts_counts_the_rest() -> None:
    payload = render_incident(_fleet(300), receiver="ops", change=Change.OPENED, max_alerts=100)

    assert payload_errors(payload) == []
    assert len(encode(payload)) <= MAX_BODY_BYTES
    alerts = payload["alerts"]
    assert len(alerts) == 100
    assert payload["truncatedAlerts"] == 301 - 100  # the fleet's own alert and 300 hosts, never left out in silence
    fleet, *hosts = alerts
    assert fleet["annotations"]["summary"].startswith("[FLEET] 300 of 300 instances of p5-training")
    assert fleet["annotations"]["hosts_not_listed"].startswith("201 impaired hosts not in this payload")
    assert "instance" not in fleet["labels"]
    # The oldest hosts first, each its own alert with its own instance and fingerprint.
    assert [host["labels"]["ec2_instance"] for host in hosts[:2]] == ["i-00000000000000000", "i-00000000000000001"]
    assert len({alert["fingerprint"] for alert in alerts}) == 100
    assert payload["commonLabels"]["fleet"] == "true"
    assert payload["commonLabels"]["cluster"] == "gpu-training"


@pytest.mark.parametrize(("hosts", "listed"), [(300, 300), (2000, 300)])
def test_with_no_max_alerts_a_fleet_is_cut_to_the_body_limit_and_counts_every_host_left_out(
    hosts: int, listed: int
) -> None:
    payload = render_incident(_fleet(hosts, listed=listed), receiver="ops", change=Change.UPDATED, max_alerts=0)

    assert payload_errors(payload) == []
    size = len(encode(payload))
    assert size <= MAX_BODY_BYTES
    assert len(payload["alerts"]) + payload["truncatedAlerts"] == 1 + hosts
    assert payload["truncatedAlerts"] >= hosts - listed


def test_hostile_text_everywhere_still_fits_and_says_it_was_shortened() -> None:
    huge = "\u2603<&>" * 20_000
    incident = dataclasses.replace(
        an_incident(reason=huge, title=huge),
        id=huge,
        instance=dataclasses.replace(
            INSTANCE, ec2_instance_id=huge, capacity_provider=huge, cluster_arn=f"arn:aws:ecs:::cluster/{huge}"
        ),
    )

    payload = render_incident(incident, receiver="ops", change=Change.OPENED)

    assert payload_errors(payload) == []
    assert len(encode(payload)) <= MAX_BODY_BYTES
    alert = _only_alert(payload)
    assert alert["annotations"]["summary"].endswith("… (shortened)")
    assert alert["labels"]["cluster"].endswith("… (shortened)")
    assert alert["labels"]["incident"] == payload["groupLabels"]["incident"]  # the group's identity is cut once


def test_a_resolved_fleet_resolves_its_own_alert() -> None:
    payload = render_incident(_fleet(5, open_=False), receiver="ops", change=Change.RESOLVED)

    assert payload_errors(payload) == []
    assert payload["status"] == "resolved"
    alert = _only_alert(payload)
    assert alert["annotations"]["summary"].startswith("RESOLVED [FLEET] all 5 instances")
    assert payload["truncatedAlerts"] == 0


def test_times_are_rfc3339_as_alertmanager_writes_them() -> None:
    assert rfc3339(datetime(2026, 12, 5, 0, 23, 41, tzinfo=UTC)) == "2026-12-05T00:23:41Z"
    assert rfc3339(datetime(2026, 12, 5, 0, 23, 41, 500_000, tzinfo=UTC)) == "2026-12-05T00:23:41.5Z"
    in_paris = datetime(2026, 12, 5, 2, 23, 41, 120, tzinfo=timezone(timedelta(hours=1)))
    assert rfc3339(in_paris) == "2026-12-05T01:23:41.00012Z"
    assert _RFC3339.match(rfc3339(in_paris))


def test_the_stand_in_refuses_what_departs_from_the_format() -> None:
    good = render_incident(an_incident(), receiver="ops", change=Change.OPENED)
    alert = _only_alert(good)

    assert payload_errors({**good, "version": 4}) == ["/version is not a str"]
    assert payload_errors({**good, "status": "open"}) == ["status 'open' is not firing or resolved"]
    assert payload_errors({**good, "alerts": [{**alert, "endsAt": "yesterday"}]}) == [
        "/alerts/0/endsAt is not an RFC 3339 time"
    ]
    assert payload_errors({**good, "commonLabels": {}}) == [
        "commonLabels is not what every alert's labels have in common"
    ]
    assert payload_errors({**good, "extra": 1}) == ["/extra is not documented"]
    assert payload_errors({k: v for k, v in good.items() if k != "groupKey"}) == ["/groupKey is missing"]


def test_the_pages_example_is_what_the_renderer_sends() -> None:
    incident = draining(an_incident())
    incident.route = "page-critical-and-error"
    dashboard = "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2#dashboards/dashboard/gpu-fault-responder"
    entry = incident.timeline[-1]
    page = (Path(__file__).resolve().parents[2] / "docs/webhook.md").read_text(encoding="utf-8")
    [example] = re.findall(r"^```json\n(.*?)^```$", page, flags=re.DOTALL | re.MULTILINE)

    payload = render_incident(
        incident, receiver="ops-tool", change=change_for_step(incident, entry), step=entry, external_url=dashboard
    )

    assert json.loads(example) == payload
