"""`python -m sandbox run`: a scenario (docs/scenarios.md) from seeded world to checked expectations.

1. The stack is deployed from the template with the scenario's parameters (waits shortened there, never
   in the definition), the Slack/PagerDuty stand-ins get the scenario's faults, ECS and CloudWatch get the
   emulation of what moto lacks (sandbox/ecs_emulation.py, sandbox/cloudwatch_emulation.py) and the scenario's
   RunTask faults.
2. The world is seeded (sandbox/world.py), and its trainers start training (sandbox/trainer_emulation.py) until
   the run is reported.
3. Each event step goes onto the default bus: rules match with EventBridge's semantics, SQS targets
   get the event and their functions drain them (the alert pipeline: the incident and its Slack
   thread), state machine targets start executions that moto's interpreter runs with every Lambda
   task dispatched to our handlers in process (sandbox/stepfunctions.py). The runner waits for the
   executions (bounded by the scenario's timeout) and meanwhile performs its actions (approve or
   reject with the command the workflow published).
4. The report adds the executions, the ECS world at the end and the expectations' results.

Report sections beyond `replay`'s (see `ReportBuilder.finish`):
- scenario: {name, file, description, passed}; world: {clusters, instances, tasks, checkpoints} by name
- executions: [{name, arn, rule, state_machine_arn, status, input, output, error, cause, started_at,
  stopped_at, history: {states_entered, state_transitions, lambda_invocations, lambda_tasks, retries,
  events}, wall_seconds, wait_state_seconds, retry_backoff_seconds, task_token_wait_seconds,
  active_seconds}]
- workflow_invocations: [{function, request_id, error, duration_ms, logs}]
- ecs: {instances: [...], tasks: [...], run_task_requests: [...]} (sandbox.report.collect_ecs)
- pagerduty_changes: the change events PagerDuty accepted; actions: [{action, after_seconds, outcome, ...}]
- cli: [{step, args, exit_code, expect_exit, passed, stdout, stderr}], one per `cli` step (python -m
  fault_responder.cli run in process against the stack's IncidentsTable)
- clicks: [{step, button, user, signed, instance, signed_at, replay_of, status, refused, message_ts, outcome}], one per
  `click` step (a press of an incident root's button through SlackActionsFunction's function URL, or a replay of one)
- webhooks: [{step, webhook, by, agent, signed, assignee, event_id, incident, dedup_key, occurred_at, status, refused,
  outcome}], one per `pagerduty` step (a v3 webhook through PagerDutyWebhookFunction's function URL)
- training: [{job, run, cluster, tasks, resume_from, from_step, last_step, ended, checkpoints, answered, held,
  hold_ended, ignored_requests, steps_lost, errors}], one per run of an emulated trainer, in the order they started
- ledgers: every job's resume ledger ({job_key, attempts, failed_hosts}), as `fault-responder recovery --report` reads
- expectations: [{name, select, passed, selected, problems}]
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from sandbox import expectations
from sandbox import scenario as model
from sandbox.accounts import TrustEmulation, delete_role
from sandbox.cloudwatch_emulation import CloudWatchEmulation
from sandbox.drill_emulation import drill_bridge
from sandbox.ecs_emulation import EcsEmulation
from sandbox.errors import SandboxError
from sandbox.eventbridge import BusDelivery, EventBus, SqsTargetDeliverer, StatesTargetDeliverer
from sandbox.function_url import FunctionUrl, request_event
from sandbox.lambda_runtime import patched_environ
from sandbox.replay import load_event_file
from sandbox.report import SCHEDULED, ReportBuilder, Timeline, collect_ecs
from sandbox.scenario import LoadedScenario
from sandbox.session import Sandbox
from sandbox.sqs_mapping import BatchOutcome, SqsEventSourceMapping
from sandbox.stack import layer_on_path
from sandbox.standins import PAGERDUTY_WEBHOOK_SECRET, SLACK_SIGNING_SECRET, signed_click
from sandbox.stepfunctions import (
    ExecutionTracker,
    LambdaDispatch,
    SharedFunction,
    forget_warm_caches,
    quiet_interpreter,
    strings_in,
)
from sandbox.template import load_template
from sandbox.trainer_emulation import TrainerEmulation, trainers_for
from sandbox.world import INCIDENTS_TABLE, SeededAlarm, World, deep_merge, point_at, seed_world, set_alarm

SWEEP_FUNCTION = "SweepFunction"
SLACK_ACTIONS_FUNCTION = "SlackActionsFunction"
"""Where button presses go (its function URL)."""
PAGERDUTY_WEBHOOK_FUNCTION = "PagerDutyWebhookFunction"
"""Where PagerDuty's webhooks go (its function URL)."""
RECONCILE_FUNCTION = "ReconcileFunction"

CLI_USER = "sandbox"
"""The author of a silence a `cli` step adds without --author."""


@dataclass(frozen=True)
class RunResult:
    report: dict[str, Any]
    passed: bool


