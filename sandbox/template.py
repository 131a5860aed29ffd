"""Load a SAM/CloudFormation template and resolve it the way CloudFormation does.

The sandbox builds the stack from template.yaml itself, never from a hand-kept copy, so a change to
the template is what the sandbox runs. This module knows the parts of the template language the
stack uses: short-form tags, parameters (defaults, overrides, constraints), Rules, Conditions, intrinsic
functions, pseudo parameters, AWS::NoValue, and SAM's Globals. Resource attributes (a queue's URL,
a rule's ARN) come from whoever creates the resources, through `ResourceAttributes`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import yaml

from sandbox.errors import SandboxError


class TemplateError(SandboxError):
    """The template, or a parameter given for it, is not something CloudFormation would accept."""


# --- Loading ---------------------------------------------------------------------------------------


# libyaml's parser when PyYAML has it (ten times quicker on template.yaml, which the sandbox reads for every run);
# the same safe constructors either way.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TemplateLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe YAML loader that also reads CloudFormation's short-form tags (`!Ref X` and friends)."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix == "GetAtt" and isinstance(value, str):
        # `!GetAtt Res.Attr.Sub` names attribute `Attr.Sub` of `Res`.
        value = value.split(".", 1)
    key = tag_suffix if tag_suffix in ("Ref", "Condition") else f"Fn::{tag_suffix}"
    return {key: value}


_TemplateLoader.add_multi_constructor("!", _construct_intrinsic)


@dataclass(frozen=True)
class Template:
    """A parsed template and the directory its relative paths (CodeUri, ContentUri) start from."""

    path: Path
    body: Mapping[str, Any]

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def parameters(self) -> Mapping[str, Mapping[str, Any]]:
        return self.body.get("Parameters") or {}

    @property
    def conditions(self) -> Mapping[str, Any]:
        return self.body.get("Conditions") or {}

    @property
    def rules(self) -> Mapping[str, Mapping[str, Any]]:
        return self.body.get("Rules") or {}

    @property
    def resources(self) -> Mapping[str, Mapping[str, Any]]:
        resources: Mapping[str, Mapping[str, Any]] = self.body["Resources"]
        return resources

    def resource_type(self, logical_id: str) -> str:
        return str(self.resources[logical_id]["Type"])

    def merged_properties(self, logical_id: str) -> dict[str, Any]:
        """The resource's Properties with SAM Globals applied, intrinsics still unresolved."""
        resource = self.resources[logical_id]
        properties = dict(resource.get("Properties") or {})
        resource_type = str(resource["Type"])
        for section, section_values in (self.body.get("Globals") or {}).items():
            if resource_type == f"AWS::Serverless::{section}":
                properties = merge_globals(section_values, properties)
        return properties


def load_template(path: Path) -> Template:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read template {path}: {exc.strerror}") from exc
    try:
        body = yaml.load(text, Loader=_TemplateLoader)  # nosec B506  # a SafeLoader subclass (adds tags only)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("Resources"), dict):
        raise TemplateError(f"{path} is not a CloudFormation template (no Resources section)")
    return Template(path.resolve(), body)


# --- SAM Globals -----------------------------------------------------------------------------------


def _is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = next(iter(value))
    return key in ("Ref", "Condition") or key.startswith("Fn::")


def merge_globals(global_value: Any, local_value: Any) -> Any:
    """SAM's Globals rule: maps merge, lists concatenate (globals first), otherwise the resource wins.

    An intrinsic function counts as a single value, not as a map to merge into.
    """
    if isinstance(global_value, list) and isinstance(local_value, list):
        return [*global_value, *local_value]
    if not (isinstance(global_value, dict) and isinstance(local_value, dict)):
        return local_value
    if _is_intrinsic(global_value) or _is_intrinsic(local_value):
        return local_value
    merged = dict(global_value)
    for key, value in local_value.items():
        merged[key] = merge_globals(global_value[key], value) if key in global_value else value
    return merged


