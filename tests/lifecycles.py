"""Generated incident lifecycles: what ECS would send for faults on a fleet, as full EventBridge envelopes.

A lifecycle is one container instance: one or two health checks, each with one or more fault episodes (a
report, maybe a changed report, maybe a recovery), maybe a drain with a task it stops, maybe the instance
leaving the cluster (DEREGISTERING, INACTIVE). `events()` gives every event it produces; a test shuffles
them, duplicates some, and checks that the outcome does not depend on the order.

Plain data and `random.Random`, so the same generator serves hypothesis (which draws the specs) and the
seeded sandbox runs (which need a few hundred events from one seed).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import load_event

BASE = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
REASONS = ("XID_79", "XID_48", "XID_13", "XID_31", "XID_999", None)
CHECKS = ("ACCELERATED_COMPUTE", "DAEMON")


@dataclass(frozen=True)
class Report:
    minute: int
    status: str
    reason: str | None


@dataclass(frozen=True)
class Episode:
    reports: tuple[Report, ...]
    recovered: int | None
    """Minute of the OK, if the episode ends."""


@dataclass(frozen=True)
class Lifecycle:
    number: int
    checks: dict[str, tuple[Episode, ...]]
    drained: int | None = None
    task_stopped: int | None = None
    left: int | None = None
    """Minute the instance left the cluster (DEREGISTERING a minute before INACTIVE)."""
    cluster: str = "gpu-fleet"
    provider: str = "p5-inference"

    @property
    def container_instance_arn(self) -> str:
        return f"arn:aws:ecs:us-west-2:123456789012:container-instance/{self.cluster}/ci{self.number:05d}"

    def last_is_recovery(self, check: str) -> bool:
        """Whether the check's last fact closes its last episode (an OK, or the instance leaving)."""
        return self.checks[check][-1].recovered is not None or self.left is not None


@dataclass
class _Clock:
    minute: int = 0

    def next(self, at_least: int = 1, at_most: int = 5, rng: random.Random | None = None) -> int:
        self.minute += (rng or random.Random(self.minute)).randint(at_least, at_most)
        return self.minute


def random_lifecycle(rng: random.Random, number: int) -> Lifecycle:
    """One instance's lifecycle, drawn from `rng`."""
    clock = _Clock(rng.randint(0, 30))
    checks: dict[str, tuple[Episode, ...]] = {}
    for check in rng.sample(CHECKS, rng.choice((1, 1, 2))):
        episodes = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            reports = [Report(clock.next(rng=rng), "IMPAIRED", rng.choice(REASONS))]
            if rng.random() < 0.3:
                reports.append(
                    Report(clock.next(rng=rng), rng.choice(("IMPAIRED", "INSUFFICIENT_DATA")), rng.choice(REASONS))
                )
            recovered = clock.next(rng=rng) if rng.random() < 0.6 else None
            episodes.append(Episode(tuple(reports), recovered))
            if recovered is None:
                break
        checks[check] = tuple(episodes)
    drained = clock.next(rng=rng) if rng.random() < 0.5 else None
    task = clock.next(rng=rng) if drained is not None and rng.random() < 0.7 else None
    left = clock.next(2, 9, rng) if rng.random() < 0.4 else None
    return Lifecycle(number, checks, drained, task, left)


@dataclass
class _Ids:
    counter: int = 0
    seen: dict[str, int] = field(default_factory=dict)

    def next(self, number: int, what: str) -> str:
        self.counter += 1
        return f"evt-{number:05d}-{what}-{self.counter:04d}"


