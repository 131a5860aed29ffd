"""An EventBridge envelope read into the model its detail-type names: an ECS event (events/ecs.py) or one of the
stack's own alarms or their contributors (events/cloudwatch.py, imported only when an alarm arrives)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.parser import parse

from fault_responder.events.ecs import (
    ALARM_CONTRIBUTOR_STATE_CHANGE,
    ALARM_STATE_CHANGE,
    MODELS,
    EcsEvent,
    UnsupportedEventError,
    collecting_drift,
    report_drift,
)

if TYPE_CHECKING:
    from fault_responder.events.cloudwatch import AlarmEvent


def parse_ecs_event(raw: Any) -> EcsEvent | AlarmEvent:
    """Parse a full EventBridge envelope with the Powertools parser into the model its detail-type names; fields
    read as absent are reported as schema drift (report_drift).

    Raises UnsupportedEventError for other detail-types and pydantic.ValidationError for a malformed one.
    """
    detail_type = raw.get("detail-type") if isinstance(raw, dict) else None
    if detail_type == ALARM_STATE_CHANGE:
        from fault_responder.events.cloudwatch import AlarmStateChangeEvent  # noqa: PLC0415 - only the alarm path pays for it

        model: type[EcsEvent | AlarmEvent] = AlarmStateChangeEvent
    elif detail_type == ALARM_CONTRIBUTOR_STATE_CHANGE:
        from fault_responder.events.cloudwatch import AlarmContributorStateChangeEvent  # noqa: PLC0415

        model = AlarmContributorStateChangeEvent
    else:
        found = MODELS.get(detail_type) if isinstance(detail_type, str) else None
        if found is None:
            raise UnsupportedEventError(f"not an ECS event this app consumes (detail-type {detail_type!r})")
        model = found
    with collecting_drift() as drifted:
        event: EcsEvent | AlarmEvent = parse(event=raw, model=model)
    if drifted:
        report_drift(event.id, drifted)
    return event