# --- Parameters ------------------------------------------------------------------------------------

ParameterValue = str | list[str]

_LONG_FORM_OVERRIDE = re.compile(r"^ParameterKey=([^,]+),ParameterValue=(.*)$")


def parse_parameter_overrides(tokens: Iterable[str]) -> dict[str, str]:
    """Read `Key=Value` tokens (or SAM's `ParameterKey=K,ParameterValue=V`) as sam deploy does."""
    overrides: dict[str, str] = {}
    for token in tokens:
        long_form = _LONG_FORM_OVERRIDE.match(token)
        if long_form:
            key, value = long_form.group(1), long_form.group(2)
        else:
            key, separator, value = token.partition("=")
            if not separator or not key:
                raise TemplateError(f"parameter override {token!r} is not Key=Value")
        overrides[key] = value
    return overrides


def resolve_parameters(template: Template, overrides: Mapping[str, str]) -> dict[str, ParameterValue]:
    """Each declared parameter's value: the override, else the default, checked like CloudFormation."""
    declared = template.parameters
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise TemplateError(
            f"unknown parameter {', '.join(unknown)}; {template.path.name} declares: {', '.join(sorted(declared))}"
        )
    values: dict[str, ParameterValue] = {}
    for name, spec in declared.items():
        if name in overrides:
            raw = overrides[name]
        elif "Default" in spec:
            raw = _scalar_text(spec["Default"])
        else:
            raise TemplateError(f"parameter {name} has no default: pass --parameter-overrides {name}=...")
        values[name] = _typed_parameter(name, spec, raw)
    return values


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _typed_parameter(name: str, spec: Mapping[str, Any], raw: str) -> ParameterValue:
    parameter_type = str(spec.get("Type", "String"))
    is_list = parameter_type == "CommaDelimitedList" or parameter_type.startswith("List<")
    # CloudFormation trims each member of a comma-delimited list.
    items = [item.strip() for item in raw.split(",")] if is_list else [raw]
    numeric = parameter_type in ("Number", "List<Number>")
    for item in items:
        _check_parameter_constraints(name, spec, item, numeric=numeric and item != "")
    return items if is_list else raw


def _check_parameter_constraints(name: str, spec: Mapping[str, Any], value: str, *, numeric: bool) -> None:
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in [_scalar_text(v) for v in allowed]:
        raise TemplateError(f"parameter {name}={value!r} is not one of {', '.join(map(str, allowed))}")
    pattern = spec.get("AllowedPattern")
    if pattern is not None and not re.fullmatch(str(pattern), value):
        raise TemplateError(f"parameter {name}={value!r} does not match AllowedPattern {pattern}")
    if "MinLength" in spec and len(value) < int(spec["MinLength"]):
        raise TemplateError(f"parameter {name} is shorter than MinLength {spec['MinLength']}")
    if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
        raise TemplateError(f"parameter {name} is longer than MaxLength {spec['MaxLength']}")
    if not numeric:
        return
    try:
        number = float(value)
    except ValueError:
        raise TemplateError(f"parameter {name}={value!r} is not a number") from None
    if "MinValue" in spec and number < float(spec["MinValue"]):
        raise TemplateError(f"parameter {name}={value} is below MinValue {spec['MinValue']}")
    if "MaxValue" in spec and number > float(spec["MaxValue"]):
        raise TemplateError(f"parameter {name}={value} is above MaxValue {spec['MaxValue']}")


# --- Resolution ------------------------------------------------------------------------------------


class ResourceAttributes(Protocol):
    """Where `Ref` and `Fn::GetAtt` on a resource find their values (filled as resources are created)."""

    def ref(self, logical_id: str) -> Any: ...

    def get_att(self, logical_id: str, attribute: str) -> Any: ...


