"""A storm spread over an organization's accounts and Regions (docs/noise.md, "Fleet incidents"): the same cluster and
capacity provider names in each, yet one fleet incident per account, Region and provider, each naming where it is,
every host named, and each resolved when its hosts recover. Through AlertService with the in-memory store, as
tests/unit/test_fleet.py runs a single account's storm; its timing, through the real path, is benchmarks/storm.py's
(--organization)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from typing import Any

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.accounts import Accounts
from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Grouping, Router, load_routing
from tests.unit.test_identity import START, fault

HOME = ("123456789012", "us-east-1")
ACCOUNTS = ("123456789012", "111111111111", "222222222222", "333333333333")
REGIONS = ("us-east-1", "us-west-2")
NAMES = {"111111111111": "prod-ml", "222222222222": "research", "333333333333": "sandbox-ml"}
HOSTS = 400


def place(number: int) -> tuple[str, str]:
    return ACCOUNTS[number % len(ACCOUNTS)], REGIONS[number // len(ACCOUNTS) % len(REGIONS)]


def recovered(number: int) -> dict[str, Any]:
    """The host's check is OK again, twenty minutes on."""
    account, region = place(number)
    event = fault(account, region, number, START + timedelta(minutes=20, seconds=number % 60), cluster="gpu-storm")
    check = event["detail"]["healthChecks"][0]
    check.update(status="OK", statusReason=None)
    event["detail"]["overallStatus"] = "OK"
    event["id"] += "-ok"
    return event


class World:
    def __init__(self) -> None:
        self.now = START + timedelta(minutes=5)
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        routing = load_routing("default.yaml")
        pagerduty = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=lambda: self.now),
            lifecycle.Settings(accounts=Accounts(home=HOME, names=NAMES)),
            clock=lambda: self.now,
            grouping=Grouping(),
            policy=Policy(pagerduty_receivers=pagerduty),
        )

    def alerts(self) -> dict[str, list[str]]:
        """PagerDuty dedup key -> its actions, in order."""
        alerts: dict[str, list[str]] = {}
        for sent in self.channels.sent:
            if sent.service == "pagerduty" and sent.action in ("trigger", "resolve"):
                alerts.setdefault(sent.target, []).append(sent.action)
        return alerts


def test_a_storm_over_four_accounts_and_two_regions_is_one_fleet_a_place_naming_every_host() -> None:
    world = World()
    # Given 400 hosts of clusters and providers of the same names in 4 accounts and 2 Regions, XID 79 within two
    # minutes, every event delivered twice, in any order
    events = [
        fault(*place(n), n, START + timedelta(seconds=120 * n // HOSTS), cluster="gpu-storm")
        for n in range(HOSTS)
        for _ in (0, 1)
    ]
    for number, event in enumerate(events):
        event["id"] += f"-copy{number % 2}"
    random.Random(11).shuffle(events)

    # When each is handled, and the sweep sends what waited to go out together
    for event in events:
        world.service.handle(event)
    world.now += timedelta(minutes=2)
    world.service.sweep(seconds_left=600)

    # Then each account, Region and provider has one fleet alert, and no more than two hosts paged on their own
    alerts = world.alerts()
    fleets = sorted(key for key in alerts if key.startswith("fleet/"))
    assert fleets == sorted(
        "fleet/gpu-storm/my-capacity-provider/ACCELERATED_COMPUTE"
        + ("" if (account, region) == HOME else f"/{account}/{region}")
        for account in ACCOUNTS
        for region in REGIONS
    )
    alone = Counter(place(int(key.split("/")[1], 16)) for key in alerts if not key.startswith("fleet/"))
    assert max(alone.values()) <= 2
    # and every host is named in Slack (a fleet's root or thread), or paged on its own
    slack = "\n".join(f"{s.text}\n{s.body}" for s in world.channels.sent if s.service == "slack")
    for number in range(HOSTS):
        assert f"i-{number:017x}" in slack or place(number) in alone, number
    # and each fleet's root says where it is, the account by its name and id
    roots = [s for s in world.channels.sent if s.service == "slack" and s.action == "post" and "FLEET" in s.text]
    assert len(roots) == len(ACCOUNTS) * len(REGIONS)
    for account in ACCOUNTS[1:]:
        assert sum(f"{NAMES[account]} ({account})" in root.text for root in roots) == len(REGIONS), account

    # When every host recovers, each fleet's alert is resolved, once
    for number in range(HOSTS):
        world.service.handle(recovered(number))
    world.now += timedelta(minutes=30)
    world.service.sweep(seconds_left=600)
    assert {key: actions[-1] for key, actions in world.alerts().items() if key.startswith("fleet/")} == dict.fromkeys(
        fleets, "resolve"
    )
