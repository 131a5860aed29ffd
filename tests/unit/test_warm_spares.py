"""Warm spares: which hosts are free, the all-or-none claim on DynamoDB (moto), the refill of the provider's Auto
Scaling group (moto), and what the thread says."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from fault_responder.adapters.autoscaling import AutoScalingAdapter
from fault_responder.adapters.resume_store import DynamoDBResumeStore
from fault_responder.resume.config import ResumeConfig
from fault_responder.resume.fault import ProviderInfo
from fault_responder.resume.jobs import Job, TaskSpec
from fault_responder.resume.relaunch import HostsToAvoid, hosts_to_avoid
from fault_responder.resume.spares import (
    MAX_SPARES_PER_JOB,
    REFILL_LEASE_WAIT,
    Refill,
    RefillLease,
    RefillLeaseLost,
    RefillRecord,
    RefillState,
    ScalingError,
    SpareHost,
    SpareState,
    SpareUse,
    describe_use,
    free_spares,
    refill,
    spare_constraint,
    unsupported_reason,
)
from fault_responder.resume.steps import ResumeSteps
from tests.integration.tables import create_incidents_table

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PROVIDER = "p5-training"
EC2 = ProviderInfo(name=PROVIDER, type="EC2_AUTOSCALING", auto_repair=None, auto_scaling_group="asg-p5")
MANAGED = ProviderInfo(name="mi", type="MANAGED_INSTANCES", auto_repair="DISABLED")


def spare(ec2_id: str, **changes: object) -> SpareHost:
    values: dict[str, object] = {
        "container_instance_arn": f"arn:aws:ecs:us-east-1:123456789012:container-instance/c/{ec2_id}",
        "ec2_instance_id": ec2_id,
        "capacity_provider": PROVIDER,
    }
    return SpareHost.model_validate(values | changes)


# --- Which spares are free --------------------------------------------------------------------------------------------


def test_a_spare_is_free_only_when_idle_on_the_provider_not_to_avoid_and_not_held() -> None:
    hosts = [
        spare("i-6"),
        spare("i-1"),
        spare("i-2", running_tasks=1),
        spare("i-3", pending_tasks=1),
        spare("i-4", status="DRAINING"),
        spare("i-5", agent_connected=False),
        spare("i-7", capacity_provider="other"),
        spare("i-8"),
        spare("i-9"),
    ]
    avoid = hosts_to_avoid(["i-8"], [])

    free = free_spares(hosts, PROVIDER, avoid, held={"i-9"})

    assert [host.ec2_instance_id for host in free] == ["i-1", "i-6"]


@pytest.mark.parametrize(
    ("providers", "names", "tasks", "reason"),
    [
        ({PROVIDER: EC2}, [PROVIDER, PROVIDER], 2, None),
        ({PROVIDER: EC2}, [None], 1, "launch type"),
        ({PROVIDER: EC2, "mi": MANAGED}, [PROVIDER, "mi"], 2, "several capacity providers"),
        ({"mi": MANAGED}, ["mi"], 1, "Managed Instances"),
        ({PROVIDER: EC2}, [PROVIDER] * (MAX_SPARES_PER_JOB + 1), MAX_SPARES_PER_JOB + 1, "more than one claim"),
    ],
)
def test_spares_serve_jobs_on_one_ec2_provider_only(
    providers: dict[str, ProviderInfo], names: list[str | None], tasks: int, reason: str | None
) -> None:
    found = unsupported_reason(providers, names, tasks)
    assert found is None if reason is None else reason in (found or "")


def test_a_task_is_pinned_to_its_spare_by_instance_id() -> None:
    assert spare_constraint("i-0abc") == {"type": "memberOf", "expression": "ec2InstanceId in ['i-0abc']"}


# --- Refill --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "max_size", "taken", "state", "after"),
    [
        (4, 10, 1, RefillState.ASKED, 5),
        (4, 10, 3, RefillState.ASKED, 7),
        (9, 10, 2, RefillState.FAILED, 10),
        (10, 10, 1, RefillState.FAILED, None),
    ],
)
def test_the_group_is_asked_for_as_many_instances_as_spares_taken_within_its_maximum(
    desired: int, max_size: int, taken: int, state: RefillState, after: int | None
) -> None:
    asked = refill("asg-p5", desired, max_size, taken)
    assert (asked.state, asked.desired_after) == (state, after)
    if state is RefillState.FAILED:
        assert "maximum size (10)" in (asked.detail or "")


def test_a_provider_without_a_group_cannot_be_refilled() -> None:
    asked = refill(None, None, None, 1)
    assert asked.state is RefillState.FAILED
    assert "no Auto Scaling group" in (asked.detail or "")


# --- What the thread says ----------------------------------------------------------------------------------------


def test_the_thread_says_which_spare_and_how_the_pool_was_refilled() -> None:
    asked = Refill(state=RefillState.ASKED, group="asg-p5", desired_before=4, desired_after=5, max_size=10)
    use = SpareUse(state=SpareState.USED, hosts=("i-1",), declared=3, free=2, needed=1, refill=asked)
    text = describe_use(use)
    assert "warm spare i-1 (2 of 3 free)" in text
    assert "asg-p5 asked for 4 → 5 instances" in text


def test_the_thread_says_when_no_spare_was_free_and_a_failed_refill_loudly() -> None:
    none = describe_use(SpareUse(state=SpareState.NONE_FREE, declared=1, free=0, needed=2))
    failed = Refill(state=RefillState.FAILED, group="asg-p5", detail="asg-p5 is at its maximum size (4)")
    used = describe_use(SpareUse(state=SpareState.USED, hosts=("i-1",), declared=1, free=1, needed=1, refill=failed))
    assert "none used (0 of 1 free, 2 needed)" in none
    assert "Pool refill FAILED: asg-p5 is at its maximum size (4)" in used
    assert describe_use(SpareUse(state=SpareState.OFF)) == ""
    assert describe_use(SpareUse(state=SpareState.NONE_DECLARED)) == ""


def test_many_spares_are_named_up_to_five() -> None:
    hosts = tuple(f"i-{n}" for n in range(8))
    text = describe_use(SpareUse(state=SpareState.USED, hosts=hosts, declared=8, free=8, needed=8))
    assert "i-4 and 3 more" in text and "i-5" not in text


# --- The claim, on DynamoDB ----------------------------------------------------------------------------------------


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBResumeStore]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, "incidents")  # as template.yaml defines it
        yield DynamoDBResumeStore("incidents", client)


def claim(store: DynamoDBResumeStore, hosts: list[str], owner: str, at: datetime = NOW) -> bool:
    return store.claim_spares("c", PROVIDER, hosts, owner, now=at, until=at + timedelta(minutes=10))


def test_spares_are_claimed_all_or_none(store: DynamoDBResumeStore) -> None:
    assert claim(store, ["i-1"], "job-a#attempt-1")
    assert not claim(store, ["i-2", "i-1"], "job-b#attempt-1")  # i-1 is held: i-2 is not taken either

    assert store.spare_claims("c", PROVIDER, NOW) == {"i-1": "job-a#attempt-1"}
    assert claim(store, ["i-2", "i-3"], "job-b#attempt-1")
    assert store.spare_claims("c", PROVIDER, NOW) == {
        "i-1": "job-a#attempt-1",
        "i-2": "job-b#attempt-1",
        "i-3": "job-b#attempt-1",
    }


def test_a_retried_claim_by_its_owner_holds_and_a_hold_that_passed_frees_the_spare(
    store: DynamoDBResumeStore,
) -> None:
    assert claim(store, ["i-1"], "job-a#attempt-1")
    assert claim(store, ["i-1"], "job-a#attempt-1")

    later = NOW + timedelta(minutes=11)
    assert store.spare_claims("c", PROVIDER, later) == {}
    assert claim(store, ["i-1"], "job-b#attempt-1", at=later)
    assert store.spare_claims("c", PROVIDER, later) == {"i-1": "job-b#attempt-1"}


def test_claims_are_per_provider_and_an_empty_claim_takes_nothing(store: DynamoDBResumeStore) -> None:
    assert claim(store, ["i-1"], "job-a#attempt-1")
    assert store.spare_claims("c", "other", NOW) == {}
    assert store.spare_claims("other-cluster", PROVIDER, NOW) == {}
    assert not claim(store, [], "job-b#attempt-1")


def test_something_is_marked_once(store: DynamoDBResumeStore) -> None:
    assert store.mark_once("REFILL#job-a#attempt-1", timedelta(days=1))
    assert not store.mark_once("REFILL#job-a#attempt-1", timedelta(days=1))
    assert store.mark_once("REFILL#job-a#attempt-2", timedelta(days=1))


# --- The Auto Scaling group, on moto ----------------------------------------------------------------------------------


@pytest.fixture
def autoscaling(monkeypatch: pytest.MonkeyPatch) -> Iterator[AutoScalingAdapter]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("autoscaling", region_name="us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ec2.create_launch_template(
            LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": "ami-12345678", "InstanceType": "p5.48xlarge"}
        )
        client.create_auto_scaling_group(
            AutoScalingGroupName="asg-p5",
            LaunchTemplate={"LaunchTemplateName": "gpu", "Version": "$Latest"},
            MinSize=0,
            MaxSize=3,
            DesiredCapacity=1,
            AvailabilityZones=["us-east-1a"],
        )
        yield AutoScalingAdapter(client)


def test_the_group_size_is_read_and_grown(autoscaling: AutoScalingAdapter) -> None:
    assert autoscaling.group_size("asg-p5") == (1, 3)
    autoscaling.set_desired_capacity("asg-p5", 2)
    assert autoscaling.group_size("asg-p5") == (2, 3)
    assert autoscaling.group_size("no-such-group") is None


def test_a_refused_growth_is_a_scaling_error_saying_why() -> None:
    # moto grows a group past its MaxSize without a word; Auto Scaling answers this (botocore's Stubber checks the
    # request against the API model and gives the error as the service shapes it).
    client = boto3.client("autoscaling", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    message = "New SetDesiredCapacity value 10 is above max value 3 for the AutoScalingGroup."
    with Stubber(client) as stubbed:
        stubbed.add_client_error("set_desired_capacity", service_error_code="ValidationError", service_message=message)
        with pytest.raises(ScalingError, match="ValidationError: New SetDesiredCapacity value 10 is above max"):
            AutoScalingAdapter(client).set_desired_capacity("asg-p5", 10)


# --- The claim, as a relaunch takes it -----------------------------------------------------------------------------


class _Spares:
    def __init__(self, hosts: list[SpareHost]) -> None:
        self.hosts = hosts

    def spare_hosts(self, cluster: str, attribute: str) -> list[SpareHost]:
        return list(self.hosts)


def _take(store: DynamoDBResumeStore, spares: list[str], job: str, tasks: int) -> SpareUse:
    unused: Any = None
    steps = ResumeSteps(
        ecs=cast(Any, _Spares([spare(host) for host in spares])),
        store=store,
        spare_records=store,
        incidents=unused,
        fleets=unused,
        checkpoints=unused,
        notifier=unused,
        config=ResumeConfig(),
        clock=lambda: NOW,
    )
    specs = [
        TaskSpec(task_arn=f"{job}-{n}", task_definition_arn="t:1", capacity_provider_name=PROVIDER)
        for n in range(tasks)
    ]
    the_job = Job(
        job_id=job,
        cluster_arn="arn:aws:ecs:us-east-1:1:cluster/c",
        checkpoint_uri="s3://b/",
        mode="auto",
        task_count=tasks,
        hosts=(),
    )
    use, _ = steps.take_spares(the_job, specs, 1, HostsToAvoid(), providers={PROVIDER: EC2}, config=ResumeConfig())
    return use


def test_a_retried_relaunch_gets_the_same_spares_in_the_same_task_order(store: DynamoDBResumeStore) -> None:
    pool = [f"i-{n}" for n in range(6)]
    first = _take(store, pool, "llm", tasks=3)
    again = _take(store, pool, "llm", tasks=3)

    assert first.used and again.used
    assert again.hosts == first.hosts == tuple(sorted(first.hosts))
    other = _take(store, pool, "other", tasks=3)
    assert other.used and not set(other.hosts) & set(first.hosts)
    assert _take(store, pool, "third", tasks=1).state is SpareState.NONE_FREE


# --- The refill, recorded before its Auto Scaling call (DynamoDB and Auto Scaling on moto) ------------------------


class _Died(BaseException):
    """The Lambda's process ended where this is raised (a timeout, out of memory): no handler of the step runs, as
    nothing runs in a process that is gone."""


class _DiesOnce:
    """The Auto Scaling adapter (on moto), whose first SetDesiredCapacity the function does not survive: the
    process ends just before the call, or just after Auto Scaling did it."""

    def __init__(self, adapter: AutoScalingAdapter, *, after_the_call: bool) -> None:
        self.adapter, self.after_the_call = adapter, after_the_call
        self.calls: list[int] = []

    def group_size(self, name: str) -> tuple[int, int] | None:
        return self.adapter.group_size(name)

    def set_desired_capacity(self, name: str, desired: int) -> None:
        first = not self.calls
        self.calls.append(desired)
        if first and not self.after_the_call:
            raise _Died
        self.adapter.set_desired_capacity(name, desired)
        if first:
            raise _Died


def _refill_steps(store: DynamoDBResumeStore, scaling: Any) -> ResumeSteps:
    unused: Any = None
    return ResumeSteps(
        ecs=unused,
        store=store,
        spare_records=store,
        incidents=unused,
        fleets=unused,
        checkpoints=unused,
        notifier=unused,
        config=ResumeConfig(),
        clock=lambda: NOW,
        scaling=lambda: scaling,
    )


def _job(job: str = "llm") -> Job:
    return Job(
        job_id=job,
        cluster_arn="arn:aws:ecs:us-east-1:1:cluster/c",
        checkpoint_uri="s3://b/",
        mode="auto",
        task_count=1,
        hosts=(),
    )


TOOK_ONE = SpareUse(state=SpareState.USED, hosts=("i-1",), declared=2, free=2, needed=1)


@pytest.mark.parametrize("after_the_call", [False, True], ids=["before the call", "after the call"])
def test_a_refill_whose_step_died_around_its_auto_scaling_call_is_completed_once_by_the_retry(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter, after_the_call: bool
) -> None:
    # Given a relaunch that took one spare of asg-p5 (desired 1, max 3), and a function that dies at its
    # SetDesiredCapacity, just before Auto Scaling gets it or just after it did it
    dying = _DiesOnce(autoscaling, after_the_call=after_the_call)

    # When the step runs and dies there, and the workflow runs the step again
    with pytest.raises(_Died):
        _refill_steps(store, dying).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())
    assert autoscaling.group_size("asg-p5") == ((2, 3) if after_the_call else (1, 3))
    retried = _refill_steps(store, dying).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then the group was grown by the one spare taken, once: neither lost nor grown twice
    assert autoscaling.group_size("asg-p5") == (2, 3)
    assert dying.calls == ([2] if after_the_call else [2, 2])
    assert retried is not None and (retried.state, retried.desired_before, retried.desired_after) == (
        RefillState.ASKED,
        1,
        2,
    )
    assert "completed by a retry of the step" in describe_use(TOOK_ONE.model_copy(update={"refill": retried}))
    # And the record is confirmed: another try returns the same refill, and asks Auto Scaling for nothing
    again = _refill_steps(store, dying).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())
    assert again == retried and autoscaling.group_size("asg-p5") == (2, 3)
    assert len(dying.calls) == (1 if after_the_call else 2)


def test_a_refill_is_recorded_before_its_call_and_confirmed_after_it(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    seen: list[RefillRecord | None] = []

    class Watching:
        def group_size(self, name: str) -> tuple[int, int] | None:
            return autoscaling.group_size(name)

        def set_desired_capacity(self, name: str, desired: int) -> None:
            seen.append(store.refill_record("REFILL#c/llm#attempt-1"))
            autoscaling.set_desired_capacity(name, desired)

    asked = _refill_steps(store, Watching()).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # The call is made with the intent on record, unconfirmed; then the record is confirmed with the outcome
    assert asked is not None and asked.state is RefillState.ASKED
    [before_the_call] = seen
    assert before_the_call == RefillRecord(refill=asked, confirmed=False)
    assert store.refill_record("REFILL#c/llm#attempt-1") == RefillRecord(refill=asked, confirmed=True)


def test_a_failed_refill_is_recorded_so_a_retry_reports_it_again_and_asks_nothing_more(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given a group at its maximum size
    autoscaling.set_desired_capacity("asg-p5", 3)
    steps = _refill_steps(store, autoscaling)

    first = steps.refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())
    again = steps.refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then both say it failed (the step's last output pages it once), and the group is as it was
    assert first is not None and first.state is RefillState.FAILED and "maximum size (3)" in str(first.detail)
    assert again == first and autoscaling.group_size("asg-p5") == (3, 3)


def test_a_marker_of_an_earlier_version_says_the_refill_was_asked_and_asks_nothing(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given the marker a step of the earlier version left (asked once, nothing recorded about it)
    assert store.mark_once("REFILL#c/llm#attempt-1", timedelta(days=1))

    again = _refill_steps(store, autoscaling).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    assert again == Refill(state=RefillState.ASKED_BEFORE, group="asg-p5")
    assert autoscaling.group_size("asg-p5") == (1, 3)


# --- One refill of a group at a time: its lease (DynamoDB and Auto Scaling on moto) ------------------------------


class _Time:
    """The step's clock, moved on by its waits: a fake Lambda whose sleeps take no real time."""

    def __init__(self, at: datetime = NOW) -> None:
        self.now, self.slept = at, 0.0

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.slept += seconds


