"""What a sandbox run shows: the timeline printed as it goes, and the JSON report at the end.

The report records everything that crossed a boundary: the events and the rules they matched, each
function invocation, every request to Slack and PagerDuty, the dead-letter queues, the incidents
table, and what on-call would have seen. Its format is described in `ReportBuilder.finish`; a
scenario run (`python -m sandbox run`) adds the sections `sandbox.run` describes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from boto3.dynamodb.types import TypeSerializer

from sandbox.aws import AwsClients
from sandbox.errors import SandboxError
from sandbox.session import Sandbox
from sandbox.stack import SqsEventSource, Stack, layer_on_path
from sandbox.standins import REDACTED, WEBHOOK_CHANNEL

_serializer = TypeSerializer()

INCIDENTS_TABLE = "IncidentsTable"
# Receiving 10 at a time, this reads up to 1,000 dead letters; more means something else is wrong.
_MAX_DEAD_LETTER_RECEIVES = 100
# The report derives what routing decided; it reads no secret, so the settings name none.
_NOT_READ = "none"
SCHEDULED = "its schedule"
"""The `queue` of an invocation its schedule made (the sweep, the reconciliation): no queue, no batch."""


# --- The end state ---------------------------------------------------------------------------------


def collect_dead_letters(stack: Stack, aws: AwsClients) -> list[dict[str, Any]]:
    """Every message in every dead-letter queue of the stack (received, not deleted)."""
    letters: list[dict[str, Any]] = []
    for queue in stack.dead_letter_queues():
        for _ in range(_MAX_DEAD_LETTER_RECEIVES):
            messages = aws.sqs.receive_message(
                QueueUrl=queue.ref,
                MaxNumberOfMessages=10,
                # Long enough that a message already read is not read again during the collection.
                VisibilityTimeout=300,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                break
            letters.extend(_dead_letter(queue.logical_id, message) for message in messages)
    return letters


def _dead_letter(queue: str, message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "queue": queue,
        "message_id": message["MessageId"],
        "body": _parsed(message["Body"]),
        "attributes": dict(message.get("Attributes") or {}),
        "message_attributes": {
            name: value.get("StringValue", _b64(value.get("BinaryValue")))
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
    }


def _parsed(body: str) -> Any:
    """The body as JSON when it is JSON a report can hold; as text otherwise (not JSON, or nested too deep)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def table_items(aws: AwsClients, table_name: str) -> list[dict[str, Any]]:
    """Every item of a table, as plain JSON (numbers as int or float, sets as sorted lists)."""
    items: list[dict[str, Any]] = []
    for page in aws.dynamodb.get_paginator("scan").paginate(TableName=table_name):
        items.extend(
            {name: REDACTED if name in _SECRET_ATTRIBUTES else _plain(value) for name, value in item.items()}
            for item in page["Items"]
        )
    return items


_SECRET_ATTRIBUTES = frozenset({"task_token"})
"""Attributes no report shows: an approval's task token answers the workflow for whoever holds it."""


def _plain(attribute: Mapping[str, Any]) -> Any:
    """A DynamoDB attribute value (`{"S": "x"}`, `{"N": "1"}`, ...) as plain JSON."""
    ((kind, value),) = attribute.items()
    if kind == "N":
        return _number(value)
    if kind == "B":
        return base64.b64encode(value).decode()
    if kind == "NULL":
        return None
    if kind == "M":
        return {name: _plain(item) for name, item in value.items()}
    if kind == "L":
        return [_plain(item) for item in value]
    if kind == "NS":
        return sorted(_number(item) for item in value)
    if kind == "BS":
        return sorted(base64.b64encode(item).decode() for item in value)
    if kind == "SS":
        return sorted(value)
    return value  # S, BOOL


def _number(text: str) -> int | float:
    number = Decimal(text)
    return int(number) if number == number.to_integral_value() else float(number)


