"""The ResumeTraining workflow's steps: one method per task state, over ports (docs/auto-resume.md).

Each step reads what it needs through a port, asks the domain (fault_responder.resume) what to do, does it,
and returns the payload the next state reads. Every step is safe to run again after a Lambda retry: the
claim and the ledger are conditional writes, StopTask and the drain are idempotent, RunTask carries a
clientToken derived from the job, the attempt and the task, and a spare pool's refill is recorded before its
Auto Scaling call and completed from that record by a retry (or, under the group's refill lease, by the next refill
of the group).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from fault_responder.core.timefmt import format_duration
from fault_responder.resume.budget import (
    AttemptOutcome,
    Ledger,
    LedgerAttempt,
    Plan,
    RecordResult,
    RecordStatus,
    next_attempt,
    plan_job,
    plan_retry,
)
from fault_responder.resume.checkpoint_now import (
    MAX_TEXT,
    MAX_WAIT,
    CheckpointRequest,
    MoveAsk,
    MoveCheckpoint,
    Placed,
    judge_answer,
    new_request,
    skip_reason,
)
from fault_responder.resume.checkpoints import (
    Checkpoint,
    CheckpointStore,
    CheckpointStoreError,
    S3Location,
    find_newest_complete,
    parse_checkpoint_uri,
)
from fault_responder.resume.config import EVIDENCE_ITEMS, ResumeConfig
from fault_responder.resume.fault import (
    DRAINING,
    MOVE_SOURCE,
    OWN_DRAIN_WINDOW,
    Claim,
    ClaimedFault,
    ClaimResult,
    ClaimStatus,
    Fault,
    Guards,
    NotResumableError,
    ProviderInfo,
    Quarantine,
    claim_rank,
    drain_from_event,
    fault_from_event,
    judge_guards,
    move_from_event,
    quarantine_reason,
)
from fault_responder.resume.jobs import (
    JOB_ID_TAG,
    FoundJobs,
    Job,
    TaskSpec,
    group_jobs,
    is_job_task,
    job_from_tasks,
    tasks_digest,
    untouched_summary,
)
from fault_responder.resume.notices import Delivered, Notice, NoticeRequest, build_notice
from fault_responder.resume.recovery import training_ended, work_lost
from fault_responder.resume.relaunch import (
    HostsToAvoid,
    KnownFault,
    Launch,
    LaunchState,
    RunTaskResult,
    build_run_task_request,
    chosen_checkpoint,
    client_token,
    excludable_hosts,
    hosts_to_avoid,
    misplaced_stop_reason,
    placement_exclusion,
    stop_reason,
)
from fault_responder.resume.spares import (
    REFILL_LEASE,
    REFILL_LEASE_WAIT,
    Refill,
    RefillLease,
    RefillLeaseBusy,
    RefillLeaseLost,
    RefillRecord,
    RefillState,
    ScalingError,
    SpareHost,
    SpareState,
    SpareUse,
    free_spares,
    refill,
    refill_to_complete,
    spare_constraint,
    spare_owner,
    spread,
    unsupported_reason,
)
from fault_responder.resume.watch import (
    StoppedTask,
    StopRequest,
    TaskState,
    TaskWatch,
    WatchState,
    describe_failure,
    failed_hosts,
    judge_start,
    judge_stop,
    misplaced_tasks,
    watch_result,
)

if TYPE_CHECKING:
    from fault_responder.alerting.store import InstanceStore
    from fault_responder.events.ecs import InstanceStateEvent

MAX_STATE_CONFLICTS = 5
SPARE_CLAIM_ROUNDS = 5
"""Claims of spares tried per relaunch: a claim lost to a concurrent relaunch reads the claims again and retries."""
REFILL_RECORD_TTL = timedelta(days=1)
"""How long an attempt's refill record is kept: far past any retry of its step."""
REFILL_LEASE_POLL_SECONDS = 0.2
"""How often a refill waiting for its group's lease reads it again (a holder keeps it for a read, two writes and one
Auto Scaling call)."""
MAX_OPEN_MEMBERS_READ = 1000
"""Open members of a group read for the hosts to avoid (the oldest first); placement expressions fit far fewer."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    def claim(self, fault: Fault, execution: str) -> ClaimResult: ...

    def claim_planned(self, key: str, fault: Fault, execution: str, window: timedelta) -> ClaimResult: ...

    def impaired_instances(self, fault: Fault, window: timedelta) -> set[str]: ...

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

    def spare_claims(self, cluster_name: str, provider: str, now: datetime) -> dict[str, str]:
        """The spares held now: EC2 instance id -> owner (resume.spares.spare_owner)."""
        ...

    def claim_spares(
        self, cluster_name: str, provider: str, hosts: Sequence[str], owner: str, *, now: datetime, until: datetime
    ) -> bool:
        """Hold every one of `hosts` for `owner` until `until`, or none (False: another owner holds one)."""
        ...

    def mark_once(self, key: str, ttl: timedelta) -> bool:
        """True the first time `key` is marked (within `ttl`), False after."""
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


@dataclass
class ResumeSteps:
    ecs: EcsPort
    store: ResumeStore
    incidents: Callable[[], InstanceStore]
    """The alert pipeline's records, built on first use: only the quarantine, a relaunch and the check of where its
    tasks landed read them, and the other steps' cold starts need not import the incident store."""
    checkpoints: Callable[[], CheckpointStore]
    """A fresh store per search, so its S3 request count is the search's own."""
    notifier: Callable[[], Notifier]
    """Built on first use: steps that never notify need no notifier secrets."""
    config: ResumeConfig
    incident_wait_retries: int = 6
    """Retries of a Notify state after which a notice goes out standalone (the ASL retries IncidentNotReady
    6 times, 2 s apart and doubling, so by default the Lambda never gives up before the ASL does)."""
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    approvals: ApprovalKeeper | None = None
    """Where an approval request's task token is kept (never in a message); needed in approve mode only."""
    requests: Callable[[], CheckpointRequests] | None = None
    """Where a move asks the job for a checkpoint now (its `_CHECKPOINT_NOW`); None: moves never ask."""
    scaling: Callable[[], ScalingPort] | None = None
    """The providers' Auto Scaling groups, where taken spares are replaced; None: never refilled."""
    sleep: Callable[[float], None] = time.sleep
    """How a refill waits for its group's lease."""
    scope: tuple[tuple[str, str], ...] = ()
    """What the alert side's group keys of this account and Region end with: nothing at the stack's home, its account
    and Region elsewhere (fault_responder.core.accounts), as the hosts to avoid are read from its groups."""

    # --- Claim, guards, quarantine, jobs --------------------------------------------------------

    def claim(self, raw_event: dict[str, Any], execution: str) -> Claim:
        # Imported here: only ClaimFault reads an event (the event models are not every task function's to import).
        from fault_responder.events.ecs import HealthChangeEvent, InstanceStateEvent  # noqa: PLC0415
        from fault_responder.events.parse import parse_ecs_event  # noqa: PLC0415

        if raw_event.get("source") == MOVE_SOURCE:
            return self._claim_move(raw_event, execution)
        event = parse_ecs_event(raw_event)
        if isinstance(event, InstanceStateEvent):
            return self._claim_drain(event, execution)
        if not isinstance(event, HealthChangeEvent):
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason="not a health change", config=self.config)
        provider = event.detail.capacity_provider_name
        if self.config.capacity_providers and provider not in self.config.capacity_providers:
            reason = f"capacity provider {provider!r} is not a training capacity provider"
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason=reason, config=self.config)
        try:
            fault = fault_from_event(event, self.config.check_types)
        except NotResumableError as error:
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason=str(error), config=self.config)
        result = self.store.claim(fault, execution)
        if not result.claimed:
            reason = f"already handled by {result.execution}"
            return Claim(status=ClaimStatus.DUPLICATE, reason=reason, fault=fault, config=self.config)
        return Claim(status=ClaimStatus.CLAIMED, reason="claimed", fault=fault, config=self.config)

    def _claim_drain(self, event: InstanceStateEvent, execution: str) -> Claim:
        """A DRAINING nobody's fault explains is a move with warning: claimed once per drain. Not one: our own
        quarantine's drain, and the drain of an instance whose GPU fault is being handled (the fault's execution
        moves its jobs; with ECS auto-repair, ECS does)."""
        detail = event.detail

        def not_applicable(reason: str) -> Claim:
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason=reason, config=self.config)

        if detail.status != DRAINING:
            return not_applicable(f"the instance is {detail.status}, not DRAINING")
        provider = detail.capacity_provider_name
        if not provider and not event.is_drill:
            provider = self.ecs.instance_capacity_provider(detail.cluster_arn, detail.container_instance_arn)
        if provider and self.config.capacity_providers and provider not in self.config.capacity_providers:
            return not_applicable(f"capacity provider {provider!r} is not a training capacity provider")
        try:
            fault = drain_from_event(event, provider)
        except NotResumableError as error:
            return not_applicable(str(error))
        record = self.incidents().load(fault.container_instance_arn)
        quarantined = record.quarantine if record is not None else None
        if quarantined is not None and fault.impaired_at - quarantined.at <= OWN_DRAIN_WINDOW:
            return not_applicable(f"this stack quarantined the instance ({quarantined.reason})")
        window = timedelta(minutes=self.config.mass_fault_window_minutes)
        claims = self.store.claimed_faults(fault.cluster_name, fault.capacity_provider, fault.impaired_at, window)
        if any(claim.container_instance_arn == fault.container_instance_arn for claim in claims):
            return not_applicable("a GPU fault of the instance is being handled: its execution moves the jobs")
        return self._claim_planned(f"DRAIN#{fault.container_instance_arn}", fault, execution, "the drain")

    def _claim_move(self, raw_event: dict[str, Any], execution: str) -> Claim:
        """An operator's move of one job off one host (`fault-responder move`): claimed once per request."""
        try:
            fault = move_from_event(raw_event)
        except NotResumableError as error:
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason=str(error), config=self.config)
        if self.config.capacity_providers and fault.capacity_provider not in self.config.capacity_providers:
            reason = f"capacity provider {fault.capacity_provider!r} is not a training capacity provider"
            return Claim(status=ClaimStatus.NOT_APPLICABLE, reason=reason, config=self.config)
        return self._claim_planned(f"MOVE#{fault.event_id}", fault, execution, "the move")

    def _claim_planned(self, key: str, fault: Fault, execution: str, what: str) -> Claim:
        result = self.store.claim_planned(key, fault, execution, OWN_DRAIN_WINDOW)
        if not result.claimed:
            reason = f"{what} is already handled by {result.execution}"
            return Claim(status=ClaimStatus.DUPLICATE, reason=reason, fault=fault, config=self.config)
        return Claim(status=ClaimStatus.CLAIMED, reason="claimed", fault=fault, config=self.config)

    def check_guards(self, fault: Fault, config: ResumeConfig) -> Guards:
        providers = self.ecs.describe_capacity_providers([fault.capacity_provider], fault.cluster_arn)
        provider = providers[fault.capacity_provider]
        if provider.ecs_owns_recovery or fault.planned:
            # ECS acts whatever the share; a drain is no fault, and the mass-fault guard counts faults.
            return judge_guards(provider, impaired=0, instances=0, config=config)
        window = timedelta(minutes=config.mass_fault_window_minutes)
        claims = self.store.claimed_faults(fault.cluster_name, fault.capacity_provider, fault.impaired_at, window)
        impaired = {claim.container_instance_arn for claim in claims} | {fault.container_instance_arn}
        instances = self.ecs.provider_instance_count(fault.cluster_arn, fault.capacity_provider)
        rank = claim_rank(fault, claims)
        return judge_guards(provider, impaired=len(impaired), instances=instances, config=config, rank=rank)

    def quarantine(self, fault: Fault) -> Quarantine:
        """Record the quarantine FIRST, so the DRAINING event the drain causes is attributed to us."""
        # Imported here, as the incident store is built: the other steps never touch an instance's record.
        from fault_responder.alerting.store import ConcurrentUpdateError  # noqa: PLC0415
        from fault_responder.incidents.record import InstanceRecord, QuarantineFact  # noqa: PLC0415

        reason = quarantine_reason(fault)
        incidents = self.incidents()
        for _ in range(MAX_STATE_CONFLICTS):
            record = incidents.load(fault.container_instance_arn)
            record = record or InstanceRecord(fault.container_instance_arn, fault.instance_ref())
            if not record.add_quarantine(QuarantineFact(self.clock(), reason)):
                break
            try:
                incidents.commit(record)
                break
            except ConcurrentUpdateError:
                continue  # the alert pipeline wrote the same instance's record meanwhile
        else:
            raise ConcurrentUpdateError(f"instance state of {fault.container_instance_arn} kept changing")
        statuses = self.ecs.drain(fault.cluster_arn, [fault.container_instance_arn])
        return Quarantine(quarantined=True, status=statuses.get(fault.container_instance_arn))

    def find_jobs(self, fault: Fault, config: ResumeConfig) -> FoundJobs:
        on_instance = self.ecs.running_tasks(fault.cluster_arn, fault.container_instance_arn)
        untouched = [untouched_summary(task) for task in on_instance if not is_job_task(task.tags)]
        job_ids = sorted({task.tags[JOB_ID_TAG] for task in on_instance if is_job_task(task.tags)})
        if fault.job_id is not None:
            # An operator's move moves its one job; the others on the host are not touched.
            job_ids = [job_id for job_id in job_ids if job_id == fault.job_id]
        jobs: list[Job] = []
        if job_ids:
            # A gang's other tasks run on other instances: the job is every task of the cluster with its id.
            in_cluster = group_jobs(self.ecs.running_tasks(fault.cluster_arn))
            on_instance_jobs = group_jobs(on_instance)
            for job_id in job_ids:
                tasks = in_cluster.get(job_id) or on_instance_jobs[job_id]
                job = job_from_tasks(job_id, fault.cluster_arn, tasks, config.mode)
                self.store.save_tasks(job.key, fault.key, tasks)
                jobs.append(job)
        return FoundJobs(jobs=tuple(jobs), untouched=tuple(untouched[:EVIDENCE_ITEMS]), untouched_count=len(untouched))

    # --- Per job --------------------------------------------------------------------------------

    def plan(self, fault: Fault, config: ResumeConfig, job: Job) -> Plan:
        """Read-only: dry-run reports this plan and changes nothing."""
        ledger = self.store.load_ledger(job.key)
        search = None if job.problems else find_newest_complete(job.checkpoint_uri, self.checkpoints())
        return plan_job(job, fault, config, ledger, search)

    def request_checkpoint(self, fault: Fault, config: ResumeConfig, job: Job, plan: Plan, execution: str) -> Plan:
        """Before a move stops the job: ask it to save now and hold at that step (docs/checkpoint-contract.md), or
        say why not. The plan comes back with `checkpoint_now`; a request S3 refuses does not hold the move up."""
        reason = skip_reason(
            fault.fault_class, fault.label, config.checkpoint_now_seconds, config.checkpoint_now_faults
        )
        if plan.replaces is not None:
            reason = "a retry replaces a failed attempt's tasks, which trained nothing to save"
        if reason is None and self.requests is None:
            reason = "this deployment has nowhere to write a checkpoint-now request"
        if reason is not None or self.requests is None:
            return _with_ask(plan, MoveCheckpoint(state=MoveAsk.SKIPPED, detail=reason or ""))
        now = self.clock()
        wait = timedelta(seconds=config.checkpoint_now_seconds)
        # Held at the saved step until the stop: the wait, then one poll and the longest stop, at most a day.
        hold = min(MAX_WAIT, wait + timedelta(seconds=config.poll_seconds + config.stop_timeout_seconds))
        request = new_request(
            now,
            wait=wait,
            hold=hold,
            reason=f"{fault.label} on {fault.host}: the workflow moves {job.job_id}"[:MAX_TEXT],
            requested_by=f"fault-responder workflow {execution.rsplit(':', 1)[-1]}"[:MAX_TEXT],
        )
        before = plan.checkpoint.step if plan.checkpoint else None
        before_at = plan.checkpoint.saved if plan.checkpoint else None
        try:
            placed = self.requests().place(parse_checkpoint_uri(job.checkpoint_uri), request, now)
        except CheckpointStoreError as error:
            failed = MoveCheckpoint(state=MoveAsk.FAILED, detail=str(error), before_step=before, before_at=before_at)
            return _with_ask(plan, failed)
        asked = placed.request
        return _with_ask(
            plan,
            MoveCheckpoint(
                state=MoveAsk.ASKED,
                request_id=asked.id,
                joined=placed.joined,
                requested_at=asked.requested_at,
                # A request joined may give the job longer than this stack waits: the move waits its own time.
                deadline=min(asked.deadline, request.deadline),
                hold_until=asked.hold_until,
                stored_at=placed.stored.stored_at,
                before_step=before,
                before_at=before_at,
            ),
        )

    def check_checkpoint(self, job: Job, plan: Plan) -> Plan:
        """One search for the answer: the plan resumes from the answering checkpoint, or at the deadline from the
        newest complete one (the request, if ours, withdrawn so the job does not save for nobody)."""
        asked = plan.checkpoint_now
        if asked is None or asked.state != MoveAsk.ASKED:
            return plan
        try:
            newest = find_newest_complete(job.checkpoint_uri, self.checkpoints()).checkpoint
        except CheckpointStoreError as error:
            # One failed search does not fail the move: the wait goes on, and at the deadline the move falls back
            # to the plan's checkpoint (RelaunchJob searches again once the tasks are stopped).
            if asked.deadline is not None and self.clock() < asked.deadline:
                return plan.model_copy(update={"checkpoint_now": asked.model_copy(update={"detail": str(error)})})
            newest = None
        judged, checkpoint = judge_answer(asked, newest, self.clock())
        update: dict[str, Any] = {"checkpoint_now": judged}
        if judged.state != MoveAsk.ASKED:
            update["checkpoint"] = chosen_checkpoint(plan.checkpoint, checkpoint)
            update["from_scratch"] = update["checkpoint"] is None and plan.from_scratch
        if judged.state == MoveAsk.TIMED_OUT and not judged.joined and self.requests is not None:
            try:
                self.requests().withdraw(parse_checkpoint_uri(job.checkpoint_uri), judged.request().id)
            except CheckpointStoreError as error:
                # The job is stopped next either way, and a request left behind has passed its deadline.
                update["checkpoint_now"] = judged.model_copy(update={"detail": f"not withdrawn: {error}"})
        return plan.model_copy(update=update)

    def stop(self, fault: Fault, job: Job, plan: Plan) -> StopRequest:
        arns = self._replaced_tasks(fault, job, plan)
        reason = stop_reason(fault, job.job_id)
        for arn in arns:
            self.ecs.stop_task(job.cluster_arn, arn, reason)
        return StopRequest(stopping=len(arns), requested_at=self.clock())

    def watch_stop(self, fault: Fault, job: Job, plan: Plan, stop: StopRequest, config: ResumeConfig) -> TaskWatch:
        states = self.ecs.task_states(job.cluster_arn, self._replaced_tasks(fault, job, plan))
        waited = self.clock() - stop.requested_at
        state = judge_stop(states, waited, timedelta(seconds=config.stop_timeout_seconds))
        return watch_result(state, states, want_running=False)

    def relaunch(
        self,
        fault: Fault,
        config: ResumeConfig,
        job: Job,
        plan: Plan,
        execution: str,
        *,
        stopped: TaskWatch | None = None,
    ) -> Launch:
        """Record the attempt, then RunTask each task of the job, kept off the hosts to avoid where the provider
        allows it; stops at the first task ECS cannot place. `stopped`: the check that saw the tasks replaced
        stopped, with when ECS told them to stop."""
        specs = self.store.load_tasks(job.key, fault.key)
        fresh = find_newest_complete(job.checkpoint_uri, self.checkpoints()).checkpoint
        checkpoint = chosen_checkpoint(plan.checkpoint, fresh)
        self.store.add_failed_hosts(job.key, [fault.host])
        asked = plan.checkpoint_now
        # The old tasks are STOPPED by now: a job that trained on after the fault lost what it trained until ECS
        # told them to stop (the job's own tasks; a failed attempt's trained nothing), or, without ECS's time, now.
        told = stopped.stopping_at if stopped is not None and plan.replaces is None else None
        stopped_at, answered = told or self.clock(), asked.request_id if asked else None
        lost = work_lost(checkpoint, fault, stopped_at=stopped_at, answered=answered)
        record = self.store.record_attempt(
            job.key,
            LedgerAttempt(
                number=0,
                step=checkpoint.step if checkpoint else None,
                checkpoint_uri=checkpoint.uri if checkpoint else None,
                fault_key=fault.key,
                execution=execution,
                started_at=self.clock(),
                fault_at=fault.impaired_at,
                cause=fault.label,
                training_ended_at=training_ended(checkpoint, fault, stopped_at=stopped_at, answered=answered),
                work_lost_seconds=lost.total_seconds() if lost is not None else None,
                checkpoint_now=plan.checkpoint_now.state.value if plan.checkpoint_now else None,
            ),
            self._replaces_key(fault, job, plan),
        )
        now = self.clock()
        if record.status == RecordStatus.SUPERSEDED or record.attempt is None:
            return Launch(state=LaunchState.SUPERSEDED, attempt=0, launched_at=now, superseded_by=record.by)
        attempt = record.attempt.number
        ledger = self.store.load_ledger(job.key)
        prior = [a for a in ledger.attempts if a.number < attempt]
        budget = next_attempt(prior, checkpoint.step if checkpoint else None, plan.max_attempts)
        providers = tuple(sorted({spec.capacity_provider_name for spec in specs if spec.capacity_provider_name}))
        avoid = self._hosts_to_avoid(fault, config, ledger.failed_hosts, providers)
        arns, failures, excluded, spare = self._run_tasks(job, specs, attempt, checkpoint, avoid, config=config)
        self.store.save_attempt_tasks(job.key, attempt, arns)
        return Launch(
            state=LaunchState.NO_CAPACITY if failures else LaunchState.STARTED,
            attempt=attempt,
            in_budget=budget.in_budget,
            max_attempts=plan.max_attempts,
            launched=len(arns),
            expected=len(specs),
            failures=failures,
            checkpoint=checkpoint,
            launched_at=now,
            stopped_at=told,
            capacity_providers=providers,
            avoided=len(avoid.in_priority),
            excluded_hosts=excluded,
            spare=spare,
        )

    def watch_start(self, fault: Fault, job: Job, launch: Launch, config: ResumeConfig) -> TaskWatch:
        """Poll the new tasks; the check after placement stops any that landed on a host to avoid (the same
        hosts as the relaunch's, found again now) and fails the attempt, so the retry path relaunches."""
        arns = self.store.load_attempt_tasks(job.key, launch.attempt)
        states = self.ecs.task_states(job.cluster_arn, arns)
        misplaced: tuple[StoppedTask, ...] = ()
        if any(task.host for task in states):
            ledger = self.store.load_ledger(job.key)
            avoid = self._hosts_to_avoid(fault, config, ledger.failed_hosts, launch.capacity_providers)
            misplaced = misplaced_tasks(states, avoid)
        for task in misplaced:
            self.ecs.stop_task(job.cluster_arn, task.task_arn, misplaced_stop_reason(job.job_id, task.reason or ""))
        waited = self.clock() - launch.launched_at
        state = judge_start(states, waited, timedelta(seconds=config.start_timeout_seconds), misplaced)
        if state == WatchState.DONE:
            used = launch.spare.used if launch.spare is not None else None
            self.store.finish_attempt(
                job.key, launch.attempt, AttemptOutcome.RUNNING, running_at=self.clock(), spare=used
            )
        return watch_result(state, states, want_running=True, misplaced=misplaced)

    def retry(
        self, fault: Fault, config: ResumeConfig, job: Job, plan: Plan, *, launch: Launch, watch: TaskWatch | None
    ) -> Plan:
        """Attempt `launch.attempt` failed: record why (and the hosts its tasks died or were misplaced on), then
        plan the next."""
        failure = describe_failure(launch, watch, config.start_timeout_seconds)
        ledger = self.store.finish_attempt(job.key, launch.attempt, AttemptOutcome.FAILED, failure, failed_hosts(watch))
        tried = plan.model_copy(update={"checkpoint": launch.checkpoint, "from_scratch": launch.checkpoint is None})
        return plan_retry(tried, fault, config, ledger, failed_attempt=launch.attempt, failure=failure)

    # --- Notifications --------------------------------------------------------------------------

    def notify(self, request: NoticeRequest, retry_count: int) -> dict[str, Any]:
        notice = build_notice(request, self.clock())
        if notice.approval_id is not None and request.task_token:
            # Kept before the buttons are posted, so that no button ever points at nothing; as long as the workflow
            # waits for it, then DynamoDB's TTL removes it.
            if self.approvals is None:
                raise RuntimeError("an approval request needs somewhere to keep its task token")
            self.approvals.put_approval(request.task_token, request.config.approval_timeout_seconds, request.execution)
        # A planned move has no incident of ours to thread into: its notices stand alone at once.
        standalone = request.fault.planned or retry_count >= self.incident_wait_retries
        delivered = self.notifier().deliver(notice, request.fault, allow_standalone=standalone)
        told: dict[str, Any] = {
            "kind": notice.kind.value,
            "title": notice.title,
            "pages": notice.pages,
            "receivers": list(delivered.receivers),
            "threaded": delivered.threaded,
            "held": list(delivered.held),
            "fleet": delivered.fleet,
        }
        if "recovery" in notice.details:
            # A resumed job's figures, for the handler's metrics (and the execution's history).
            told["recovery"] = notice.details["recovery"]
        return told

    # --- Helpers --------------------------------------------------------------------------------

    def _replaced_tasks(self, fault: Fault, job: Job, plan: Plan) -> list[str]:
        """The tasks the next stop and relaunch replace: the ones found, or a failed attempt's."""
        if plan.replaces is None:
            return [task.task_arn for task in self.store.load_tasks(job.key, fault.key)]
        return list(self.store.load_attempt_tasks(job.key, plan.replaces))

    def _replaces_key(self, fault: Fault, job: Job, plan: Plan) -> str:
        if plan.replaces is None:
            return tasks_digest(task.task_arn for task in self.store.load_tasks(job.key, fault.key))
        # Attempt numbers are unique per job, and an attempt that placed nothing has no task ARNs to digest.
        return f"attempt-{plan.replaces}"

    def _hosts_to_avoid(
        self, fault: Fault, config: ResumeConfig, failed: Sequence[str], providers: Iterable[str]
    ) -> HostsToAvoid:
        """The job's failed hosts, and every host of its providers with a fault claimed within the mass-fault
        window around now or open on the alert side (the members of the providers' groups by the default
        grouping; another grouping has other keys, and then the claimed faults alone count)."""
        from fault_responder.noise.fleet import group_arn  # noqa: PLC0415  # with the incident store, on first use

        now = self.clock()
        window = timedelta(minutes=config.mass_fault_window_minutes)
        known: list[KnownFault] = []
        for provider in sorted({fault.capacity_provider, *providers}):
            for claimed in self.store.claimed_faults(fault.cluster_name, provider, now, window):
                if claimed.host:
                    known.append(KnownFault(claimed.host, claimed.impaired_at, open=False))
            for check in config.check_types:
                labels = (
                    ("cluster", fault.cluster_name),
                    ("capacity_provider", provider),
                    ("check_type", check),
                    *self.scope,
                )
                for member in self.incidents().open_members(group_arn(labels), EPOCH, limit=MAX_OPEN_MEMBERS_READ):
                    host = member.instance.ec2_instance_id or member.instance.container_instance_id
                    known.append(KnownFault(host, member.opened_at, open=True))
        return hosts_to_avoid(failed, known)

    def _run_tasks(
        self,
        job: Job,
        specs: Sequence[TaskSpec],
        attempt: int,
        checkpoint: Checkpoint | None,
        avoid: HostsToAvoid,
        *,
        config: ResumeConfig,
    ) -> tuple[list[str], tuple[str, ...], tuple[str, ...], SpareUse]:
        """RunTask each task, on claimed spares when there are enough free (resume.spares), else kept off the hosts
        to avoid and the spares others hold; returns the tasks started, ECS's failures, the hosts the constraints
        excluded, and what was done with the spares."""
        names = {spec.capacity_provider_name for spec in specs if spec.capacity_provider_name}
        providers = self.ecs.describe_capacity_providers(sorted(names), job.cluster_arn)
        spare, held = self.take_spares(job, specs, attempt, avoid, providers=providers, config=config)
        containers: dict[str, list[str]] = {}
        arns: list[str] = []
        excluded: dict[str, None] = {}
        for index, spec in enumerate(specs):
            if spec.task_definition_arn not in containers:
                containers[spec.task_definition_arn] = self.ecs.container_names(spec.task_definition_arn)
            provider = providers.get(spec.capacity_provider_name or "")
            if spare.used:
                constraints = [spare_constraint(spare.hosts[index])]
            else:
                # Spares other relaunches hold come after the hosts to avoid: those matter more if the list is cut.
                keep_off = (*avoid.in_priority, *held)
                excluded.update(dict.fromkeys(excludable_hosts(provider, keep_off)))
                constraints = placement_exclusion(provider, keep_off)
            request = build_run_task_request(
                spec,
                cluster_arn=job.cluster_arn,
                container_names=containers[spec.task_definition_arn],
                attempt=attempt,
                checkpoint_uri=checkpoint.uri if checkpoint else None,
                token=client_token(job.key, attempt, index),
                constraints=constraints,
            )
            result = self.ecs.run_task(request)
            arns.extend(result.task_arns)
            if result.failures or not result.task_arns:
                # A gang needs every task: starting the rest would only hold GPUs the retry then releases.
                failures = result.failures or ("RunTask started no task and reported no failure",)
                return arns, failures, tuple(excluded), spare
        if spare.used:
            refilled = self.refill_spares(job, attempt, providers, spare, config)
            spare = spare.model_copy(update={"refill": refilled})
        return arns, (), tuple(excluded), spare

    def take_spares(
        self,
        job: Job,
        specs: Sequence[TaskSpec],
        attempt: int,
        avoid: HostsToAvoid,
        *,
        providers: dict[str, ProviderInfo],
        config: ResumeConfig,
    ) -> tuple[SpareUse, tuple[str, ...]]:
        """Claim one free spare per task, all or none; returns what was done and the spares others hold."""
        if not config.spare_attribute:
            return SpareUse(state=SpareState.OFF), ()
        needed = len(specs)
        why_not = unsupported_reason(providers, [spec.capacity_provider_name for spec in specs], needed)
        if why_not is not None:
            return SpareUse(state=SpareState.NOT_SUPPORTED, needed=needed, detail=why_not), ()
        provider = str(specs[0].capacity_provider_name)
        hosts = self.ecs.spare_hosts(job.cluster_arn, config.spare_attribute)
        declared = sum(1 for host in hosts if host.capacity_provider == provider)
        if not declared:
            return SpareUse(state=SpareState.NONE_DECLARED, needed=needed), ()
        owner = spare_owner(job.key, attempt)
        cluster_name = job.cluster_arn.rsplit("/", 1)[-1]
        free: list[SpareHost] = []
        others: set[str] = set()
        for _ in range(SPARE_CLAIM_ROUNDS):
            now = self.clock()
            held = self.store.spare_claims(cluster_name, provider, now)
            mine = sorted(host for host, holder in held.items() if holder == owner)
            others = {host for host, holder in held.items() if holder != owner}
            free = free_spares(hosts, provider, avoid, others)
            if len(mine) >= needed:
                # A retried step: the first try claimed them (and its RunTasks carry the same clientTokens).
                return _used(mine[:needed], declared, len(free), needed), tuple(others)
            # Sorted: task i goes to the i-th spare, so a retried step (which reads its claim back, sorted) sends
            # the same RunTask requests, and their clientTokens replay instead of conflicting.
            chosen = sorted([*mine, *(host for host in spread(free, owner) if host not in mine)][:needed])
            if len(chosen) < needed:
                break
            until = now + timedelta(seconds=config.spare_hold_seconds)
            if self.store.claim_spares(cluster_name, provider, chosen, owner, now=now, until=until):
                return _used(chosen, declared, len(free), needed), tuple(others)
        none_free = SpareUse(state=SpareState.NONE_FREE, declared=declared, free=len(free), needed=needed)
        return none_free, tuple(sorted(others))

    def refill_spares(
        self, job: Job, attempt: int, providers: dict[str, ProviderInfo], spare: SpareUse, config: ResumeConfig
    ) -> Refill | None:
        """Ask the provider's Auto Scaling group for as many instances as the spares taken, once per attempt.

        Through the attempt's refill record (resume.spares.RefillRecord): the refill, with the desired capacity it
        computed, is recorded before the Auto Scaling call and confirmed after it. A try that stops between the two
        (the function timed out or ran out of memory; the workflow retries the step) leaves the record unconfirmed,
        and the retry sets that capacity, unless the group has it already (refill_to_complete): the refill is done
        once, not lost and not doubled. A confirmed record is returned as it is (a failed refill is paged once, from
        the step's last output).

        Under the group's lease (resume.spares.RefillLease), so that refills of one group are made one at a time,
        each from the size the one before left: two relaunches that read the same size would grow the group by one
        refill instead of two. The intent is recorded in the lease too, so that when a holder dies its refill is
        completed by whoever takes the lease next, even if its own retry never comes."""
        if not config.refill_spares or self.scaling is None:
            return None
        provider = next(iter(providers.values()), None)
        group = provider.auto_scaling_group if provider is not None else None
        owner = spare_owner(job.key, attempt)
        key = f"REFILL#{owner}"
        recorded = self.store.refill_record(key)
        if recorded is not None and (recorded.refill is None or recorded.confirmed):
            return _recorded(recorded, group)
        if group is None:  # nothing to grow, so nothing to wait for
            intent = refill(None, None, None, len(spare.hosts))
            self.store.record_refill(key, RefillRecord(refill=intent), REFILL_RECORD_TTL, create=True)
            return intent
        try:
            lease = self._take_refill_lease(group, owner)
        except RefillLeaseBusy as busy:
            # Nothing recorded: a retry of the step tries again; else the failure is paged as any refill's.
            return Refill(state=RefillState.FAILED, group=group, detail=f"{group} could not be grown: {busy}")
        lease = self._complete_left_refill(lease, key)
        recorded = self.store.refill_record(key)  # again, under the lease: the one before may have confirmed it
        if recorded is not None and (recorded.refill is None or recorded.confirmed):
            self._free_refill_lease(lease)
            return _recorded(recorded, group)
        if recorded is not None and recorded.refill is not None:
            return self._grow(lease, key, recorded.refill, retried=True)
        intent = self._refill_intent(group, len(spare.hosts))
        if not intent.grows:  # no call to make: recorded as it is, confirmed, and the lease freed
            freed = lease.model_copy(update={"holder": None, "held_until": None})
            if not self.store.write_refill_lease(freed, lease.revision, record=(key, RefillRecord(refill=intent))):
                raise RefillLeaseLost(f"the refill lease of {group} was taken from {owner}")
            return intent
        held = self._hold(lease, pending=(key, intent))
        record = RefillRecord(refill=intent, confirmed=False)
        if not self.store.write_refill_lease(held, lease.revision, record=(key, record), create=True):
            raise RefillLeaseLost(f"the refill lease of {group} was taken from {owner} before it recorded its refill")
        return self._grow(held.model_copy(update={"revision": lease.revision + 1}), key, intent, retried=False)

    def _take_refill_lease(self, group: str, owner: str) -> RefillLease:
        """The group's refill lease, taken for `owner` (what it holds pending stays): waits while another relaunch
        holds it, at most REFILL_LEASE_WAIT (then RefillLeaseBusy); a lease whose hold passed is taken over."""
        waited = 0.0
        while True:
            lease = self.store.refill_lease(group)
            now = self.clock()
            if lease.free_for(owner, now):
                taken = lease.model_copy(update={"holder": owner, "held_until": now + REFILL_LEASE})
                if self.store.write_refill_lease(taken, lease.revision):
                    return taken.model_copy(update={"revision": lease.revision + 1})
                # Another relaunch wrote it between the read and the write: it holds it now.
            if waited >= REFILL_LEASE_WAIT.total_seconds():
                held = f"held by {lease.holder} until {lease.held_until:%H:%M:%S}Z" if lease.held_until else "taken"
                raise RefillLeaseBusy(
                    f"its refill lease was {held}, and another relaunch kept refilling it for "
                    f"{format_duration(REFILL_LEASE_WAIT)}"
                )
            self.sleep(REFILL_LEASE_POLL_SECONDS)
            waited += REFILL_LEASE_POLL_SECONDS

    def _complete_left_refill(self, lease: RefillLease, key: str) -> RefillLease:
        """Complete the refill another attempt left pending in the lease (its step died between recording and
        confirming it): set the capacity it computed, unless the group has it already, and confirm its record with
        the lease freed of it, in one write. Returns the lease as held then."""
        if not lease.left_by_another(key) or lease.pending is None or lease.pending_key is None:
            return lease
        left, left_key = lease.pending, lease.pending_key
        recorded = self.store.refill_record(left_key)
        done = recorded.refill if recorded is not None and recorded.confirmed else None
        if done is None:
            lease, done = self._set_at_least(lease, left)
            if left.state is RefillState.ASKED and done.state is RefillState.ASKED:
                note = "completed by the next refill of the group, after this step stopped before Auto Scaling answered"
                done = done.model_copy(update={"detail": note})
        cleared = self._hold(lease, pending=None)
        confirmed = (left_key, RefillRecord(refill=done, confirmed=True))
        if not self.store.write_refill_lease(cleared, lease.revision, record=confirmed):
            raise RefillLeaseLost(f"the refill lease of {lease.group} was taken from {lease.holder}")
        return cleared.model_copy(update={"revision": lease.revision + 1})

    def _set_at_least(self, lease: RefillLease, intent: Refill) -> tuple[RefillLease, Refill]:
        """Set the group to the intent's desired capacity unless it has it already (refill_to_complete), renewing
        the lease first; the lease as held then, and the intent as done, or FAILED saying why."""
        group = str(intent.group)
        try:
            scaling = self.scaling() if self.scaling is not None else None
            if scaling is None:
                raise ScalingError("this deployment cannot reach Auto Scaling")
            size = scaling.group_size(group)
            if size is None:
                raise ScalingError(f"Auto Scaling group {group} not found")
            target = refill_to_complete(intent, size[0])
            if target is not None:
                lease = self._renew(lease)
                scaling.set_desired_capacity(group, target)
        except ScalingError as error:
            failed = intent.model_copy(
                update={"state": RefillState.FAILED, "detail": f"{group} could not be grown: {error}"}
            )
            return lease, failed
        return lease, intent

    def _refill_intent(self, group: str, taken: int) -> Refill:
        """The refill to make: the group's size read now, grown by the spares taken within its maximum."""
        try:
            size = self.scaling().group_size(group) if self.scaling is not None else None
        except ScalingError as error:
            return Refill(state=RefillState.FAILED, group=group, detail=f"{group} could not be grown: {error}")
        if size is None:
            return Refill(state=RefillState.FAILED, group=group, detail=f"Auto Scaling group {group} not found")
        return refill(group, size[0], size[1], taken)

    def _grow(self, lease: RefillLease, key: str, intent: Refill, *, retried: bool) -> Refill:
        """Set the recorded refill's desired capacity (on a retry, only if the group is below it), then confirm the
        record with the outcome and free the lease, in one write."""
        group = str(intent.group)
        done = intent
        try:
            scaling = self.scaling() if self.scaling is not None else None
            if scaling is None:
                raise ScalingError("this deployment cannot reach Auto Scaling")
            target = intent.desired_after
            if retried:
                size = scaling.group_size(group)
                if size is None:
                    raise ScalingError(f"Auto Scaling group {group} not found")
                target = refill_to_complete(intent, size[0])
                if intent.state is RefillState.ASKED:
                    note = "completed by a retry of the step, which stopped before Auto Scaling answered"
                    done = intent.model_copy(update={"detail": note})
                if target is not None:
                    # The lease was taken again, its hold renewed here with the intent pending (a record of an
                    # earlier version may have none in the lease).
                    lease = self._renew(lease, pending=(key, intent))
            if target is not None:
                scaling.set_desired_capacity(group, target)
        except ScalingError as error:
            done = intent.model_copy(
                update={"state": RefillState.FAILED, "detail": f"{group} could not be grown: {error}"}
            )
        confirmed = RefillRecord(refill=done, confirmed=True)
        freed = lease.model_copy(update={"holder": None, "held_until": None, "pending": None, "pending_key": None})
        if not self.store.write_refill_lease(freed, lease.revision, record=(key, confirmed)):
            # Held past its time and taken over: the next holder completes this refill from the lease (setting the
            # capacity only if the group lacks it) and confirms it; the record is confirmed here as well.
            self.store.record_refill(key, confirmed, REFILL_RECORD_TTL, create=False)
        return done

    def _hold(self, lease: RefillLease, *, pending: tuple[str, Refill] | None) -> RefillLease:
        """The lease held by its holder for another REFILL_LEASE from now, with `pending` the refill made under it."""
        key, intent = pending if pending is not None else (None, None)
        return lease.model_copy(
            update={"held_until": self.clock() + REFILL_LEASE, "pending_key": key, "pending": intent}
        )

    def _renew(self, lease: RefillLease, *, pending: tuple[str, Refill] | None = None) -> RefillLease:
        """Renew the hold just before an Auto Scaling call (keeping what is pending, or with `pending`): a holder
        whose lease was taken makes no call (RefillLeaseLost)."""
        if pending is None and lease.pending is not None and lease.pending_key is not None:
            pending = (lease.pending_key, lease.pending)
        renewed = self._hold(lease, pending=pending)
        if not self.store.write_refill_lease(renewed, lease.revision):
            raise RefillLeaseLost(f"the refill lease of {lease.group} was taken from {lease.holder}")
        return renewed.model_copy(update={"revision": lease.revision + 1})

    def _free_refill_lease(self, lease: RefillLease) -> None:
        """Free the lease (nothing pending of this holder's): a lease taken over meanwhile is left to its holder."""
        freed = lease.model_copy(update={"holder": None, "held_until": None})
        self.store.write_refill_lease(freed, lease.revision)


def _recorded(recorded: RefillRecord, group: str | None) -> Refill:
    """A refill the attempt recorded and confirmed, as it was (a marker of an earlier version: asked before)."""
    if recorded.refill is None:
        return Refill(state=RefillState.ASKED_BEFORE, group=group)
    return recorded.refill


def _used(hosts: Sequence[str], declared: int, free: int, needed: int) -> SpareUse:
    return SpareUse(state=SpareState.USED, hosts=tuple(hosts), declared=declared, free=free, needed=needed)


def _with_ask(plan: Plan, ask: MoveCheckpoint) -> Plan:
    return plan.model_copy(update={"checkpoint_now": ask})
