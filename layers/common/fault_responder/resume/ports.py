"""The ports the ResumeTraining workflow's steps act through: ECS, Auto Scaling, the workflow's records in the
incidents table, S3 checkpoint-now requests, the notifier and the approvals' task tokens.

The adapters implement them (adapters/ecs.py, adapters/resume_store.py, ...); wiring/resume_training.py hands them to
the steps (resume/steps.py, resume/spare_steps.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from fault_responder.resume.budget import AttemptOutcome, Ledger, LedgerAttempt, RecordResult
from fault_responder.resume.checkpoint_now import CheckpointRequest, Placed
from fault_responder.resume.checkpoints import S3Location
from fault_responder.resume.fault import ClaimedFault, ClaimResult, Fault, ProviderInfo
from fault_responder.resume.jobs import TaskSpec
from fault_responder.resume.notices import Delivered, Notice
from fault_responder.resume.relaunch import RunTaskResult
from fault_responder.resume.spares import RefillLease, RefillRecord, SpareHost
from fault_responder.resume.watch import TaskState


class EcsPort(Protocol):
    def describe_capacity_providers(self, names: Sequence[str], cluster: str) -> dict[str, ProviderInfo]: ...

    def instance_capacity_provider(self, cluster: str, container_instance_arn: str) -> str | None: ...

    def provider_instance_count(self, cluster: str, provider: str) -> int: ...

    def drain(self, cluster: str, container_instance_arns: Sequence[str]) -> dict[str, str]: ...

    def running_tasks(self, cluster: str, container_instance: str | None = None) -> list[TaskSpec]: ...

    def task_states(self, cluster: str, task_arns: Sequence[str]) -> list[TaskState]: ...

    def stop_task(self, cluster: str, task_arn: str, reason: str) -> None: ...

    def run_task(self, request: dict[str, Any]) -> RunTaskResult: ...

    def container_names(self, task_definition: str) -> list[str]: ...

    def spare_hosts(self, cluster: str, attribute: str) -> list[SpareHost]: ...


class ScalingPort(Protocol):
    def group_size(self, name: str) -> tuple[int, int] | None:
        """(desired capacity, maximum size); None when the group does not exist. Raises ScalingError."""
        ...

    def set_desired_capacity(self, name: str, desired: int) -> None: ...


class ResumeStore(Protocol):
    """Which faults are handled (the claims), and each job's tasks and attempt ledger."""

    def claim(self, fault: Fault, execution: str) -> ClaimResult: ...

    def claim_planned(self, key: str, fault: Fault, execution: str, window: timedelta) -> ClaimResult: ...

    def claimed_faults(
        self, cluster_name: str, provider: str, around: datetime, window: timedelta
    ) -> list[ClaimedFault]: ...

    def save_tasks(self, job_key: str, fault_key: str, tasks: Sequence[TaskSpec]) -> None: ...

    def load_tasks(self, job_key: str, fault_key: str) -> list[TaskSpec]: ...

    def load_ledger(self, job_key: str) -> Ledger: ...

    def add_failed_hosts(self, job_key: str, hosts: Iterable[str]) -> Ledger: ...

    def record_attempt(self, job_key: str, attempt: LedgerAttempt, replaces: str) -> RecordResult: ...

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
    ) -> Ledger: ...

    def save_attempt_tasks(self, job_key: str, number: int, task_arns: Sequence[str]) -> None: ...

    def load_attempt_tasks(self, job_key: str, number: int) -> tuple[str, ...]: ...


class SpareRecords(Protocol):
    """The warm spares held, and each attempt's refill of their pool under its group's lease."""

    def spare_claims(self, cluster_name: str, provider: str, now: datetime) -> dict[str, str]:
        """The spares held now: EC2 instance id -> owner (resume.spares.spare_owner)."""
        ...

    def claim_spares(
        self, cluster_name: str, provider: str, hosts: Sequence[str], owner: str, *, now: datetime, until: datetime
    ) -> bool:
        """Hold every one of `hosts` for `owner` until `until`, or none (False: another owner holds one)."""
        ...

    def refill_record(self, key: str) -> RefillRecord | None:
        """The refill recorded under `key` (the attempt's), read consistently; None when there is none."""
        ...

    def record_refill(self, key: str, record: RefillRecord, ttl: timedelta, *, create: bool) -> bool:
        """Write the refill's record: with `create`, only where there is none (False: there is one); else over it
        (the step that recorded it, or its retry, confirming it)."""
        ...

    def refill_lease(self, group: str) -> RefillLease:
        """The Auto Scaling group's refill lease, read consistently (revision 0 when there is none)."""
        ...

    def write_refill_lease(
        self, lease: RefillLease, expected: int, *, record: tuple[str, RefillRecord] | None = None, create: bool = False
    ) -> bool:
        """One transaction: the group's lease as `lease`, at revision `expected` + 1, conditional on its revision
        being `expected` (0: no lease yet), and `record` (key, record) written with it (with `create`, only where
        there is none). False when a condition failed, or another transaction was writing the lease: it changed."""
        ...


class CheckpointRequests(Protocol):
    def place(self, location: S3Location, request: CheckpointRequest, moment: datetime) -> Placed: ...

    def withdraw(self, location: S3Location, request_id: str) -> bool: ...


class Notifier(Protocol):
    def deliver(self, notice: Notice, fault: Fault, *, allow_standalone: bool) -> Delivered: ...


class ApprovalKeeper(Protocol):
    def put_approval(self, task_token: str, timeout_seconds: int, execution: str) -> str: ...
