"""Where the training auto-resume workflow's notices go: they follow the incident they belong to; nothing is dropped.

The alert pipeline (AlertService) and the workflow's notifier (ResumeNotifier) share one in-memory incident store, one
routing file (routes/default.yaml: Slack #gpu-alerts, PagerDuty gpu-oncall, fleets of three within ten minutes) and
one set of recording channels, as in AWS they share the incidents table, the routing file and Slack and PagerDuty.

- A fault whose incident belongs to a fleet incident: its notice is a reply in the fleet incident's thread, and its
  change event names the fleet incident.
- A receiver a silence holds back is not told now; the sweep tells it once the silence ended (in the incident's
  thread, or the fleet's), once, even if the incident closed meanwhile.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Severity
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy
from fault_responder.noise.silences import Silence, iso, new_id, silencing
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels, Sent
from fault_responder.resume.fault import Fault, fault_from_event
from fault_responder.resume.notices import Delivered, Notice, NoticeKind, PagerDutyAction
from fault_responder.resume.notify import ResumeNotifier
from fault_responder.routing.matchers import Labels, parse_matchers
from fault_responder.routing.router import Grouping, Router, load_routing
from tests.conftest import health_check, load_event, vary

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
FLEET_KEY = "fleet/my-cluster/my-capacity-provider/ACCELERATED_COMPUTE"


def instance_arn(number: int) -> str:
    return f"arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/{number:032x}"


def host(number: int) -> str:
    return f"i-{number:017x}"


def impaired(number: int, at: datetime) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(
        load_event("aws-docs/health-change-accelerated-compute-xid46.json"),
        status="IMPAIRED",
        lastStatusChange=stamp,
        lastUpdated=stamp,
        statusReason="XID_79",
    )
    return vary(
        event,
        event_id=f"i{number}-impaired",
        time=stamp,
        containerInstanceArn=instance_arn(number),
        ec2InstanceId=host(number),
    )


def inactive(number: int, at: datetime) -> dict[str, Any]:
    event = load_event("state/inactive.json")
    return vary(
        event,
        event_id=f"i{number}-inactive",
        time=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        clusterArn="arn:aws:ecs:us-west-2:123456789012:cluster/my-cluster",
        containerInstanceArn=instance_arn(number),
        ec2InstanceId=host(number),
        capacityProviderName="my-capacity-provider",
        updatedAt=at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    )


def resumed(number: int, *, job: str, onto: str) -> Notice:
    """What the workflow says once it resumed the job of the instance's fault (as resume.notices builds it)."""
    return Notice(
        kind=NoticeKind.RESUMED,
        key=f"run-{number}/NotifyResumed/{job}/1",
        title=f"Resumed {job} from step 300, attempt 1 of 3",
        text=f"Resumed {job} from step 300 on {onto}, attempt 1 of 3 (1 task(s), RESUME_ATTEMPT=1).",
        pagerduty=PagerDutyAction.CHANGE,
        severity=Severity.INFO,
        job_id=job,
    )


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class World:
    """The alert pipeline and the workflow's notifier, over one store and one set of channels."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        self.silences: list[Silence] = []
        self.failed_at: dict[int, datetime] = {}
        routing = load_routing("default.yaml")
        pagerduty = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
        policy = Policy(silencer=self._silenced, pagerduty_receivers=pagerduty)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(),
            clock=self.clock,
            grouping=Grouping(threshold=3),
            policy=policy,
        )
        # The workflow's notifier, wired as wiring/resume_training.py wires it (no quiet-when-handled of its own).
        self.notifier = ResumeNotifier(
            Router(routing),
            self.channels,
            self.channels.pagerduty_changes(),
            self.store,
            self.store,
            clock=self.clock,
            policy=policy,
        )

    def _silenced(self, labels: Labels, now: datetime) -> str | None:
        silence = silencing(self.silences, labels, now)
        return None if silence is None else f"silenced by {silence.id} until {iso(silence.ends_at)}"

    def silence(self, *matchers: str, minutes: int) -> None:
        now = self.clock.now
        silence = Silence(new_id(), parse_matchers(matchers), now, now + timedelta(minutes=minutes), "alice", "m", now)
        self.silences.append(silence)

    def handle(self, event: dict[str, Any]) -> None:
        self.service.handle(event)

    def fails(self, number: int, at: datetime) -> None:
        """The instance's GPU fails at `at`: its event reaches the alert pipeline."""
        self.failed_at[number] = at
        self.handle(impaired(number, at))

    def fault(self, number: int) -> Fault:
        """The fault as the workflow's execution for it knows it (from the same event)."""
        event = parse_ecs_event(impaired(number, self.failed_at[number]))
        return fault_from_event(event, ["ACCELERATED_COMPUTE"])

    def tell(self, number: int, notice: Notice) -> Delivered:
        return self.notifier.deliver(notice, self.fault(number), allow_standalone=False)

    def sweep(self) -> None:
        self.service.sweep(seconds_left=60.0)

    def root(self, marker: str) -> Sent:
        """The Slack root whose texts hold `marker`."""
        [root] = [s for s in self.channels.sent if s.action == "post" and s.thread_ts is None and marker in s.body]
        return root

    def replies_naming(self, text: str) -> list[Sent]:
        return [s for s in self.channels.sent if s.service == "slack" and s.action == "reply" and text in s.body]

    def changes_naming(self, text: str) -> list[dict[str, Any]]:
        return [
            json.loads(s.body)
            for s in self.channels.sent
            if s.service == "pagerduty" and s.action == "change" and text in s.text
        ]


