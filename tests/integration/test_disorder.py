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
from tests.lifecycles import delivered, fleet

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
    # No duplicate alert: no check (or fleet) opened more alerts than it had page-worthy incidents
    assert all(count <= paging[key] for key, count in alerts.items()), (alerts, paging)
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
