"""The ResumeTraining workflow's steps: one method per task state, over ports (docs/auto-resume.md).

Each step reads what it needs through a port, asks the domain (fault_responder.resume) what to do, does it,
and returns the payload the next state reads. Every step is safe to run again after a Lambda retry: the
claim and the ledger are conditional writes, StopTask and the drain are idempotent, RunTask carries a
clientToken derived from the job, the attempt and the task, and a spare pool's refill is recorded before its
Auto Scaling call and completed from that record by a retry (or, under the group's refill lease, by the next refill
of the group).

The ports they act through are in resume/ports.py; taking warm spares and refilling their pool, in
resume/spare_steps.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from fault_responder.resume.budget import (
    AttemptOutcome,
    LedgerAttempt,
    Plan,
    RecordStatus,
    next_attempt,
    plan_job,
    plan_retry,
)
from fault_responder.resume.checkpoint_now import (
    MAX_TEXT,
    MAX_WAIT,
    MoveAsk,
    MoveCheckpoint,
    judge_answer,
    new_request,
    skip_reason,
)
from fault_responder.resume.checkpoints import (
    Checkpoint,
    CheckpointStore,
    CheckpointStoreError,
    find_newest_complete,
    parse_checkpoint_uri,
)
from fault_responder.resume.config import EVIDENCE_ITEMS, ResumeConfig
from fault_responder.resume.fault import (
    DRAINING,
    MOVE_SOURCE,
    OWN_DRAIN_WINDOW,
    Claim,
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
from fault_responder.resume.notices import NoticeRequest, build_notice
from fault_responder.resume.ports import (
    ApprovalKeeper,
    CheckpointRequests,
    EcsPort,
    Notifier,
    ResumeStore,
    ScalingPort,
    SpareRecords,
)
from fault_responder.resume.recovery import training_ended, work_lost
from fault_responder.resume.relaunch import (
    HostsToAvoid,
    KnownFault,
    Launch,
    LaunchState,
    build_run_task_request,
    chosen_checkpoint,
    client_token,
    excludable_hosts,
    hosts_to_avoid,
    misplaced_stop_reason,
    placement_exclusion,
    stop_reason,
)
from fault_responder.resume.spare_steps import SpareSteps
from fault_responder.resume.spares import (
    Refill,
    SpareUse,
    spare_constraint,
)
from fault_responder.resume.watch import (
    StoppedTask,
    StopRequest,
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
    from fault_responder.alerting.store import Fleets, Records
    from fault_responder.events.ecs import InstanceStateEvent

MAX_STATE_CONFLICTS = 5
MAX_OPEN_MEMBERS_READ = 1000
"""Open members of a group read for the hosts to avoid (the oldest first); placement expressions fit far fewer."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class ResumeSteps:
    ecs: EcsPort
    store: ResumeStore
    spare_records: SpareRecords
    """The warm spares held and their pools' refills (resume/spare_steps.py): the same table as `store`."""
    incidents: Callable[[], Records]
    """The alert pipeline's records, built on first use: only the quarantine, a relaunch and the check of where its
    tasks landed read them, and the other steps' cold starts need not import the incident store."""
    fleets: Callable[[], Fleets]
    """The alert pipeline's groups (the same table as `incidents`), built on first use: only the hosts to avoid read
    them (their open members)."""
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
                for member in self.fleets().open_members(group_arn(labels), EPOCH, limit=MAX_OPEN_MEMBERS_READ):
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
        """Claim one free spare per task, all or none (resume/spare_steps.py); what was done and the spares others
        hold."""
        return self._spares().take_spares(job, specs, attempt, avoid, providers=providers, config=config)

    def refill_spares(
        self, job: Job, attempt: int, providers: dict[str, ProviderInfo], spare: SpareUse, config: ResumeConfig
    ) -> Refill | None:
        """Grow the provider's Auto Scaling group by the spares taken, once per attempt (resume/spare_steps.py)."""
        return self._spares().refill_spares(job, attempt, providers, spare, config)

    def _spares(self) -> SpareSteps:
        # Built per call from the fields as they are then: a test may swap the clock or the sleep.
        return SpareSteps(
            ecs=self.ecs, records=self.spare_records, clock=self.clock, scaling=self.scaling, sleep=self.sleep
        )


def _with_ask(plan: Plan, ask: MoveCheckpoint) -> Plan:
    return plan.model_copy(update={"checkpoint_now": ask})
