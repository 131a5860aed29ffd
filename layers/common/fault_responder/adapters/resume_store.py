"""The training auto-resume workflow's state on the IncidentsTable (single table, see template.yaml).

Items (pk / sk):
- FAULT#<fingerprint>#<lastStatusChange> / CLAIM: who handles this fault. Created once; a duplicate or
  concurrent trigger finds it and changes nothing.
- PROVIDER#<cluster>/<provider> / FAULT#<time>#<container instance id>: each claimed fault, counted by the
  mass-fault guard over a time window, with its host's EC2 instance id (`host`; absent on items written before
  it was stored), which relaunches avoid.
- JOB#<cluster>/<job id> / TASKS#<fault key>: the tasks of the job as found (zlib-compressed JSON: a gang of
  hundreds of tasks fits in one item, and not in a state's payload).
- JOB#<cluster>/<job id> / LEDGER: the attempts (number, step resumed from, outcome) and the hosts that
  failed the job. Every write is conditional on the revision read.
- JOB#<cluster>/<job id> / ATTEMPT#<number>: the tasks an attempt started.
- JOB#<cluster>/<job id> / REPLACED#<digest of task ARNs>: which execution replaced that set of tasks. It is
  written in the same transaction as the attempt, so two executions cannot both restart the same tasks.
- SPARES#<cluster>/<provider> / HOST#<EC2 instance id>: which relaunch (job and attempt) holds that warm spare, and
  until when. A relaunch claims all its spares in one transaction, each conditional on being free or expired.
- ONCE#<key> / ONCE: something done at most once. A spare pool's refill per attempt is one
  (`REFILL#<cluster>/<job id>#attempt-<n>`), kept as its record (`refill`: the refill as JSON, with the desired
  capacity to set; `confirmed`): written, create-only, before the Auto Scaling call, and confirmed after it. An item
  without `refill` is the marker of an earlier version.
- ASG#<Auto Scaling group name> / REFILL: the group's refill lease (resume.spares.RefillLease): who refills it now
  and until when (`holder`, `held_until`), the refill made under it and not confirmed yet (`pending`, `pending_key`),
  and a `revision` every write is conditional on. A refill record is written and confirmed in one transaction with
  the lease, so a refill is pending in the lease exactly while its record is unconfirmed.

Everything expires through TTL (`expires_at`).

A store for a fault of another account or Region than the stack's (the organization's bus: the workflow acts where
the fault happened) has a `scope`, `<account>/<region>/`, that every key named by a cluster, a provider, a job, an
Auto Scaling group or a refill begins with after its prefix (`PROVIDER#<scope><cluster>/<provider>`,
`JOB#<scope><cluster>/<job id>`, `SPARES#...`, `ASG#...`, `ONCE#...`): two accounts' clusters, jobs and groups of one
name never share a count, a ledger, a spare or a lease. The stack's own account and Region have no scope: their keys
are as they always were. A claim (`FAULT#<fingerprint>...`) names its container instance, whose id is ECS's own.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache, partial
from typing import Any, cast

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from botocore.client import BaseClient
from pydantic import TypeAdapter

from fault_responder.adapters.dynamo_conditions import conditionally
from fault_responder.resume.budget import AttemptOutcome, Ledger, LedgerAttempt, RecordResult, RecordStatus
from fault_responder.resume.fault import ClaimedFault, ClaimResult, Fault
from fault_responder.resume.jobs import TaskSpec
from fault_responder.resume.spares import Refill, RefillLease, RefillRecord

CLAIM_TTL = timedelta(days=30)
LEDGER_TTL = timedelta(days=90)
SNAPSHOT_TTL = timedelta(days=30)
REFILL_TTL = timedelta(days=1)
"""A refill lease, and a refill record written with it, are kept a day after their last write: far past any retry."""
MAX_LEDGER_ATTEMPTS = 100
"""Older attempts are dropped from the ledger item; the budget only ever looks at the recent ones."""
MAX_WRITE_CONFLICTS = 8
_SCOPE = re.compile(r"^[0-9]{12}/[a-z0-9-]+/")


def of_cluster(job_key: str, cluster_name: str) -> bool:
    """Whether the job key (a member's begins with its scope: account/Region/cluster/job) is of that cluster."""
    return _SCOPE.sub("", job_key).startswith(f"{cluster_name}/")


"""A member account's and Region's scope at the start of a job key."""

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


# Built on first use (a TypeAdapter builds its validator when made): most task functions never read these items.
@cache
def _tasks_adapter() -> TypeAdapter[list[TaskSpec]]:
    return TypeAdapter(list[TaskSpec])


@cache
def _attempts_adapter() -> TypeAdapter[list[LedgerAttempt]]:
    return TypeAdapter(list[LedgerAttempt])


class ResumeStoreConflictError(Exception):
    """Concurrent writers kept changing an item; the Lambda fails and the state's Retry runs it again."""


@dataclass(frozen=True, slots=True)
class _Versioned:
    ledger: Ledger
    revision: int


class DynamoDBResumeStore:
    def __init__(
        self, table_name: str, client: BaseClient, clock: Callable[[], float] = time.time, *, scope: str = ""
    ) -> None:
        """`scope`: `<account>/<region>/` for a fault of another account or Region than the stack's (see above)."""
        self.table_name = table_name
        self._db = cast(Any, client)
        self._clock = clock
        self.scope = scope

    # --- Claims and the mass-fault count ---------------------------------------------------------

    def claim(self, fault: Fault, execution: str) -> ClaimResult:
        """Claim the fault for `execution`, and count it for its provider, in one transaction."""
        claim = {
            "pk": f"FAULT#{fault.key}",
            "sk": "CLAIM",
            "execution": execution,
            "event_id": fault.event_id,
            "expires_at": self._expiry(CLAIM_TTL),
        }
        counted = {
            "pk": _provider_pk(self.scope + fault.cluster_name, fault.capacity_provider),
            "sk": _provider_sk(fault.impaired_at, fault.container_instance_arn),
            "container_instance_arn": fault.container_instance_arn,
            "host": fault.host,
            "fault_key": fault.key,
            "claimed_at": datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="microseconds"),
            "expires_at": self._expiry(CLAIM_TTL),
        }
        written = conditionally(
            lambda: self._db.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": _typed(claim),
                            # The same execution may claim again: its Lambda was retried after the write.
                            "ConditionExpression": "attribute_not_exists(pk) OR execution = :me",
                            "ExpressionAttributeValues": {":me": {"S": execution}},
                        }
                    },
                    {"Put": {"TableName": self.table_name, "Item": _typed(counted)}},
                ]
            )
        )
        if not written.held:
            holder = self._get(f"FAULT#{fault.key}", "CLAIM") or {}
            return ClaimResult(claimed=False, execution=str(holder.get("execution", "another execution")))
        return ClaimResult(claimed=True, execution=execution)

    def claim_planned(self, key: str, fault: Fault, execution: str, window: timedelta) -> ClaimResult:
        """Claim a planned move for `execution`: one per `key` within `window` (a drain's instance: however many
        DRAINING events ECS sends while it drains, one per task stopping; an operator's request: its id). Not
        counted for the provider: a planned move is no fault, and the mass-fault guard counts faults."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        claim = {
            "pk": key,
            "sk": "CLAIM",
            "execution": execution,
            "event_id": fault.event_id,
            "claimed_at": now.isoformat(timespec="microseconds"),
            "expires_at": self._expiry(CLAIM_TTL),
        }
        written = conditionally(
            lambda: self._db.put_item(
                TableName=self.table_name,
                Item=_typed(claim),
                ConditionExpression="attribute_not_exists(pk) OR execution = :me OR claimed_at < :before",
                ExpressionAttributeValues={
                    ":me": {"S": execution},
                    ":before": {"S": (now - window).isoformat(timespec="microseconds")},
                },
            )
        )
        if not written.held:
            holder = self._get(key, "CLAIM") or {}
            return ClaimResult(claimed=False, execution=str(holder.get("execution", "another execution")))
        return ClaimResult(claimed=True, execution=execution)

    def impaired_instances(self, fault: Fault, window: timedelta) -> set[str]:
        """Container instances of the fault's provider with a claimed fault within `window` of this one."""
        claimed = self.claimed_faults(fault.cluster_name, fault.capacity_provider, fault.impaired_at, window)
        return {claim.container_instance_arn for claim in claimed}

    def claimed_faults(
        self, cluster_name: str, provider: str, around: datetime, window: timedelta
    ) -> list[ClaimedFault]:
        """The provider's claimed faults that began within `window` of `around`, oldest first."""
        low = _provider_sk(around - window, "")
        high = _provider_sk(around + window, "~")
        items = self._query(
            _provider_pk(self.scope + cluster_name, provider),
            "sk BETWEEN :low AND :high",
            {":low": {"S": low}, ":high": {"S": high}},
        )
        return [
            ClaimedFault(
                container_instance_arn=str(item["container_instance_arn"]),
                impaired_at=_provider_sk_time(str(item["sk"])),
                host=str(item["host"]) if item.get("host") else None,
                fault_key=str(item["fault_key"]) if item.get("fault_key") else None,
                claimed_at=datetime.fromisoformat(str(item["claimed_at"])) if item.get("claimed_at") else None,
            )
            for item in items
        ]

    # --- Job snapshots ----------------------------------------------------------------------------

    def save_tasks(self, job_key: str, fault_key: str, tasks: Sequence[TaskSpec]) -> None:
        """The job's tasks as found; rewritten whole by a retried FindJobs (nothing has acted on them yet)."""
        payload = zlib.compress(_tasks_adapter().dump_json(list(tasks)))
        item = {"pk": _job_pk(self.scope + job_key), "sk": f"TASKS#{fault_key}", "tasks": payload}
        self._db.put_item(TableName=self.table_name, Item=_typed({**item, "expires_at": self._expiry(SNAPSHOT_TTL)}))

    def load_tasks(self, job_key: str, fault_key: str) -> list[TaskSpec]:
        item = self._get(_job_pk(self.scope + job_key), f"TASKS#{fault_key}")
        if item is None:
            raise LookupError(f"no task snapshot for job {job_key} and fault {fault_key}")
        raw = item["tasks"]
        data: bytes = raw.value if isinstance(raw, Binary) else raw  # type: ignore[attr-defined]  # untyped stub
        return _tasks_adapter().validate_json(zlib.decompress(data))

    # --- The ledger -------------------------------------------------------------------------------

    def load_ledger(self, job_key: str) -> Ledger:
        return self._load_ledger(job_key).ledger

    def add_failed_hosts(self, job_key: str, hosts: Iterable[str]) -> Ledger:
        new = [host for host in hosts if host]

        def change(ledger: Ledger) -> Ledger | None:
            missing = [host for host in new if host not in ledger.failed_hosts]
            if not missing:
                return None
            return ledger.model_copy(update={"failed_hosts": (*ledger.failed_hosts, *missing)})

        return self._update_ledger(job_key, change)

    def record_attempt(self, job_key: str, attempt: LedgerAttempt, replaces: str) -> RecordResult:
        """Record the next attempt BEFORE its RunTask, and that it replaces the tasks named by `replaces`.

        The attempt's number is the ledger's next one; `attempt.number` is ignored. A retry of the same
        execution gets its attempt back; another execution that already replaced these tasks wins.
        """
        marker_sk = f"REPLACED#{replaces}"
        for _ in range(MAX_WRITE_CONFLICTS):
            current = self._load_ledger(job_key)
            mine = next(
                (a for a in current.ledger.attempts if a.execution == attempt.execution and a.replaces == replaces),
                None,
            )
            if mine is not None:
                return RecordResult(RecordStatus.REUSED, mine)
            holder = self._get(_job_pk(self.scope + job_key), marker_sk)
            if holder is not None and holder.get("execution") != attempt.execution:
                return RecordResult(RecordStatus.SUPERSEDED, None, str(holder.get("execution")))
            number = current.ledger.attempt_count + 1
            recorded = attempt.model_copy(update={"number": number, "replaces": replaces})
            ledger = current.ledger.model_copy(
                update={"attempts": (*current.ledger.attempts, recorded)[-MAX_LEDGER_ATTEMPTS:]}
            )
            marker = {
                "pk": _job_pk(self.scope + job_key),
                "sk": marker_sk,
                "execution": attempt.execution,
                "attempt": number,
            }
            marker_put = {
                "TableName": self.table_name,
                "Item": _typed({**marker, "expires_at": self._expiry(LEDGER_TTL)}),
                "ConditionExpression": "attribute_not_exists(pk) OR execution = :me",
                "ExpressionAttributeValues": {":me": {"S": attempt.execution}},
            }
            writes = [{"Put": marker_put}, {"Put": self._ledger_put(ledger, current.revision)}]
            if not conditionally(partial(self._db.transact_write_items, TransactItems=writes)).held:
                continue  # re-read: either the ledger moved on, or another execution took the marker
            return RecordResult(RecordStatus.RECORDED, recorded)
        raise ResumeStoreConflictError(f"ledger of {job_key} kept changing while recording an attempt")

    def finish_attempt(
        self,
        job_key: str,
        number: int,
        outcome: AttemptOutcome,
        reason: str | None = None,
        failed_hosts: Sequence[str] = (),
        *,
        running_at: datetime | None = None,
        spare: bool | None = None,
    ) -> Ledger:
        finished: dict[str, Any] = {"outcome": outcome, "reason": reason}
        if running_at is not None:
            finished["running_at"] = running_at
        if spare is not None:
            finished["spare"] = spare

        def change(ledger: Ledger) -> Ledger | None:
            attempts = tuple(a.model_copy(update=finished) if a.number == number else a for a in ledger.attempts)
            hosts = (*ledger.failed_hosts, *(h for h in failed_hosts if h and h not in ledger.failed_hosts))
            updated = ledger.model_copy(update={"attempts": attempts, "failed_hosts": tuple(dict.fromkeys(hosts))})
            return None if updated == ledger else updated

        return self._update_ledger(job_key, change)

    def ledgers(self, cluster_name: str | None = None) -> Iterator[Ledger]:
        """Every job's ledger (of one cluster's jobs, with `cluster_name`): a Scan of the table, page by page, for
        the recovery report (an operator's command, never a workflow step)."""
        pages = self._db.get_paginator("scan").paginate(
            TableName=self.table_name,
            FilterExpression="sk = :ledger AND begins_with(pk, :prefix)",
            ExpressionAttributeValues={":ledger": {"S": "LEDGER"}, ":prefix": {"S": _job_pk("")}},
        )
        for page in pages:
            for raw in page.get("Items", []):
                item = _plain(raw)
                # Every account's and Region's: a member's job key begins with its scope (account/Region/cluster/job).
                job_key = str(item["pk"]).removeprefix("JOB#")
                if cluster_name is None or of_cluster(job_key, cluster_name):
                    yield _ledger(job_key, item)

    def save_attempt_tasks(self, job_key: str, number: int, task_arns: Sequence[str]) -> None:
        item = {"pk": _job_pk(self.scope + job_key), "sk": _attempt_sk(number), "task_arns": list(task_arns)}
        self._db.put_item(TableName=self.table_name, Item=_typed({**item, "expires_at": self._expiry(LEDGER_TTL)}))

    def load_attempt_tasks(self, job_key: str, number: int) -> tuple[str, ...]:
        """The tasks attempt `number` started (none when RunTask placed nothing)."""
        item = self._get(_job_pk(self.scope + job_key), _attempt_sk(number))
        return tuple(str(arn) for arn in (item or {}).get("task_arns", []))

    # --- Helpers ----------------------------------------------------------------------------------

    # --- Warm spares ----------------------------------------------------------------------------

    def spare_claims(self, cluster_name: str, provider: str, now: datetime) -> dict[str, str]:
        """The spares of the provider held now: EC2 instance id -> owner. One item per spare ever claimed within
        the TTL, so the read is as large as the pool."""
        items = self._query(
            _spares_pk(self.scope + cluster_name, provider), "begins_with(sk, :host)", {":host": {"S": "HOST#"}}
        )
        moment = _iso(now)
        return {str(item["host"]): str(item["owner"]) for item in items if str(item["held_until"]) > moment}

    def claim_spares(
        self, cluster_name: str, provider: str, hosts: Sequence[str], owner: str, *, now: datetime, until: datetime
    ) -> bool:
        """Hold every one of `hosts` for `owner` until `until`, or none: one transaction, each write conditional on
        the spare being unclaimed, its hold past, or held by `owner` already (a retried step)."""
        puts = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": _typed(
                        {
                            "pk": _spares_pk(self.scope + cluster_name, provider),
                            "sk": f"HOST#{host}",
                            "host": host,
                            "owner": owner,
                            "claimed_at": _iso(now),
                            "held_until": _iso(until),
                            "expires_at": self._expiry(CLAIM_TTL),
                        }
                    ),
                    "ConditionExpression": "attribute_not_exists(pk) OR held_until < :now OR #owner = :me",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": {":now": {"S": _iso(now)}, ":me": {"S": owner}},
                }
            }
            for host in dict.fromkeys(hosts)
        ]
        if not puts:
            return False
        return conditionally(partial(self._db.transact_write_items, TransactItems=puts)).held

    def mark_once(self, key: str, ttl: timedelta) -> bool:
        item = _typed({"pk": f"ONCE#{self.scope}{key}", "sk": "ONCE", "expires_at": self._expiry(ttl)})
        condition = "attribute_not_exists(pk)"
        return conditionally(
            partial(self._db.put_item, TableName=self.table_name, Item=item, ConditionExpression=condition)
        ).held

    def refill_record(self, key: str) -> RefillRecord | None:
        item = self._get(f"ONCE#{self.scope}{key}", "ONCE")
        if item is None:
            return None
        if "refill" not in item:
            return RefillRecord(refill=None, confirmed=True)
        return RefillRecord(refill=Refill.model_validate_json(item["refill"]), confirmed=bool(item.get("confirmed")))

    def record_refill(self, key: str, record: RefillRecord, ttl: timedelta, *, create: bool) -> bool:
        item = _typed(self._refill_item(key, record, ttl))
        condition = {"ConditionExpression": "attribute_not_exists(pk)"} if create else {}
        # (with no condition, nothing is refused: the write is made or raises)
        return conditionally(partial(self._db.put_item, TableName=self.table_name, Item=item, **condition)).held

    def refill_lease(self, group: str) -> RefillLease:
        item = self._get(f"ASG#{self.scope}{group}", "REFILL")
        if item is None:
            return RefillLease(group=group)
        return RefillLease(
            group=group,
            holder=item.get("holder"),
            held_until=datetime.fromisoformat(item["held_until"]) if item.get("held_until") else None,
            pending_key=item.get("pending_key"),
            pending=Refill.model_validate_json(item["pending"]) if item.get("pending") else None,
            revision=int(item.get("revision", 0)),
        )

    def write_refill_lease(
        self, lease: RefillLease, expected: int, *, record: tuple[str, RefillRecord] | None = None, create: bool = False
    ) -> bool:
        item: dict[str, Any] = {
            "pk": f"ASG#{self.scope}{lease.group}",
            "sk": "REFILL",
            "revision": expected + 1,
            "expires_at": self._expiry(REFILL_TTL),
        }
        if lease.holder is not None and lease.held_until is not None:
            item.update(holder=lease.holder, held_until=_iso(lease.held_until))
        if lease.pending is not None and lease.pending_key is not None:
            item.update(pending=lease.pending.model_dump_json(exclude_none=True), pending_key=lease.pending_key)
        put: dict[str, Any] = {"TableName": self.table_name, "Item": _typed(item)}
        if expected:
            put.update(
                ConditionExpression="revision = :read", ExpressionAttributeValues={":read": {"N": str(expected)}}
            )
        else:
            put.update(ConditionExpression="attribute_not_exists(pk)")
        writes: list[dict[str, Any]] = [{"Put": put}]
        if record is not None:
            key, written = record
            kept: dict[str, Any] = {
                "TableName": self.table_name,
                "Item": _typed(self._refill_item(key, written, REFILL_TTL)),
            }
            if create:
                kept.update(ConditionExpression="attribute_not_exists(pk)")
            writes.append({"Put": kept})
        return conditionally(partial(self._db.transact_write_items, TransactItems=writes), conflict=True).held

    def _refill_item(self, key: str, record: RefillRecord, ttl: timedelta) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": f"ONCE#{self.scope}{key}",
            "sk": "ONCE",
            "confirmed": record.confirmed,
            "expires_at": self._expiry(ttl),
        }
        if record.refill is not None:
            item["refill"] = record.refill.model_dump_json(exclude_none=True)
        return item

    def _load_ledger(self, job_key: str) -> _Versioned:
        item = self._get(_job_pk(self.scope + job_key), "LEDGER")
        if item is None:
            return _Versioned(Ledger(job_key=job_key), 0)
        return _Versioned(_ledger(job_key, item), int(item["revision"]))

    def _update_ledger(self, job_key: str, change: Callable[[Ledger], Ledger | None]) -> Ledger:
        for _ in range(MAX_WRITE_CONFLICTS):
            current = self._load_ledger(job_key)
            updated = change(current.ledger)
            if updated is None:
                return current.ledger
            if not conditionally(partial(self._db.put_item, **self._ledger_put(updated, current.revision))).held:
                continue
            return updated
        raise ResumeStoreConflictError(f"ledger of {job_key} kept changing")

    def _ledger_put(self, ledger: Ledger, revision: int) -> dict[str, Any]:
        item = {
            "pk": _job_pk(self.scope + ledger.job_key),
            "sk": "LEDGER",
            "attempts": _attempts_adapter().dump_json(list(ledger.attempts)).decode(),
            "failed_hosts": list(ledger.failed_hosts),
            "revision": revision + 1,
            "expires_at": self._expiry(LEDGER_TTL),
        }
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if revision == 0
            else {
                "ConditionExpression": "revision = :revision",
                "ExpressionAttributeValues": {":revision": {"N": str(revision)}},
            }
        )
        return {"TableName": self.table_name, "Item": _typed(item), **condition}

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self._db.get_item(
            TableName=self.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
        )
        return _plain(answer["Item"]) if "Item" in answer else None

    def _query(self, pk: str, condition: str, values: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        pages = self._db.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression=f"pk = :pk AND {condition}",
            ExpressionAttributeValues={":pk": {"S": pk}, **values},
            ConsistentRead=True,
        )
        for page in pages:
            items.extend(_plain(raw) for raw in page.get("Items", []))
        return items

    def _expiry(self, ttl: timedelta) -> int:
        return int(self._clock() + ttl.total_seconds())