def run_scenario(loaded: LoadedScenario, timeline: Timeline) -> RunResult:
    scenario = loaded.scenario
    template = load_template(loaded.find(scenario.template))
    faults = {
        name: schedule
        for name, schedule in (("slack", scenario.faults.slack), ("pagerduty", scenario.faults.pagerduty))
        if schedule
    }
    timeline.scenario(loaded.name, loaded.path, scenario.description)
    with contextlib.ExitStack() as context:
        context.enter_context(quiet_interpreter())
        sandbox = context.enter_context(
            Sandbox(template, parameter_overrides=scenario.parameter_overrides(), faults=faults or None)
        )
        identity = sandbox.identity
        emulation = context.enter_context(
            EcsEmulation(
                account_id=identity.account_id,
                region=identity.region,
                start_after_describes=scenario.ecs.start_after_describes,
                stop_after_describes=scenario.ecs.stop_after_describes,
            )
        )
        cloudwatch = context.enter_context(CloudWatchEmulation(account_id=identity.account_id, region=identity.region))
        context.enter_context(TrustEmulation())
        run = _Run(loaded, sandbox, emulation, timeline, context, cloudwatch=cloudwatch)
        return run.execute()


PRODUCT_CLOCK_MODULE = "fault_responder.core.elapsed"
"""The product's elapsed-time clock (every timer that decides by time passed across calls reads it)."""


class SandboxClock:
    """The clock of a run's `delay_seconds`: a delay passes at once when nothing is running.

    Between steps every queue has been drained into the functions; when no execution is running either, and no
    emulated trainer is training (sandbox/trainer_emulation.py), nothing would happen during the delay but the clock
    moving on. So the clocks move on by the delay at once, and the run carries on from there, as if it had waited:
    the wall clock of the whole process (time-machine: `time.time`, `datetime.now` and the like, for the functions,
    moto and the stand-ins alike), so that a sweep a minute later sees a minute gone and records written before are
    a minute old; and the product's elapsed-time clock (`fault_responder.core.elapsed`, as the functions loaded it),
    so that the router's copy of the silences, its caches and its rate limits are a minute older too. While an
    execution runs or a trainer trains, the delay is waited, and every clock moves by itself. `time.monotonic` and
    `time.perf_counter` are never moved: they bound the run's own waits (timeouts, the scenario's deadline, an
    invocation's time budget) and the emulations' real time (training steps, instance launches). The wall clock is
    back to the real time when the run ends; the elapsed-time clock stays ahead, as a monotonic clock never goes
    back.
    """

    def __init__(self) -> None:
        self._travel: Any = None
        self._coordinates: Any = None
        self.skipped_seconds = 0.0

    def wait(self, seconds: float, *, idle: bool) -> None:
        if not idle:
            time.sleep(seconds)
            return
        if self._coordinates is None:
            import time_machine  # noqa: PLC0415  (only runs with a delay load it)

            self._travel = time_machine.travel(time.time(), tick=True)
            self._coordinates = self._travel.start()
        self._coordinates.shift(seconds)
        product_clock = sys.modules.get(PRODUCT_CLOCK_MODULE)
        if product_clock is not None:  # (else no product code is loaded: no timer reads it)
            product_clock.skip(seconds)
        self.skipped_seconds += seconds

    def stop(self) -> None:
        if self._travel is not None:
            self._travel.stop()
            self._travel = self._coordinates = None


@dataclass
class _PendingAction:
    action: model.Action
    published_at: float | None = None
    approval: str | None = None
    """The approval id the pressed button carries (its value; never a task token)."""
    user: str | None = None
    outcome: str = "not performed: no approval request with buttons was posted"
    status: int | None = None
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.action,
            "button": self.action.pressed,
            "user": self.user,
            "signed": self.action.signed,
            "after_seconds": self.action.after_seconds,
            "status": self.status,
            "outcome": self.outcome,
        }