def derived_incidents(sandbox: Sandbox, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The incidents of every instance record, and the fleet incidents of every group, derived with the layer's
    own code as the stack's router derives them now (its routing file, hold-down, grouping, inhibition rules,
    maintenance windows and silences). A fleet incident has `fleet` set; an instance's incident that joined one
    has `fleet_id`; `muted` says who hears nothing new of it, and why."""
    records = [item for item in items if item.get("sk") == "RECORD"]
    if not records:
        return []
    with layer_on_path(sandbox.stack):
        from fault_responder.adapters.dynamodb_store import decode, decode_group  # noqa: PLC0415
        from fault_responder.adapters.serialization import member_from_dict  # noqa: PLC0415
        from fault_responder.incidents import lifecycle  # noqa: PLC0415
        from fault_responder.noise.fleet import derive_fleet  # noqa: PLC0415

        router, settings, policy = _router_view(sandbox)
        now = datetime.now(UTC)
        incidents: list[dict[str, Any]] = []
        for item in records:
            typed = {name: _serializer.serialize(_decimals(value)) for name, value in item.items()}
            pk = str(item.get("pk", ""))
            if pk.startswith("GROUP#"):
                group = decode_group(str(item.get("rid") or pk), typed)
                _open_members(group, [other for other in items if other.get("og") == pk], member_from_dict)
                fleets = derive_fleet(
                    group, router.config.grouping, router.route, now, policy, accounts=settings.accounts
                )
                incidents.extend(_jsonable(dataclasses.asdict(incident)) for incident in fleets.incidents)
            elif pk.startswith("INSTANCE#"):
                record = decode(str(item["ref"]["container_instance_arn"]), typed)
                view = lifecycle.derive(record, settings, router.route, now, policy)
                incidents.extend(_jsonable(dataclasses.asdict(incident)) for incident in view.incidents)
        return incidents


def _open_members(group: Any, items: Sequence[Mapping[str, Any]], read: Any) -> None:
    """A group's open members (its members in the table's Members index) on its head, as the router reads them
    beside it: how many, and the first LISTED_MEMBERS of them, oldest first."""
    from fault_responder.noise.fleet import LISTED_MEMBERS  # noqa: PLC0415

    listed = sorted((item for item in items if item.get("og")), key=lambda i: str(i["oat"]))
    group.open_count = len(listed)
    group.listed = [read(_decimals_out(item)) for item in listed[:LISTED_MEMBERS]]


def _decimals_out(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: _decimals_out(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decimals_out(item) for item in value]
    return value


def _router_view(sandbox: Sandbox) -> tuple[Any, Any, Any]:
    """The router, lifecycle settings and policy the stack's AlertRouter has, from its parameters."""
    from fault_responder.adapters.silence_store import DynamoDBSilenceStore  # noqa: PLC0415
    from fault_responder.core.accounts import accounts_of  # noqa: PLC0415
    from fault_responder.incidents import lifecycle  # noqa: PLC0415
    from fault_responder.noise.policy import SilenceCache  # noqa: PLC0415
    from fault_responder.routing.router import Router, load_routing  # noqa: PLC0415
    from fault_responder.wiring.alert_router import RouterSettings, policy_for  # noqa: PLC0415

    parameters = sandbox.stack.parameters
    routing = load_routing(str(parameters.get("RoutingFile", "default.yaml")))
    router = Router(routing)
    window = timedelta(minutes=int(str(parameters.get("DrainAttributionWindowMinutes", 60))))
    table = str(sandbox.stack.resources[INCIDENTS_TABLE].ref) if INCIDENTS_TABLE in sandbox.stack.resources else ""
    environment = {
        "INCIDENTS_TABLE": table or "none",
        "ALERT_DLQ_URL": "none",
        "SLACK_SECRET_NAME": _NOT_READ,
        "PAGERDUTY_SECRET_NAME": _NOT_READ,
        "TRAINING_CAPACITY_PROVIDERS": _joined(parameters.get("TrainingCapacityProviders", "")),
        "RESUME_CHECK_TYPES": _joined(parameters.get("ResumeCheckTypes", "ACCELERATED_COMPUTE")),
        "RESUME_MODE": str(parameters.get("ResumeMode", "auto")),
        "RESUME_PAGE_DEADLINE_MINUTES": str(parameters.get("ResumePageDeadlineMinutes", 30)),
        "AWS_REGION": sandbox.identity.region,
    }
    # The organization's bus: quiet when handled applies to this account's faults only, as the router has it.
    router_function = sandbox.stack.functions.get("AlertRouterFunction")
    if router_function is not None:
        environment.update(
            {
                name: router_function.environment[name]
                for name in (
                    "ORGANIZATION_MODE",
                    "ENROLLED_ACCOUNTS",
                    "ENROLLED_REGIONS",
                    "STACK_ACCOUNT",
                    "ACCOUNT_NAMES",
                )
                if name in router_function.environment
            }
        )
    silencer = None
    if table:
        store = DynamoDBSilenceStore(table, sandbox.aws.dynamodb)
        cache = SilenceCache(lambda: store.active(datetime.now(UTC)))
        cache.refresh_or_keep()
        silencer = cache.silencer
    router_settings = RouterSettings.from_env(environment)
    policy = policy_for(routing, router_settings, silencer, router.muted_receivers)
    # The accounts' names as the stack's AccountNames gives them (the sandbox has no AWS Organizations to ask).
    accounts = accounts_of(
        router_settings.organization_mode,
        router_settings.stack_account,
        router_settings.region,
        router_settings.account_names,
        lambda: None,
    )
    settings = lifecycle.Settings(drain_window=window, hold_down=routing.flapping.hold_down, accounts=accounts)
    return router, settings, policy