def _ledger(job_key: str, item: dict[str, Any]) -> Ledger:
    """A job's ledger from its LEDGER item."""
    return Ledger(
        job_key=job_key,
        attempts=tuple(_attempts_adapter().validate_json(item["attempts"])),
        failed_hosts=tuple(item.get("failed_hosts", [])),
    )


def _job_pk(job_key: str) -> str:
    return f"JOB#{job_key}"


def _attempt_sk(number: int) -> str:
    return f"ATTEMPT#{number:06d}"


def _spares_pk(cluster_name: str, provider: str) -> str:
    return f"SPARES#{cluster_name}/{provider}"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _provider_pk(cluster_name: str, provider: str) -> str:
    return f"PROVIDER#{cluster_name}/{provider}"


_PROVIDER_SK_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def _provider_sk(moment: datetime, container_instance_arn: str) -> str:
    # ISO-8601 UTC strings sort like the times they name, so a time window is a key range.
    instance = container_instance_arn.rsplit("/", 1)[-1]
    return f"FAULT#{moment.astimezone(UTC).strftime(_PROVIDER_SK_TIME)}#{instance}"


def _provider_sk_time(sk: str) -> datetime:
    return datetime.strptime(sk.split("#", 2)[1], _PROVIDER_SK_TIME).replace(tzinfo=UTC)


def _typed(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _serializer.serialize(value) for key, value in item.items()}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _deserializer.deserialize(value) for key, value in item.items()}