def a_fleet_of_three(world: World) -> None:
    """Instances 0, 1 and 2 fail within a minute: the first two page alone, the third opens the fleet incident."""
    for number in range(3):
        world.clock.now = START + timedelta(seconds=20 * number)
        world.fails(number, world.clock.now)


def test_a_fleet_members_notice_is_a_reply_in_the_fleet_incidents_thread_and_names_it_on_pagerduty() -> None:
    # Given three instances failing together: the third's incident joined the fleet incident, and is held back
    world = World()
    a_fleet_of_three(world)
    fleet_root = world.root(f"Fleet incident `{FLEET_KEY}`")

    # When the workflow tells that the third one's job was resumed elsewhere
    delivered = world.tell(2, resumed(2, job="llm-c", onto="i-0spare0000000001"))

    # Then Slack has it in the fleet incident's thread, naming the job, the failed host and where it runs now
    [reply] = world.replies_naming("Resumed llm-c from step 300")
    assert reply.thread_ts == fleet_root.ts
    assert f"host `{host(2)}`" in reply.body and "on i-0spare0000000001" in reply.body
    # and PagerDuty a change event that names the job, the host and the fleet incident (nothing pages)
    [change] = world.changes_naming("Resumed llm-c from step 300")
    assert change["fleet_dedup_key"] == FLEET_KEY and "on i-0spare0000000001" in change["text"]
    assert (delivered.receivers, delivered.held, delivered.fleet) == (
        ("gpu-alerts", "gpu-oncall"),
        (),
        change["fleet_incident"],
    )
    # and the router, at the next sweep, has nothing of it left to tell
    before = len(world.channels.sent)
    world.sweep()
    assert not [s for s in world.channels.sent[before:] if "llm-c" in s.body + s.text]


def test_a_notice_about_a_founding_member_goes_to_the_fleet_incidents_thread_too() -> None:
    # Given the fleet of three: the first instance paged alone before the threshold was crossed, and counts in it
    world = World()
    a_fleet_of_three(world)
    fleet_root = world.root(f"Fleet incident `{FLEET_KEY}`")

    # When the workflow tells that its job was resumed
    world.tell(0, resumed(0, job="llm-a", onto="i-0spare0000000002"))

    # Then the notice is in the fleet incident's thread, where the fleet's story is told, and not in its own
    [reply] = world.replies_naming("Resumed llm-a from step 300")
    assert reply.thread_ts == fleet_root.ts


