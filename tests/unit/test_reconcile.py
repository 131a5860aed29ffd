"""The reconciliation sweep's decisions (fault_responder.operations.reconcile) and a run of it over the alert service,
with an in-memory store and inventory: a missed fault is opened once, marked; a missed recovery or departure closes; the
event path and a second run add nothing; what ECS answers strangely decides nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fault_responder.adapters.ecs_health import read_described
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import FOUND_BY_SWEEP, InstanceRecord
from fault_responder.noise.policy import Policy, QuietWhenHandled
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.notification.render.pagerduty import render_trigger
from fault_responder.notification.render.slack import render_incident_root
from fault_responder.operations.reconcile import (
    Described,
    ObservedCheck,
    ObservedInstance,
    Reconciler,
    finding_for,
    gone_finding,
    run_event_id,
)
from fault_responder.routing.router import Router, load_routing
from tests.conftest import load_event
from tests.unit.test_fleet import CLUSTER, START, Clock, instance_arn, report

CHECK = "ACCELERATED_COMPUTE"
OTHER_CLUSTER = "arn:aws:ecs:us-west-2:123456789012:cluster/other"


def observed(number: int, check: str = "IMPAIRED", at: datetime = START, **changes: object) -> ObservedInstance:
    """Instance `number` as ECS describes it: its ACCELERATED_COMPUTE check `check` since `at`."""
    reported = ObservedCheck(CHECK, check, at, at + timedelta(minutes=3), "XID_79" if check != "OK" else None)
    fields: dict[str, object] = {
        "cluster_arn": CLUSTER,
        "container_instance_arn": instance_arn(number),
        "status": "ACTIVE",
        "ec2_instance_id": f"i-{number:017x}",
        "capacity_provider": "my-capacity-provider",
        "version": 7,
        "overall_status": check,
        "checks": (reported,),
    }
    fields.update(changes)
    return ObservedInstance(**fields)  # type: ignore[arg-type]


@dataclass
class Inventory:
    """What ECS answers, per cluster: listed instances (in pages) and what describing them shows."""

    pages: dict[str, list[list[str]]] = field(default_factory=dict)
    described: dict[str, ObservedInstance] = field(default_factory=dict)
    describes: list[int] = field(default_factory=list)
    """The size of every DescribeContainerInstances call."""

    def show(self, *instances: ObservedInstance) -> None:
        for instance in instances:
            self.described[instance.container_instance_arn] = instance
        self.pages = {}
        for instance in self.described.values():
            if instance.status != "INACTIVE":
                self.pages.setdefault(instance.cluster_arn, [[]])[0].append(instance.container_instance_arn)

    def forget(self, arn: str) -> None:
        del self.described[arn]
        self.show()

    def clusters(self) -> Iterator[str]:
        yield from [CLUSTER, OTHER_CLUSTER]

    def instance_pages(self, cluster: str) -> Iterator[list[str]]:
        yield from self.pages.get(cluster, [])

    def describe(self, cluster: str, arns: Sequence[str]) -> Described:
        assert len(arns) <= 100
        self.describes.append(len(arns))
        answer = Described()
        for arn in arns:
            if arn in self.described:
                answer.instances.append(self.described[arn])
            else:
                answer.missing.append(arn)
        return answer


@dataclass
class FlakyChannels(RecordingChannels):
    """PagerDuty refuses the first `refusals` resolves (down), then takes them."""

    refusals: int = 0

    def send(self, event: dict[str, object]) -> str:
        if event["event_action"] == "resolve" and self.refusals > 0:
            self.refusals -= 1
            raise DeliveryError("pagerduty", 503, "service unavailable", retryable=True)
        return super().send(event)  # type: ignore[arg-type]


class World:
    def __init__(self) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = FlakyChannels()
        self.inventory = Inventory()
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(),
            clock=self.clock,
        )

    def sweep(self, *, clusters: Sequence[str] = (), max_instances: int = 5000) -> dict[str, int]:
        reconciler = Reconciler(
            inventory=self.inventory,
            records=self.store,
            observe=lambda facts, left: self.service.observe(facts, seconds_left=left),
            redeliver=lambda arn, left: self.service.reconcile(arn, seconds_left=left),
            clusters=clusters,
            epoch=lambda: 0.0,
            max_instances=max_instances,
        )
        return reconciler.run(started=self.clock.now, seconds_left=60)

    def sent(self, service: str, action: str) -> int:
        return sum(1 for s in self.channels.sent if s.service == service and s.action == action)

    def record(self, number: int) -> InstanceRecord:
        record = self.store.load(instance_arn(number))
        assert record is not None
        return record


# --- Opening what no event announced ------------------------------------------------------------------


def test_an_impaired_instance_no_event_announced_gets_one_incident_and_one_page_even_when_swept_twice() -> None:
    # Given ECS describes instance 1 IMPAIRED (XID 79) since START, and no event reached the responder
    world = World()
    world.inventory.show(observed(1), observed(2, "OK"))

    # When the sweep runs twice
    first = world.sweep()
    second = world.sweep()

    # Then one incident was opened and paged once, marked as found by the sweep; healthy instance 2 has no record
    assert first["missed_fault"] == 1 and second["missed_fault"] == 0
    assert world.sent("pagerduty", "trigger") == 1
    assert world.sent("slack", "post") == 1
    (known,) = world.record(1).incidents[CHECK]
    assert known.status == "OPEN" and known.found == FOUND_BY_SWEEP
    assert world.store.load(instance_arn(2)) is None


def test_the_real_event_arriving_after_the_sweep_adds_nothing() -> None:
    # Given the sweep opened instance 1's incident from ECS's description
    world = World()
    world.inventory.show(observed(1))
    world.sweep()
    sent = len(world.channels.sent)

    # When the IMPAIRED event with the same lastStatusChange finally arrives
    result = world.service.handle(report(1, "IMPAIRED", START))

    # Then it is already known, nothing is sent, and the incident stays marked as found by the sweep
    assert result["ignored"] == "already known"
    assert len(world.channels.sent) == sent
    assert world.record(1).incidents[CHECK][0].found == FOUND_BY_SWEEP


def test_the_sweep_after_the_real_event_adds_nothing() -> None:
    # Given the IMPAIRED event arrived and paged
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))
    version, sent = world.record(1).version, len(world.channels.sent)

    # When the sweep sees the same transition in ECS's description
    world.inventory.show(observed(1))
    tally = world.sweep()

    # Then the record is unchanged and nothing more is sent; the incident is not marked
    assert tally["missed_fault"] == 0 and tally["already_known"] == 0
    assert world.record(1).version == version
    assert len(world.channels.sent) == sent
    assert world.record(1).incidents[CHECK][0].found is None


def test_a_missed_fault_on_a_training_provider_pages_at_once_no_workflow_handles_it() -> None:
    # Given quiet-when-handled on instance 1's capacity provider (its faults wait for the resume workflow, which
    # starts on the fault's event), and a fault no event announced
    world = World()
    pagerduty = frozenset({"gpu-oncall"})
    quiet = QuietWhenHandled(frozenset({"my-capacity-provider"}), frozenset({CHECK}), timedelta(minutes=30))
    world.service.policy = Policy(quiet=quiet, pagerduty_receivers=pagerduty)
    world.inventory.show(observed(1))

    world.sweep()

    # Then it pages now, not after the deadline: no workflow will resume anything
    assert world.sent("pagerduty", "trigger") == 1


def test_the_same_fault_from_its_event_waits_for_the_workflow() -> None:
    world = World()
    quiet = QuietWhenHandled(frozenset({"my-capacity-provider"}), frozenset({CHECK}), timedelta(minutes=30))
    world.service.policy = Policy(quiet=quiet, pagerduty_receivers=frozenset({"gpu-oncall"}))

    world.service.handle(report(1, "IMPAIRED", START))

    assert world.sent("pagerduty", "trigger") == 0


def test_the_incident_found_by_the_sweep_says_so_in_slack_and_pagerduty() -> None:
    world = World()
    world.inventory.show(observed(1))
    world.sweep()

    (incident,) = world.service.derive(world.record(1)).incidents

    root = str(render_incident_root(incident).blocks)
    assert "Found by the sweep: the event was missed" in root
    assert render_trigger(incident, "key")["payload"]["custom_details"]["found"] == FOUND_BY_SWEEP


# --- Closing what is over -----------------------------------------------------------------------------


def test_an_open_incident_whose_check_is_ok_again_is_resolved() -> None:
    # Given an incident opened by its event, and the OK event was lost
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))

    # When ECS describes the check OK since ten minutes later
    world.inventory.show(observed(1, "OK", START + timedelta(minutes=10)))
    tally = world.sweep()

    # Then the incident is closed by the OK, and PagerDuty resolved
    assert tally["recovered"] == 1
    assert world.record(1).incidents[CHECK][0].status == "CLOSED"
    assert world.sent("pagerduty", "resolve") == 1


def test_an_open_incident_whose_instance_ecs_no_longer_knows_is_closed() -> None:
    # Given an incident opened by its event; the instance left the cluster and its INACTIVE event was lost
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))
    world.inventory.show(observed(2, "OK"))

    # When the sweep lists the cluster (instance 1 is not there) and ECS answers MISSING for it
    tally = world.sweep()
    again = world.sweep()

    # Then the incident is closed because the instance left, and PagerDuty resolved, once
    assert tally["gone"] == 1 and again["gone"] == 0
    (known,) = world.record(1).incidents[CHECK]
    assert known.status == "CLOSED"
    assert world.sent("pagerduty", "resolve") == 1


def test_a_resolve_that_failed_when_the_sweep_closed_the_incident_is_delivered_again_in_the_same_run() -> None:
    # Given an open incident whose instance left with no event, and PagerDuty refusing the first resolve
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))
    world.inventory.show(observed(2, "OK"))
    world.channels.refusals = 1

    # When the sweep closes it (the record leaves the Open index: no later sweep would look at it again)
    tally = world.sweep()

    # Then the run delivered the resolve once more, at its end
    assert tally["failed"] == 1 and tally["redelivered"] == 1
    assert world.record(1).incidents[CHECK][0].status == "CLOSED"
    assert world.sent("pagerduty", "resolve") == 1


def test_an_instance_ecs_still_describes_as_inactive_gets_its_inactive_with_its_version() -> None:
    # Given an incident opened by its event, and ECS describing the deregistered instance INACTIVE at version 9
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))
    world.inventory.show(observed(1, status="INACTIVE", version=9), observed(2, "OK"))

    world.sweep()

    # Then its INACTIVE fact has the identity of the event ECS sent (version 9): that event adds nothing later
    (gone,) = world.record(1).statuses
    assert gone.status == "INACTIVE" and gone.version == 9
    assert world.record(1).incidents[CHECK][0].status == "CLOSED"


def test_an_unlisted_instance_of_a_cluster_the_run_did_not_finish_is_not_closed() -> None:
    # Given an open incident on instance 1, not listed; the cluster has 150 other instances; the cap is 100
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))
    world.inventory.show(*(observed(n, "OK") for n in range(2, 152)))

    # When a run is cut short by its cap
    tally = world.sweep(clusters=[CLUSTER], max_instances=100)

    # Then nothing was concluded about instance 1: its cluster was not listed whole
    assert tally["gone"] == 0
    assert world.record(1).incidents[CHECK][0].status == "OPEN"
    assert world.inventory.describes == [100]


def test_describe_is_called_with_at_most_100_instances() -> None:
    world = World()
    world.inventory.show(*(observed(n, "OK") for n in range(1, 251)))

    tally = world.sweep(clusters=[CLUSTER])

    assert world.inventory.describes == [100, 100, 50]
    assert tally["described"] == 250


def test_an_instance_in_an_unwatched_cluster_is_left_alone() -> None:
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))

    tally = world.sweep(clusters=[OTHER_CLUSTER])

    assert tally["gone"] == 0
    assert world.record(1).incidents[CHECK][0].status == "OPEN"


# --- Decisions --------------------------------------------------------------------------------------


def test_nothing_is_decided_from_a_check_without_its_last_status_change_or_still_initializing() -> None:
    event_id = run_event_id(START)
    no_moment = observed(1, checks=(ObservedCheck(CHECK, "IMPAIRED", None),))
    initializing = observed(1, checks=(ObservedCheck(CHECK, "INITIALIZING", START),))

    assert finding_for(no_moment, None, event_id=event_id, at=START) is None
    assert finding_for(initializing, None, event_id=event_id, at=START) is None


def test_an_ok_check_without_an_open_incident_adds_nothing() -> None:
    assert finding_for(observed(1, "OK"), None, event_id=run_event_id(START), at=START) is None


def test_a_gone_instance_without_an_open_incident_adds_nothing() -> None:
    assert gone_finding(None, event_id=run_event_id(START), at=START) is None


def test_the_facts_the_sweep_finds_have_the_identity_an_event_would_give_them() -> None:
    finding = finding_for(observed(1), None, event_id=run_event_id(START), at=START + timedelta(hours=1))

    assert finding is not None and finding.kind == "missed_fault"
    (fact,) = finding.facts.health
    assert (fact.check_type, fact.status, fact.at) == (CHECK, "IMPAIRED", START)
    assert fact.reconciled
    assert finding.facts.instance.region == "us-west-2" and finding.facts.instance.account == "123456789012"


# --- What ECS answers strangely ---------------------------------------------------------------------------


def test_a_description_with_a_naive_timestamp_is_unreadable_and_decides_nothing() -> None:
    answer = {
        "containerInstances": [
            {
                "containerInstanceArn": instance_arn(1),
                "status": "ACTIVE",
                "healthStatus": {
                    "overallStatus": "IMPAIRED",
                    "details": [{"type": CHECK, "status": "IMPAIRED", "lastStatusChange": datetime(2026, 4, 11)}],
                },
            },
            {"containerInstanceArn": instance_arn(2), "status": "ACTIVE"},
        ],
        "failures": [],
    }

    described = read_described(CLUSTER, answer)

    assert [i.container_instance_arn for i in described.instances] == [instance_arn(2)]
    (unreadable,) = described.unreadable
    assert unreadable.container_instance_arn == instance_arn(1)
    assert "time zone" in unreadable.reason


def test_only_a_missing_failure_means_gone() -> None:
    answer = {
        "containerInstances": [],
        "failures": [{"arn": instance_arn(1), "reason": "MISSING"}, {"arn": instance_arn(2), "reason": "THROTTLED"}],
    }

    described = read_described(CLUSTER, answer)

    assert described.missing == [instance_arn(1)]
    assert [u.container_instance_arn for u in described.unreadable] == [instance_arn(2)]


def test_an_answer_of_the_wrong_shape_is_unreadable() -> None:
    assert read_described(CLUSTER, {"containerInstances": "nope"}).unreadable
    assert read_described(CLUSTER, ["not", "an", "object"]).unreadable


def test_a_sweep_with_an_unreadable_instance_counts_it_and_changes_nothing() -> None:
    world = World()
    world.service.handle(report(1, "IMPAIRED", START))

    class Strange(Inventory):
        def describe(self, cluster: str, arns: Sequence[str]) -> Described:
            return read_described(cluster, {"containerInstances": [{"containerInstanceArn": arns[0]}]})

    world.inventory = Strange()
    world.inventory.show(observed(1, "OK", START + timedelta(minutes=10)))
    tally = world.sweep(clusters=[CLUSTER])

    assert tally["unreadable"] == 1 and tally["recovered"] == 0 and tally["gone"] == 0
    assert world.record(1).incidents[CHECK][0].status == "OPEN"


def test_a_cluster_ecs_will_not_list_is_counted_and_the_others_are_still_reconciled() -> None:
    # Given ECS refusing to list the first watched cluster (deleted), and a missed fault in the second
    world = World()

    class Refusing(Inventory):
        def instance_pages(self, cluster: str) -> Iterator[list[str]]:
            if cluster == OTHER_CLUSTER:
                raise RuntimeError("ClusterNotFoundException: Cluster not found.")
            yield from super().instance_pages(cluster)

    world.inventory = Refusing()
    world.inventory.show(observed(1))

    tally = world.sweep(clusters=[OTHER_CLUSTER, CLUSTER])

    # Then the run goes on: the failure is counted, the missed fault in the other cluster is opened
    assert tally["failed"] == 1 and tally["missed_fault"] == 1
    assert world.sent("pagerduty", "trigger") == 1


def test_started_is_the_run_moment() -> None:
    assert run_event_id(datetime(2026, 4, 11, 1, 0, tzinfo=UTC)) == "reconcile:2026-04-11T01:00:00Z"


def test_an_alarm_contributors_incident_is_left_alone_though_its_record_names_a_watched_cluster() -> None:
    # Given an open incident of a GPU alarm's contributor for cluster my-cluster (its record names the cluster's ARN,
    # as an instance's would), and ECS lists my-cluster whole, with no container instance by that record's name
    world = World()
    contributor = load_event("alarm/gpu-temperature-contributor-alarm.json")
    contributor["region"] = "us-west-2"
    contributor["detail"]["alarmContributor"] = {"id": "0a1b2c3d4e5f6071", "attributes": {"ClusterName": "my-cluster"}}
    world.service.handle(contributor)
    arn = f"{contributor['resources'][0]}#contributor/0a1b2c3d4e5f6071"

    # When the instances' reconciliation runs over every cluster
    tally = world.sweep()

    # Then the contributor's incident is still open: it is no container instance (the alarms' reconciliation has it)
    record = world.store.load(arn)
    assert record is not None and record.instance.cluster_arn == CLUSTER
    assert [k.status for known in record.incidents.values() for k in known] == ["OPEN"]
    assert tally["gone"] == 0 and world.sent("pagerduty", "resolve") == 0