def _leased_steps(store: DynamoDBResumeStore, scaling: Any, time: _Time) -> ResumeSteps:
    unused: Any = None
    return ResumeSteps(
        ecs=unused,
        store=store,
        spare_records=store,
        incidents=unused,
        fleets=unused,
        checkpoints=unused,
        notifier=unused,
        config=ResumeConfig(),
        clock=time.clock,
        scaling=lambda: scaling,
        sleep=time.sleep,
    )


def _hold_lease(store: DynamoDBResumeStore, holder: str, until: datetime) -> RefillLease:
    """asg-p5's refill lease, taken by `holder` (another relaunch) until `until`."""
    lease = RefillLease(group="asg-p5", holder=holder, held_until=until)
    assert store.write_refill_lease(lease, 0)
    return lease.model_copy(update={"revision": 1})


def test_a_refill_waits_for_the_group_lease_and_grows_the_group_from_the_size_its_holder_left(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given another relaunch holding asg-p5's refill lease (desired 1), which grows it to 2 and frees the lease
    # while this one waits
    held = _hold_lease(store, "c/other#attempt-1", NOW + timedelta(seconds=30))
    time = _Time()

    def holder_finishes(seconds: float) -> None:
        time.sleep(seconds)
        if store.refill_lease("asg-p5").holder == held.holder:
            autoscaling.set_desired_capacity("asg-p5", 2)
            assert store.write_refill_lease(held.model_copy(update={"holder": None, "held_until": None}), 1)

    steps = _leased_steps(store, autoscaling, time)
    steps.sleep = holder_finishes

    # When this relaunch, which took one spare, refills the group
    asked = steps.refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then it waited for the lease, and grew the group from the size the holder left: 2 -> 3, not 1 -> 2 again
    assert asked is not None and (asked.state, asked.desired_before, asked.desired_after) == (RefillState.ASKED, 2, 3)
    assert autoscaling.group_size("asg-p5") == (3, 3)
    assert 0 < time.slept < 1
    # And the lease is free, with nothing pending
    lease = store.refill_lease("asg-p5")
    assert (lease.holder, lease.pending) == (None, None)


@pytest.mark.parametrize("after_the_call", [False, True], ids=["before the call", "after the call"])
def test_a_refill_whose_step_died_holding_the_lease_is_completed_by_the_next_refill_of_the_group_once(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter, after_the_call: bool
) -> None:
    # Given a relaunch of job llm (one spare of asg-p5: desired 1, max 3) whose step died at its SetDesiredCapacity
    # holding the group's lease, and whose retry never came
    dying = _DiesOnce(autoscaling, after_the_call=after_the_call)
    with pytest.raises(_Died):
        _leased_steps(store, dying, _Time()).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())
    assert store.refill_lease("asg-p5").pending_key == "REFILL#c/llm#attempt-1"

    # When another job's relaunch, 5 s later, refills the same group for the one spare it took
    time, calls = _Time(NOW + timedelta(seconds=5)), _Calls(autoscaling)
    other = _leased_steps(store, calls, time).refill_spares(_job("other"), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then it waited for the dead holder's lease to pass (not for ever), completed its refill, then made its own:
    # the group grew by both spares, once each
    assert NOW + timedelta(seconds=30) <= time.now < NOW + timedelta(seconds=31)
    assert calls.made == ([3] if after_the_call else [2, 3])
    assert autoscaling.group_size("asg-p5") == (3, 3)
    assert other is not None and (other.desired_before, other.desired_after) == (2, 3)
    # And the dead step's record is confirmed, saying so; its retry, had it come, returns it and asks nothing
    left = store.refill_record("REFILL#c/llm#attempt-1")
    assert left is not None and left.confirmed and left.refill is not None
    assert (left.refill.state, left.refill.desired_after) == (RefillState.ASKED, 2)
    assert "completed by the next refill of the group" in str(left.refill.detail)
    late = _leased_steps(store, calls, time).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())
    assert late == left.refill and autoscaling.group_size("asg-p5") == (3, 3)
    assert store.refill_lease("asg-p5").pending is None


