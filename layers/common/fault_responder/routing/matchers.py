"""Labels and label matchers, as Alertmanager writes them: silences and inhibition rules select with these.

Every incident and notice has the same label names (LABEL_NAMES); a label with no value is the empty string,
so `xid=""` selects what has no XID and `xid!=""` what has one. A matcher is `name=value`, `name!=value`,
`name=~regex` or `name!~regex`; a regular expression must match the whole value (it is anchored, as in
Alertmanager). A value may be written in double quotes (`comment="a, b"`), with `\\"` and `\\\\` escapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fault_responder.core.domain import Alert, Incident, InstanceRef, Where

LABEL_NAMES = (
    "kind",
    "cluster",
    "capacity_provider",
    "instance",
    "ec2_instance",
    "check_type",
    "xid",
    "severity",
    "fault_class",
    "drain_attribution",
    "fleet",
    "drill",
    "account",
    "account_name",
    "region",
)
"""`instance` is the container instance id (the last part of its ARN); `fleet` is "true" on a fleet incident;
`drill` is "true" on what a drill reported (source fault-responder.drill, docs/drills.md), "false" otherwise;
`account` and `region` are where it happened (the event's, as EventBridge set them), `account_name` that account's
name in organization mode (AccountNames, else AWS Organizations; empty when neither tells it, and in a
single-account stack)."""
MAX_VALUE = 256
_MATCHER = re.compile(r"^\s*(?P<name>[a-z_]+)\s*(?P<op>=~|!~|!=|=)\s*(?P<value>.*?)\s*$", re.DOTALL)

Labels = Mapping[str, str]


class MatcherError(ValueError):
    """A matcher that cannot be read; the message says which and why."""


class Op(StrEnum):
    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: Op
    value: str

    def __post_init__(self) -> None:
        if self.name not in LABEL_NAMES:
            raise MatcherError(f"unknown label {self.name!r}; labels are {', '.join(LABEL_NAMES)}")
        if len(self.value) > MAX_VALUE:
            raise MatcherError(f"the value for {self.name!r} is longer than {MAX_VALUE} characters")
        if self.op in (Op.REGEX, Op.NOT_REGEX):
            try:
                re.compile(self.value)
            except re.error as error:
                raise MatcherError(f"{self.name}{self.op}{self.value!r}: not a regular expression ({error})") from None

    def matches(self, labels: Labels) -> bool:
        value = labels.get(self.name, "")
        if self.op == Op.EQUAL:
            return value == self.value
        if self.op == Op.NOT_EQUAL:
            return value != self.value
        found = _compiled(self.value).fullmatch(value) is not None
        return found if self.op == Op.REGEX else not found

    def __str__(self) -> str:
        return f"{self.name}{self.op.value}{_quoted(self.value)}"


def parse_matcher(text: str) -> Matcher:
    """`name=value`, `name!=value`, `name=~regex` or `name!~regex`."""
    found = _MATCHER.match(text)
    if found is None:
        raise MatcherError(f"{text!r} is not a matcher: write name=value, name!=value, name=~regex or name!~regex")
    return Matcher(found["name"], Op(found["op"]), _unquoted(found["value"], text))


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    return tuple(parse_matcher(text) for text in texts)


def matches_all(matchers: Iterable[Matcher], labels: Labels) -> bool:
    return all(matcher.matches(labels) for matcher in matchers)


def incident_labels(incident: Incident) -> dict[str, str]:
    classification = incident.classification
    return {
        "kind": incident.kind.value,
        "cluster": incident.instance.cluster_name,
        "capacity_provider": incident.instance.capacity_provider or "",
        "instance": incident.instance.container_instance_id,
        "ec2_instance": incident.instance.ec2_instance_id or "",
        "check_type": incident.check_type,
        "xid": "" if classification.xid is None else str(classification.xid),
        "severity": classification.severity.value,
        "fault_class": classification.fault_class.value,
        "drain_attribution": incident.drain.cause.value if incident.drain else "",
        "fleet": "false",
        "drill": flag(incident.instance.drill),
        **where_labels(incident.instance, incident.where),
    }


def alert_labels(alert: Alert) -> dict[str, str]:
    return {
        "kind": alert.kind.value,
        "cluster": alert.instance.cluster_name,
        "capacity_provider": alert.instance.capacity_provider or "",
        "instance": alert.instance.container_instance_id,
        "ec2_instance": alert.instance.ec2_instance_id or "",
        "check_type": "",
        "xid": "",
        "severity": alert.severity.value,
        "fault_class": alert.fault_class.value,
        "drain_attribution": alert.drain.cause.value if alert.drain else "",
        "fleet": "false",
        "drill": flag(alert.instance.drill),
        **where_labels(alert.instance, alert.where),
    }


def where_labels(instance: InstanceRef, where: Where | None) -> dict[str, str]:
    """`account`, `account_name` and `region` of what happened on `instance` (its `where` names the account)."""
    return {
        "account": instance.account,
        "account_name": where.name if where is not None else "",
        "region": instance.region,
    }


def flag(value: bool) -> str:
    """A yes/no label's value (`fleet`, `drill`)."""
    return "true" if value else "false"


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _CACHE.get(pattern)
    if compiled is None:
        compiled = _CACHE.setdefault(pattern, re.compile(pattern))
    return compiled


def _unquoted(value: str, text: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        if re.search(r'(?<!\\)(?:\\\\)*"', inner):
            raise MatcherError(f'{text!r}: a quote inside a quoted value must be written \\"')
        return re.sub(r"\\(.)", r"\1", inner)
    if '"' in value:
        raise MatcherError(f"{text!r}: quote the whole value, or none of it")
    return value


def _quoted(value: str) -> str:
    if value and re.fullmatch(r"[A-Za-z0-9_.:/@+-]*", value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
