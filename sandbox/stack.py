"""Deploy the template's resources into moto, the way CloudFormation would create the stack.

Each emulated resource type has a creator that turns the resolved Properties into moto API calls and
returns what `Ref` and `Fn::GetAtt` give for it. Functions are not created in moto: the sandbox runs
their handlers itself, so a function here is a `FunctionSpec` (code, handler, environment, event
sources). State machines are created in moto, whose interpreter executes them (`statemachine`).
Types the sandbox does not emulate are recorded as skipped, never silently dropped. To emulate a new
type, add a creator to `CREATORS`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError

from sandbox.aws import AwsClients
from sandbox.errors import SandboxError
from sandbox.function_url import FunctionUrl
from sandbox.statemachine import enable_interpreter, load_definition, parse_once, substitute
from sandbox.template import (
    ParameterValue,
    Resolver,
    StackIdentity,
    Template,
    TemplateError,
    check_rules,
    creation_order,
    rule_violations,
)


@dataclass(frozen=True)
class DeployedResource:
    """A resource as the stack knows it: its `Ref` value, its attributes and resolved properties."""

    logical_id: str
    resource_type: str
    ref: Any
    attributes: Mapping[str, Any] = field(default_factory=dict)
    properties: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedResource:
    """A template resource (or part of one) that the sandbox does not create, and why."""

    logical_id: str
    resource_type: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"logical_id": self.logical_id, "type": self.resource_type, "reason": self.reason}


@dataclass(frozen=True)
class SqsEventSource:
    """An SQS event source mapping (a function's `Events` entry of `Type: SQS`)."""

    name: str
    queue_logical_id: str
    queue_arn: str
    queue_url: str
    batch_size: int
    maximum_batching_window_seconds: int
    report_batch_item_failures: bool
    maximum_concurrency: int | None
    enabled: bool


@dataclass(frozen=True)
class FunctionSpec:
    """Everything needed to run one function's handler the way Lambda would."""

    logical_id: str
    name: str
    arn: str
    runtime: str
    handler: str
    code_dir: Path
    layer_dirs: tuple[Path, ...]
    timeout_seconds: int
    memory_size_mb: int
    environment: Mapping[str, str]
    sqs_sources: tuple[SqsEventSource, ...]
    function_url: FunctionUrl | None = None
    """Its function URL (`FunctionUrlConfig`), invoked in process (sandbox/function_url.py)."""


@dataclass(frozen=True)
class StateMachineSpec:
    """A state machine created in moto, with the definition it runs (substitutions applied)."""

    logical_id: str
    name: str
    arn: str
    type: str
    definition: str


@dataclass(frozen=True)
class RuleTarget:
    rule_logical_id: str
    target_id: str
    arn: str
    dead_letter_arn: str | None
    retry_policy: Mapping[str, Any] | None
    # Target settings that change what is delivered (Input, InputTransformer, SqsParameters, ...).
    delivery_options: tuple[str, ...] = ()

    @property
    def service(self) -> str:
        """The target type as the ARN names it (`sqs`, `states`, `lambda`, ...)."""
        return self.arn.split(":")[2]


_PLAIN_TARGET_KEYS = {"Id", "Arn", "DeadLetterConfig", "RetryPolicy", "RoleArn"}


@dataclass(frozen=True)
class RuleSpec:
    logical_id: str
    name: str
    arn: str
    event_bus: str
    pattern: Mapping[str, Any] | None
    enabled: bool
    targets: tuple[RuleTarget, ...]

    @classmethod
    def from_properties(cls, logical_id: str, properties: Mapping[str, Any], *, name: str, arn: str) -> RuleSpec:
        """A rule from its resolved AWS::Events::Rule properties."""
        pattern = properties.get("EventPattern")
        return cls(
            logical_id=logical_id,
            name=name,
            arn=arn,
            # EventBusName may be a name or an ARN (`arn:...:event-bus/<name>`).
            event_bus=str(properties.get("EventBusName", "default")).rsplit("/", 1)[-1],
            pattern=json.loads(pattern) if isinstance(pattern, str) else pattern,
            enabled=properties.get("State", "ENABLED") != "DISABLED",
            targets=tuple(
                RuleTarget(
                    rule_logical_id=logical_id,
                    target_id=str(target["Id"]),
                    arn=str(target["Arn"]),
                    dead_letter_arn=(target.get("DeadLetterConfig") or {}).get("Arn"),
                    retry_policy=target.get("RetryPolicy"),
                    delivery_options=tuple(sorted(set(target) - _PLAIN_TARGET_KEYS)),
                )
                for target in properties.get("Targets") or []
            ),
        )


@dataclass
class Stack:
    """The deployed stack: implements `ResourceAttributes` for the resolver while it is being built."""

    identity: StackIdentity
    template: Template
    parameters: Mapping[str, ParameterValue]
    resources: dict[str, DeployedResource] = field(default_factory=dict)
    skipped: list[SkippedResource] = field(default_factory=list)
    functions: dict[str, FunctionSpec] = field(default_factory=dict)
    rules: dict[str, RuleSpec] = field(default_factory=dict)
    state_machines: dict[str, StateMachineSpec] = field(default_factory=dict)

    def ref(self, logical_id: str) -> Any:
        return self._deployed(logical_id).ref

    def get_att(self, logical_id: str, attribute: str) -> Any:
        resource = self._deployed(logical_id)
        if attribute not in resource.attributes:
            raise TemplateError(
                f"Fn::GetAtt {logical_id}.{attribute}: not available in the sandbox ({resource.resource_type})"
            )
        return resource.attributes[attribute]

    def _deployed(self, logical_id: str) -> DeployedResource:
        if logical_id not in self.resources:
            raise TemplateError(f"{logical_id} is referenced before it was created")
        return self.resources[logical_id]

    def of_type(self, resource_type: str) -> list[DeployedResource]:
        return [resource for resource in self.resources.values() if resource.resource_type == resource_type]

    def queue_by_arn(self, arn: str) -> DeployedResource:
        for queue in self.of_type("AWS::SQS::Queue"):
            if queue.attributes["Arn"] == arn:
                return queue
        raise SandboxError(f"no queue with ARN {arn} in this stack")

    def dead_letter_queues(self) -> list[DeployedResource]:
        """Queues that some redrive policy or rule target names as its dead-letter queue."""
        arns = {
            queue.properties["RedrivePolicy"]["deadLetterTargetArn"]
            for queue in self.of_type("AWS::SQS::Queue")
            if "RedrivePolicy" in queue.properties
        }
        arns |= {
            target.dead_letter_arn for rule in self.rules.values() for target in rule.targets if target.dead_letter_arn
        }
        return [queue for queue in self.of_type("AWS::SQS::Queue") if queue.attributes["Arn"] in arns]


# --- Building ------------------------------------------------------------------------------------


class StackBuilder:
    """Creates resources one at a time, in dependency order, recording each into the `Stack`."""

    def __init__(
        self,
        template: Template,
        identity: StackIdentity,
        parameters: Mapping[str, ParameterValue],
        aws: AwsClients,
        creators: Mapping[str, ResourceCreator] | None = None,
    ) -> None:
        self.stack = Stack(identity, template, parameters)
        self.resolver = Resolver(template, identity, parameters, self.stack)
        self.aws = aws
        self.creators: Mapping[str, ResourceCreator] = {**CREATORS, **(creators or {})}

    def physical_name(self, logical_id: str, max_length: int, ending: str = "") -> str:
        """A name shaped like CloudFormation's `<stack>-<LogicalId>-<SUFFIX>`.

        The suffix is derived from the stack and logical id, not random, so reports from two runs
        can be compared line by line.
        """
        digest = hashlib.sha256(f"{self.stack.identity.name}/{logical_id}".encode()).digest()
        suffix = base64.b32encode(digest).decode()[:13]
        prefix = f"{self.stack.identity.name}-{logical_id}"[: max_length - len(suffix) - len(ending) - 1]
        return f"{prefix}-{suffix}{ending}"

    def arn(self, service: str, resource: str) -> str:
        identity = self.stack.identity
        return f"arn:{identity.partition}:{service}:{identity.region}:{identity.account_id}:{resource}"

    def build(self) -> Stack:
        template = self.stack.template
        for logical_id in creation_order(template):
            resource_type = template.resource_type(logical_id)
            if not self.resolver.is_enabled(logical_id):
                condition = template.resources[logical_id]["Condition"]
                self.skip(logical_id, resource_type, f"Condition {condition} is false")
                continue
            creator = self.creators.get(resource_type, _not_emulated)
            try:
                self.stack.resources[logical_id] = creator(self, logical_id)
            except (ClientError, ParamValidationError) as exc:
                raise SandboxError(f"creating {logical_id} ({resource_type}) in moto failed: {exc}") from exc
        return self.stack

    def skip(self, logical_id: str, resource_type: str, reason: str) -> None:
        self.stack.skipped.append(SkippedResource(logical_id, resource_type, reason))


ResourceCreator = Callable[[StackBuilder, str], DeployedResource]


SANDBOX_ALARM_TOPIC_NAME = "sandbox-on-call"
"""The SNS topic a sandbox deploy names as AlarmTopicArn when it names no one to hear the own-health alarms."""


def deploy_stack(
    template: Template,
    identity: StackIdentity,
    parameters: Mapping[str, ParameterValue],
    aws: AwsClients,
    creators: Mapping[str, ResourceCreator] | None = None,
) -> Stack:
    """Create the stack, after the template's Rules have accepted its parameters (as CloudFormation checks them).
    `creators` replace the sandbox's own for some types (forwarder.yaml's roles are created in IAM:
    sandbox/world.py)."""
    parameters = with_sandbox_subscriber(template, identity, parameters)
    check_rules(template, identity, parameters)
    return StackBuilder(template, identity, parameters, aws, creators).build()


def with_sandbox_subscriber(
    template: Template, identity: StackIdentity, parameters: Mapping[str, ParameterValue]
) -> Mapping[str, ParameterValue]:
    """The parameters, with the sandbox's example topic as AlarmTopicArn when the Rules refuse them for want of it.

    CloudFormation refuses a deploy whose own-health alarms reach no one; so would the sandbox, every scenario and
    replay included, though it creates no topic and evaluates no alarm (it replays their state changes). So a
    deploy that names no subscriber gets `arn:...:sns:<region>:<account>:sandbox-on-call` as its AlarmTopicArn,
    shown in the report's parameters (docs/alarms.md); one that fails a rule otherwise is still refused."""
    if parameters.get("AlarmTopicArn") != "" or not rule_violations(template, identity, parameters):
        return parameters
    topic = f"arn:{identity.partition}:sns:{identity.region}:{identity.account_id}:{SANDBOX_ALARM_TOPIC_NAME}"
    return {**parameters, "AlarmTopicArn": topic}


# --- Creators ------------------------------------------------------------------------------------

_QUEUE_ATTRIBUTES = (
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "KmsDataKeyReusePeriodSeconds",
    "KmsMasterKeyId",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
)


def _attribute_text(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _tags(properties: Mapping[str, Any]) -> dict[str, str]:
    return {str(tag["Key"]): str(tag["Value"]) for tag in properties.get("Tags") or []}


def _create_queue(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    fifo = str(properties.get("FifoQueue", "false")).lower() == "true"
    name = properties.get("QueueName") or builder.physical_name(logical_id, 80, ".fifo" if fifo else "")
    request: dict[str, Any] = {
        "QueueName": name,
        "Attributes": {key: _attribute_text(properties[key]) for key in _QUEUE_ATTRIBUTES if key in properties},
    }
    if tags := _tags(properties):
        request["tags"] = tags
    sqs = builder.aws.sqs
    url = sqs.create_queue(**request)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return DeployedResource(
        logical_id, "AWS::SQS::Queue", url, {"Arn": arn, "QueueName": name, "QueueUrl": url}, properties
    )


def _create_table(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    name = properties.get("TableName") or builder.physical_name(logical_id, 255)
    request: dict[str, Any] = {
        "TableName": name,
        "AttributeDefinitions": properties["AttributeDefinitions"],
        "KeySchema": properties["KeySchema"],
        "BillingMode": properties.get("BillingMode", "PROVISIONED"),
    }
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if key in properties:
            request[key] = properties[key]
    if "ProvisionedThroughput" in properties:
        request["ProvisionedThroughput"] = _integers(properties["ProvisionedThroughput"])
    if "StreamSpecification" in properties:
        request["StreamSpecification"] = {"StreamEnabled": True, **properties["StreamSpecification"]}
    if "SSESpecification" in properties:
        # CloudFormation spells the flag SSEEnabled; the API spells it Enabled.
        sse = dict(properties["SSESpecification"])
        request["SSESpecification"] = {"Enabled": sse.pop("SSEEnabled", False), **sse}
    if tags := _tags(properties):
        request["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
    dynamodb = builder.aws.dynamodb
    table = dynamodb.create_table(**request)["TableDescription"]
    ttl = properties.get("TimeToLiveSpecification") or {}
    if ttl.get("Enabled"):
        dynamodb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]}
        )
    attributes = {"Arn": table["TableArn"]}
    if "LatestStreamArn" in table:
        attributes["StreamArn"] = table["LatestStreamArn"]
    return DeployedResource(logical_id, "AWS::DynamoDB::Table", name, attributes, properties)


def _create_rule(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    name = properties.get("Name") or builder.physical_name(logical_id, 64)
    partial = RuleSpec.from_properties(logical_id, properties, name=name, arn="")
    bus = partial.event_bus
    request: dict[str, Any] = {"Name": name, "EventBusName": bus, "State": properties.get("State", "ENABLED")}
    if partial.pattern is not None:
        request["EventPattern"] = json.dumps(partial.pattern)
    for key in ("Description", "ScheduleExpression", "RoleArn"):
        if key in properties:
            request[key] = properties[key]
    if properties.get("Tags"):
        request["Tags"] = [{"Key": str(tag["Key"]), "Value": str(tag["Value"])} for tag in properties["Tags"]]
    events = builder.aws.events
    arn = events.put_rule(**request)["RuleArn"]
    targets = [_api_target(target) for target in properties.get("Targets") or []]
    if targets:
        failed = events.put_targets(Rule=name, EventBusName=bus, Targets=targets).get("FailedEntries")
        if failed:
            raise SandboxError(f"{logical_id}: moto rejected targets {failed}")
    builder.stack.rules[logical_id] = dataclasses.replace(partial, arn=arn)
    ref = name if bus == "default" else f"{bus}|{name}"
    return DeployedResource(logical_id, "AWS::Events::Rule", ref, {"Arn": arn}, properties)


def _create_event_bus(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """A custom event bus (the organization's): created in moto so that rules can be put on it; what reaches it and
    what its rules match is the sandbox's (sandbox/eventbridge.py)."""
    properties = builder.resolver.properties(logical_id)
    name = str(properties["Name"])
    arn = builder.aws.events.create_event_bus(Name=name)["EventBusArn"]
    return DeployedResource(logical_id, "AWS::Events::EventBus", name, {"Arn": arn, "Name": name}, properties)


def _record_bus_policy(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """An event bus policy is not enforced: the sandbox puts another account's events on the bus itself, as that
    account's forwarder would (sandbox/eventbridge.py). Whom it admits is tested on the template
    (tests/unit/test_template_organization.py)."""
    properties = builder.resolver.properties(logical_id)
    builder.skip(logical_id, "AWS::Events::EventBusPolicy", "not enforced: the sandbox does not evaluate IAM")
    return DeployedResource(
        logical_id, "AWS::Events::EventBusPolicy", str(properties.get("StatementId", logical_id)), {}, properties
    )


def _integers(values: Mapping[str, Any]) -> dict[str, int]:
    # A number that came through a parameter (`!Ref`) is a string; the API wants an integer.
    return {key: int(value) for key, value in values.items()}


def _api_target(target: Mapping[str, Any]) -> dict[str, Any]:
    api_target = dict(target)
    if "RetryPolicy" in api_target:
        api_target["RetryPolicy"] = _integers(api_target["RetryPolicy"])
    return api_target


def _register_layer(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    content_uri = properties.get("ContentUri")
    if not isinstance(content_uri, str):
        raise SandboxError(f"{logical_id}: only a local ContentUri directory can be emulated, got {content_uri!r}")
    content_dir = builder.stack.template.base_dir / content_uri
    # `sam build` lays a Python layer out under python/ (Lambda mounts it at /opt/python); the source
    # tree is built from ContentUri itself.
    import_dir = content_dir / "python" if (content_dir / "python").is_dir() else content_dir
    name = properties.get("LayerName") or builder.physical_name(logical_id, 140)
    arn = builder.arn("lambda", f"layer:{name}:1")
    builder.skip(
        logical_id,
        "AWS::Serverless::LayerVersion",
        f"not created in moto; {import_dir} is put on the import path of the functions that use it",
    )
    return DeployedResource(
        logical_id, "AWS::Serverless::LayerVersion", arn, {"ImportDir": str(import_dir)}, properties
    )


def _register_function(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    name = properties.get("FunctionName") or builder.physical_name(logical_id, 64)
    arn = builder.arn("lambda", f"function:{name}")
    code_uri = properties.get("CodeUri")
    if not isinstance(code_uri, str):
        raise SandboxError(f"{logical_id}: only a local CodeUri directory can be emulated, got {code_uri!r}")
    builder.stack.functions[logical_id] = FunctionSpec(
        logical_id=logical_id,
        name=name,
        arn=arn,
        runtime=str(properties.get("Runtime", "")),
        handler=str(properties["Handler"]),
        code_dir=builder.stack.template.base_dir / code_uri,
        layer_dirs=tuple(_layer_dir(builder, logical_id, layer) for layer in properties.get("Layers") or []),
        timeout_seconds=int(properties.get("Timeout", 3)),
        memory_size_mb=int(properties.get("MemorySize", 128)),
        environment={
            key: _environment_text(value)
            for key, value in ((properties.get("Environment") or {}).get("Variables") or {}).items()
        },
        sqs_sources=_event_sources(builder, logical_id, properties.get("Events") or {}),
        function_url=_function_url(builder, logical_id, properties.get("FunctionUrlConfig")),
    )
    return DeployedResource(logical_id, "AWS::Serverless::Function", name, {"Arn": arn}, properties)


def _function_url(builder: StackBuilder, logical_id: str, config: Any) -> FunctionUrl | None:
    if not isinstance(config, Mapping):
        return None
    url_id = builder.physical_name(f"{logical_id}Url", 32).lower().replace("_", "-")
    return FunctionUrl(logical_id, url_id, builder.stack.identity.region, str(config.get("AuthType", "AWS_IAM")))


def _environment_text(value: Any) -> str:
    if isinstance(value, list | dict):
        raise SandboxError(f"environment variable value {value!r} is not a string")
    return _attribute_text(value)


def _layer_dir(builder: StackBuilder, function_id: str, layer_arn: str) -> Path:
    for layer in builder.stack.of_type("AWS::Serverless::LayerVersion"):
        if layer.ref == layer_arn:
            return Path(layer.attributes["ImportDir"])
    raise SandboxError(f"{function_id}: layer {layer_arn} is not defined in this template, so it cannot be emulated")


def _event_sources(
    builder: StackBuilder, function_id: str, events: Mapping[str, Mapping[str, Any]]
) -> tuple[SqsEventSource, ...]:
    sources = []
    for name, event in events.items():
        if event.get("Type") != "SQS":
            builder.skip(f"{function_id}.Events.{name}", f"{event.get('Type')} event", "event source not emulated")
            continue
        properties = event.get("Properties") or {}
        queue = builder.stack.queue_by_arn(str(properties["Queue"]))
        sources.append(
            SqsEventSource(
                name=name,
                queue_logical_id=queue.logical_id,
                queue_arn=queue.attributes["Arn"],
                queue_url=queue.ref,
                batch_size=int(properties.get("BatchSize", 10)),
                maximum_batching_window_seconds=int(properties.get("MaximumBatchingWindowInSeconds", 0)),
                report_batch_item_failures="ReportBatchItemFailures" in (properties.get("FunctionResponseTypes") or []),
                maximum_concurrency=_optional_int((properties.get("ScalingConfig") or {}).get("MaximumConcurrency")),
                enabled=str(properties.get("Enabled", True)).lower() == "true",
            )
        )
    return tuple(sources)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _create_state_machine(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """AWS::Serverless::StateMachine or AWS::StepFunctions::StateMachine, executed by moto's interpreter."""
    # moto's interpreter (and with it moto's Batch and EC2, 0.6 CPU-seconds to import) is loaded by a stack that has a
    # workflow.
    parse_once()
    resource_type = builder.stack.template.resource_type(logical_id)
    properties = builder.resolver.properties(logical_id)
    name = properties.get("Name") or properties.get("StateMachineName") or builder.physical_name(logical_id, 80)
    definition = substitute(
        logical_id,
        load_definition(logical_id, properties, builder.stack.template.base_dir),
        properties.get("DefinitionSubstitutions") or {},
    )
    machine_type = str(properties.get("Type") or properties.get("StateMachineType") or "STANDARD")
    identity = builder.stack.identity
    # SAM creates a role from Policies when there is no Role; moto only needs some role ARN.
    role = (
        properties.get("Role")
        or properties.get("RoleArn")
        or f"arn:{identity.partition}:iam::{identity.account_id}:role/{name}"
    )
    enable_interpreter(builder.aws.endpoint_url)
    request: dict[str, Any] = {"name": name, "definition": definition, "roleArn": role, "type": machine_type}
    if tags := _state_machine_tags(properties):
        request["tags"] = tags
    try:
        arn = builder.aws.client("stepfunctions").create_state_machine(**request)["stateMachineArn"]
    except ClientError as exc:
        # moto's interpreter parses the definition here: a grammar error is the definition's, not moto's.
        raise SandboxError(f"{logical_id}: the state machine definition was rejected: {exc}") from exc
    for event_name, event in (properties.get("Events") or {}).items():
        builder.skip(f"{logical_id}.Events.{event_name}", f"{event.get('Type')} event", "event source not emulated")
    builder.stack.state_machines[logical_id] = StateMachineSpec(logical_id, name, arn, machine_type, definition)
    return DeployedResource(logical_id, resource_type, arn, {"Arn": arn, "Name": name}, properties)


def _state_machine_tags(properties: Mapping[str, Any]) -> list[dict[str, str]]:
    tags = properties.get("Tags") or {}
    if isinstance(tags, dict):  # SAM: a map; CloudFormation: a list of {Key, Value}
        return [{"key": str(key), "value": str(value)} for key, value in tags.items()]
    return [{"key": str(tag["Key"]), "value": str(tag["Value"])} for tag in tags]


def _record_role(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """An IAM role is named, not created: the sandbox does not enforce IAM, but rule targets name their role."""
    properties = builder.resolver.properties(logical_id)
    name = properties.get("RoleName") or builder.physical_name(logical_id, 64)
    identity = builder.stack.identity
    arn = f"arn:{identity.partition}:iam::{identity.account_id}:role{properties.get('Path', '/')}{name}"
    builder.skip(logical_id, "AWS::IAM::Role", "not created: the sandbox does not enforce IAM")
    return DeployedResource(logical_id, "AWS::IAM::Role", name, {"Arn": arn}, properties)


def _record_log_group(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """A log group is named, not created: the sandbox captures what functions log itself."""
    properties = builder.resolver.properties(logical_id)
    name = properties.get("LogGroupName") or builder.physical_name(logical_id, 512)
    arn = builder.arn("logs", f"log-group:{name}:*")
    builder.skip(logical_id, "AWS::Logs::LogGroup", "not created: the report carries each invocation's logs")
    return DeployedResource(logical_id, "AWS::Logs::LogGroup", name, {"Arn": arn}, properties)


def _not_emulated(builder: StackBuilder, logical_id: str) -> DeployedResource:
    """A stand-in so `Ref` to the resource still resolves to a name; its attributes are unavailable."""
    resource_type = builder.stack.template.resource_type(logical_id)
    builder.skip(logical_id, resource_type, "resource type not emulated by the sandbox")
    return DeployedResource(logical_id, resource_type, builder.physical_name(logical_id, 255))


CREATORS: dict[str, ResourceCreator] = {
    "AWS::SQS::Queue": _create_queue,
    "AWS::DynamoDB::Table": _create_table,
    "AWS::Events::Rule": _create_rule,
    "AWS::Events::EventBus": _create_event_bus,
    "AWS::Events::EventBusPolicy": _record_bus_policy,
    "AWS::Serverless::LayerVersion": _register_layer,
    "AWS::Serverless::Function": _register_function,
    "AWS::Serverless::StateMachine": _create_state_machine,
    "AWS::StepFunctions::StateMachine": _create_state_machine,
    "AWS::IAM::Role": _record_role,
    "AWS::Logs::LogGroup": _record_log_group,
}


@contextlib.contextmanager
def layer_on_path(stack: Stack) -> Iterator[None]:
    """The stack's layer code importable (the sandbox reads the table with the layer's own code).

    Appended, not prepended: a layer built for the Lambda runtime carries third-party packages compiled
    for that interpreter (pydantic_core for 3.13, say), and the host's own installed copies must win."""
    added = [
        str(layer.attributes["ImportDir"])
        for layer in stack.of_type("AWS::Serverless::LayerVersion")
        if str(layer.attributes.get("ImportDir")) not in sys.path
    ]
    sys.path.extend(added)
    try:
        yield
    finally:
        for path in added:
            if path in sys.path:
                sys.path.remove(path)
