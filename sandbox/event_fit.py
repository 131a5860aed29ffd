"""Which events a function can be invoked with: decided by its trigger in the template and by the event's shape.

`sam local invoke` hands a function any JSON; a Slack endpoint given an ECS event answers 405 and the run looks fine.
`python -m sandbox invoke` refuses an event its function's trigger would never deliver, before anything runs.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from sandbox.errors import SandboxError
from sandbox.template import Template


class Trigger(StrEnum):
    """How the deployed stack invokes a function."""

    QUEUE = "queue"
    SCHEDULE = "schedule"
    URL = "url"
    TASK = "task"


class Shape(StrEnum):
    """What an event file is."""

    SQS = "an SQS event"
    ENVELOPE = "an EventBridge event"
    SCHEDULED = "a scheduled event"
    URL_REQUEST = "a function URL request"
    INPUT = "neither an EventBridge, SQS, scheduled event nor a function URL request"


_HOW: dict[Trigger, str] = {
    Trigger.QUEUE: "fed by SQS (EventBridge rules put events on its queue): it takes an EventBridge event, a list of "
    "them, or an SQS event",
    Trigger.SCHEDULE: "run by its schedule: it takes a scheduled event (source aws.events, detail-type "
    "Scheduled Event)",
    Trigger.URL: "invoked through its function URL: it takes a function URL request (payload format version 2.0)",
    Trigger.TASK: "a Step Functions task: it takes the input its state passes it, a JSON object that is no "
    "EventBridge, SQS or scheduled event nor a function URL request",
}

_FITS: dict[Trigger, frozenset[Shape]] = {
    Trigger.QUEUE: frozenset({Shape.SQS, Shape.ENVELOPE}),
    Trigger.SCHEDULE: frozenset({Shape.SCHEDULED}),
    Trigger.URL: frozenset({Shape.URL_REQUEST}),
    Trigger.TASK: frozenset({Shape.INPUT}),
}

_SCHEDULE_EVENTS = frozenset({"Schedule", "ScheduleV2"})


def trigger_of(template: Template, logical_id: str) -> Trigger:
    """The function's trigger, from its `Events` and `FunctionUrlConfig`; a function with neither is a task."""
    properties = template.resources[logical_id].get("Properties") or {}
    events = properties.get("Events") or {}
    types = {str(event.get("Type")) for event in events.values() if isinstance(event, dict)}
    if "SQS" in types:
        return Trigger.QUEUE
    if properties.get("FunctionUrlConfig") is not None:
        return Trigger.URL
    if types & _SCHEDULE_EVENTS:
        return Trigger.SCHEDULE
    return Trigger.TASK


def shape_of(document: Any) -> Shape:
    if isinstance(document, dict) and document.get("version") == "2.0" and _has_http(document):
        return Shape.URL_REQUEST
    records = document.get("Records") if isinstance(document, dict) else None
    if (
        isinstance(records, list)
        and records
        and all(isinstance(r, dict) and r.get("eventSource") == "aws:sqs" for r in records)
    ):
        return Shape.SQS
    envelopes = document if isinstance(document, list) else [document]
    if envelopes and all(isinstance(e, dict) and "detail-type" in e and "source" in e for e in envelopes):
        scheduled = [e.get("source") == "aws.events" and e.get("detail-type") == "Scheduled Event" for e in envelopes]
        return Shape.SCHEDULED if all(scheduled) and len(envelopes) == 1 else Shape.ENVELOPE
    return Shape.INPUT


def _has_http(document: dict[str, Any]) -> bool:
    context = document.get("requestContext")
    return isinstance(context, dict) and isinstance(context.get("http"), dict)


def check_fit(template: Template, logical_id: str, document: Any, path: Path) -> Trigger:
    """The function's trigger; SandboxError when the event is not what that trigger delivers."""
    trigger = trigger_of(template, logical_id)
    shape = shape_of(document)
    if shape not in _FITS[trigger]:
        raise SandboxError(
            f"{path} is {shape.value}, which does not fit {logical_id}: {logical_id} is {_HOW[trigger]} "
            "(events/README.md lists a sample for each function)"
        )
    return trigger
