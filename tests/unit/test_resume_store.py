"""The resume store's conditional writes on DynamoDB (moto): one claim per fault, one replacement per task set."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.resume_store import DynamoDBResumeStore
from fault_responder.resume.budget import AttemptOutcome, LedgerAttempt, RecordStatus
from fault_responder.resume.jobs import TaskSpec
from tests.unit.test_resume_domain import NOW, a_fault, check, fault_from_event, health_event

TABLE = "incidents"
JOB = "gpu-training/llm"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBResumeStore]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield DynamoDBResumeStore(TABLE, client)


def attempt(execution: str, step: int = 200) -> LedgerAttempt:
    return LedgerAttempt(number=0, step=step, checkpoint_uri=None, fault_key="f", execution=execution, started_at=NOW)


def test_a_fault_is_claimed_once(store: DynamoDBResumeStore) -> None:
    fault = a_fault()
    first = store.claim(fault, "exec-a")
    retried = store.claim(fault, "exec-a")
    duplicate = store.claim(fault, "exec-b")
    assert (first.claimed, retried.claimed) == (True, True)
    assert (duplicate.claimed, duplicate.execution) == (False, "exec-a")


def test_the_same_instance_faulting_again_later_is_a_new_claim(store: DynamoDBResumeStore) -> None:
    later = check()
    later["lastStatusChange"] = "2026-11-29T11:00:00Z"
    assert store.claim(a_fault(), "exec-a").claimed
    assert store.claim(fault_from_event(health_event(later), ["ACCELERATED_COMPUTE"]), "exec-b").claimed


def test_impaired_instances_are_counted_within_the_window(store: DynamoDBResumeStore) -> None:
    fault = a_fault()
    store.claim(fault, "exec-a")
    other = fault.model_copy(update={"container_instance_arn": fault.container_instance_arn + "-2", "fingerprint": "x"})
    store.claim(other, "exec-b")
    far = fault.model_copy(
        update={
            "container_instance_arn": "ci-3",
            "fingerprint": "y",
            "impaired_at": fault.impaired_at + timedelta(hours=2),
        }
    )
    store.claim(far, "exec-c")
    assert len(store.impaired_instances(fault, timedelta(minutes=30))) == 2


def test_claimed_faults_name_their_hosts_within_the_window_around_a_moment(store: DynamoDBResumeStore) -> None:
    # Given two claimed faults of the provider (one 10 minutes later, on i-2) and one two hours later
    fault = a_fault()
    store.claim(fault, "exec-a")
    later = fault.impaired_at + timedelta(minutes=10)
    other = fault.model_copy(
        update={"container_instance_arn": "ci-2", "ec2_instance_id": "i-2", "fingerprint": "x", "impaired_at": later}
    )
    store.claim(other, "exec-b")
    far = other.model_copy(update={"fingerprint": "y", "impaired_at": fault.impaired_at + timedelta(hours=2)})
    store.claim(far, "exec-c")

    # When the claims within 10 minutes of the later one are read
    claimed = store.claimed_faults(fault.cluster_name, fault.capacity_provider, later, timedelta(minutes=10))

    # Then both near ones are there, oldest first, with their hosts and times
    assert [(c.container_instance_arn, c.host, c.impaired_at) for c in claimed] == [
        (fault.container_instance_arn, "i-faulty", fault.impaired_at),
        ("ci-2", "i-2", later),
    ]
    # And each knows its fault and when it was claimed, in the order the claims were written
    assert [c.fault_key for c in claimed] == [fault.key, other.key]
    first, second = (c.claimed_at for c in claimed)
    assert first is not None and second is not None and first <= second
    assert store.claimed_faults(fault.cluster_name, "another-provider", later, timedelta(minutes=10)) == []


def test_a_claim_recorded_before_hosts_were_stored_is_counted_without_a_host(store: DynamoDBResumeStore) -> None:
    # Given a provider's fault record as an earlier version wrote it: no host attribute
    fault = a_fault()
    store.claim(fault, "exec-a")
    client = boto3.client("dynamodb", region_name="us-east-1")
    key = {"pk": {"S": f"PROVIDER#{fault.cluster_name}/{fault.capacity_provider}"}}
    [item] = client.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": key["pk"]}
    )["Items"]
    client.update_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]}, UpdateExpression="REMOVE host")

    # When it is read back
    [claimed] = store.claimed_faults(fault.cluster_name, fault.capacity_provider, NOW, timedelta(hours=3))

    # Then it has no host, and the mass-fault guard still counts it
    assert (claimed.container_instance_arn, claimed.host) == (fault.container_instance_arn, None)
    assert store.impaired_instances(fault, timedelta(minutes=30)) == {fault.container_instance_arn}


def test_an_attempt_is_recorded_once_per_task_set(store: DynamoDBResumeStore) -> None:
    # Given exec-a recorded attempt 1 replacing the set "found"
    first = store.record_attempt(JOB, attempt("exec-a"), "found")

    # When exec-a's Lambda is retried, and exec-b tries to replace the same set
    retried = store.record_attempt(JOB, attempt("exec-a"), "found")
    rival = store.record_attempt(JOB, attempt("exec-b"), "found")

    # Then the retry gets attempt 1 back and exec-b is superseded: one copy of the job
    assert (first.status, first.attempt and first.attempt.number) == (RecordStatus.RECORDED, 1)
    assert (retried.status, retried.attempt and retried.attempt.number) == (RecordStatus.REUSED, 1)
    assert (rival.status, rival.by) == (RecordStatus.SUPERSEDED, "exec-a")
    assert [a.number for a in store.load_ledger(JOB).attempts] == [1]


def test_replacing_another_task_set_is_the_next_attempt(store: DynamoDBResumeStore) -> None:
    store.record_attempt(JOB, attempt("exec-a"), "found")
    second = store.record_attempt(JOB, attempt("exec-a"), "attempt-1")
    assert second.attempt is not None and second.attempt.number == 2


def test_finishing_an_attempt_records_its_outcome_and_the_hosts_it_failed_on(store: DynamoDBResumeStore) -> None:
    store.record_attempt(JOB, attempt("exec-a"), "found")
    store.add_failed_hosts(JOB, ["i-faulty"])
    store.add_failed_hosts(JOB, ["i-faulty"])
    ledger = store.finish_attempt(JOB, 1, AttemptOutcome.FAILED, "early stop", ["i-2", "i-faulty"])
    assert (ledger.attempts[0].outcome, ledger.attempts[0].reason) == (AttemptOutcome.FAILED, "early stop")
    assert store.load_ledger(JOB).failed_hosts == ("i-faulty", "i-2")


def test_a_large_gang_snapshot_round_trips_in_one_item(store: DynamoDBResumeStore) -> None:
    tasks = [
        TaskSpec(
            task_arn=f"arn:aws:ecs:us-east-1:123456789012:task/gpu-training/{n:032x}",
            task_definition_arn="arn:aws:ecs:us-east-1:123456789012:task-definition/trainer:7",
            overrides={
                "containerOverrides": [{"name": "trainer", "environment": [{"name": "NODE_RANK", "value": str(n)}]}]
            },
            tags={"fault-responder:job-id": "llm", "team": "pretraining"},
        )
        for n in range(1000)
    ]
    store.save_tasks(JOB, "fault-1", tasks)
    assert store.load_tasks(JOB, "fault-1") == tasks


def test_attempt_tasks_round_trip_and_an_attempt_that_placed_nothing_has_none(store: DynamoDBResumeStore) -> None:
    store.save_attempt_tasks(JOB, 1, ["arn:t/1", "arn:t/2"])
    assert store.load_attempt_tasks(JOB, 1) == ("arn:t/1", "arn:t/2")
    assert store.load_attempt_tasks(JOB, 2) == ()


# --- Another account's and Region's faults (the organization's bus) ---------------------------------------------------

MEMBER_SCOPE = "222222222222/us-west-2/"


def test_another_accounts_clusters_jobs_spares_and_refills_of_the_same_names_are_its_own_the_homes_keys_unchanged(
    store: DynamoDBResumeStore,
) -> None:
    member = DynamoDBResumeStore(store.table_name, store._db, scope=MEMBER_SCOPE)
    fault = a_fault()
    # (its own container instance, with an id of its own: ECS's ids are unique)
    theirs = fault.model_copy(
        update={
            "account": "222222222222",
            "region": "us-west-2",
            "container_instance_arn": "arn:aws:ecs:us-west-2:222222222222:container-instance/gpu-training/ci-theirs",
            "fingerprint": "gpu-training/ci-theirs/ACCELERATED_COMPUTE",
        }
    )

    # Claims of one cluster and provider name: counted per account and Region
    assert store.claim(fault, "exec-home").claimed and member.claim(theirs, "exec-member").claimed
    window = timedelta(minutes=30)
    assert len(store.claimed_faults(fault.cluster_name, fault.capacity_provider, fault.impaired_at, window)) == 1
    assert len(member.claimed_faults(fault.cluster_name, fault.capacity_provider, fault.impaired_at, window)) == 1
    # Ledgers of one job key: each its own
    store.add_failed_hosts(JOB, ["i-home"])
    member.add_failed_hosts(JOB, ["i-member"])
    assert store.load_ledger(JOB).failed_hosts == ("i-home",)
    assert member.load_ledger(JOB).failed_hosts == ("i-member",)
    # Spares of one provider, and at-most-once keys: each its own
    assert store.claim_spares("gpu-training", "p5", ["i-spare"], "job-a#attempt-1", now=NOW, until=NOW + window)
    assert member.claim_spares("gpu-training", "p5", ["i-spare"], "job-b#attempt-1", now=NOW, until=NOW + window)
    assert member.spare_claims("gpu-training", "p5", NOW) == {"i-spare": "job-b#attempt-1"}
    assert store.mark_once("REFILL#k", window) and member.mark_once("REFILL#k", window)

    # The stack's own keys are as they always were; the member's begin with its account and Region
    keys = {item["pk"]["S"] for item in store._db.scan(TableName=store.table_name)["Items"]}
    assert {f"JOB#{JOB}", f"PROVIDER#{fault.cluster_name}/{fault.capacity_provider}", "SPARES#gpu-training/p5"} <= keys
    assert {f"JOB#{MEMBER_SCOPE}{JOB}", f"SPARES#{MEMBER_SCOPE}gpu-training/p5", f"ONCE#{MEMBER_SCOPE}REFILL#k"} <= keys
    # and the recovery report reads every account's ledgers, of a cluster by its name whichever account
    assert sorted(ledger.job_key for ledger in store.ledgers("gpu-training")) == [f"{MEMBER_SCOPE}{JOB}", JOB]