@dataclass(frozen=True)
class StackIdentity:
    """The stack name, account and Region the pseudo parameters (AWS::Region, ...) resolve to."""

    name: str
    region: str = "us-east-1"
    account_id: str = "123456789012"

    @property
    def partition(self) -> str:
        if self.region.startswith("cn-"):
            return "aws-cn"
        if self.region.startswith("us-gov-"):
            return "aws-us-gov"
        return "aws"

    @property
    def stack_id(self) -> str:
        stable = uuid.uuid5(uuid.NAMESPACE_URL, f"{self.account_id}/{self.region}/{self.name}")
        return f"arn:{self.partition}:cloudformation:{self.region}:{self.account_id}:stack/{self.name}/{stable}"

    def pseudo_parameters(self) -> dict[str, Any]:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": self.partition,
            "AWS::StackName": self.name,
            "AWS::StackId": self.stack_id,
            "AWS::URLSuffix": "amazonaws.com.cn" if self.partition == "aws-cn" else "amazonaws.com",
            "AWS::NotificationARNs": [],
        }


class _NoValue:
    """`AWS::NoValue`: the property (or list item) it stands in is removed."""

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Final = _NoValue()

_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


class Resolver:
    """Resolves intrinsic functions and conditions for one stack."""

    def __init__(
        self,
        template: Template,
        identity: StackIdentity,
        parameters: Mapping[str, ParameterValue],
        attributes: ResourceAttributes,
    ) -> None:
        self.template = template
        self.identity = identity
        self.parameters = dict(parameters)
        self._attributes = attributes
        self._pseudo = identity.pseudo_parameters()
        self._conditions: dict[str, bool] = {}
        self._functions: dict[str, Callable[[Any], Any]] = {
            "Ref": self._ref,
            "Condition": self.condition,
            "Fn::GetAtt": self._get_att,
            "Fn::Sub": self._sub,
            "Fn::Join": self._join,
            "Fn::Split": self._split,
            "Fn::Select": self._select,
            "Fn::If": self._if,
            "Fn::Equals": self._equals,
            "Fn::Not": self._not,
            "Fn::And": self._and,
            "Fn::Or": self._or,
        }

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            if name not in self.template.conditions:
                raise TemplateError(f"unknown condition {name}")
            self._conditions[name] = _truth(self.resolve(self.template.conditions[name]), f"condition {name}")
        return self._conditions[name]

    def is_enabled(self, logical_id: str) -> bool:
        """False when the resource's Condition is false, as CloudFormation then does not create it."""
        condition = self.template.resources[logical_id].get("Condition")
        return condition is None or self.condition(str(condition))

    def properties(self, logical_id: str) -> dict[str, Any]:
        """The resource's Properties, Globals merged and every intrinsic resolved."""
        return dict(self.resolve(self.template.merged_properties(logical_id)))

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in map(self.resolve, value) if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            function = self._functions.get(key)
            # `Ref`/`Condition` are also ordinary keys (an IAM statement's Condition): only a name is a call.
            if function is not None and (key not in ("Ref", "Condition") or isinstance(argument, str)):
                return function(argument)
            if key.startswith("Fn::") and function is None:
                raise TemplateError(f"{key} is not supported by the sandbox")
        resolved = {key: self.resolve(item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not NO_VALUE}

    # Each function takes its argument as written in the template.

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.parameters:
            return self.parameters[name]
        if name in self._pseudo:
            return self._pseudo[name]
        self._require_resource(name, "Ref")
        return self._attributes.ref(name)

    def _get_att(self, argument: Any) -> Any:
        if isinstance(argument, str):
            argument = argument.split(".", 1)
        if not (isinstance(argument, list) and len(argument) == 2):
            raise TemplateError(f"Fn::GetAtt needs [Resource, Attribute], got {argument!r}")
        logical_id, attribute = str(argument[0]), str(self.resolve(argument[1]))
        self._require_resource(logical_id, "Fn::GetAtt")
        return self._attributes.get_att(logical_id, attribute)

    def _require_resource(self, logical_id: str, function: str) -> None:
        if logical_id not in self.template.resources:
            raise TemplateError(f"{function} {logical_id}: no such parameter or resource")
        if not self.is_enabled(logical_id):
            raise TemplateError(f"{function} {logical_id}: the resource's Condition is false, so it does not exist")

    def _sub(self, argument: Any) -> str:
        if isinstance(argument, str):
            text, variables = argument, {}
        elif isinstance(argument, list) and len(argument) == 2 and isinstance(argument[1], dict):
            text, variables = argument[0], {key: self.resolve(value) for key, value in argument[1].items()}
        else:
            raise TemplateError(f"Fn::Sub needs a string or [string, {{variables}}], got {argument!r}")

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                value = variables[name]
            elif "." in name and name not in self.parameters and name not in self._pseudo:
                value = self._get_att(name.split(".", 1))
            else:
                value = self._ref(name)
            return _sub_text(name, value)

        return _SUB_VARIABLE.sub(substitute, str(text))

    def _join(self, argument: Any) -> str:
        delimiter, items = _arguments(argument, 2, "Fn::Join")
        values = self.resolve(items)
        if not isinstance(values, list):
            raise TemplateError(f"Fn::Join needs a list to join, got {values!r}")
        return str(delimiter).join(_scalar_text(value) for value in values)

    def _split(self, argument: Any) -> list[str]:
        delimiter, source = _arguments(argument, 2, "Fn::Split")
        return str(self.resolve(source)).split(str(delimiter))

    def _select(self, argument: Any) -> Any:
        index, items = _arguments(argument, 2, "Fn::Select")
        values = self.resolve(items)
        position = int(self.resolve(index))
        if not isinstance(values, list) or not 0 <= position < len(values):
            raise TemplateError(f"Fn::Select index {position} is out of range for {values!r}")
        return values[position]

    def _if(self, argument: Any) -> Any:
        name, when_true, when_false = _arguments(argument, 3, "Fn::If")
        return self.resolve(when_true if self.condition(str(name)) else when_false)

    def _equals(self, argument: Any) -> bool:
        left, right = (self.resolve(value) for value in _arguments(argument, 2, "Fn::Equals"))
        return bool(_comparable(left) == _comparable(right))

    def _not(self, argument: Any) -> bool:
        (value,) = _arguments(argument, 1, "Fn::Not")
        return not _truth(self.resolve(value), "Fn::Not")

    def _and(self, argument: Any) -> bool:
        return all(_truth(self.resolve(value), "Fn::And") for value in _condition_list(argument, "Fn::And"))

    def _or(self, argument: Any) -> bool:
        return any(_truth(self.resolve(value), "Fn::Or") for value in _condition_list(argument, "Fn::Or"))


def _arguments(argument: Any, count: int, function: str) -> Sequence[Any]:
    if not isinstance(argument, list) or len(argument) != count:
        raise TemplateError(f"{function} needs a list of {count} arguments, got {argument!r}")
    return argument


def _condition_list(argument: Any, function: str) -> list[Any]:
    if not isinstance(argument, list) or not 2 <= len(argument) <= 10:
        raise TemplateError(f"{function} needs a list of 2 to 10 conditions, got {argument!r}")
    return argument


def _truth(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TemplateError(f"{where} must be true or false, got {value!r}")
    return bool(value)


def _comparable(value: Any) -> Any:
    return _scalar_text(value) if isinstance(value, str | int | float | bool) else value


def _sub_text(name: str, value: Any) -> str:
    if isinstance(value, list | dict) or value is NO_VALUE:
        raise TemplateError(f"Fn::Sub variable ${{{name}}} is not a string: {value!r}")
    return _scalar_text(value)


# --- Rules ---------------------------------------------------------------------------------------


class _ParametersOnly:
    """What a rule's `Ref` finds beyond the parameters: nothing, as CloudFormation checks Rules before any resource
    exists."""

    def ref(self, logical_id: str) -> Any:
        raise TemplateError(f"a rule refers to resource {logical_id}: Rules may refer to parameters only")

    def get_att(self, logical_id: str, attribute: str) -> Any:
        raise TemplateError(f"a rule refers to {logical_id}.{attribute}: Rules may refer to parameters only")


def rule_violations(template: Template, identity: StackIdentity, parameters: Mapping[str, ParameterValue]) -> list[str]:
    """The AssertDescription of each assertion of the template's Rules that these parameters fail.

    CloudFormation checks them before it creates or updates anything and refuses the change set with that
    description. A rule whose RuleCondition is false asserts nothing. The rule functions the sandbox knows are the
    condition functions (Fn::Equals, Fn::Not, Fn::And, Fn::Or) and Ref; any other is refused by name."""
    resolver = Resolver(template, identity, parameters, _ParametersOnly())
    failed: list[str] = []
    for name, rule in template.rules.items():
        condition = rule.get("RuleCondition")
        if condition is not None and not _truth(resolver.resolve(condition), f"rule {name}'s RuleCondition"):
            continue
        for assertion in rule.get("Assertions") or []:
            if not _truth(resolver.resolve(assertion["Assert"]), f"rule {name}'s Assert"):
                failed.append(str(assertion.get("AssertDescription") or f"rule {name} is not satisfied"))
    return failed


def check_rules(template: Template, identity: StackIdentity, parameters: Mapping[str, ParameterValue]) -> None:
    """Refuse parameters that the template's Rules refuse, with their AssertDescription, as CloudFormation does."""
    failed = rule_violations(template, identity, parameters)
    if failed:
        raise TemplateError(f"{template.path.name}'s Rules refuse these parameters: {' '.join(failed)}")


# --- Dependencies ----------------------------------------------------------------------------------


def _referenced_names(value: Any) -> set[str]:
    """Every name a value refers to through Ref, Fn::GetAtt or Fn::Sub (parameters included)."""
    names: set[str] = set()
    if isinstance(value, list):
        for item in value:
            names |= _referenced_names(item)
    elif isinstance(value, dict):
        for key, argument in value.items():
            if key == "Ref" and isinstance(argument, str):
                names.add(argument)
            elif key == "Fn::GetAtt":
                target = argument.split(".", 1)[0] if isinstance(argument, str) else argument[0]
                names.add(str(target))
            elif key == "Fn::Sub":
                text = argument if isinstance(argument, str) else argument[0]
                local = set(argument[1]) if isinstance(argument, list) else set()
                names |= {
                    match.split(".", 1)[0] for match in _SUB_VARIABLE.findall(str(text)) if not match.startswith("!")
                } - local
                if isinstance(argument, list):
                    names |= _referenced_names(argument[1])
            else:
                names |= _referenced_names(argument)
    return names


def resource_dependencies(template: Template, logical_id: str) -> set[str]:
    """The resources this one needs created first: what it references, plus its DependsOn."""
    resource = template.resources[logical_id]
    depends_on = resource.get("DependsOn") or []
    explicit = {depends_on} if isinstance(depends_on, str) else set(depends_on)
    missing = explicit - set(template.resources)
    if missing:
        raise TemplateError(f"{logical_id} DependsOn unknown resource {', '.join(sorted(missing))}")
    implicit = _referenced_names(template.merged_properties(logical_id)) & set(template.resources)
    return (implicit | explicit) - {logical_id}


def creation_order(template: Template) -> list[str]:
    """Resources in an order where each comes after everything it depends on (template order otherwise)."""
    pending = {logical_id: resource_dependencies(template, logical_id) for logical_id in template.resources}
    ordered: list[str] = []
    while pending:
        ready = [logical_id for logical_id, needs in pending.items() if not needs - set(ordered)]
        if not ready:
            raise TemplateError(f"circular dependency between {', '.join(sorted(pending))}")
        for logical_id in ready:
            ordered.append(logical_id)
            del pending[logical_id]
    return ordered