def _joined(value: Any) -> str:
    return ",".join(str(item) for item in value) if isinstance(value, list | tuple) else str(value)


def _decimals(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _decimals(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decimals(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


_DESCRIBE_BATCH = 100


def collect_ecs(aws: AwsClients, clusters: Sequence[str], names: Mapping[str, str], seeded: set[str]) -> dict[str, Any]:
    """Every container instance and task of the clusters at the end, as DescribeContainerInstances and
    DescribeTasks show them; `names` gives the scenario's name for an ARN, `seeded` the tasks it started."""
    ecs = aws.client("ecs")
    instances: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for cluster in clusters:
        described_instances = _described(
            ecs, "describe_container_instances", "containerInstances", cluster,
            _listed(ecs, "list_container_instances", "containerInstanceArns", cluster=cluster),
        )  # fmt: skip
        hosts = {i["containerInstanceArn"]: i.get("ec2InstanceId") for i in described_instances}
        instances.extend(_instance_entry(cluster, raw, names) for raw in described_instances)
        arns = [
            arn
            for status in ("RUNNING", "STOPPED")
            for arn in _listed(ecs, "list_tasks", "taskArns", cluster=cluster, desiredStatus=status)
        ]
        described = _described(ecs, "describe_tasks", "tasks", cluster, list(dict.fromkeys(arns)), include=["TAGS"])
        tasks.extend(_task_entry(cluster, raw, hosts, names, seeded) for raw in described)
    return {"instances": instances, "tasks": tasks}


def _listed(ecs: Any, operation: str, key: str, **arguments: Any) -> list[str]:
    return [arn for page in ecs.get_paginator(operation).paginate(**arguments) for arn in page.get(key, [])]


def _described(ecs: Any, operation: str, key: str, cluster: str, arns: list[str], **extra: Any) -> list[dict[str, Any]]:
    argument = "containerInstances" if key == "containerInstances" else "tasks"
    described: list[dict[str, Any]] = []
    for start in range(0, len(arns), _DESCRIBE_BATCH):
        batch = arns[start : start + _DESCRIBE_BATCH]
        described.extend(getattr(ecs, operation)(cluster=cluster, **{argument: batch}, **extra).get(key, []))
    return described


def _instance_entry(cluster: str, raw: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    attributes = {a["name"]: a.get("value") for a in raw.get("attributes", [])}
    return {
        "name": names.get(raw["containerInstanceArn"]),
        "cluster": cluster,
        "container_instance_arn": raw["containerInstanceArn"],
        "ec2_instance_id": raw.get("ec2InstanceId"),
        "capacity_provider": raw.get("capacityProviderName"),
        "instance_type": attributes.get("ecs.instance-type"),
        "status": raw.get("status"),
        "running_tasks": raw.get("runningTasksCount"),
    }


def _task_entry(
    cluster: str, raw: Mapping[str, Any], hosts: Mapping[str, Any], names: Mapping[str, str], seeded: set[str]
) -> dict[str, Any]:
    tags = {tag["key"]: tag.get("value", "") for tag in raw.get("tags", [])}
    instance = raw.get("containerInstanceArn")
    return {
        "name": names.get(raw["taskArn"]),
        "origin": "seeded" if raw["taskArn"] in seeded else "started",
        "arn": raw["taskArn"],
        "cluster": cluster,
        "job_id": tags.get("fault-responder:job-id"),
        "task_definition": str(raw.get("taskDefinitionArn", "")).rsplit("/", 1)[-1],
        "container_instance_arn": instance,
        "ec2_instance_id": hosts.get(instance or ""),
        "instance": names.get(instance or ""),
        "capacity_provider": raw.get("capacityProviderName"),
        "last_status": raw.get("lastStatus"),
        "desired_status": raw.get("desiredStatus"),
        "stop_code": raw.get("stopCode"),
        "stopped_reason": raw.get("stoppedReason") or None,
        "started_by": raw.get("startedBy") or None,
        "group": raw.get("group"),
        "tags": tags,
        "environment": {
            str(entry.get("name")): {item["name"]: item.get("value", "") for item in entry.get("environment", [])}
            for entry in (raw.get("overrides") or {}).get("containerOverrides", [])
        },
    }


# --- The JSON report -------------------------------------------------------------------------------


class ReportBuilder:
    """Collects the run as it happens; `finish` adds the end state."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.invocations: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.warnings: list[str] = []

    def add_event(
        self, file: Path, event: Mapping[str, Any], matched_rules: list[str], targets: list[dict[str, Any]]
    ) -> None:
        self.events.append(
            {
                "id": event.get("id"),
                "file": str(file),
                "detail_type": event.get("detail-type"),
                "account": event.get("account"),
                "region": event.get("region"),
                "matched_rules": matched_rules,
                "targets": targets,
            }
        )

    def add_invocation(self, entry: dict[str, Any], errors: Sequence[dict[str, Any]]) -> None:
        self.invocations.append(entry)
        self.errors.extend(errors)

    def finish(self, sandbox: Sandbox) -> dict[str, Any]:
        """The report:

        - stack: name, region, account_id, parameters (as resolved)
        - events: [{id, file, detail_type, account, region, matched_rules: [rule logical ids],
                    targets: [{rule, target_id, type, arn, delivered, error, dead_lettered}]}]
        - invocations: [{function, queue, request_id, batch_size, message_ids, failures: [message ids],
                         error, duration_ms, logs}]
        - requests: every request to the Slack/PagerDuty stand-ins, in order (secrets redacted)
        - dlq: [{queue: logical id, message_id, body (parsed JSON if it is JSON), attributes, message_attributes}]
        - errors: [{event_id, reason}] the handlers logged at ERROR
        - incidents: every incident derived from the IncidentsTable's instance records at the end (as the
          router derives them: status, phase, classification, drain, receivers, Slack threads, timeline)
        - table: every item of the IncidentsTable at the end, as stored
        - slack: channel -> messages (with thread_ts and edits); pagerduty: alerts with their event logs
        - teams: the messages the Teams stand-in accepted (each passed its schema and size checks), in order
        - skipped_resources: [{logical_id, type, reason}]; warnings: [text]
        """
        stack, aws, standins = sandbox.stack, sandbox.aws, sandbox.standins
        table = stack.resources.get(INCIDENTS_TABLE)
        items = table_items(aws, table.ref) if table is not None else []
        return {
            "stack": {
                "name": stack.identity.name,
                "region": stack.identity.region,
                "account_id": stack.identity.account_id,
                "parameters": dict(stack.parameters),
            },
            "events": self.events,
            "invocations": self.invocations,
            "requests": standins.requests,
            "dlq": collect_dead_letters(stack, aws),
            "errors": self.errors,
            "incidents": derived_incidents(sandbox, items),
            "table": items,
            "slack": standins.slack_channels(),
            "ephemeral": standins.ephemeral_replies(),
            "pagerduty": standins.pagerduty_alerts(),
            "teams": standins.teams_messages(),
            "skipped_resources": [skipped.to_json() for skipped in stack.skipped],
            "warnings": self.warnings,
        }


def write_report(report: Mapping[str, Any], path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SandboxError(f"cannot write the report to {path}: {exc.strerror}") from exc


# --- The timeline ----------------------------------------------------------------------------------

_DETAIL_FIELDS: dict[str, tuple[str, ...]] = {
    "ECS Container Instance Health Change": (
        "clusterArn",
        "containerInstanceArn",
        "capacityProviderName",
        "overallStatus",
    ),
    "ECS Container Instance State Change": ("clusterArn", "containerInstanceArn", "status", "statusReason"),
    "ECS Task State Change": ("clusterArn", "taskArn", "lastStatus", "stopCode", "stoppedReason"),
}


def _short(value: Any) -> str:
    """An ARN shortened to its resource part (`cluster/my-cluster`); anything else as text."""
    text = str(value)
    return text.split(":", 5)[5] if text.startswith("arn:") and text.count(":") >= 5 else text


def detail_summary(event: Mapping[str, Any]) -> list[str]:
    """The detail fields worth a glance, as `name=value` lines, for the ECS detail-types we route."""
    detail = event.get("detail")
    if not isinstance(detail, dict):
        return []
    names = _DETAIL_FIELDS.get(str(event.get("detail-type")), ())
    lines = [" ".join(f"{name}={_short(detail[name])}" for name in names if detail.get(name) not in (None, ""))]
    checks = detail.get("healthChecks")
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict):
            reason = f" ({check['statusReason']})" if check.get("statusReason") else ""
            lines.append(f"healthCheck {check.get('type')}={check.get('status')}{reason}")
    return [line for line in lines if line]


class Timeline:
    """Plain-text progress for a terminal; `stream=None` prints nothing (--quiet)."""

    def __init__(self, stream: TextIO | None, show_logs: bool = False, verbose: bool = False) -> None:
        self._stream = stream
        self._show_logs = show_logs
        self._verbose = verbose

    def _print(self, text: object = "", indent: int = 0) -> None:
        if self._stream is None:
            return
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        # Events are untrusted: what the terminal cannot encode (a lone surrogate, say) is shown escaped.
        safe = str(text).encode(encoding, "backslashreplace").decode(encoding, "replace")
        for line in safe.splitlines() or [""]:
            print(" " * indent + line, file=self._stream)
        self._stream.flush()

    def header(self, sandbox: Sandbox) -> None:
        identity, stack, standins = sandbox.identity, sandbox.stack, sandbox.standins
        skipped_ids = {entry.logical_id for entry in stack.skipped}
        created = [
            resource.logical_id
            for resource in stack.resources.values()
            if resource.logical_id not in skipped_ids and resource.logical_id not in stack.functions
        ]
        self._print(f"Sandbox: stack {identity.name} in {identity.region}, account {identity.account_id}")
        self._print(f"moto       {sandbox.moto_endpoint}", 2)
        self._print(f"Slack      {standins.slack_api_url}  (webhook {standins.slack_webhook_url})", 2)
        self._print(f"PagerDuty  {standins.pagerduty_url}", 2)
        if sandbox.faults:
            faults = "; ".join(f"{service}: {json.dumps(f)}" for service, f in sandbox.faults.items())
            self._print(f"faults     {faults}", 2)
        self._print(f"created    {', '.join(created)}", 2)
        if self._verbose:
            for function in stack.functions.values():
                self._print(f"function   {function.logical_id} ({function.handler}, {function.runtime})", 2)
        elif stack.functions:
            runtimes = ", ".join(sorted({function.runtime for function in stack.functions.values()}))
            names = ", ".join(f"{f.logical_id} ({f.handler})" for f in stack.functions.values())
            self._print(f"functions  {runtimes}: {names}", 2)
        if self._verbose:
            for skipped in stack.skipped:
                self._print(f"skipped    {skipped.logical_id} ({skipped.resource_type}): {skipped.reason}", 2)
        elif stack.skipped:
            self._print(f"skipped    {skipped_summary([entry.resource_type for entry in stack.skipped])}", 2)

    def event_source(self, source: SqsEventSource, function: str, init_logs: Sequence[str]) -> None:
        details = [f"batches of up to {source.batch_size}"]
        if source.report_batch_item_failures:
            details.append("partial batch failures")
        # Not simulated: the sandbox polls at once and invokes one batch at a time.
        if source.maximum_batching_window_seconds:
            details.append(f"batching window {source.maximum_batching_window_seconds} s not waited for")
        if source.maximum_concurrency:
            details.append(f"max concurrency {source.maximum_concurrency}, run one at a time here")
        self._print(f"polling    {source.queue_logical_id} -> {function} in process ({'; '.join(details)})", 2)
        if self._show_logs:
            for line in init_logs:
                self._print(f"| {line}", 6)

    def file(self, number: int, path: Path) -> None:
        self._print()
        self._print(f"== {number}. {path}")

    def event(self, event: Mapping[str, Any], matched_rules: list[str], targets: list[dict[str, Any]]) -> None:
        self._print(_event_line(event), 2)
        for line in detail_summary(event):
            self._print(line, 6)
        if not matched_rules and not targets:
            self._print("no rule matched: not delivered", 4)
        for target in targets:
            outcome = "delivered" if target["delivered"] else f"FAILED {target['error']}"
            if target.get("dead_lettered"):
                outcome += " -> rule target DLQ"
            self._print(f"rule {target['rule']} -> {target['target_id']} ({target['type']}): {outcome}", 4)
        for rule in matched_rules:
            if not any(target["rule"] == rule for target in targets):
                self._print(f"rule {rule}: matched, has no targets", 4)

    def batch(self, entry: Mapping[str, Any], errors: Sequence[Mapping[str, Any]]) -> None:
        if entry["queue"] == SCHEDULED:
            head = f"scheduled run of {entry['function']}, {entry['duration_ms']:.0f} ms"
        else:
            head = f"{entry['function']} <- {entry['queue']}: batch of {entry['batch_size']}"
            head += f", {entry['duration_ms']:.0f} ms"
        if entry["error"]:
            self._print(f"{head}: whole batch failed: {entry['error']}", 4)
        elif entry["failures"]:
            self._print(f"{head}: {len(entry['failures'])} failed, back to the queue", 4)
        else:
            self._print(f"{head}: ok", 4)
        for error in errors:
            self._print(f"! {error.get('event_id')}: {error.get('reason')}", 6)
        if self._show_logs:
            for line in entry.get("logs", []):
                self._print(f"| {line}", 6)

    def warning(self, text: str) -> None:
        self._print(f"WARNING: {text}", 4)

    def would_match(self, event: Mapping[str, Any], matched_rules: list[str]) -> None:
        self._print(_event_line(event), 2)
        for line in detail_summary(event):
            self._print(line, 6)
        self._print(f"rules that would match it: {', '.join(matched_rules) or 'none'}", 4)

    def invoking(self, logical_id: str, interpreter: Path, note: str) -> None:
        self._print(f"invoking {logical_id} with {interpreter} -S; the event is {note}", 2)

    def invocation_result(self, entry: Mapping[str, Any]) -> None:
        self._print()
        self._print(f"Logs ({entry['duration_ms']:.0f} ms):")
        for line in entry["logs"]:
            self._print(f"| {line}", 2)
        self._print()
        if entry["error_detail"] is not None:
            self._print("Error:")
            self._print(json.dumps(entry["error_detail"], indent=2), 2)
        else:
            self._print("Result:")
            self._print(json.dumps(entry["result"], indent=2), 2)

    def on_call_view(self, report: Mapping[str, Any]) -> None:
        self._print()
        self._print("What on-call saw")
        self._slack(report["slack"])
        self._teams(report.get("teams") or [])
        self._pagerduty(report["requests"])
        self._failed_requests(report["requests"])
        self._dead_letters(report["dlq"])
        if report["errors"]:
            self._print(f"Handler errors: {len(report['errors'])}", 2)
            for error in report["errors"]:
                self._print(f"{error.get('event_id')}: {error.get('reason')}", 4)
        for warning in report["warnings"]:
            self._print(f"WARNING: {warning}", 2)

    def _slack(self, channels: Mapping[str, list[dict[str, Any]]]) -> None:
        if not any(channels.values()):
            self._print("Slack: nothing posted", 2)
        for channel, messages in channels.items():
            if not messages:
                continue
            label = "Slack webhook" if channel == WEBHOOK_CHANNEL else f"Slack #{channel}"
            self._print(f"{label} ({len(messages)} message{'s' if len(messages) != 1 else ''})", 2)
            for root in (m for m in messages if not m.get("thread_ts")):
                self._slack_thread(root, [m for m in messages if m.get("thread_ts") == root["ts"]])

    def _slack_thread(self, root: Mapping[str, Any], replies: Sequence[Mapping[str, Any]]) -> None:
        """A root message as it reads now (blocks as text), what it first said, then its thread."""
        edits = root.get("edits") or []
        self._print("+" + "-" * 78, 4)
        for line in _blocks_text(root) or [_message_text(root)]:
            self._print(f"| {line}", 4)
        if edits:
            self._print(f"| (edited {len(edits)}x; first posted as: {_readable(str(edits[0].get('text', '')))})", 4)
        for reply in replies:
            self._print(f"|   > {' / '.join(_blocks_text(reply)) or _message_text(reply)}", 4)
        self._print("+" + "-" * 78, 4)

    def _teams(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """The cards a Teams channel shows (what its stand-in accepted), each by its fallback text; nothing when the
        routing file names no Teams receiver."""
        if not messages:
            return
        self._print(f"Teams ({len(messages)} card{'s' if len(messages) != 1 else ''})", 2)
        for posted in messages:
            for card in posted.get("cards") or []:
                self._print(f"- {_readable(str(card.get('fallbackText', '')))}", 4)

    def _pagerduty(self, requests: Sequence[Mapping[str, Any]]) -> None:
        events = [r for r in requests if r["service"] == "pagerduty" and not r["fault"]]
        if not events:
            self._print("PagerDuty: no events", 2)
            return
        self._print(f"PagerDuty ({len(events)} event{'s' if len(events) != 1 else ''})", 2)
        for request in events:
            body: dict[str, Any] = request["body"] if isinstance(request["body"], dict) else {}
            payload: dict[str, Any] = body["payload"] if isinstance(body.get("payload"), dict) else {}
            # A change event (/v2/change/enqueue) has no action or severity: it never pages.
            action = body.get("event_action") or ("change" if request["path"].endswith("/change/enqueue") else "?")
            self._print(
                f"{action:<11} {payload.get('severity', ''):<8} "
                f"dedup_key={body.get('dedup_key')}  -> {request['status']} {request.get('effect', '')}",
                4,
            )
            if payload.get("summary"):
                self._print(str(payload["summary"]), 16)

    def _failed_requests(self, requests: Sequence[Mapping[str, Any]]) -> None:
        failed = [r for r in requests if r["fault"] or r["status"] >= 400 or _slack_not_ok(r)]
        if not failed:
            return
        self._print(f"Failed or refused requests ({len(failed)} of {len(requests)})", 2)
        for request in failed:
            why = "injected fault" if request["fault"] else _refusal(request)
            self._print(f"{request['service']} {request['path']} -> {request['status']} ({why})", 4)

    def _dead_letters(self, letters: Sequence[Mapping[str, Any]]) -> None:
        if not letters:
            self._print("Dead-letter queues: empty", 2)
            return
        self._print(f"Dead-letter queues ({len(letters)} message{'s' if len(letters) != 1 else ''})", 2)
        for letter in letters:
            body = letter["body"]
            event_id = body.get("id") if isinstance(body, dict) else None
            why = ", ".join(f"{k}={v}" for k, v in letter["message_attributes"].items())
            self._print(f"{letter['queue']}: event {event_id} {why}".rstrip(), 4)

    # --- Scenarios (python -m sandbox run) -----------------------------------------------------------

    def scenario(self, name: str, path: Path, description: str) -> None:
        self._print(f"Scenario: {name} ({path})")
        if description:
            self._print(description.strip(), 2)
        self._print()

    def seeded(self, world: Mapping[str, Any]) -> None:
        self._print()
        self._print("World")
        for instance in world["instances"].values():
            self._print(
                f"instance  {instance['name']:<12} {instance['ec2_instance_id']}  {instance['instance_type']}  "
                f"{instance['gpus']} GPUs  {instance['cluster']}/{instance['capacity_provider']}",
                2,
            )
        for task in world["tasks"].values():
            self._print(f"task      {task['name']:<12} on {task['instance']}  {_short(task['arn'])}", 2)
        for prefix, folders in world["checkpoints"].items():
            newest = folders[-1].removeprefix(prefix) if folders else "none complete"
            self._print(f"checkpoints {prefix}  ({len(folders)} complete, newest {newest})", 2)

    def step(self, number: int, label: str) -> None:
        self._print()
        self._print(f"== {number}. {label}")

    def delay(self, seconds: float, *, waited: bool) -> None:
        how = "waited: an execution or a trainer was running" if waited else "passed at once: nothing was running"
        self._print(f"({seconds:g} s later; {how})")

    def execution(self, summary: Mapping[str, Any]) -> None:
        history = summary["history"]
        waiting = summary["wall_seconds"] - summary["active_seconds"]
        self._print(
            f"execution {summary['name']} ({summary['rule']}): {summary['status']} in {summary['wall_seconds']:.1f} s "
            f"({summary['active_seconds']:.1f} s active, {waiting:.1f} s waiting)",
            4,
        )
        self._print(" > ".join(history["states_entered"]), 8)
        self._print(
            f"{history['lambda_invocations']} Lambda invocations, {history['state_transitions']} state transitions",
            8,
        )
        if summary.get("error"):
            self._print(f"error {summary['error']}: {summary.get('cause')}", 8)

    def cli(self, entry: Mapping[str, Any]) -> None:
        for line in str(entry["stdout"]).splitlines():
            self._print(line, 4)
        for line in str(entry["stderr"]).splitlines():
            self._print(f"stderr: {line}", 4)
        outcome = "as expected" if entry["passed"] else f"FAIL: expected {entry['expect_exit']}"
        self._print(f"exit {entry['exit_code']} ({outcome})", 4)

    def action(self, entry: Mapping[str, Any]) -> None:
        self._print(f"action {entry['action']}: {entry['outcome']}", 4)

    def ecs_view(self, ecs: Mapping[str, Any]) -> None:
        self._print()
        self._print("ECS at the end")
        for instance in ecs["instances"]:
            name = instance["name"] or _short(instance["container_instance_arn"])
            self._print(f"instance {name:<12} {instance['ec2_instance_id']}  {instance['status']}", 2)
        for task in ecs["tasks"]:
            name = task["name"] or f"({task['origin']})"
            where = task["instance"] or task["ec2_instance_id"] or "?"
            line = f"task {name:<14} job={task['job_id'] or '-'}  on {where}  {task['last_status']}"
            resume = {
                key: value
                for environment in task["environment"].values()
                for key, value in environment.items()
                if key.startswith("RESUME_")
            }
            if resume:
                line += "  " + " ".join(f"{key}={value}" for key, value in sorted(resume.items()))
            self._print(line, 2)
            if task["stopped_reason"]:
                self._print(f"stopped: {task['stopped_reason']}", 8)

    def training(self, runs: Sequence[Mapping[str, Any]]) -> None:
        """One line per run of an emulated trainer: the steps it trained, what it saved and answered, what was lost."""
        if not runs:
            return
        self._print()
        self._print("Training")
        for run in runs:
            line = f"{run['job']} run {run['run']}: steps {run['from_step']} -> {run['last_step']}"
            line += ", ended" if run["ended"] else ", training"
            saved = ", ".join(map(str, run["checkpoints"]))
            line += f"; checkpoints {saved}" if saved else "; no checkpoint"
            if run["answered"]:
                line += f"; answered {', '.join(run['answered'])}" + (" and held" if run["held"] else "")
            if run["ignored_requests"]:
                line += "; ignores requests"
            if run["steps_lost"] is not None:
                line += f"; {run['steps_lost']} steps lost to the next run"
            self._print(line, 2)

    def expectations(self, results: Sequence[Mapping[str, Any]]) -> None:
        self._print()
        held = sum(1 for result in results if result["passed"])
        self._print(f"Expectations: {held} of {len(results)} held")
        for result in results:
            self._print(f"{'ok  ' if result['passed'] else 'FAIL'} {result['name']}", 2)
            for problem in result["problems"]:
                self._print(problem, 7)

    def report_written(self, path: Path) -> None:
        self._print()
        self._print(f"Report: {path}")


def skipped_summary(types: Sequence[str]) -> str:
    """The resources the sandbox does not emulate, counted by type, most first (--verbose lists each)."""
    counts = Counter(types)
    by_type = ", ".join(
        f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )
    noun = "resource" if len(types) == 1 else "resources"
    return f"{len(types)} {noun} the sandbox does not emulate: {by_type} (--verbose lists them)"


def _event_line(event: Mapping[str, Any]) -> str:
    fields = (event.get("id") or "(no id)", event.get("detail-type") or "(no detail-type)", event.get("time"))
    return "event " + "  ".join(str(field) for field in fields if field)


def _message_text(message: Mapping[str, Any]) -> str:
    """The message's text, or its blocks' text when it has only blocks."""
    if message.get("text"):
        return str(message["text"])
    texts = []
    for block in message.get("blocks") or []:
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(text, dict) and text.get("text"):
            texts.append(str(text["text"]))
    return " / ".join(texts) or "(no text)"


_LINK = re.compile(r"<(?:!date\^[^|>]*|[^|>]*)\|([^>]*)>")


def _readable(text: str) -> str:
    """Slack mrkdwn as a person reads it: links and dates show their label, entities decoded."""
    text = _LINK.sub(r"\1", text).replace("*", "")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _blocks_text(message: Mapping[str, Any]) -> list[str]:
    """Header, sections and fields of a Block Kit message, one line per text."""
    lines: list[str] = []
    for block in message.get("blocks") or []:
        if not isinstance(block, dict):
            continue
        text = block.get("text")
        if isinstance(text, dict) and text.get("text"):
            lines.extend(_readable(str(text["text"])).splitlines())
        fields = [f for f in block.get("fields") or [] if isinstance(f, dict)]
        if fields:
            pairs = [_readable(str(f.get("text", ""))).replace("\n", ": ", 1) for f in fields]
            lines.extend("   ".join(pairs[i : i + 3]) for i in range(0, len(pairs), 3))
        elements = [element for element in block.get("elements") or [] if isinstance(element, dict)]
        buttons = [_button_label(element) for element in elements if element.get("type") == "button"]
        if buttons:
            lines.append(" ".join(f"[{label}]" for label in buttons))
        for element in elements:
            if element.get("type") != "button" and element.get("text"):
                lines.append(_readable(str(element["text"])))
    return lines


def _button_label(button: Mapping[str, Any]) -> str:
    """A button's label (its text object's text), as a person reads it."""
    text = button.get("text")
    label = text.get("text") if isinstance(text, dict) else text
    return _readable(str(label or button.get("action_id") or "?"))


def _slack_not_ok(request: Mapping[str, Any]) -> bool:
    response = request.get("response")
    return request["service"] == "slack" and isinstance(response, dict) and response.get("ok") is False


def _refusal(request: Mapping[str, Any]) -> str:
    response = request.get("response")
    if isinstance(response, dict):
        return str(response.get("error") or response.get("message") or response.get("status"))
    return str(response)
