"""50 incidents, every delivery shuffled (and some duplicated), through the whole sandbox: the rules, the alert
queue, the real handler in batches, moto, and the Slack and PagerDuty stand-ins over HTTP.

The generator is tests/lifecycles.py; tests/unit/test_order_independence.py checks the same properties on
thousands of smaller fleets in memory. Here, three seeds of a 50-instance fleet, end to end: no alert left
open, no fault unseen by on-call, no duplicate alert.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT
from tests.lifecycles import Episode, Lifecycle, Report, delivered, events, fleet

TEMPLATE = load_template(ROOT / "template.yaml")
FLEET = 50


@pytest.mark.parametrize("seed", [11, 22, 33])
def test_fifty_incidents_delivered_in_any_order_leave_nothing_open_unseen_or_doubled(seed: int) -> None:
    # Given 50 instances' lifecycles, every event delivered at least once, some twice, all shuffled
    lifecycles, events = fleet(seed, FLEET)
    shuffled = delivered(events, random.Random(seed))
    with Sandbox(TEMPLATE) as sandbox:
        report = replay(sandbox, [EventFile(Path(f"fleet-{seed}.json"), shuffled)], Timeline(None))

    incidents = [i for i in report["incidents"] if not i.get("fleet")]
    fleets = [i for i in report["incidents"] if i.get("fleet")]
    roots = Counter(
        (message.get("metadata") or {}).get("event_payload", {}).get("id")
        for messages in report["slack"].values()
        for message in messages
        if not message["thread_ts"] and (message.get("metadata") or {}).get("event_type") == "gpu_fault_incident"
    )
    alerts = Counter(alert["dedup_key"] for alert in report["pagerduty"])
    open_alerts = {alert["dedup_key"] for alert in report["pagerduty"] if alert["status"] != "resolved"}
    paging = Counter(i["fingerprint"] for i in [*incidents, *fleets] if "gpu-oncall" in i["receivers"])
    relapses: Counter[str] = Counter()
    for incident in [*incidents, *fleets]:
        if "gpu-oncall" in incident["receivers"]:
            relapses[incident["fingerprint"]] += incident.get("relapses") or 0
    print(
        f"seed {seed}: {len(events)} events, {len(shuffled)} deliveries, {len(incidents)} incidents, "
        f"{len(fleets)} fleet incidents, {sum(roots.values())} Slack roots, {sum(alerts.values())} PagerDuty alerts "
        f"({len(open_alerts)} open at the end)"
    )
    # Then nothing was lost or refused
    assert report["dlq"] == [] and report["errors"] == []
    # No fault unseen by on-call: every incident has exactly one Slack root, unless it joined a fleet incident
    # before it had one (then the fleet's root and thread name it); every fleet incident has exactly one root
    assert set(roots.values()) == {1}
    assert all(roots[i["id"]] == 1 or i["fleet_id"] for i in incidents), "an incident nobody was told of"
    assert all(roots[f["id"]] == 1 for f in fleets)
    assert set(roots) <= {i["id"] for i in [*incidents, *fleets]}
    # No duplicate alert: no check (or fleet) opened more alerts than it had page-worthy incidents, but for a relapse
    # learned after its incident's resolve had gone out. The events are a month old, so every OK has held for the
    # hold-down by the time it is read, and the incident resolves at once; a relapse within the hold-down that is read
    # after that (a later batch, or the same batch's other thread once the resolve is sent) reopens the incident, and
    # PagerDuty, which cannot reopen a resolved alert, opens the next one on the same dedup key (docs/noise.md).
    # Whether the resolve goes out first depends on the threads' timing, so each relapse may add one alert.
    assert all(count <= paging[key] + relapses[key] for key, count in alerts.items()), (alerts, paging, relapses)
    # No alert left open for what is over, and nothing open and page-worthy without an open alert: its own, or
    # (for an incident that joined a fleet incident) the fleet's
    open_paging = [i for i in [*incidents, *fleets] if i["status"] == "OPEN" and "gpu-oncall" in i["receivers"]]
    assert open_alerts <= {i["fingerprint"] for i in open_paging}
    fleet_keys = {f["id"]: f["fingerprint"] for f in fleets}
    for incident in open_paging:
        covered = incident["fingerprint"] in open_alerts
        if incident.get("fleet_id"):
            covered = covered or fleet_keys.get(incident["fleet_id"]) in open_alerts
        assert covered, incident["id"]
    # And an incident is closed if and only if its check's last fact is a recovery
    for lifecycle in lifecycles:
        for check in lifecycle.checks:
            mine = [i for i in incidents if i["fingerprint"].endswith(f"/ci{lifecycle.number:05d}/{check}")]
            last = max(mine, key=lambda i: i["opened_at"])
            assert (last["status"] == "CLOSED") == lifecycle.last_is_recovery(check), (lifecycle, last["id"])


def test_a_relapse_read_after_its_incident_was_resolved_pages_again_in_the_same_incident() -> None:
    # Given a DAEMON fault, its OK and a relapse two minutes later (within the 10-minute hold-down), read one after
    # the other a month late: the OK has held long enough when it is read, so the incident resolves at once
    lifecycle = Lifecycle(
        7,
        {
            "DAEMON": (
                Episode((Report(1, "IMPAIRED", "XID_79"),), recovered=3),
                Episode((Report(5, "IMPAIRED", "XID_79"),), recovered=None),
            )
        },
    )
    fault, ok, relapse = events(lifecycle)
    with Sandbox(TEMPLATE) as sandbox:
        files = [EventFile(Path(f"{number}.json"), [event]) for number, event in enumerate([fault, ok, relapse])]
        report = replay(sandbox, files, Timeline(None))

    # Then the relapse is the same incident, open again, and PagerDuty, whose resolved alert cannot reopen, gets
    # the next alert on the same dedup key
    key = "gpu-fleet/ci00007/DAEMON"
    [incident] = [i for i in report["incidents"] if i["fingerprint"] == key]
    assert (incident["status"], incident["relapses"]) == ("OPEN", 1)
    actions = [
        request["body"]["event_action"]
        for request in report["requests"]
        if request["path"].endswith("/v2/enqueue") and request["body"].get("dedup_key") == key
    ]
    assert actions == ["trigger", "resolve", "trigger"]
    assert [alert["status"] for alert in report["pagerduty"] if alert["dedup_key"] == key] == ["resolved", "triggered"]
    # And Slack keeps one root for it, whose thread says it relapsed
    roots = [
        message
        for messages in report["slack"].values()
        for message in messages
        if not message["thread_ts"]
        and (message.get("metadata") or {}).get("event_payload", {}).get("id") == incident["id"]
    ]
    assert len(roots) == 1
    replies = [m for messages in report["slack"].values() for m in messages if m["thread_ts"] == roots[0]["ts"]]
    assert any("relapse 1" in reply["text"] for reply in replies), [reply["text"] for reply in replies]
