"""A scenario's `expect:` block checked against the run's report, by data alone (docs/scenarios.md).

An expectation selects the items of one collection, keeps those whose fields match `where`, then
checks how many there are (`count`) and that every one matches `each`. Fields are dotted paths into
an item (`environment.trainer.RESUME_FROM`); `*` stands for every member of an object or list, and
then every member must match. A value to match is a literal, or an object of operators (`contains`,
`matches`, `in`, `not`, ...). The collections are the report's sections, with Slack, PagerDuty and Teams
flattened to one item per message or request, and the signed webhook to one item per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sandbox.errors import SandboxError
from sandbox.scenario import Count, Expectation

_MISSING = object()
INCIDENT_METADATA = "gpu_fault_incident"
"""The metadata event type of an incident's root message (fault_responder.notification.delivery)."""
FLEET_MARK = "fleet:"
"""How a fleet incident's id begins (fault_responder.noise.fleet): `fleet:<its dedup key>@<when it opened>`."""
_SHOWN_PROBLEMS = 3


# --- Collections -----------------------------------------------------------------------------------


def collections(report: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every collection an expectation can select, from a scenario report."""
    instance_names = {
        instance["container_instance_arn"]: instance["name"]
        for instance in report.get("world", {}).get("instances", {}).values()
    }
    ecs = report.get("ecs") or {}
    return {
        "events": list(report.get("events", [])),
        "executions": list(report.get("executions", [])),
        "tasks": list(ecs.get("tasks", [])),
        "instances": list(ecs.get("instances", [])),
        "run_task_requests": list(ecs.get("run_task_requests", [])),
        "slack": slack_messages(report.get("slack", {}), instance_names),
        "pagerduty": pagerduty_requests(report.get("requests", [])),
        "teams": teams_messages(report.get("teams", [])),
        "webhook": webhook_requests(report.get("requests", [])),
        "workflow_invocations": list(report.get("workflow_invocations", [])),
        "invocations": list(report.get("invocations", [])),
        "incidents": list(report.get("incidents", [])),
        "dlq": list(report.get("dlq", [])),
        "errors": list(report.get("errors", [])),
        "actions": list(report.get("actions", [])),
        "ephemeral": list(report.get("ephemeral", [])),
        "cli": list(report.get("cli", [])),
        "clicks": list(report.get("clicks", [])),
        "webhooks": list(report.get("webhooks", [])),
        "alerts": pagerduty_alerts(report.get("pagerduty", [])),
        "training": list(report.get("training", [])),
        "ledgers": list(report.get("ledgers", [])),
    }


def slack_messages(
    channels: Mapping[str, Sequence[Mapping[str, Any]]], instance_names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """One item per Slack message: channel, ts, thread_ts, reply, text (with every text of its blocks),
    `incident`: the instance (by scenario name) whose incident thread the message is in, or starts, and `fleet`: the
    fleet incident (its dedup key, `fleet/cluster/provider/check`) whose thread it is in, or starts. A root names its
    incident in its metadata (`cluster/container-instance-id/check-type@opened`, a fleet's `fleet:<dedup key>@...`)."""
    by_instance_id = {arn.rsplit("/", 1)[-1]: name for arn, name in instance_names.items()}
    threads: dict[str, tuple[str | None, str | None, str | None]] = {}
    for posted in channels.values():
        for message in posted:
            metadata = message.get("metadata") or {}
            incident = str((metadata.get("event_payload") or {}).get("id", ""))
            if metadata.get("event_type") != INCIDENT_METADATA or not incident or message.get("thread_ts"):
                continue
            fingerprint = incident.split("@", 1)[0]
            if fingerprint.startswith(FLEET_MARK):
                dedup_key = fingerprint.removeprefix(FLEET_MARK)
                threads[str(message["ts"])] = (None, dedup_key.rsplit("/", 1)[-1], dedup_key)
                continue
            _, instance_id, check = [*fingerprint.split("/"), "", "", ""][:3]
            threads[str(message["ts"])] = (by_instance_id.get(instance_id, instance_id), check, None)
    messages = []
    for channel, posted in channels.items():
        for message in posted:
            root = message.get("thread_ts") or message["ts"]
            thread_owner, check_type, fleet = threads.get(str(root), (None, None, None))
            texts = [message.get("text") or "", *block_texts(message.get("blocks") or [])]
            messages.append(
                {
                    "channel": channel,
                    "ts": message["ts"],
                    "thread_ts": message.get("thread_ts"),
                    "reply": bool(message.get("thread_ts")),
                    "text": "\n".join(text for text in texts if text),
                    "incident": thread_owner,
                    "fleet": fleet,
                    "check_type": check_type,
                    "edits": len(message.get("edits") or []),
                }
            )
    return messages


def block_texts(value: Any) -> Iterable[str]:
    """The texts of Slack blocks (every `text` string, in order), without their types and other fields."""
    if isinstance(value, list):
        for item in value:
            yield from block_texts(item)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key == "text" and isinstance(item, str):
                yield item
            else:
                yield from block_texts(item)


def pagerduty_requests(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One item per request to PagerDuty: kind (alert|change), action, severity, summary, dedup_key, status."""
    items = []
    for request in requests:
        if request.get("service") != "pagerduty":
            continue
        body = request["body"] if isinstance(request.get("body"), dict) else {}
        payload = body["payload"] if isinstance(body.get("payload"), dict) else {}
        change = str(request.get("path", "")).endswith("/change/enqueue")
        items.append(
            {
                "kind": "change" if change else "alert",
                "action": "change" if change else body.get("event_action"),
                "severity": payload.get("severity"),
                "summary": payload.get("summary"),
                "dedup_key": body.get("dedup_key"),
                "custom_details": payload.get("custom_details"),
                "status": request.get("status"),
                "fault": request.get("fault"),
            }
        )
    return items


def teams_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One item per message the Teams stand-in accepted (so each passed the Adaptive Card schema and Teams' size
    limit): `size` (the body's bytes), `cards` (how many), `text` (every text of its cards: TextBlocks, facts' titles
    and values, actions' titles), `fallback` (the cards' fallback texts)."""
    return [
        {
            "size": message.get("size"),
            "cards": len(message.get("cards") or []),
            "text": "\n".join(_card_texts(message.get("cards") or [])),
            "fallback": "\n".join(str(card.get("fallbackText", "")) for card in message.get("cards") or []),
        }
        for message in messages
    ]


def _card_texts(value: Any) -> Iterable[str]:
    if isinstance(value, list):
        for item in value:
            yield from _card_texts(item)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key in ("text", "title", "value") and isinstance(item, str):
                yield item
            elif key != "fallbackText":
                yield from _card_texts(item)


def webhook_requests(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One item per request to the signed webhook's consumer: status (200 when the stand-in found the signature and
    the Alertmanager v4 payload valid), endpoint, and of the payload: `group_status` (firing, resolved), `alertname`
    and `incident` (its groupLabels), `change` and `summary` (its first alert's annotations), `alerts` (how many),
    `truncated_alerts`, `receiver`, fault."""
    items = []
    for request in requests:
        if request.get("service") != "webhook":
            continue
        body = _object(request.get("body"))
        group = _object(body.get("groupLabels"))
        listed = body.get("alerts")
        alerts: list[Any] = listed if isinstance(listed, list) else []
        annotations = _object(_object(alerts[0] if alerts else None).get("annotations"))
        items.append(
            {
                "status": request.get("status"),
                "endpoint": str(request.get("path", "")).rsplit("/", 1)[-1],
                "group_status": body.get("status"),
                "alertname": group.get("alertname"),
                "incident": group.get("incident"),
                "change": annotations.get("change"),
                "summary": annotations.get("summary"),
                "alerts": len(alerts),
                "truncated_alerts": body.get("truncatedAlerts"),
                "receiver": body.get("receiver"),
                "fault": request.get("fault"),
            }
        )
    return items


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pagerduty_alerts(alerts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One item per PagerDuty alert at the end: number (PagerDuty's incident number: the alerts in the order they
    opened, from 1), dedup_key, status (triggered, acknowledged, resolved), summary, severity, assignees, and
    `actions`: what happened to it, in order (the Events API's trigger, acknowledge and resolve; acknowledged,
    unacknowledged, resolved and reassigned when someone did it in PagerDuty)."""
    return [
        {
            "number": alert.get("number"),
            "dedup_key": alert.get("dedup_key"),
            "status": alert.get("status"),
            "summary": alert.get("summary"),
            "severity": alert.get("severity"),
            "assignees": list(alert.get("assignees") or []),
            "actions": [entry.get("action") for entry in alert.get("log") or []],
        }
        for alert in alerts
    ]


# --- Checking --------------------------------------------------------------------------------------


def check(expectations: Sequence[Expectation], report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each expectation with whether it held and, when not, what was found instead."""
    available = collections(report)
    return [_check(expectation, available[expectation.select]) for expectation in expectations]


def _check(expectation: Expectation, items: Sequence[Any]) -> dict[str, Any]:
    selected = [
        item for item in items if all(field_matches(item, path, spec) for path, spec in expectation.where.items())
    ]
    problems: list[str] = []
    count = expectation.count
    if count is None and not expectation.each:
        count = Count(min=1)
    if count is not None and not _count_ok(len(selected), count):
        problems.append(f"{len(selected)} selected, expected {_count_text(count)}")
    for item in selected:
        for path, spec in expectation.each.items():
            if not field_matches(item, path, spec):
                problems.append(
                    f"{_label(item)}: {path} is {_shown(values_at(item, path))}, expected {_spec_text(spec)}"
                )
    if expectation.each and not selected and count is None:
        problems.append("nothing selected to check `each` against")
    return {
        "name": expectation.name or _default_name(expectation),
        "select": expectation.select,
        "passed": not problems,
        "selected": len(selected),
        "problems": problems[:_SHOWN_PROBLEMS]
        + ([f"... and {len(problems) - _SHOWN_PROBLEMS} more"] if len(problems) > _SHOWN_PROBLEMS else []),
    }


def _count_ok(found: int, count: int | Count) -> bool:
    if isinstance(count, int):
        return found == count
    return (count.min is None or found >= count.min) and (count.max is None or found <= count.max)


def _count_text(count: int | Count) -> str:
    if isinstance(count, int):
        return str(count)
    if count.min is not None and count.max is not None:
        return f"{count.min} to {count.max}"
    return f"at least {count.min}" if count.min is not None else f"at most {count.max}"


def _default_name(expectation: Expectation) -> str:
    where = ", ".join(f"{path}={_spec_text(spec)}" for path, spec in expectation.where.items())
    return f"{expectation.select}" + (f" where {where}" if where else "")


def _label(item: Any) -> str:
    if isinstance(item, Mapping):
        for key in ("name", "arn", "ts", "function", "summary"):
            if item.get(key):
                return str(item[key])
    return _shown(item)


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "missing"
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else f"{text[:197]}..."


def _spec_text(spec: Any) -> str:
    return json.dumps(spec, default=str) if not isinstance(spec, str) else repr(spec)


# --- Paths and matchers ----------------------------------------------------------------------------


def values_at(item: Any, path: str) -> Any:
    """The value at a dotted path; with `*` segments, the list of every value reached (or _MISSING)."""
    if path in ("", "."):
        return item
    current: list[Any] = [item]
    wildcard = False
    for segment in path.split("."):
        reached: list[Any] = []
        for value in current:
            if segment == "*":
                wildcard = True
                reached.extend(
                    value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else []
                )
            elif isinstance(value, Mapping) and segment in value:
                reached.append(value[segment])
            elif isinstance(value, list) and segment.lstrip("-").isdigit() and -len(value) <= int(segment) < len(value):
                reached.append(value[int(segment)])
        current = reached
    if wildcard:
        return current if current else _MISSING
    return current[0] if current else _MISSING


def field_matches(item: Any, path: str, spec: Any) -> bool:
    found = values_at(item, path)
    if "*" in path.split("."):
        return found is not _MISSING and all(matches(value, spec) for value in found)
    return matches(found, spec)


def matches(actual: Any, spec: Any) -> bool:
    """Whether a value matches a spec: a literal (scalars equal as text when their types differ), or operators."""
    if isinstance(spec, Mapping) and spec and all(key in _OPERATORS for key in spec):
        return all(_OPERATORS[operator](actual, argument) for operator, argument in spec.items())
    if actual is _MISSING:
        return False
    return _equal(actual, spec)


def _equal(actual: Any, expected: Any) -> bool:
    if isinstance(actual, bool) or isinstance(expected, bool):
        return (
            actual is expected
            if isinstance(actual, bool) and isinstance(expected, bool)
            else str(actual).lower() == str(expected).lower()
        )
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        return actual == expected
    if isinstance(actual, str | int | float) and isinstance(expected, str | int | float):
        return str(actual) == str(expected)
    return bool(actual == expected)


def _contains(actual: Any, argument: Any) -> bool:
    if isinstance(actual, str):
        return str(argument) in actual
    if isinstance(actual, list):
        return any(matches(element, argument) for element in actual)
    if isinstance(actual, Mapping):
        return str(argument) in actual
    return False


def _matches_pattern(actual: Any, argument: Any) -> bool:
    if actual is _MISSING or actual is None:
        return False
    try:
        return re.search(str(argument), actual if isinstance(actual, str) else json.dumps(actual)) is not None
    except re.error as exc:
        raise SandboxError(f"matches: {argument!r} is not a regular expression: {exc}") from None


def _compare(test: Callable[[float, float], bool]) -> Callable[[Any, Any], bool]:
    def compare(actual: Any, argument: Any) -> bool:
        try:
            return test(float(actual), float(argument))
        except (TypeError, ValueError):
            return False

    return compare


def _length(actual: Any, argument: Any) -> bool:
    return isinstance(actual, str | list | Mapping) and matches(len(actual), argument)


def _every(actual: Any, argument: Any) -> bool:
    return isinstance(actual, list) and bool(actual) and all(matches(element, argument) for element in actual)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": lambda actual, argument: actual is not _MISSING and _equal(actual, argument),
    "contains": _contains,
    "matches": _matches_pattern,
    "in": lambda actual, argument: actual is not _MISSING and any(_equal(actual, option) for option in argument),
    "not": lambda actual, argument: not matches(actual, argument),
    "exists": lambda actual, argument: (actual is not _MISSING and actual is not None) == bool(argument),
    "gt": _compare(lambda a, b: a > b),
    "gte": _compare(lambda a, b: a >= b),
    "lt": _compare(lambda a, b: a < b),
    "lte": _compare(lambda a, b: a <= b),
    "length": _length,
    "any": lambda actual, argument: isinstance(actual, list) and any(matches(element, argument) for element in actual),
    "all": _every,
}
OPERATORS = tuple(_OPERATORS)
