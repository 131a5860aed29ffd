"""The default event bus: every rule's pattern evaluated with EventBridge's exact semantics, and
matched events delivered to the rules' targets the way EventBridge delivers them.

A stack with a bus of its own (template.yaml's organization mode, docs/organization.md) has its rules on that bus: a
rule of the default bus that targets it (LocalEventsForwardRule) puts the event there, one hop, and that bus's rules
match it. An event of another account or Region goes where it happened:

- With a world of accounts (`with_members`: forwarder.yaml deployed in each member account and Region), onto that
  account and Region's default bus, whose rules (the forwarder's) match it with the same engine; a target that is the
  stack's bus delivers it there in one hop, its account and Region kept, if the bus policy admits the sender (its
  statement evaluated as EventBridge does for the account: the principal, aws:PrincipalOrgID). A refused delivery
  fails as EventBridge's would (AccessDeniedException) and goes to the rule's dead-letter queue, in the member account.
  An account or Region with no forwarder there sends nothing. An event put on the stack's bus by another account's
  PutEvents (`put_from`) is that account's (EventBridge sets `account` to the sender's), refused for a source of
  AWS's (`aws.*`) and admitted only as the bus policy says.
- Without one (`python -m sandbox replay`), straight onto the stack's bus, as its forwarder would send it there,
  without its filter or the bus policy (so the router's refusal of an account or Region that is not enrolled can be
  shown).

moto's own matcher differs from AWS (arrays of objects never match, unknown operators match
everything: see docs/sandbox.md#eventbridge-pattern-matching) and its PutEvents replaces the event's id,
time and account, so the sandbox does not publish through moto. It evaluates patterns with the rule engine from the
`localstack-core` package (a test-only dependency) and delivers to the targets itself, through a
deliverer per target type: SQS queues and Step Functions state machines. To deliver to a new target
type, add a `TargetDeliverer` for its ARN's service.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sandbox.aws import AwsClients
from sandbox.errors import SandboxError
from sandbox.stack import RuleSpec, RuleTarget, Stack


def _without_localstack_api() -> None:
    """Let localstack's rule engine be imported without localstack's API layer.

    The engine takes one name from `localstack.aws.api.events`: the exception it raises for a pattern EventBridge
    would reject. Importing that module imports the package around it (every service's API types, localstack's client
    factory and its HTTP framework): about 0.3 CPU-seconds in every sandbox command, for nothing the sandbox
    runs. Unless some other code has already imported it, the name is served by a module holding only that
    exception. A later localstack whose engine takes more from it fails at import, naming what is missing.
    """
    name = "localstack.aws.api.events"
    if name not in sys.modules:
        module = types.ModuleType(name, "InvalidEventPatternException alone (sandbox/eventbridge.py)")
        module.InvalidEventPatternException = type(  # type: ignore[attr-defined]
            "InvalidEventPatternException", (Exception,), {"__module__": name}
        )
        sys.modules[name] = module


_without_localstack_api()
from localstack.aws.api.events import InvalidEventPatternException  # noqa: E402
from localstack.services.events.event_rule_engine import EventPatternCompiler, EventRuleEngine  # noqa: E402


class DeliveryFailed(Exception):
    """A target refused the event; `code` is the AWS error code EventBridge records in the DLQ."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class TargetDeliverer(Protocol):
    def deliver(self, event_json: str, target: RuleTarget) -> None:
        """Hand the event to the target, or raise DeliveryFailed."""


class SqsTargetDeliverer:
    """An SQS target receives the event JSON, unchanged, as the message body."""

    def __init__(self, aws: AwsClients) -> None:
        self._aws = aws

    def deliver(self, event_json: str, target: RuleTarget) -> None:
        send_to_queue_arn(self._aws, target.arn, event_json)