def test_a_notice_held_back_by_a_silence_is_told_by_the_sweep_once_the_silence_ends_and_only_once() -> None:
    # Given an instance whose fault is silenced for 30 minutes (nothing posted, nothing paged)
    world = World()
    world.silence(f"instance={instance_arn(7).rsplit('/', 1)[-1]}", minutes=30)
    world.fails(7, START)
    assert world.channels.sent == []

    # When the workflow tells that the job was resumed
    world.clock.now = START + timedelta(minutes=1)
    delivered = world.tell(7, resumed(7, job="llm-7b", onto="i-0new000000000007"))

    # Then nobody is told now, and nothing is dropped: both receivers are held back, the notice kept for them
    assert (delivered.receivers, delivered.held) == ((), ("gpu-alerts", "gpu-oncall"))
    assert world.channels.sent == []
    world.clock.now = START + timedelta(minutes=10)
    world.sweep()
    assert world.channels.sent == []

    # When the silence has ended and the sweep runs
    world.clock.now = START + timedelta(minutes=31)
    world.sweep()

    # Then the incident's root goes out, the notice in its thread, and PagerDuty its change event (and its page)
    root = world.root("XID 79")
    [reply] = world.replies_naming("Resumed llm-7b from step 300")
    assert reply.thread_ts == root.ts
    assert f"host `{host(7)}`" in reply.body and "on i-0new000000000007" in reply.body
    assert len(world.changes_naming("Resumed llm-7b")) == 1
    # and a retry of the workflow's delivery, and the next sweeps, tell it nobody twice
    world.tell(7, resumed(7, job="llm-7b", onto="i-0new000000000007"))
    world.sweep()
    assert len(world.replies_naming("Resumed llm-7b")) == 1
    assert len(world.changes_naming("Resumed llm-7b")) == 1


def test_a_held_back_notice_is_told_even_when_its_incident_closed_before_the_silence_ended() -> None:
    # Given a silenced fault, its job resumed (the notice held back), and then the instance leaving the cluster
    world = World()
    world.silence("cluster=my-cluster", minutes=30)
    world.fails(7, START)
    world.clock.now = START + timedelta(minutes=1)
    world.tell(7, resumed(7, job="llm-7b", onto="i-0new000000000007"))
    world.clock.now = START + timedelta(minutes=5)
    world.handle(inactive(7, START + timedelta(minutes=5)))
    assert world.channels.sent == []

    # Then the record stays on the sweep's list while the notice waits
    assert instance_arn(7) in list(world.store.open_records())

    # When the silence has ended and the sweep runs
    world.clock.now = START + timedelta(minutes=31)
    world.sweep()

    # Then the notice is told (Slack and PagerDuty), and the record leaves the list once nothing is left to tell
    root = world.root("RESOLVED")
    [reply] = world.replies_naming("Resumed llm-7b from step 300")
    assert reply.thread_ts == root.ts
    assert len(world.changes_naming("Resumed llm-7b")) == 1
    world.sweep()
    assert instance_arn(7) not in list(world.store.open_records())


def test_a_fleet_members_notice_held_back_by_a_silence_goes_to_the_fleet_incidents_thread_when_it_ends() -> None:
    # Given the fleet of three, posted, and then a maintenance silence on the cluster for 30 minutes
    world = World()
    a_fleet_of_three(world)
    fleet_root = world.root(f"Fleet incident `{FLEET_KEY}`")
    world.clock.now = START + timedelta(minutes=2)
    world.silence("cluster=my-cluster", minutes=30)

    # When the workflow tells that the fleet member's job was resumed
    delivered = world.tell(2, resumed(2, job="llm-c", onto="i-0spare0000000001"))

    # Then it is held back while the silence lasts
    assert delivered.held == ("gpu-alerts", "gpu-oncall")
    world.sweep()
    assert world.replies_naming("llm-c") == [] and world.changes_naming("llm-c") == []

    # and once it has ended, the sweep tells it where it belongs: the fleet incident's thread, and PagerDuty
    world.clock.now = START + timedelta(minutes=33)
    world.sweep()
    [reply] = world.replies_naming("Resumed llm-c from step 300")
    assert reply.thread_ts == fleet_root.ts and f"host `{host(2)}`" in reply.body
    [change] = world.changes_naming("Resumed llm-c from step 300")
    assert change["fleet_dedup_key"] == FLEET_KEY


def test_a_notice_that_could_not_wait_in_its_incidents_timeline_is_told_now_whatever_holds_the_incident_back() -> None:
    # Given a silenced incident, and a notice about a fault before it opened (so not in its timeline, where the sweep
    # would find it later)
    world = World()
    world.silence("cluster=my-cluster", minutes=30)
    world.fails(7, START)
    world.failed_at[7] = START - timedelta(hours=1)

    # When the workflow tells it
    delivered = world.tell(7, resumed(7, job="llm-7b", onto="i-0new000000000007"))

    # Then it goes out now, a message of its own in Slack and a change event, rather than be lost
    assert (delivered.receivers, delivered.held) == (("gpu-alerts", "gpu-oncall"), ())
    assert [s.action for s in world.channels.sent if "Resumed llm-7b" in s.text] == ["post", "change"]