def events(lifecycle: Lifecycle) -> list[dict[str, Any]]:
    """Every event the lifecycle produces, in the order ECS would send them."""
    ids = _Ids()
    out: list[tuple[int, dict[str, Any]]] = []
    for check, episodes in lifecycle.checks.items():
        for episode in episodes:
            for report in episode.reports:
                out.append((report.minute, _health(lifecycle, ids, check, report.status, report.reason, report.minute)))
            if episode.recovered is not None:
                out.append((episode.recovered, _health(lifecycle, ids, check, "OK", None, episode.recovered)))
    version = 100
    if lifecycle.drained is not None:
        version += 1
        out.append((lifecycle.drained, _state(lifecycle, ids, "DRAINING", version, lifecycle.drained)))
    if lifecycle.task_stopped is not None:
        out.append((lifecycle.task_stopped, _task(lifecycle, ids, lifecycle.task_stopped)))
    if lifecycle.left is not None:
        out.append((lifecycle.left - 1, _state(lifecycle, ids, "DEREGISTERING", version + 1, lifecycle.left - 1)))
        out.append((lifecycle.left, _state(lifecycle, ids, "INACTIVE", version + 2, lifecycle.left)))
    return [event for _, event in sorted(out, key=lambda item: item[0])]


def _time(minute: int) -> str:
    return (BASE + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _health(
    lifecycle: Lifecycle, ids: _Ids, check: str, status: str, reason: str | None, minute: int
) -> dict[str, Any]:
    event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    event["id"] = ids.next(lifecycle.number, f"{check[:3].lower()}-{status.lower()}")
    event["time"] = _time(minute)
    detail = event["detail"]
    detail["clusterArn"] = f"arn:aws:ecs:us-west-2:123456789012:cluster/{lifecycle.cluster}"
    detail["containerInstanceArn"] = lifecycle.container_instance_arn
    detail["capacityProviderName"] = lifecycle.provider
    detail["ec2InstanceId"] = f"i-{lifecycle.number:017x}"
    detail["overallStatus"] = status
    detail["healthChecks"] = [
        {
            "type": check,
            "status": status,
            "lastStatusChange": _time(minute),
            "lastUpdated": _time(minute),
            "statusReason": reason if status != "OK" else None,
        }
    ]
    event["resources"] = [lifecycle.container_instance_arn]
    return event


def _state(lifecycle: Lifecycle, ids: _Ids, status: str, version: int, minute: int) -> dict[str, Any]:
    event = copy.deepcopy(load_event("state/draining-manual.json"))
    event["id"] = ids.next(lifecycle.number, status.lower())
    event["time"] = _time(minute)
    detail = event["detail"]
    detail.update(
        clusterArn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{lifecycle.cluster}",
        containerInstanceArn=lifecycle.container_instance_arn,
        ec2InstanceId=f"i-{lifecycle.number:017x}",
        capacityProviderName=lifecycle.provider,
        status=status,
        statusReason=None,
        version=version,
        updatedAt=_time(minute),
    )
    event["resources"] = [lifecycle.container_instance_arn]
    return event


def _task(lifecycle: Lifecycle, ids: _Ids, minute: int) -> dict[str, Any]:
    event = copy.deepcopy(load_event("task/stopped-instance-draining.json"))
    event["id"] = ids.next(lifecycle.number, "task")
    event["time"] = _time(minute)
    detail = event["detail"]
    detail.update(
        clusterArn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{lifecycle.cluster}",
        containerInstanceArn=lifecycle.container_instance_arn,
        taskArn=f"arn:aws:ecs:us-west-2:123456789012:task/{lifecycle.cluster}/task{lifecycle.number:05d}",
        capacityProviderName=lifecycle.provider,
        stoppedAt=_time(minute),
    )
    return event


def fleet(seed: int, size: int) -> tuple[list[Lifecycle], list[dict[str, Any]]]:
    """`size` lifecycles and all their events, each delivered once in time order, from one seed."""
    rng = random.Random(seed)
    lifecycles = [random_lifecycle(rng, number) for number in range(size)]
    return lifecycles, [event for lifecycle in lifecycles for event in events(lifecycle)]


def delivered(all_events: list[dict[str, Any]], rng: random.Random, duplicates: float = 0.2) -> list[dict[str, Any]]:
    """The events as EventBridge might deliver them: every one at least once, some twice, in any order."""
    copies = [copy.deepcopy(event) for event in all_events]
    copies += [copy.deepcopy(event) for event in all_events if rng.random() < duplicates]
    rng.shuffle(copies)
    return copies