class StatesTargetDeliverer:
    """A state machine target starts an execution with the event JSON, unchanged, as its input.

    EventBridge names the execution itself (a generated id); `on_start` hears of every execution
    started, so the caller can wait for it.
    """

    def __init__(self, aws: AwsClients, on_start: Callable[[str, RuleTarget], None]) -> None:
        self._aws = aws
        self._on_start = on_start

    def deliver(self, event_json: str, target: RuleTarget) -> None:
        try:
            started = self._aws.client("stepfunctions").start_execution(
                stateMachineArn=target.arn, name=str(uuid.uuid4()), input=event_json
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DeliveryFailed(str(error.get("Code", "Unknown")), str(error.get("Message", exc))) from exc
        self._on_start(started["executionArn"], target)


_queue_urls: dict[tuple[str, str, str], str] = {}


def _queue_url(aws: AwsClients, queue_arn: str) -> str:
    """GetQueueUrl, asked once per queue and endpoint: moto's URL names only the endpoint, the account and the queue
    (a SendMessage to a queue deleted since fails as GetQueueUrl would: NonExistentQueue, same message)."""
    key = (aws.endpoint_url, aws.region, queue_arn)
    if key not in _queue_urls:
        _, _, _, _, account_id, queue_name = queue_arn.split(":", 5)
        _queue_urls[key] = aws.sqs.get_queue_url(QueueName=queue_name, QueueOwnerAWSAccountId=account_id)["QueueUrl"]
    return _queue_urls[key]


def send_to_queue_arn(aws: AwsClients, queue_arn: str, body: str, attributes: Mapping[str, str] | None = None) -> None:
    try:
        url = _queue_url(aws, queue_arn)
        request: dict[str, Any] = {"QueueUrl": url, "MessageBody": body}
        if attributes:
            request["MessageAttributes"] = {
                name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()
            }
        aws.sqs.send_message(**request)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise DeliveryFailed(str(error.get("Code", "Unknown")), str(error.get("Message", exc))) from exc


@dataclass(frozen=True)
class TargetDelivery:
    target: RuleTarget
    delivered: bool
    error: str | None = None
    dead_lettered: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.target.rule_logical_id,
            "target_id": self.target.target_id,
            "type": self.target.service,
            "arn": self.target.arn,
            "delivered": self.delivered,
            "error": self.error,
            "dead_lettered": self.dead_lettered,
        }


@dataclass(frozen=True)
class BusDelivery:
    """What happened to one event on the bus."""

    matched_rules: list[str]
    targets: list[TargetDelivery]
    event: Mapping[str, Any] | None = None
    """The event as the bus saw it, when EventBridge made it another than the one put (PutEvents by another account:
    its `account` and `region`)."""


Place = tuple[str, str]
"""(account, Region)."""


@dataclass(frozen=True)
class BusPolicy:
    """A bus's resource policy statements (AWS::Events::EventBusPolicy), evaluated for a PutEvents of another account
    as far as the stack's policy uses them: Allow, events:PutEvents on the bus, the principal ("*" or accounts), and
    StringEquals on aws:PrincipalOrgID. Anything else is refused as not understood, never admitted."""

    bus_arn: str
    statements: tuple[Mapping[str, Any], ...]
    organization_of: Callable[[str], str | None]
    """An account -> the id of the organization it belongs to (None: none)."""

    def refusal(self, account: str) -> str | None:
        """Why a PutEvents of `account` onto the bus is refused; None when a statement allows it."""
        for statement in self.statements:
            if self._allows(statement, account):
                return None
        return (
            f"User: arn:aws:iam::{account}:root is not authorized to perform: events:PutEvents on resource: "
            f"{self.bus_arn} because no resource-based policy allows the events:PutEvents action"
        )

    def _allows(self, statement: Mapping[str, Any], account: str) -> bool:
        actions = _listed(statement.get("Action"))
        if statement.get("Effect") != "Allow" or not {"events:PutEvents", "events:*"} & set(actions):
            return False
        if self.bus_arn not in _listed(statement.get("Resource")):
            return False
        principal = statement.get("Principal")
        if principal != "*":
            named = _listed(principal.get("AWS") if isinstance(principal, Mapping) else None)
            if account not in named and f"arn:aws:iam::{account}:root" not in named:
                return False
        context = {"aws:PrincipalOrgID": self.organization_of(account), "aws:PrincipalAccount": account}
        for operator, keys in (statement.get("Condition") or {}).items():
            if operator != "StringEquals" or not set(keys) <= set(context):
                raise SandboxError(f"the sandbox does not evaluate the bus policy condition {operator} {sorted(keys)}")
            if any(context[key] not in _listed(values) for key, values in keys.items()):
                return False
        return True


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


@dataclass(frozen=True)
class _RemoteBus:
    """Another account's bus a rule may target (the stack's, from a member's forwarder), and who it admits."""

    bus: EventBus
    policy: BusPolicy


@dataclass(frozen=True)
class _CompiledRule:
    spec: RuleSpec
    pattern: dict[str, Any]


class RuleMatcher:
    """The enabled rules of one event bus, compiled once and evaluated with EventBridge's semantics."""

    def __init__(self, rules: Iterable[RuleSpec], bus: str = "default") -> None:
        self._engine = EventRuleEngine()
        self.rules = [
            _compile(rule) for rule in rules if rule.event_bus == bus and rule.enabled and rule.pattern is not None
        ]

    def matching_rules(self, event: Mapping[str, Any]) -> list[RuleSpec]:
        return [rule.spec for rule in self.rules if self._engine.evaluate_pattern_on_event(rule.pattern, dict(event))]


