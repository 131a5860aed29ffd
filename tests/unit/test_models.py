"""The event models accept what ECS may send tomorrow and reject what can never be processed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.events.ecs import HealthChangeEvent, InstanceStateEvent, TaskStateEvent, UnsupportedEventError
from fault_responder.events.parse import parse_ecs_event
from tests.conftest import health_check, load_event, vary


def test_each_detail_type_parses_into_its_model(xid46: dict[str, Any]) -> None:
    assert isinstance(parse_ecs_event(xid46), HealthChangeEvent)
    assert isinstance(parse_ecs_event(load_event("state/draining-manual.json")), InstanceStateEvent)
    assert isinstance(parse_ecs_event(load_event("task/stopped-spot-interruption.json")), TaskStateEvent)


def test_unknown_fields_are_kept_not_rejected(xid46: dict[str, Any]) -> None:
    event = vary(xid46, accountType="STANDARD")
    event["detail"]["healthChecks"][0]["severity"] = "HIGH"
    parsed = parse_ecs_event(event)
    assert parsed.detail.model_extra == {"accountType": "STANDARD"}
    assert parsed.detail.health_checks[0].model_extra == {"severity": "HIGH"}


def test_new_enum_values_are_open_strings(xid46: dict[str, Any]) -> None:
    parsed = parse_ecs_event(health_check(xid46, type="NETWORK_FABRIC", status="DEGRADED"))
    assert (parsed.detail.health_checks[0].type, parsed.detail.health_checks[0].status) == (
        "NETWORK_FABRIC",
        "DEGRADED",
    )


def test_nulls_where_lists_are_expected_become_empty_lists(xid46: dict[str, Any]) -> None:
    assert parse_ecs_event(vary(xid46, healthChecks=None)).detail.health_checks == []
    task = load_event("task/stopped-spot-interruption.json")
    task["detail"]["containers"][0]["gpuIds"] = None
    assert parse_ecs_event(task).detail.containers[0].gpu_ids == []


def test_status_reason_null_and_times_are_parsed(xid46: dict[str, Any]) -> None:
    check = parse_ecs_event(health_check(xid46, statusReason=None)).detail.health_checks[0]
    assert check.status_reason is None
    assert check.last_status_change is not None and check.last_status_change.tzinfo is not None


@pytest.mark.parametrize(
    "change",
    [
        {"containerInstanceArn": None},
        {"clusterArn": "not-an-arn"},
        {"healthChecks": [{"type": "ACCELERATED_COMPUTE", "status": 79}]},
        {"healthChecks": [{"status": "IMPAIRED"}]},
    ],
)
def test_a_detail_that_cannot_be_processed_is_a_validation_error(xid46: dict[str, Any], change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_ecs_event(vary(xid46, **change))


@pytest.mark.parametrize("raw", [{"detail-type": "EC2 Instance State-change Notification"}, {"id": "x"}, [], "text"])
def test_anything_but_an_ecs_event_we_consume_is_unsupported(raw: Any) -> None:
    with pytest.raises(UnsupportedEventError):
        parse_ecs_event(raw)