def test_a_refill_with_no_call_to_make_leaves_the_group_lease_free(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given a group at its maximum size: nothing to ask Auto Scaling for
    autoscaling.set_desired_capacity("asg-p5", 3)

    asked = _leased_steps(store, autoscaling, _Time()).refill_spares(
        _job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig()
    )

    # Then the failure is recorded, confirmed, and the lease is free for the next refill of the group at once
    assert asked is not None and asked.state is RefillState.FAILED
    assert store.refill_record("REFILL#c/llm#attempt-1") == RefillRecord(refill=asked, confirmed=True)
    lease = store.refill_lease("asg-p5")
    assert (lease.holder, lease.pending, lease.revision) == (None, None, 2)


def test_a_lease_held_past_the_wait_fails_the_refill_loudly_and_records_nothing(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given asg-p5's lease held, and held on, by another relaunch
    _hold_lease(store, "c/other#attempt-1", NOW + timedelta(hours=1))
    time = _Time()

    asked = _leased_steps(store, autoscaling, time).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then after the whole wait the refill failed (the workflow pages it), saying why; nothing grew or was recorded
    assert asked is not None and asked.state is RefillState.FAILED
    assert "held by c/other#attempt-1" in str(asked.detail)
    assert REFILL_LEASE_WAIT.total_seconds() <= time.slept < REFILL_LEASE_WAIT.total_seconds() + 1
    assert autoscaling.group_size("asg-p5") == (1, 3)
    assert store.refill_record("REFILL#c/llm#attempt-1") is None


def test_a_holder_whose_lease_was_taken_over_makes_no_auto_scaling_call(
    store: DynamoDBResumeStore, autoscaling: AutoScalingAdapter
) -> None:
    # Given a refill that stalls while it reads the group's size, for so long that another relaunch takes the lease
    class Stalls(_Calls):
        def group_size(self, name: str) -> tuple[int, int] | None:
            size = super().group_size(name)
            lease = store.refill_lease("asg-p5")
            taken = lease.model_copy(update={"holder": "c/other#attempt-1", "held_until": NOW + timedelta(hours=1)})
            assert store.write_refill_lease(taken, lease.revision)
            return size

    stalls = Stalls(autoscaling)

    # When it goes on
    with pytest.raises(RefillLeaseLost):
        _leased_steps(store, stalls, _Time()).refill_spares(_job(), 1, {PROVIDER: EC2}, TOOK_ONE, ResumeConfig())

    # Then it neither called Auto Scaling nor recorded a refill: its retry starts again under the lease
    assert stalls.made == [] and autoscaling.group_size("asg-p5") == (1, 3)
    assert store.refill_record("REFILL#c/llm#attempt-1") is None


class _Calls:
    """The Auto Scaling adapter (on moto), counting the desired capacities set."""

    def __init__(self, adapter: AutoScalingAdapter) -> None:
        self.adapter = adapter
        self.made: list[int] = []

    def group_size(self, name: str) -> tuple[int, int] | None:
        return self.adapter.group_size(name)

    def set_desired_capacity(self, name: str, desired: int) -> None:
        self.made.append(desired)
        self.adapter.set_desired_capacity(name, desired)