class EventBus:
    """One event bus of the stack: matches events to rules and delivers them to the rules' targets.

    The default bus also holds the stack's other buses: a rule's target that is one of them is delivered there (the
    one hop EventBridge makes: what a bus received from another is not sent on to a third)."""

    def __init__(
        self,
        stack: Stack,
        aws: AwsClients,
        deliverers: Mapping[str, TargetDeliverer],
        name: str = "default",
        *,
        remote: Mapping[str, _RemoteBus] | None = None,
        label: Place | None = None,
    ) -> None:
        self.name = name
        self._stack = stack
        self._label = f"{label[0]}/{label[1]}/" if label is not None else ""
        """How the report names this bus's rules: a member's with its account and Region."""
        self.matcher = RuleMatcher(stack.rules.values(), name)
        self._aws = aws
        self._deliverers = dict(deliverers)
        self._identity = (stack.identity.account_id, stack.identity.region)
        self._buses: dict[str, EventBus] = {}
        self._remote: dict[str, _RemoteBus] = dict(remote or {})
        self._members: dict[Place, EventBus] | None = None
        self._policy: BusPolicy | None = None
        if name == "default":
            self._buses = {
                str(bus.attributes["Arn"]): EventBus(stack, aws, deliverers, str(bus.attributes["Name"]))
                for bus in stack.of_type("AWS::Events::EventBus")
            }
        self._check_target_types()

    def with_members(
        self, forwarders: Mapping[Place, tuple[Stack, AwsClients]], organization_of: Callable[[str], str | None]
    ) -> EventBus:
        """The world's other accounts: each account and Region's default bus with its forwarder's rules, delivering
        to this stack's bus as its policy admits (`organization_of` says which organization an account is in). An
        event of an account or Region with no forwarder reaches nothing from now on."""
        if len(self._buses) != 1:
            raise SandboxError(f"other accounts' forwarders need the stack's bus, and it has {len(self._buses)}")
        [(arn, bus)] = self._buses.items()
        self._policy = BusPolicy(arn, _policy_statements(self._stack), organization_of)
        target = _RemoteBus(bus, self._policy)
        self._members = {
            place: EventBus(stack, aws, {"sqs": SqsTargetDeliverer(aws)}, remote={arn: target}, label=place)
            for place, (stack, aws) in forwarders.items()
        }
        return self

    @classmethod
    def default(cls, stack: Stack, aws: AwsClients) -> EventBus:
        return cls(stack, aws, {"sqs": SqsTargetDeliverer(aws)})

    def _check_target_types(self) -> None:
        unsupported = sorted(
            f"{rule.spec.logical_id}/{target.target_id} ({target.service})"
            for rule in self.matcher.rules
            for target in rule.spec.targets
            if target.service not in self._deliverers and target.arn not in {*self._buses, *self._remote}
        )
        if unsupported:
            # `replay` delivers to queues only; `run` also executes state machine targets.
            hint = " (python -m sandbox run executes state machines)" if "states" not in self._deliverers else ""
            raise SandboxError(
                f"rule targets of a type the sandbox does not deliver to: {', '.join(unsupported)}{hint}"
            )
        reshaped = sorted(
            f"{rule.spec.logical_id}/{target.target_id} ({', '.join(target.delivery_options)})"
            for rule in self.matcher.rules
            for target in rule.spec.targets
            if target.delivery_options
        )
        if reshaped:
            raise SandboxError(f"rule target settings the sandbox does not emulate: {', '.join(reshaped)}")

    def matching_rules(self, event: Mapping[str, Any]) -> list[RuleSpec]:
        return self.matcher.matching_rules(event)

    def put_event(self, event: Mapping[str, Any]) -> BusDelivery:
        """The event as it happens in the stack's account and Region (onto the default bus), or, from another account
        or Region of a stack with a bus of its own, where it happened (its forwarder sends it on: `with_members`), or
        without a world of accounts, straight onto that bus as its forwarder would send it."""
        place = (str(event.get("account")), str(event.get("region")))
        if self._buses and place != self._identity:
            if self._members is not None:
                member = self._members.get(place)
                return member.put_event(event) if member is not None else BusDelivery([], [])
            if len(self._buses) != 1:
                raise SandboxError(f"an event of another account or Region, and {len(self._buses)} buses to put it on")
            return next(iter(self._buses.values())).put_event(event)
        matched = self.matching_rules(event)
        # EventBridge sends compact JSON, keys in the order the event has them.
        event_json = json.dumps(event, separators=(",", ":"))
        rules = [f"{self._label}{rule.logical_id}" for rule in matched]
        deliveries: list[TargetDelivery] = []
        for rule in matched:
            for target in (self._labelled(target) for target in rule.targets):
                if target.arn in self._buses:
                    onward = self._buses[target.arn].put_event(event)
                    deliveries.append(TargetDelivery(target, True))
                    rules += onward.matched_rules
                    deliveries += onward.targets
                elif target.arn in self._remote:
                    onward = self._put_remote(event_json, event, rule, target)
                    rules += onward.matched_rules
                    deliveries += onward.targets
                else:
                    deliveries.append(self._deliver(event_json, rule, target))
        return BusDelivery(rules, deliveries)

    def _labelled(self, target: RuleTarget) -> RuleTarget:
        if not self._label:
            return target
        return dataclasses.replace(target, rule_logical_id=f"{self._label}{target.rule_logical_id}")

    def put_from(self, sender: str, event: Mapping[str, Any]) -> BusDelivery:
        """The event put on the stack's bus by `sender`'s PutEvents: EventBridge makes it the sender's (`account`) and
        the bus Region's, refuses a source reserved for AWS, and the bus policy decides whether it is admitted. A
        refused PutEvents delivers nothing (the sender's call fails: the report shows the error on an `events`
        target)."""
        if len(self._buses) != 1:
            raise SandboxError(f"a PutEvents onto the stack's bus, and it has {len(self._buses)} buses")
        [(arn, bus)] = self._buses.items()
        sent = {**event, "account": sender, "region": arn.split(":")[3]}
        put = RuleTarget("PutEvents", f"from-{sender}", arn, None, None)
        if str(sent.get("source", "")).startswith("aws."):
            why = f"NotAuthorizedForSourceException: Not authorized for the source {sent.get('source')}"
            return BusDelivery([], [TargetDelivery(put, False, why)], sent)
        if sender != self._identity[0]:
            policy = self._policy or BusPolicy(arn, _policy_statements(self._stack), lambda account: None)
            refused = policy.refusal(sender)
            if refused is not None:
                return BusDelivery([], [TargetDelivery(put, False, f"AccessDeniedException: {refused}")], sent)
        onward = bus.put_event(sent)
        return BusDelivery(onward.matched_rules, [TargetDelivery(put, True), *onward.targets], sent)

    def _put_remote(self, event_json: str, event: Mapping[str, Any], rule: RuleSpec, target: RuleTarget) -> BusDelivery:
        """A member's rule delivering to the stack's bus: admitted as its policy says for this account, else failed
        as EventBridge fails it (AccessDeniedException) and dead-lettered here, in the member account."""
        remote = self._remote[target.arn]
        refused = remote.policy.refusal(self._identity[0])
        if refused is not None:
            failure = DeliveryFailed("AccessDeniedException", refused)
            dead = self._dead_letter(event_json, rule, target, failure)
            return BusDelivery([], [TargetDelivery(target, False, str(failure), dead)])
        onward = remote.bus.put_event(event)
        return BusDelivery(onward.matched_rules, [TargetDelivery(target, True), *onward.targets])

    def _deliver(self, event_json: str, rule: RuleSpec, target: RuleTarget) -> TargetDelivery:
        try:
            self._deliverers[target.service].deliver(event_json, target)
        except DeliveryFailed as failure:
            # The sandbox has no clock to retry against, and the failures it can meet (a missing
            # queue, say) are ones EventBridge does not retry either: straight to the target's DLQ.
            return TargetDelivery(target, False, str(failure), self._dead_letter(event_json, rule, target, failure))
        return TargetDelivery(target, True)

    def _dead_letter(self, event_json: str, rule: RuleSpec, target: RuleTarget, failure: DeliveryFailed) -> bool:
        if target.dead_letter_arn is None:
            return False
        # The message attributes EventBridge puts on a dead-lettered event.
        attributes = {
            "RULE_ARN": rule.arn,
            "TARGET_ARN": target.arn,
            "ERROR_CODE": failure.code,
            "ERROR_MESSAGE": failure.message,
            "RETRY_ATTEMPTS": "0",
        }
        try:
            send_to_queue_arn(self._aws, target.dead_letter_arn, event_json, attributes)
        except DeliveryFailed:
            return False
        return True


def _policy_statements(stack: Stack) -> tuple[Mapping[str, Any], ...]:
    """The statements of the stack's event bus policies (AWS::Events::EventBusPolicy: one `Statement` each)."""
    statements: list[Mapping[str, Any]] = []
    for policy in stack.of_type("AWS::Events::EventBusPolicy"):
        statement = policy.properties.get("Statement")
        if isinstance(statement, Mapping):
            statements.append(statement)
        elif isinstance(statement, list):
            statements.extend(item for item in statement if isinstance(item, Mapping))
    return tuple(statements)


def _compile(rule: RuleSpec) -> _CompiledRule:
    try:
        pattern = EventPatternCompiler().compile_event_pattern(  # type: ignore[no-untyped-call]
            dict(rule.pattern or {})
        )
    except InvalidEventPatternException as exc:
        raise SandboxError(f"{rule.logical_id}: EventBridge would reject its EventPattern: {exc}") from exc
    return _CompiledRule(rule, pattern)