@dataclass
class _Run:
    loaded: LoadedScenario
    sandbox: Sandbox
    emulation: EcsEmulation
    timeline: Timeline
    context: contextlib.ExitStack
    report: ReportBuilder = field(default_factory=ReportBuilder)
    actions: list[_PendingAction] = field(default_factory=list)
    pressed: list[tuple[str, str, str | None]] = field(default_factory=list)
    functions: dict[str, SharedFunction] = field(default_factory=dict)
    timed_out: list[str] = field(default_factory=list)
    cli_steps: list[dict[str, Any]] = field(default_factory=list)
    clicks: list[dict[str, Any]] = field(default_factory=list)
    presses: dict[int, tuple[dict[str, str], bytes, dict[str, Any]]] = field(default_factory=dict)
    """Step number -> the latest press that click step sent (headers, body, its report entry), for a replay."""
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    bus: EventBus | None = None
    mappings: list[SqsEventSourceMapping] = field(default_factory=list)
    clock: SandboxClock = field(default_factory=SandboxClock)
    cloudwatch: CloudWatchEmulation | None = None

    def execute(self) -> RunResult:
        scenario, sandbox = self.loaded.scenario, self.sandbox
        self.context.callback(self.clock.stop)
        deadline = time.monotonic() + scenario.timeout_seconds
        self.timeline.header(sandbox)
        forget_warm_caches()
        functions = self._load_functions()
        self.functions = functions
        dispatch = self.context.enter_context(
            LambdaDispatch({key: f for spec_id, f in functions.items() for key in _keys(sandbox, spec_id)})
        )
        tracker = ExecutionTracker(sandbox.aws)
        sandbox.aws.client("stepfunctions")  # created once, before threads may deliver at the same moment
        bus = EventBus(
            sandbox.stack,
            sandbox.aws,
            {"sqs": SqsTargetDeliverer(sandbox.aws), "states": StatesTargetDeliverer(sandbox.aws, tracker.started)},
        )
        mappings = [
            SqsEventSourceMapping(source, functions[spec.logical_id], sandbox.aws, sandbox.identity.region)
            for spec in sandbox.stack.functions.values()
            for source in spec.sqs_sources
            if source.enabled
        ]
        self.bus, self.mappings = bus, mappings
        world = seed_world(scenario.world, sandbox.aws, self.emulation, sandbox.stack, self.cloudwatch)
        if world.forwarders:
            forwarders = {place: (stack, world.members[place]) for place, stack in world.forwarders.items()}
            bus.with_members(forwarders, self._organization_of(world))
        self.timeline.seeded(_world_json(world))
        trainers = self.context.enter_context(trainers_for(scenario.world, sandbox.aws, self.emulation))
        self._arm_faults(scenario.faults)
        seeded_requests = len(self.emulation.run_task_requests)
        self.actions = [_PendingAction(action) for action in scenario.actions]
        summarized = 0
        for number, step in enumerate(scenario.events, start=1):
            for repetition in range(step.repeat):
                if step.delay_seconds:
                    idle = not tracker.running() and not trainers.training()
                    self.clock.wait(step.delay_seconds, idle=idle)
                    self.timeline.delay(step.delay_seconds, waited=not idle)
                if step.cli is not None:
                    self._run_cli(number, step.cli, step.expect_exit or 0, world)
                elif step.sweep:
                    self._scheduled(number, functions, SWEEP_FUNCTION, "the sweep")
                elif step.reconcile:
                    self._scheduled(number, functions, RECONCILE_FUNCTION, "the reconciliation sweep")
                elif step.click is not None:
                    self._click(number, step.click, world)
                elif step.pagerduty is not None:
                    self._webhook(number, step.pagerduty, world)
                elif step.alarm is not None:
                    self._set_alarm(number, step.alarm, world)
                elif step.delete_role is not None:
                    self._delete_role(number, step.delete_role, world)
                else:
                    self._deliver(number, step, repetition, world, bus)
                for mapping in mappings:
                    self._drain(mapping)
                last = number == len(scenario.events) and repetition == step.repeat - 1
                if step.wait or repetition < step.repeat - 1 or last:
                    self._wait(tracker, deadline)
                    summarized = self._print_executions(tracker, dispatch, summarized)
        for mapping in mappings:
            self._drain(mapping)
        for pending in self.actions:
            self.timeline.action(pending.to_json())
        return self._finish(world, tracker, dispatch, seeded_requests, trainers)

    # --- Setting up ------------------------------------------------------------------------------

    def _load_functions(self) -> dict[str, SharedFunction]:
        """Every function of the stack, loaded once (a warm execution environment each)."""
        loaded: dict[str, SharedFunction] = {}
        for spec in self.sandbox.stack.functions.values():
            function = SharedFunction(spec, self.sandbox.function_environment(spec))
            self.context.enter_context(function)
            loaded[spec.logical_id] = function
            for source in spec.sqs_sources:
                if source.enabled:
                    self.timeline.event_source(source, spec.logical_id, function.init_logs)
        return loaded

    def _arm_faults(self, faults: model.Faults) -> None:
        if faults.run_task is None:
            return
        if faults.run_task.fail:
            self.emulation.fail_run_tasks(faults.run_task.fail, faults.run_task.reason)
        if faults.run_task.stop_early:
            self.emulation.stop_started_tasks_early(
                faults.run_task.stop_early, faults.run_task.stop_reason, faults.run_task.stop_code
            )

    # --- Events ----------------------------------------------------------------------------------

    def _organization_of(self, world: World) -> Callable[[str], str | None]:
        """Which organization an account is in, for the bus policy: the stack's account and the world's accounts in
        the organization are in the stack's OrganizationId (none when it is empty); any other account in none."""
        organization = str(self.sandbox.parameters.get("OrganizationId") or "") or None
        inside = {self.sandbox.identity.account_id} | {a.id for a in world.accounts.values() if a.organization}
        return lambda account: organization if account in inside else None

    def _delete_role(self, number: int, account: str, world: World) -> None:
        """The account's ResponderRole deleted in IAM (with the account's own credentials): AssumeRole of it is refused
        from now on, as AWS refuses it."""
        seeded = world.accounts[account]
        clients = world.members[(account, seeded.regions[0])]
        deleted = delete_role(clients, seeded.role_name)
        world.accounts[account] = dataclasses.replace(seeded, role="deleted")
        what = "deleted" if deleted else "was not there to delete"
        self.timeline.step(number, f"the role {seeded.role_name} of account {account} {what}")

    def _deliver(self, number: int, step: model.EventStep, repetition: int, world: World, bus: EventBus) -> None:
        source = step.file if step.file is not None else "inline event"
        label = source + (f" (x{step.concurrently} at once)" if step.concurrently > 1 else "")
        if step.sender is not None:
            label += f" (PutEvents by account {step.sender} onto the stack's bus)"
        if step.repeat > 1:
            label += f" [{repetition + 1} of {step.repeat}]"
        self.timeline.step(number, label)
        sender = step.sender
        for event in self._events(step, world):
            copies = [event] * step.concurrently
            if sender is not None:
                deliveries = _at_once([lambda e=e: bus.put_from(sender, e) for e in copies])
            else:
                deliveries = _at_once([lambda e=e: bus.put_event(e) for e in copies])
            for delivery in deliveries:
                targets = [target.to_json() for target in delivery.targets]
                seen = delivery.event if delivery.event is not None else event
                self.report.add_event(
                    self.loaded.path if step.file is None else self.loaded.find(step.file),
                    seen,
                    delivery.matched_rules,
                    targets,
                )
                self.timeline.event(seen, delivery.matched_rules, targets)

    def _events(self, step: model.EventStep, world: World) -> list[dict[str, Any]]:
        raw = load_event_file(self.loaded.find(step.file)).events if step.file is not None else [dict(step.event or {})]
        events = []
        for event in raw:
            filled = world.fill(event)
            if step.instance is not None:
                filled = point_at(filled, world.instance(step.instance), self.sandbox.identity)
            events.append(deep_merge(filled, world.fill(step.overrides)))
        return events

    def _set_alarm(self, number: int, alarm: model.Alarm, world: World) -> None:
        """One of the world's alarms changes state in CloudWatch (sandbox/cloudwatch_emulation.py); no event is sent."""
        seeded = set_alarm(alarm, world, datetime.now(UTC))
        hot = f", {len(seeded.contributors)} contributors in ALARM" if seeded.contributors else ""
        error = f", DescribeAlarmContributors answers {alarm.contributors_error}" if alarm.contributors_error else ""
        where = f" of {alarm.account} {alarm.region}" if alarm.place else ""
        self.timeline.step(
            number, f"alarm {seeded.full_name}{where} is {alarm.state} in CloudWatch (no event){hot}{error}"
        )

    def _run_cli(self, number: int, arguments: list[str], expected: int, world: World) -> None:
        """`python -m fault_responder.cli` in process, against the deployed stack's incidents table in moto."""
        filled = [str(argument) for argument in world.fill(arguments)]
        self.timeline.step(number, f"python -m fault_responder.cli {shlex.join(filled)}")
        table = self.sandbox.stack.resources.get(INCIDENTS_TABLE)
        if table is None:
            raise SandboxError(
                f"{self.loaded.path}: step {number} runs the CLI, and the stack has no {INCIDENTS_TABLE}"
            )
        target = ["--table", str(table.ref), "--region", self.sandbox.identity.region]
        target += ["--endpoint-url", self.sandbox.moto_endpoint]
        out, err = io.StringIO(), io.StringIO()
        with layer_on_path(self.sandbox.stack):
            from fault_responder.cli import main as cli  # noqa: PLC0415 - the stack's layer, on the path only here

            # The run's environment is the functions' (no USER): `silence add` without --author is by "sandbox".
            with (
                patched_environ({"USER": CLI_USER}),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
                self._drill_support(number, filled) as drill_errors,
            ):
                status = cli.main([*filled, *target])
            if drill_errors:
                raise SandboxError(f"{self.loaded.path}: step {number}: the drill's emulation failed: {drill_errors}")
            if status == 0 and filled[:2] == ["silence", "add"]:
                comment = str(cli.build_parser().parse_args([*filled, *target]).comment).strip()
                world.silences.append((out.getvalue().strip(), comment))
        entry = {
            "step": number,
            "args": filled,
            "exit_code": status,
            "expect_exit": expected,
            "passed": status == expected,
            "stdout": out.getvalue(),
            "stderr": err.getvalue(),
        }
        self.cli_steps.append(entry)
        self.timeline.cli(entry)

    @contextlib.contextmanager
    def _drill_support(self, number: int, arguments: list[str]) -> Iterator[list[str]]:
        """For a `drill` step (sandbox/drill_emulation.py): its PutEvents onto the stack's bus, the queues drained
        and the emulated ECS reacting while it waits. Yields the errors the background work met."""
        if arguments[:1] != ["drill"] or self.bus is None:
            yield []
            return
        identity = self.sandbox.identity
        source = self.loaded.path

        def pump() -> None:
            for mapping in self.mappings:
                self._drain(mapping)

        def on_event(event: dict[str, Any], delivery: BusDelivery) -> None:
            targets = [target.to_json() for target in delivery.targets]
            self.report.add_event(source, event, delivery.matched_rules, targets)
            self.timeline.event(event, delivery.matched_rules, targets)

        with drill_bridge(self.bus, pump, on_event, self.sandbox.aws, identity.account_id, identity.region) as bridge:
            yield bridge.errors

    def _scheduled(self, number: int, functions: dict[str, SharedFunction], logical_id: str, what: str) -> None:
        """A scheduled function of the stack (the sweep, the reconciliation), once, with the event its schedule
        sends."""
        self.timeline.step(number, f"{what} ({logical_id}, as its schedule runs it)")
        function = functions.get(logical_id)
        if function is None:
            raise SandboxError(f"{self.loaded.path}: step {number} runs {what}, and the stack has no {logical_id}")
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": self.sandbox.identity.account_id,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.sandbox.identity.region,
            "resources": [],
            "detail": {},
        }
        invocation = function.invoke(event)
        entry = {
            "function": logical_id,
            "queue": SCHEDULED,
            "request_id": invocation.request_id,
            "batch_size": 0,
            "message_ids": [],
            "failures": [],
            "result": invocation.result,
            "error": invocation.error,
            "duration_ms": invocation.duration_ms,
            "logs": invocation.logs,
        }
        self.report.add_invocation(entry, invocation.errors)
        self.timeline.batch(entry, invocation.errors)

    def _drain(self, mapping: SqsEventSourceMapping) -> None:
        def record(outcome: BatchOutcome) -> None:
            entry = outcome.to_json()
            self.report.add_invocation(entry, outcome.invocation.errors)
            self.timeline.batch(entry, outcome.invocation.errors)

        result = mapping.drain(on_batch=record)
        if not result.drained:
            warning = f"{mapping.source.queue_logical_id} still had messages after {len(result.outcomes)} batches"
            self.report.warnings.append(warning)
            self.timeline.warning(warning)

    # --- Waiting and acting ----------------------------------------------------------------------

    def _wait(self, tracker: ExecutionTracker, deadline: float) -> None:
        left = tracker.wait(deadline, on_tick=self._act)
        if left:
            cause = f"still running when the scenario's timeout ({self.loaded.scenario.timeout_seconds:g} s) ran out"
            tracker.stop(left, cause)
            self.timed_out.extend(execution.arn for execution in left)
            for execution in left:
                warning = f"execution {execution.arn.rsplit(':', 1)[-1]} {cause}; stopped"
                self.report.warnings.append(warning)
                self.timeline.warning(warning)

    def _act(self) -> None:
        """Each action presses its button on the first approval request its user did not press it on yet,
        `after_seconds` after the buttons appeared in Slack: the Slack stand-in signs the press and sends it to the
        function URL."""
        pending = [action for action in self.actions if not action.done]
        if not pending:
            return
        posted = self._posted_approvals()
        now = time.monotonic()
        for action in pending:
            button, user = action.action.pressed, action.action.user
            if action.approval is None:
                action.approval = next((a for a in posted if (button, a, user) not in self.pressed), None)
                action.published_at = now
            if action.approval is None or action.published_at is None:
                continue
            waited = now - action.published_at
            if waited < action.action.after_seconds:
                continue
            self.pressed.append((button, action.approval, user))
            action.done = True
            self._press(action, waited)

    def _press(self, action: _PendingAction, waited: float) -> None:
        function, url = self._function_url(SLACK_ACTIONS_FUNCTION)
        if function is None or url is None:
            action.outcome = f"not performed: the stack has no {SLACK_ACTIONS_FUNCTION} with a function URL"
            return
        approvers = self.sandbox.parameters.get("ResumeApprovers") or []
        approvers = approvers.split(",") if isinstance(approvers, str) else list(approvers)
        action.user = action.action.user or next((a for a in approvers if a), "U0NOBODY00")
        secret = SLACK_SIGNING_SECRET if action.action.signed == "rightly" else "not-the-signing-secret"
        headers, body = signed_click(
            action_id=f"resume_{action.action.pressed}",
            value=str(action.approval),
            user_id=action.user,
            response_url=self.sandbox.standins.response_url(uuid.uuid4().hex),
            timestamp=int(time.time()),
            secret=secret,
        )
        if action.action.signed == "not":
            headers = {k: v for k, v in headers.items() if not k.startswith("x-slack-")}
        invocation = function.invoke(request_event(url, headers, body))
        result = invocation.result if isinstance(invocation.result, dict) else {}
        action.status = result.get("statusCode")
        label = action.action.pressed.capitalize()
        action.outcome = (
            f"pressed {label} as {action.user} ({action.action.signed} signed) {waited:.1f} s after it was posted: "
            f"HTTP {action.status}" + (f" ({invocation.error.get('errorType')})" if invocation.error else "")
        )

    def _function_url(self, logical_id: str) -> tuple[SharedFunction | None, FunctionUrl | None]:
        spec = self.sandbox.stack.functions.get(logical_id)
        if spec is None or spec.function_url is None:
            return None, None
        return self.functions.get(logical_id), spec.function_url

    def _click(self, number: int, click: model.ClickStep, world: World) -> None:
        """A person presses an incident root's button: the newest root carrying it (of `click.instance`'s incident,
        when named), signed as the step says, through SlackActionsFunction's function URL. Or a replay: an earlier
        press sent again exactly."""
        if click.replay is not None:
            self._replay(number, click.replay)
            return
        action_id = f"incident_{click.button}"
        at = f", at {click.signed_at}" if click.signed_at else ""
        self.timeline.step(number, f"click {click.button} as {click.user} ({click.signed} signed{at})")
        entry = _click_entry(number, button=click.button, user=click.user, signed=click.signed, instance=click.instance)
        function, url = self._function_url(SLACK_ACTIONS_FUNCTION)
        found = self._incident_button(action_id, click.instance, world)
        if function is None or url is None:
            entry["outcome"] = f"not performed: the stack has no {SLACK_ACTIONS_FUNCTION} with a function URL"
        elif found is None:
            where = f"{click.instance}'s incident" if click.instance else "an incident root"
            entry["outcome"] = f"not performed: no {action_id} button on {where} in Slack"
        else:
            channel_id, message_ts, value = found
            secret = SLACK_SIGNING_SECRET if click.signed == "rightly" else "not-the-signing-secret"
            timestamp = int(self._moment(number, "signed_at", click.signed_at, world).timestamp())
            headers, body = signed_click(
                action_id=action_id,
                value=value,
                user_id=str(click.user),
                response_url=self.sandbox.standins.response_url(uuid.uuid4().hex),
                timestamp=timestamp,
                secret=secret,
                channel_id=channel_id,
                message_ts=message_ts,
            )
            if click.signed == "not":
                headers = {k: v for k, v in headers.items() if not k.startswith("x-slack-")}
            entry.update(message_ts=message_ts, signed_at=_iso(timestamp))
            self.presses[number] = (headers, body, entry)
            self._send_press(function, url, headers, body, entry, f"pressed {click.button} on the root {message_ts}")
        self.clicks.append(entry)
        self.timeline.action({"action": "click", **entry})

    def _replay(self, number: int, replay: bool | int) -> None:
        """An earlier press sent again exactly (the same headers and body: signature and timestamp included), as
        someone who recorded it would: `replay` is True (the latest press sent) or the click step whose press."""
        sent = [step for step in self.presses if replay is True or step == replay]
        original = max(sent) if sent else None
        of = original if original is not None else (None if replay is True else replay)
        self.timeline.step(number, f"replay of the press of step {of}" if of else "replay of the latest press")
        entry = _click_entry(number, replay_of=of)
        function, url = self._function_url(SLACK_ACTIONS_FUNCTION)
        if original is None:
            entry["outcome"] = "not performed: " + (f"step {of} sent no press" if of else "no press was sent before")
        elif function is None or url is None:
            entry["outcome"] = f"not performed: the stack has no {SLACK_ACTIONS_FUNCTION} with a function URL"
        else:
            headers, body, pressed = self.presses[original]
            entry.update({name: pressed[name] for name in ("button", "user", "signed", "instance", "signed_at")})
            entry["message_ts"] = pressed["message_ts"]
            self._send_press(function, url, headers, body, entry, f"replayed the press of step {original}")
        self.clicks.append(entry)
        self.timeline.action({"action": "click", **entry})

    def _send_press(
        self,
        function: SharedFunction,
        url: FunctionUrl,
        headers: dict[str, str],
        body: bytes,
        entry: dict[str, Any],
        what: str,
    ) -> None:
        invocation = function.invoke(request_event(url, headers, body))
        result = invocation.result if isinstance(invocation.result, dict) else {}
        entry.update(status=result.get("statusCode"), refused=_refusal(invocation.logs))
        entry["outcome"] = f"{what}: HTTP {entry['status']}" + _why(invocation.error, entry["refused"])

    def _moment(self, number: int, name: str, text: str | None, world: World) -> datetime:
        """A step's `signed_at` or `occurred_at` (placeholders filled), now when not given."""
        now = datetime.now(UTC)
        if text is None:
            return now
        filled = str(world.fill(text, now))
        try:
            return model.moment(filled, now)
        except ValueError as exc:
            raise SandboxError(f"{self.loaded.path}: step {number}: {name}: {exc}") from None

    def _incident_button(self, action_id: str, instance: str | None, world: World) -> tuple[str, str, str] | None:
        """(channel id, root ts, value) of the newest root with the button, of `instance`'s incident when named."""
        wanted = world.instance(instance).container_instance_arn.rsplit("/", 1)[-1] if instance else None
        with layer_on_path(self.sandbox.stack):
            from fault_responder.notification.buttons import BadRequest, IncidentButton  # noqa: PLC0415 - the stack's layer

            for channel_id, ts, value in self.sandbox.standins.buttons(action_id):
                try:
                    button = IncidentButton.parse(value)
                except BadRequest:
                    continue
                if wanted is None or button.instance == wanted:
                    return channel_id, ts, value
        return None

    def _webhook(self, number: int, step: model.PagerDutyStep, world: World) -> None:
        """Someone acts on an alert in PagerDuty (the newest, or the one the step names): the stand-in changes it
        and its v3 webhook goes, signed as the step says and with the step's `occurred_at`, through
        PagerDutyWebhookFunction's function URL."""
        self.timeline.step(number, f"PagerDuty webhook incident.{step.webhook} by {step.by} ({step.signed} signed)")
        dedup_key = str(world.fill(step.dedup_key)) if step.dedup_key is not None else None
        occurred_at = self._moment(number, "occurred_at", step.occurred_at, world)
        entry: dict[str, Any] = {
            "step": number,
            "webhook": step.webhook,
            "by": step.by,
            "agent": step.agent,
            "signed": step.signed,
            "assignee": step.assignee,
            "event_id": None,
            "incident": step.incident,
            "dedup_key": dedup_key,
            "occurred_at": None,
            "status": None,
            "refused": None,
        }
        function, url = self._function_url(PAGERDUTY_WEBHOOK_FUNCTION)
        if function is None or url is None:
            entry["outcome"] = f"not performed: the stack has no {PAGERDUTY_WEBHOOK_FUNCTION} with a function URL"
        else:
            secret = {"rightly": PAGERDUTY_WEBHOOK_SECRET, "wrongly": "not-the-webhook-secret", "not": None}
            sent = self.sandbox.standins.pagerduty_webhook(
                step.webhook,
                by=step.by,
                agent=step.agent,
                assignee=step.assignee,
                secret=secret[step.signed],
                occurred_at=occurred_at,
                incident=step.incident,
                dedup_key=dedup_key,
            )
            if sent is None:
                named = (
                    f" numbered {step.incident}"
                    if step.incident is not None
                    else (f" with dedup key {dedup_key}" if dedup_key is not None else "")
                )
                entry["outcome"] = f"not performed: PagerDuty has no alert{named} to act on"
            else:
                headers, body, event = sent
                invocation = function.invoke(request_event(url, headers, body))
                result = invocation.result if isinstance(invocation.result, dict) else {}
                entry.update(
                    event_id=event["id"],
                    incident=event["data"]["number"],
                    dedup_key=event["data"]["incident_key"],
                    occurred_at=event["occurred_at"],
                    status=result.get("statusCode"),
                    refused=_refusal(invocation.logs),
                )
                entry["outcome"] = (
                    f"sent incident.{step.webhook} for incident #{entry['incident']} ({entry['dedup_key']}), "
                    f"occurred at {entry['occurred_at']}: HTTP {entry['status']}"
                ) + _why(invocation.error, entry["refused"])
        self.webhooks.append(entry)
        self.timeline.action({"action": "pagerduty webhook", **entry})

    def _posted_approvals(self) -> list[str]:
        """The approval ids on the Approve/Reject buttons in Slack, in the order they were posted."""
        found: list[str] = []
        for channel in self.sandbox.standins.slack_channels().values():
            for message in channel:
                for block in message.get("blocks") or []:
                    if block.get("type") != "actions":
                        continue
                    for element in block.get("elements") or []:
                        value = element.get("value")
                        if element.get("action_id", "").startswith("resume_") and value and value not in found:
                            found.append(value)
        return found

    def _print_executions(self, tracker: ExecutionTracker, dispatch: LambdaDispatch, already: int) -> int:
        summaries = tracker.summaries(dispatch.invocations)
        for summary in summaries[already:]:
            self.timeline.execution(summary)
        return len(summaries)

    # --- The report ------------------------------------------------------------------------------

    def _finish(
        self,
        world: World,
        tracker: ExecutionTracker,
        dispatch: LambdaDispatch,
        seeded_requests: int,
        trainers: TrainerEmulation,
    ) -> RunResult:
        sandbox, scenario = self.sandbox, self.loaded.scenario
        trainers.stop()
        for problem in trainers.problems():
            self.report.warnings.append(problem)
            self.timeline.warning(problem)
        for record in dispatch.invocations:
            self.report.errors.extend(record.invocation.errors)
        report = self.report.finish(sandbox)
        seeded = {task.arn for task in world.tasks.values()}
        # Reading the end state must not move it: describing would advance the emulated task lifecycle.
        with mock.patch.object(self.emulation, "after_describe", lambda tasks: None):
            own = [name for name in world.clusters if name not in world.places]
            ecs = collect_ecs(sandbox.aws, own, world.names(), seeded)
            for key, (account, region) in world.places.items():
                found = collect_ecs(world.members[(account, region)], [key.rsplit("/", 1)[-1]], world.names(), seeded)
                for entry in (*found["instances"], *found["tasks"]):
                    entry.update(cluster=key, account=account, region=region)
                ecs["instances"] += found["instances"]
                ecs["tasks"] += found["tasks"]
        order = {name: index for index, name in enumerate(world.instances)}
        ecs["instances"].sort(key=lambda instance: order.get(instance["name"], len(order)))
        ecs["run_task_requests"] = list(self.emulation.run_task_requests[seeded_requests:])
        report.update(
            {
                "scenario": {
                    "name": self.loaded.name,
                    "file": str(self.loaded.path),
                    "description": scenario.description,
                },
                "world": _world_json(world),
                "executions": tracker.summaries(dispatch.invocations),
                "workflow_invocations": [record.to_json() for record in dispatch.invocations],
                "ecs": ecs,
                "pagerduty_changes": sandbox.standins.pagerduty_changes(),
                "actions": [action.to_json() for action in self.actions],
                "task_tokens": self._token_exposure(tracker),
                "cli": self.cli_steps,
                "clicks": self.clicks,
                "webhooks": self.webhooks,
                "training": trainers.runs(),
                "ledgers": self._ledgers(),
            }
        )
        results = [
            self._finished_in_time(),
            self._nothing_amiss(report),
            *self._cli_exited_as_expected(),
            *expectations.check([_filled(e, world) for e in scenario.expect], report),
        ]
        passed = all(result["passed"] for result in results)
        report["expectations"] = results
        report["scenario"]["passed"] = passed
        self.timeline.ecs_view(ecs)
        self.timeline.training(report["training"])
        self.timeline.on_call_view(report)
        self.timeline.expectations(results)
        return RunResult(report, passed)

    def _ledgers(self) -> list[dict[str, Any]]:
        """Every job's resume ledger, as the workflow left it (what `fault-responder recovery --report` reads)."""
        table = self.sandbox.stack.resources.get(INCIDENTS_TABLE)
        if table is None or not self.sandbox.stack.state_machines:
            return []
        from fault_responder.adapters.resume_store import DynamoDBResumeStore  # noqa: PLC0415 - with a workflow only

        store = DynamoDBResumeStore(str(table.ref), self.sandbox.aws.dynamodb)
        return [ledger.model_dump(mode="json") for ledger in store.ledgers()]

    def _token_exposure(self, tracker: ExecutionTracker) -> dict[str, int]:
        """How many task tokens the executions issued, and how many of them appear anywhere people saw (a Slack
        message, an ephemeral reply, a PagerDuty event): the second must be 0. Counts only: a token is no report's."""
        standins = self.sandbox.standins
        seen = [
            *(text for channel in standins.slack_channels().values() for m in channel for text in strings_in(m)),
            *(text for reply in standins.ephemeral_replies() for text in strings_in(reply)),
            *(text for request in standins.requests for text in strings_in(request["body"])),
        ]
        tokens = tracker.task_tokens()
        return {"issued": len(tokens), "exposed": sum(1 for t in tokens if any(t in text for text in seen))}

    def _finished_in_time(self) -> dict[str, Any]:
        """The expectation every scenario has: the runner did not have to stop an execution."""
        timeout = self.loaded.scenario.timeout_seconds
        return {
            "name": f"every execution finished within the scenario's timeout ({timeout:g} s)",
            "select": "executions",
            "passed": not self.timed_out,
            "selected": len(self.timed_out),
            "problems": [f"{arn.rsplit(':', 1)[-1]} was still running: stopped" for arn in self.timed_out],
        }

    def _nothing_amiss(self, report: dict[str, Any]) -> dict[str, Any]:
        """The expectation every scenario has: the sandbox warned of nothing, no task token reached a person, a
        training scenario started an execution (unless it expects none: a drill, say) and an approve one issued a
        token, so that `python -m sandbox run` fails what its report would show wrong."""
        scenario = self.loaded.scenario
        problems = [f"warning: {warning}" for warning in report["warnings"]]
        tokens = report["task_tokens"]
        if tokens["exposed"]:
            problems.append(f"{tokens['exposed']} task token(s) in a Slack message, reply or PagerDuty event")
        expects_none = any(e.select == "executions" and e.count == 0 for e in scenario.expect)
        if scenario.parameters.get("TrainingCapacityProviders") and not expects_none and not report["executions"]:
            problems.append("the scenario started no execution")
        if scenario.parameters.get("ResumeMode") == "approve" and not tokens["issued"]:
            problems.append("an approve scenario issued no task token")
        return {
            "name": "nothing amiss: no warning, no task token shown, an execution started where training is on",
            "select": "warnings",
            "passed": not problems,
            "selected": len(problems),
            "problems": problems,
        }

    def _cli_exited_as_expected(self) -> list[dict[str, Any]]:
        """The expectation every scenario with cli steps has: each exited with its expect_exit (default 0)."""
        if not self.cli_steps:
            return []
        failed = [entry for entry in self.cli_steps if not entry["passed"]]
        return [
            {
                "name": "every cli step exited as expected",
                "select": "cli",
                "passed": not failed,
                "selected": len(failed),
                "problems": [
                    f"step {entry['step']} exited {entry['exit_code']}, expected {entry['expect_exit']}: "
                    + ((entry["stderr"] or entry["stdout"]).strip().splitlines() or ["(no output)"])[0]
                    for entry in failed
                ],
            }
        ]


