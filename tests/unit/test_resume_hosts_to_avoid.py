"""Where a relaunch may not land (docs/auto-resume.md#never-on-a-faulting-host): which hosts, in which order,
within ECS's expression limit, and the check after placement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fault_responder.resume.fault import ProviderInfo
from fault_responder.resume.relaunch import (
    MAX_EXCLUSION_EXPRESSION,
    MAX_STOP_REASON,
    KnownFault,
    Launch,
    LaunchState,
    excludable_hosts,
    hosts_to_avoid,
    misplaced_stop_reason,
    placement_exclusion,
)
from fault_responder.resume.watch import (
    TaskState,
    WatchState,
    describe_failure,
    failed_hosts,
    judge_start,
    misplaced_tasks,
    watch_result,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
EC2_PROVIDER = ProviderInfo(name="p5-training", type="EC2_AUTOSCALING", auto_repair=None)
MANAGED = ProviderInfo(name="p5-managed", type="MANAGED_INSTANCES", auto_repair="DISABLED")
TASK = "arn:aws:ecs:us-east-1:123456789012:task/gpu-training/"
SECOND, TIMEOUT = timedelta(seconds=1), timedelta(seconds=900)


def fault(host: str, minutes_ago: float, *, open: bool = True) -> KnownFault:
    return KnownFault(host, NOW - timedelta(minutes=minutes_ago), open=open)


def new_task(name: str, host: str | None, last: str = "PENDING", desired: str = "RUNNING") -> TaskState:
    return TaskState(task_arn=TASK + name, last_status=last, desired_status=desired, host=host)


# --- Which hosts, in which order --------------------------------------------------------------------


def test_the_jobs_failed_hosts_come_first_most_recent_first_then_faulting_hosts_newest_fault_first() -> None:
    # Given the ledger's failed hosts (oldest first) and faults open or claimed on other hosts
    faults = [fault("i-old", 20), fault("i-new", 1, open=False), fault("i-faulty", 0)]

    # When the hosts to avoid are ordered
    avoid = hosts_to_avoid(["i-faulty", "i-died"], faults)

    # Then the job's own failed hosts lead, and a host in both lists is named once, in the first
    assert avoid.in_priority == ("i-died", "i-faulty", "i-new", "i-old")


def test_a_host_with_several_faults_is_ranked_by_its_newest_and_named_once() -> None:
    avoid = hosts_to_avoid([], [fault("i-a", 30), fault("i-b", 10), fault("i-a", 5, open=False)])
    assert avoid.in_priority == ("i-a", "i-b")
    assert avoid.why("i-a") == "which has an open GPU fault"


def test_faults_of_the_same_moment_are_ordered_by_host() -> None:
    avoid = hosts_to_avoid([], [fault("i-c", 1), fault("i-a", 1), fault("i-b", 1)])
    assert avoid.in_priority == ("i-a", "i-b", "i-c")


def test_each_host_to_avoid_says_why_and_another_host_is_not_one() -> None:
    avoid = hosts_to_avoid(["i-died"], [fault("i-open", 1), fault("i-claimed", 2, open=False)])
    assert avoid.why("i-open") == "which has an open GPU fault"
    assert avoid.why("i-claimed") == "which has a GPU fault claimed within the mass-fault window"
    assert avoid.why("i-died") == "which failed this job before"
    assert "i-healthy" not in avoid
    with pytest.raises(ValueError, match="i-healthy is not a host to avoid"):
        avoid.why("i-healthy")


def test_a_fault_or_failed_host_without_a_host_id_is_ignored() -> None:
    avoid = hosts_to_avoid(["", "i-died"], [fault("", 1)])
    assert avoid.in_priority == ("i-died",)


# --- The placement constraint -----------------------------------------------------------------------


def test_on_an_ec2_provider_every_host_to_avoid_is_excluded_in_priority_order() -> None:
    avoid = hosts_to_avoid(["i-faulty"], [fault("i-c", 2), fault("i-b", 1)])
    assert placement_exclusion(EC2_PROVIDER, avoid.in_priority) == [
        {"type": "memberOf", "expression": "ec2InstanceId !in ['i-faulty', 'i-b', 'i-c']"}
    ]


def test_on_managed_instances_no_host_can_be_excluded() -> None:
    avoid = hosts_to_avoid(["i-faulty"], [fault("i-b", 1)])
    assert excludable_hosts(MANAGED, avoid.in_priority) == ()
    assert placement_exclusion(MANAGED, avoid.in_priority) == []


def test_nothing_to_avoid_is_no_constraint() -> None:
    assert placement_exclusion(EC2_PROVIDER, hosts_to_avoid([], []).in_priority) == []


def test_past_the_expression_limit_the_jobs_failed_hosts_stay_and_the_oldest_faults_go() -> None:
    # Given 200 faulting hosts (one a minute) besides the job's two failed hosts
    storm = [fault(f"i-{n:017x}", minutes_ago=n) for n in range(200)]
    avoid = hosts_to_avoid(["i-faulty", "i-died"], storm)

    # When the relaunch's constraint is built
    kept = excludable_hosts(EC2_PROVIDER, avoid.in_priority)
    [constraint] = placement_exclusion(EC2_PROVIDER, avoid.in_priority)

    # Then it fits ECS's limit, with no room for one more id, and holds the failed hosts and the newest faults
    expression = constraint["expression"]
    assert len(expression) <= MAX_EXCLUSION_EXPRESSION < len(expression) + len(", 'i-00000000000000000'")
    assert kept == ("i-died", "i-faulty", *(f.host for f in storm[: len(kept) - 2]))
    assert storm[-1].host not in expression


def test_an_expression_of_exactly_the_limit_is_kept_whole() -> None:
    # "ec2InstanceId !in [" + "]" is 20 characters, each quoted id 2 more than the id, ", " between ids:
    # 98 ids of 16 characters and one of 18 make 20 + 98 * 18 + 20 + 98 * 2 = 2,000
    hosts = [*(f"i-{n:014d}" for n in range(98)), "i-" + "f" * 16]
    assert len(placement_exclusion(None, hosts)[0]["expression"]) == MAX_EXCLUSION_EXPRESSION
    assert excludable_hosts(None, hosts) == tuple(hosts)
    assert excludable_hosts(None, [*hosts, "i-a"]) == tuple(hosts)


# --- The check after placement ----------------------------------------------------------------------


def test_a_new_task_on_a_host_with_an_open_fault_is_misplaced_and_fails_the_attempt() -> None:
    # Given a relaunched task ECS placed on a host whose GPU fault is open, and another on a healthy host
    avoid = hosts_to_avoid(["i-faulty"], [fault("i-b", 1)])
    tasks = [new_task("t1", "i-b"), new_task("t2", "i-d", last="RUNNING")]

    # When the start is watched
    misplaced = misplaced_tasks(tasks, avoid)

    # Then the first is misplaced, with the reason, and the attempt failed
    assert [(m.task_arn, m.host, m.reason) for m in misplaced] == [
        (TASK + "t1", "i-b", "placed on i-b, which has an open GPU fault")
    ]
    assert judge_start(tasks, SECOND, TIMEOUT, misplaced) == WatchState.FAILED


def test_a_new_task_on_one_of_the_jobs_failed_hosts_is_misplaced_too() -> None:
    avoid = hosts_to_avoid(["i-faulty", "i-died"], [])
    [misplaced] = misplaced_tasks([new_task("t1", "i-died", last="RUNNING")], avoid)
    assert misplaced.reason == "placed on i-died, which failed this job before"


def test_tasks_on_healthy_hosts_without_a_host_yet_or_already_stopping_are_not_misplaced() -> None:
    avoid = hosts_to_avoid(["i-faulty"], [fault("i-b", 1)])
    tasks = [
        new_task("healthy", "i-d", last="RUNNING"),
        new_task("unplaced", None),
        new_task("stopping", "i-b", last="RUNNING", desired="STOPPED"),
    ]
    assert misplaced_tasks(tasks, avoid) == ()
    assert judge_start(tasks[:1], SECOND, TIMEOUT, ()) == WatchState.DONE


def test_a_misplaced_attempt_says_where_and_why_and_its_hosts_are_failed_hosts() -> None:
    # Given two tasks misplaced and a third that died on its own
    avoid = hosts_to_avoid([], [fault("i-b", 1), fault("i-c", 2)])
    tasks = [new_task("t1", "i-b"), new_task("t2", "i-c"), new_task("t3", "i-e", last="STOPPED")]
    misplaced = misplaced_tasks(tasks, avoid)
    watch = watch_result(WatchState.FAILED, tasks, want_running=True, misplaced=misplaced)
    launch = Launch(state=LaunchState.STARTED, attempt=1, launched_at=NOW)

    # Then the failure names the first misplaced task, its host and why, and counts the others
    assert describe_failure(launch, watch, 900) == (
        "task t1 was placed on i-b, which has an open GPU fault (and 1 more task on hosts to avoid); it was stopped"
    )
    # And every host the attempt failed on joins the job's failed hosts
    assert failed_hosts(watch) == ["i-b", "i-c", "i-e"]


def test_the_stop_reason_of_a_misplaced_task_says_why_within_the_limit() -> None:
    reason = misplaced_stop_reason("llm-7b", "placed on i-b, which has an open GPU fault")
    assert reason == (
        "GPU Fault Responder: placed on i-b, which has an open GPU fault; job llm-7b is relaunched elsewhere"
    )
    assert len(misplaced_stop_reason("j" * 300, "placed on i-b")) == MAX_STOP_REASON
