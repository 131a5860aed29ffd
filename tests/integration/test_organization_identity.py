"""Identity across an organization end to end in the sandbox (docs/organization.md, "Identity across accounts"): three
accounts in two Regions, through template.yaml with the organization's bus, the real rules, queue and router, Slack
and PagerDuty over HTTP (the stand-ins).

The sandbox has no forwarders of its own yet: each member account's event is put on the organization's bus as its
forwarder (forwarder.yaml) sends it there, with the account and Region it happened in (sandbox/eventbridge.py), as
tests/integration/test_organization.py does.

- A fault in each account and Region reaches the one Slack channel and the one PagerDuty service of the routing file
  (`organization.yaml`), each page naming the account (its name and id) and the Region.
- The same cluster name in two accounts is two incidents, and two fleets when both storm.
- The route on `account_name` sends the sandbox account's faults to Slack only.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT
from tests.unit.test_identity import fault

TEMPLATE = load_template(ROOT / "template.yaml")
ACCOUNTS = {"111111111111": "prod-ml", "222222222222": "research", "333333333333": "sandbox-ml"}
REGIONS = ("us-west-2", "eu-west-1")
PARAMETERS = {
    "OrganizationId": "o-a1b2c3d4e5",
    "AccountNames": ",".join(f"{account}={name}" for account, name in ACCOUNTS.items()),
    "RoutingFile": "organization.yaml",
}
START = datetime.now(UTC) - timedelta(minutes=20)


def run(events: list[dict[str, Any]]) -> dict[str, Any]:
    with Sandbox(TEMPLATE, parameter_overrides=PARAMETERS) as sandbox:
        return replay(sandbox, [EventFile(Path("organization.json"), events)], Timeline(None))


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    # One fault in each account and Region, on clusters of one name ("gpu-training"); then a storm of three hosts in
    # two of the accounts, on another cluster of one name ("gpu-storm")
    events = [
        fault(account, region, 10 * number + index, START, cluster="gpu-training")
        for number, account in enumerate(ACCOUNTS)
        for index, region in enumerate(REGIONS)
    ]
    events += [
        fault(account, "us-west-2", 100 + 10 * number + host, START + timedelta(seconds=host), cluster="gpu-storm")
        for number, account in enumerate(("111111111111", "222222222222"))
        for host in range(3)
    ]
    return run(events)


def named(account: str) -> str:
    return f"{ACCOUNTS[account]} ({account})"


def roots(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for messages in report["slack"].values() for m in messages if not m.get("thread_ts")]


def test_a_fault_in_each_account_and_region_reaches_one_channel_and_one_service_naming_where_it_is(
    report: dict[str, Any],
) -> None:
    assert report["dlq"] == [] and report["errors"] == []
    assert set(report["slack"]) == {"gpu-alerts"}
    assert len({event["routing_key"] for event in _pagerduty_events(report)}) == 1

    for position, (account, name) in enumerate(ACCOUNTS.items()):
        for index, region in enumerate(REGIONS):
            number = 10 * position + index
            instance = f"{number:032x}"
            [root] = [m for m in roots(report) if instance in json.dumps(m["blocks"])]
            # The Slack root: the account by its name and id, and the Region, beside the cluster; so is its push text
            assert f"*Account*\\n{named(account)}" in json.dumps(root["blocks"])
            assert f"*Region*\\n{region}" in json.dumps(root["blocks"])
            assert f"gpu-training, account {named(account)}, {region})" in root["text"]
            pages = [a for a in report["pagerduty"] if instance in a["dedup_key"]]
            if name.startswith("sandbox-"):
                # The route on account_name: the sandbox account's faults post to Slack and page nobody
                assert pages == []
                continue
            [page] = pages
            assert f"in cluster gpu-training, account {named(account)}, {region} (IMPAIRED)" in page["summary"]
            details = page["custom_details"]
            assert (details["account"], details["account_name"], details["region"]) == (
                account,
                name,
                region,
            )


def test_the_same_cluster_name_in_two_accounts_is_two_incidents_and_two_fleets_when_both_storm(
    report: dict[str, Any],
) -> None:
    training = [i for i in report["incidents"] if i["instance"]["cluster_arn"].endswith("/gpu-training")]
    assert len(training) == len(ACCOUNTS) * len(REGIONS)
    assert len({incident["fingerprint"] for incident in training}) == len(training)
    assert {(i["instance"]["account"], i["instance"]["region"]) for i in training} == {
        (account, region) for account in ACCOUNTS for region in REGIONS
    }

    fleets = [i for i in report["incidents"] if i.get("fleet")]
    assert sorted(fleet["fingerprint"] for fleet in fleets) == [
        f"fleet/gpu-storm/my-capacity-provider/ACCELERATED_COMPUTE/{account}/us-west-2"
        for account in ("111111111111", "222222222222")
    ]
    fleet_pages = [a for a in report["pagerduty"] if a["dedup_key"].startswith("fleet/")]
    assert len(fleet_pages) == 2
    for page in fleet_pages:
        account = page["dedup_key"].split("/")[4]
        assert f"(cluster gpu-storm, account {named(account)}, us-west-2)" in page["summary"]


def _pagerduty_events(report: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    for request in report["requests"]:
        if request["service"] == "pagerduty" and isinstance(request.get("body"), dict):
            events.append(request["body"])
    assert events, "no PagerDuty event was sent"
    return events