REFUSALS = ("request refused", "webhook refused")
"""What SlackActionsFunction and PagerDutyWebhookFunction log when they refuse a request, with its `reason`."""


def _refusal(logs: Sequence[str]) -> str | None:
    """The reason the function logged for refusing the request (a 401 or a 400), or None."""
    for line in logs:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("message") in REFUSALS:
            return str(record.get("reason"))
    return None


def _why(error: Mapping[str, Any] | None, refused: str | None) -> str:
    if error:
        return f" ({error.get('errorType')})"
    return f" (refused: {refused})" if refused else ""


def _click_entry(number: int, **known: Any) -> dict[str, Any]:
    """A `clicks` item, every field present from the start (what is not known yet is null)."""
    fields = ("button", "user", "signed", "instance", "signed_at", "replay_of", "status", "refused")
    return {"step": number, **dict.fromkeys(fields), **known}


def _iso(epoch_seconds: int) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _keys(sandbox: Sandbox, logical_id: str) -> tuple[str, str]:
    spec = sandbox.stack.functions[logical_id]
    return spec.name, spec.arn


def _filled(expectation: model.Expectation, world: World) -> model.Expectation:
    return expectation.model_copy(update={"where": world.fill(expectation.where), "each": world.fill(expectation.each)})


def _world_json(world: World) -> dict[str, Any]:
    return {
        "clusters": dict(world.clusters),
        "instances": {name: dataclasses.asdict(instance) for name, instance in world.instances.items()},
        "tasks": {name: dataclasses.asdict(task) for name, task in world.tasks.items()},
        "checkpoints": {prefix: list(folders) for prefix, folders in world.checkpoints.items()},
        **({"alarms": {name: _alarm_json(alarm) for name, alarm in world.alarms.items()}} if world.alarms else {}),
        **({"accounts": {a: _account_json(world, a) for a in world.accounts}} if world.accounts else {}),
    }


def _account_json(world: World, account: str) -> dict[str, Any]:
    seeded = world.accounts[account]
    return {
        "name": seeded.name,
        "organization": seeded.organization,
        "role": seeded.role,
        "regions": {
            region: {
                "forwarder_rules": sorted(world.forwarders[(account, region)].rules)
                if (account, region) in world.forwarders
                else [],
                "clusters": sorted(key for key, place in world.places.items() if place == (account, region)),
            }
            for region in seeded.regions
        },
    }


def _alarm_json(alarm: SeededAlarm) -> dict[str, Any]:
    def stamp(moment: datetime) -> str:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    contributors = {key: {"since": stamp(at), "reason": reason} for key, (at, reason) in alarm.contributors.items()}
    return {"name": alarm.full_name, "arn": alarm.arn, "since": stamp(alarm.since), "contributors": contributors}


def _at_once(calls: Sequence[Any]) -> list[Any]:
    """Run the calls in threads released together (duplicate triggers arriving at the same moment)."""
    if len(calls) == 1:
        return [calls[0]()]
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
