"""Identity across an organization (docs/organization.md, "Identity"): account and Region are labels that routes,
silences, inhibition and grouping match; the same names in two accounts are two incidents, two fleets and two alerts;
keys stay as they were for the stack's own account and Region; pages say where, by the account's name and id.

Through AlertService with the in-memory store and recording channels: each event handled as the router handles it.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.accounts import SINGLE_ACCOUNT, AccountNamesError, Accounts, accounts_of, parse_account_names
from fault_responder.core.domain import InstanceRef
from fault_responder.incidents import lifecycle
from fault_responder.incidents.lifecycle import fingerprint
from fault_responder.noise.fleet import fingerprint as fleet_fingerprint
from fault_responder.noise.fleet import group_arn, group_from_labels
from fault_responder.noise.policy import Policy
from fault_responder.noise.silences import new_silence
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels, Sent
from fault_responder.resume.fault import Guards, GuardVerdict, ProviderInfo
from fault_responder.resume.notices import NoticeKind, build_notice
from fault_responder.resume.notify import trigger_dedup_key
from fault_responder.routing.matchers import incident_labels, parse_matchers
from fault_responder.routing.router import Grouping, Router, RoutingConfig
from tests.conftest import health_check, load_event, vary
from tests.notice_renders import render_resume_standalone, render_resume_trigger
from tests.unit.test_resume_domain import NOW, a_fault
from tests.unit.test_resume_notices import request

START = datetime(2026, 4, 11, 1, 0, tzinfo=UTC)
HOME = ("123456789012", "us-east-1")
PROD = "111111111111"
SANDBOX = "222222222222"
NAMES = {PROD: "prod-ml", SANDBOX: "sandbox-ml"}
ORGANIZATION = Accounts(home=HOME, names=NAMES)

ROUTING: dict[str, Any] = {
    "receivers": {
        "gpu-alerts": {"slack": {"channel": "#gpu-alerts"}},
        "gpu-oncall": {"pagerduty": {"service": "gpu-oncall"}},
    },
    "routes": [
        {
            "name": "sandbox-accounts-post-only",
            "match": {"account_name": "sandbox-*"},
            "receivers": ["gpu-alerts"],
            "runbook": {"action": "A sandbox account: look in the morning."},
        },
        {"name": "everything-pages", "receivers": ["gpu-alerts", "gpu-oncall"]},
    ],
}


def fault(account: str, region: str, number: int, at: datetime = START, *, cluster: str = "my-cluster") -> dict:
    """XID 79 on instance `number` of `cluster` in `account` and `region` (the same cluster and provider names in every
    account; a container instance's id is ECS's own, unique, so tests give each account's instances numbers of their
    own)."""
    base = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(base, lastStatusChange=stamp, lastUpdated=stamp, statusReason="XID_79")
    event = vary(
        event,
        event_id=f"{account}-{region}-{number}-{stamp}",
        time=stamp,
        clusterArn=f"arn:aws:ecs:{region}:{account}:cluster/{cluster}",
        containerInstanceArn=f"arn:aws:ecs:{region}:{account}:container-instance/{cluster}/{number:032x}",
        ec2InstanceId=f"i-{number:017x}",
    )
    event.update(account=account, region=region)
    return event


class World:
    def __init__(self, accounts: Accounts, routing: dict[str, Any] | None = None, threshold: int = 3) -> None:
        self.now = START + timedelta(minutes=5)
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        config = RoutingConfig.model_validate(routing or ROUTING)
        self.grouping = Grouping(threshold=threshold)
        pagerduty = frozenset(name for name, r in config.receivers.items() if r.pagerduty is not None)
        self.silences: list[Any] = []
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(config),
            ReceiverCourier(self.channels, clock=lambda: self.now),
            lifecycle.Settings(accounts=accounts),
            clock=lambda: self.now,
            grouping=self.grouping,
            policy=Policy(
                silencer=self._silenced,
                inhibit_rules=tuple(config.inhibit_rules),
                pagerduty_receivers=pagerduty,
            ),
        )

    def _silenced(self, labels: Any, now: datetime) -> str | None:
        matching = [s for s in self.silences if s.is_silencing(labels, now)]
        return f"silenced by {matching[0].id}" if matching else None

    def handle(self, *events: dict[str, Any]) -> None:
        for event in events:
            self.service.handle(event)

    def incidents(self) -> list[Any]:
        found = []
        for arn in self.store.open_records():
            record = self.store.load(arn)
            if record is not None:
                found.extend(self.service.derive(record).incidents)
        return found

    def sent(self, service: str, receiver: str | None = None) -> list[Sent]:
        return [s for s in self.channels.sent if s.service == service and receiver in (None, s.receiver)]


# --- Account names ----------------------------------------------------------------------------------------------------


def test_account_names_are_id_equals_name_pairs_and_anything_else_is_refused_naming_the_entry() -> None:
    assert parse_account_names("") == {}
    assert parse_account_names(f" {PROD}=prod-ml , {SANDBOX} = sandbox ml ") == {PROD: "prod-ml", SANDBOX: "sandbox ml"}
    for bad, said in [
        ("prod-ml", "not id=name"),
        (f"{PROD[:-1]}=x", "12-digit"),
        (f"{PROD}=", "1 to 50"),
        (f"{PROD}={'x' * 51}", "1 to 50"),
        (f"{PROD}=a=b", "without ="),
        (f"{PROD}=tab\there", "printable"),
        (f"{PROD}=one,{PROD}=two", "named twice"),
    ]:
        with pytest.raises(AccountNamesError, match=said):
            parse_account_names(bad)


def test_a_name_comes_from_the_map_then_the_lookup_and_else_the_id_alone_and_only_in_an_organization() -> None:
    asked: list[str] = []

    def lookup(account: str) -> str | None:
        asked.append(account)
        return {"333333333333": "research\x07 "}.get(account)

    accounts = Accounts(home=HOME, names=NAMES, lookup=lookup)
    assert accounts.name(PROD) == "prod-ml"
    assert accounts.name("333333333333") == "research"  # what Organizations said, kept printable
    assert accounts.name("444444444444") == ""
    assert accounts.name("not-an-id") == ""
    assert asked == ["333333333333", "444444444444"]
    instance = InstanceRef("eu-west-1", PROD, "arn:c", "arn:i", None, None)
    where = accounts.where(instance)
    assert where is not None and str(where) == "account prod-ml (111111111111), eu-west-1"
    # A single-account stack: no home, no names, nothing says where
    assert SINGLE_ACCOUNT.where(instance) is None
    assert Accounts(names=NAMES, lookup=lookup).name("333333333333") == ""
    assert accounts_of(False, "", "", "garbage", lambda: lookup) is SINGLE_ACCOUNT
    with pytest.raises(RuntimeError, match="ACCOUNT_NAMES"):
        accounts_of(True, HOME[0], HOME[1], "garbage", lambda: lookup)


# --- Keys: the same names in two accounts, and the home's unchanged ---------------------------------------------------


def test_the_same_cluster_in_two_accounts_is_two_incidents_each_labelled_with_its_account_and_region() -> None:
    world = World(ORGANIZATION)

    world.handle(fault(PROD, "us-west-2", 1), fault(SANDBOX, "us-west-2", 2))

    incidents = sorted(world.incidents(), key=lambda i: i.instance.account)
    assert len({i.id for i in incidents}) == len({i.fingerprint for i in incidents}) == 2
    labels = [{k: incident_labels(i)[k] for k in ("cluster", "account", "account_name", "region")} for i in incidents]
    assert labels == [
        {"cluster": "my-cluster", "account": PROD, "account_name": "prod-ml", "region": "us-west-2"},
        {"cluster": "my-cluster", "account": SANDBOX, "account_name": "sandbox-ml", "region": "us-west-2"},
    ]


def test_keys_built_from_shared_names_gain_the_account_and_region_only_away_from_home() -> None:
    grouping = Grouping()
    labels = {"cluster": "gpu", "capacity_provider": "p5", "check_type": "ACCELERATED_COMPUTE"}
    at_home = {**labels, "account": HOME[0], "region": HOME[1]}
    elsewhere = {**labels, "account": PROD, "region": HOME[1]}
    other_region = {**labels, "account": HOME[0], "region": "eu-west-1"}

    single = group_from_labels(at_home, grouping, SINGLE_ACCOUNT)
    assert group_from_labels(at_home, grouping, ORGANIZATION) == single
    assert group_arn(single) == "group:cluster=gpu;capacity_provider=p5;check_type=ACCELERATED_COMPUTE"
    assert fleet_fingerprint(single) == "fleet/gpu/p5/ACCELERATED_COMPUTE"
    keys = {group_arn(group_from_labels(x, grouping, ORGANIZATION)) for x in (at_home, elsewhere, other_region)}
    assert len(keys) == 3
    assert fleet_fingerprint(group_from_labels(elsewhere, grouping, ORGANIZATION)) == (
        f"fleet/gpu/p5/ACCELERATED_COMPUTE/{PROD}/{HOME[1]}"
    )
    # Grouping by account names it first (by id, whatever the name), and never twice
    by_name = Grouping(by=["account_name", "cluster"])
    assert group_from_labels(elsewhere, by_name, ORGANIZATION) == (
        ("account", PROD),
        ("cluster", "gpu"),
        ("region", HOME[1]),
    )


def test_an_alarm_of_a_member_account_has_a_key_of_its_own_and_the_homes_is_unchanged() -> None:
    def alarm(account: str) -> InstanceRef:
        arn = f"arn:aws:cloudwatch:us-east-1:{account}:alarm:gpu-fault-responder.gpu-temperature"
        return InstanceRef("us-east-1", account, "", arn, None, None)

    single = fingerprint(alarm(HOME[0]), "ALARM_GPU_TEMPERATURE")
    assert single == "cloudwatch-alarm/us-east-1/gpu-fault-responder.gpu-temperature"
    assert fingerprint(alarm(HOME[0]), "ALARM_GPU_TEMPERATURE", ORGANIZATION) == single
    assert fingerprint(alarm(PROD), "ALARM_GPU_TEMPERATURE", ORGANIZATION) == (
        f"cloudwatch-alarm/{PROD}/us-east-1/gpu-fault-responder.gpu-temperature"
    )
    # A drill names a made-up instance: away from home its key names the account and Region too
    drill = InstanceRef("us-west-2", PROD, "arn:aws:ecs:us-west-2:1:cluster/c", "arn:x/drill-1#drill", None, None, True)
    assert fingerprint(drill, "ACCELERATED_COMPUTE") == "drill/c/drill-1/ACCELERATED_COMPUTE"
    assert (
        fingerprint(drill, "ACCELERATED_COMPUTE", ORGANIZATION)
        == f"drill/{PROD}/us-west-2/c/drill-1/ACCELERATED_COMPUTE"
    )


def test_a_storm_in_two_accounts_with_the_same_names_is_two_fleets_and_the_homes_keeps_its_single_account_key() -> None:
    world = World(ORGANIZATION)
    events = [fault(account, HOME[1], base + n, START + timedelta(seconds=n)) for account, base in
              ((HOME[0], 0), (PROD, 100)) for n in range(6)]  # fmt: skip
    random.Random(3).shuffle(events)

    world.handle(*events)

    home = (
        ("cluster", "my-cluster"),
        ("capacity_provider", "my-capacity-provider"),
        ("check_type", "ACCELERATED_COMPUTE"),
    )
    member = (*home, ("account", PROD), ("region", HOME[1]))
    for group, account in ((home, HOME[0]), (member, PROD)):
        head = world.service.load_fleets(group_arn(group))
        assert head is not None, group
        [fleet] = world.service.derive_fleet(head).incidents
        assert fleet.fleet is not None and fleet.fleet.total == 6
        assert {m.instance.account for m in fleet.fleet.listed} == {account}
        assert fleet.where is not None and fleet.where.account == account
    assert world.service.load_fleets(group_arn(home)).arn == (  # type: ignore[union-attr]
        "group:cluster=my-cluster;capacity_provider=my-capacity-provider;check_type=ACCELERATED_COMPUTE"
    )


# --- Routes, runbooks, silences and inhibition on account -------------------------------------------------------------


def test_a_route_on_account_name_sends_the_sandbox_accounts_faults_to_slack_only_with_its_own_runbook() -> None:
    world = World(ORGANIZATION)

    world.handle(fault(PROD, "us-west-2", 1), fault(SANDBOX, "eu-west-1", 2))

    by_account = {i.instance.account: i for i in world.incidents()}
    assert by_account[PROD].receivers == ["gpu-alerts", "gpu-oncall"]
    assert by_account[SANDBOX].receivers == ["gpu-alerts"]
    assert by_account[SANDBOX].route == "sandbox-accounts-post-only"
    assert by_account[SANDBOX].runbook is not None
    assert by_account[SANDBOX].runbook.action == "A sandbox account: look in the morning."
    assert by_account[PROD].runbook is not None and "sandbox" not in by_account[PROD].runbook.action
    paged = [s for s in world.sent("pagerduty") if s.action == "trigger"]
    assert [PROD in s.body for s in paged] == [True]
    assert len([s for s in world.sent("slack") if s.action == "post"]) == 2


def test_a_silence_on_an_account_holds_back_that_accounts_faults_alone() -> None:
    world = World(ORGANIZATION)
    world.silences = [
        new_silence(
            parse_matchers([f"account={SANDBOX}"]), ends_at=START + timedelta(hours=2), created_by="t", comment="c",
            now=START,
        )
    ]  # fmt: skip

    world.handle(fault(PROD, "us-west-2", 1), fault(SANDBOX, "us-west-2", 2))

    muted = {i.instance.account: bool(i.muted) for i in world.incidents()}
    assert muted == {PROD: False, SANDBOX: True}
    assert len([s for s in world.sent("slack") if s.action == "post"]) == 1


def test_an_inhibition_may_name_the_account_and_region_among_its_equal_labels() -> None:
    routing = {
        **ROUTING,
        "inhibit_rules": [
            {
                "name": "a-critical-gpu-fault-mutes-the-daemon",
                "source_matchers": ["severity=critical"],
                "target_matchers": ["check_type=DAEMON"],
                "equal": ["account", "account_name", "region", "instance"],
            }
        ],
    }
    world = World(ORGANIZATION, routing)
    for account, number in ((PROD, 1), (SANDBOX, 2)):
        world.handle(fault(account, "us-west-2", number))
    daemon = health_check(fault(PROD, "us-west-2", 1), type="DAEMON", statusReason="dockerd is down")
    daemon["id"] = "daemon-prod"
    world.handle(daemon)

    [muted] = [i for i in world.incidents() if i.check_type == "DAEMON"]
    assert muted.instance.account == PROD
    assert set(muted.muted.values()) == {
        f"inhibited by a-critical-gpu-fault-mutes-the-daemon "
        f"(incident {fingerprint(muted.instance, 'ACCELERATED_COMPUTE')}@{START.isoformat()})"
    }


# --- Pages say where --------------------------------------------------------------------------------------------------


def test_every_page_names_the_account_by_name_and_id_and_the_region_in_an_organization_only() -> None:
    organization = World(ORGANIZATION)
    single = World(SINGLE_ACCOUNT)

    for world in (organization, single):
        world.handle(fault(PROD, "us-west-2", 1))

    [root] = [s for s in organization.sent("slack") if s.action == "post"]
    [page] = [s for s in organization.sent("pagerduty") if s.action == "trigger"]
    assert "prod-ml (111111111111), us-west-2" in root.text  # the push notification
    assert "*Account*\nprod-ml (111111111111)" in root.body and "*Region*\nus-west-2" in root.body
    assert "in cluster my-cluster, account prod-ml (111111111111), us-west-2 (IMPAIRED)" in page.text
    assert json.loads(page.body)["account_name"] == "prod-ml"
    [single_root] = [s for s in single.sent("slack") if s.action == "post"]
    [single_page] = [s for s in single.sent("pagerduty") if s.action == "trigger"]
    assert "prod-ml" not in single_root.text + single_root.body + single_page.text + single_page.body
    assert "*Account*" not in single_root.body


# --- The training workflow's notices ----------------------------------------------------------------------------------


def test_the_workflows_notices_of_a_member_account_name_it_and_its_mass_fault_page_is_that_accounts_fleet() -> None:
    home, member = a_fault(), a_fault().model_copy(update={"account": PROD, "region": "us-west-2"})
    provider = ProviderInfo(name=member.capacity_provider, type="EC2_AUTOSCALING", auto_repair=None)
    guards = Guards(verdict=GuardVerdict.MASS_FAULT, provider=provider, impaired=3, instances=5, allowed=1)
    notice = build_notice(request(NoticeKind.MASS_FAULT, guards=guards), NOW)

    # The mass fault's page is the fleet alert of the fault's own account and Region (the router's key for it), the
    # home's as it always was
    single = trigger_dedup_key(notice, home, Grouping(), SINGLE_ACCOUNT)
    assert trigger_dedup_key(notice, home.model_copy(update={"account": HOME[0], "region": HOME[1]}), Grouping(),
                             ORGANIZATION) == single  # fmt: skip
    key = trigger_dedup_key(notice, member, Grouping(), ORGANIZATION)
    assert key == f"{single}/{PROD}/us-west-2"
    # (with fleets off, one alert per capacity provider: of the account and Region it is in)
    off = Grouping(enabled=False)
    provider = f"{home.cluster_name}/{home.capacity_provider}/resume/mass-fault"
    assert trigger_dedup_key(notice, home, off, SINGLE_ACCOUNT) == provider
    assert trigger_dedup_key(notice, member, off, ORGANIZATION) == f"{PROD}/us-west-2/{provider}"
    # and it says where, by the account's name and id
    where = ORGANIZATION.where(member.instance_ref())
    page = render_resume_trigger(notice, member, "k" * 32, NOW, key, where=where)
    assert "account prod-ml (111111111111), us-west-2" in page["payload"]["summary"]
    assert page["payload"]["custom_details"]["account_name"] == "prod-ml"
    message = render_resume_standalone(notice, member, where=where)
    assert "prod-ml (111111111111), us-west-2" in message.text
    assert "*Account:* prod-ml (111111111111)" in json.dumps(message.blocks)
