"""Quiet when handled (docs/noise.md#quiet-when-handled): on a training provider, a fault goes to Slack at once and
pages PagerDuty only if the resume workflow pages itself or has not resumed the jobs within the deadline."""

from __future__ import annotations

from datetime import timedelta

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import NoticeFact
from fault_responder.noise.policy import Policy, QuietWhenHandled
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.unit.test_fleet import START, Clock, instance_arn, report

PROVIDER = "my-capacity-provider"
DEADLINE = timedelta(minutes=30)


class World:
    def __init__(self, providers: frozenset[str] = frozenset({PROVIDER})) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        routing = load_routing("default.yaml")
        pagerduty = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
        quiet = QuietWhenHandled(providers, frozenset({"ACCELERATED_COMPUTE"}), DEADLINE)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(),
            clock=self.clock,
            policy=Policy(quiet=quiet, pagerduty_receivers=pagerduty),
        )

    def fault(self, reported_late: timedelta = timedelta(0)) -> None:
        """Instance 1's XID 79, which began at START and is delivered `reported_late` after it began."""
        self.clock.now = START + reported_late
        self.service.handle(report(1, "IMPAIRED", START))

    def workflow_says(self, kind: str, *, pages: bool) -> None:
        record = self.store.load(instance_arn(1))
        assert record is not None
        assert record.add_notice(
            NoticeFact(f"exec/{kind}", "ACCELERATED_COMPUTE", START, self.clock.now, kind, pages=pages, kind=kind)
        )
        self.store.commit(record)

    def sweep_at(self, delay: timedelta) -> None:
        self.clock.now += delay
        self.service.sweep(seconds_left=60)

    def triggers(self) -> int:
        return sum(1 for s in self.channels.sent if s.service == "pagerduty" and s.action == "trigger")

    def slack_roots(self) -> int:
        return sum(1 for s in self.channels.sent if s.service == "slack" and s.action == "post" and s.thread_ts is None)


def test_a_fault_the_workflow_handles_goes_to_slack_at_once_and_pages_nobody_while_it_works() -> None:
    world = World()
    world.fault()
    assert world.slack_roots() == 1 and world.triggers() == 0
    world.sweep_at(DEADLINE - timedelta(minutes=1))
    assert world.triggers() == 0


def test_it_pages_once_when_the_jobs_are_not_resumed_within_the_deadline() -> None:
    world = World()
    world.fault()
    world.sweep_at(DEADLINE + timedelta(seconds=1))
    world.sweep_at(timedelta(minutes=1))
    assert world.triggers() == 1


def test_a_resumed_job_keeps_it_quiet_past_the_deadline() -> None:
    world = World()
    world.fault()
    world.workflow_says("resumed", pages=False)
    world.sweep_at(DEADLINE * 2)
    assert world.triggers() == 0


def test_when_the_workflow_pages_itself_its_page_is_the_only_one() -> None:
    world = World()
    world.fault()
    world.workflow_says("give_up", pages=True)
    world.sweep_at(DEADLINE * 2)
    assert world.triggers() == 0


def test_the_deadline_runs_from_when_the_fault_was_known_here_not_from_when_it_began() -> None:
    # Given an XID 79 delivered two hours after its lastStatusChange (a backlog, a replay)
    world = World()
    world.fault(reported_late=timedelta(hours=2))
    # Then the workflow, which starts from the same event, still has its deadline
    assert world.triggers() == 0
    world.sweep_at(DEADLINE - timedelta(minutes=1))
    assert world.triggers() == 0
    world.sweep_at(timedelta(minutes=2))
    assert world.triggers() == 1


def test_other_providers_page_at_once() -> None:
    world = World(providers=frozenset({"another-provider"}))
    world.fault()
    assert world.triggers() == 1


def test_when_ecs_auto_repair_owns_recovery_the_fault_pages_at_once() -> None:
    # Given the workflow found auto-repair ENABLED on the provider: it does nothing, so nothing handles the fault
    world = World()
    world.fault()
    world.workflow_says("ecs_owns_recovery", pages=False)
    # Then the next sweep pages it, long before the deadline
    world.sweep_at(timedelta(minutes=1))
    assert world.triggers() == 1
