"""pydantic v2 models of the ECS events we consume, parsed with the Powertools EventBridge envelope.

Tolerant by design: unknown fields are kept (extra="allow"), and every enum ECS may extend is an
open string. The known values are listed as constants so code can compare against them; an unknown
value is classified as unknown downstream, never rejected here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from fault_responder.domain import DRILL_SOURCE

if TYPE_CHECKING:
    from fault_responder.models.alarms import AlarmStateChangeEvent

HEALTH_CHANGE = "ECS Container Instance Health Change"
STATE_CHANGE = "ECS Container Instance State Change"
TASK_STATE_CHANGE = "ECS Task State Change"
ALARM_STATE_CHANGE = "CloudWatch Alarm State Change"
"""Of the stack's own CloudWatch alarms (fault_responder.models.alarms, imported only when one arrives)."""

KNOWN_CHECK_TYPES = frozenset({"CONTAINER_RUNTIME", "ACCELERATED_COMPUTE", "DAEMON", "AGENT_CONNECTIVITY"})
KNOWN_HEALTH_STATUSES = frozenset({"OK", "IMPAIRED", "INSUFFICIENT_DATA", "INITIALIZING"})
INFRASTRUCTURE_STOP_CODES = frozenset({"SpotInterruption", "TerminationNotice", "InfrastructureHealth"})
DRAINING_STOP_REASON = "Task stopped during instance draining"


def _none_to_empty_list(value: Any) -> Any:
    return [] if value is None else value


def _as_utc(value: datetime) -> datetime:
    # A timestamp without a zone (seen in hand-written and forwarded events) is read as UTC, so it can be
    # compared with every other time; one with a zone is converted to UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]


NonEmptyStr = Annotated[str, Field(min_length=1)]
Arn = Annotated[str, Field(min_length=20, pattern=r"^arn:aws[a-z-]*:ecs:")]


# defer_build: each model's validator is built when it first validates, not at import. A function that
# only ever sees health events (the resume workflow) never builds the others, and every cold start of the
# AlertRouter builds only the models of the event types it is given.
class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


class HealthCheck(_Tolerant):
    type: NonEmptyStr
    status: NonEmptyStr
    last_status_change: UtcDatetime | None = Field(default=None, alias="lastStatusChange")
    last_updated: UtcDatetime | None = Field(default=None, alias="lastUpdated")
    status_reason: str | None = Field(default=None, alias="statusReason")


class HealthChangeDetail(_Tolerant):
    cluster_arn: Arn = Field(alias="clusterArn")
    container_instance_arn: Arn = Field(alias="containerInstanceArn")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    ec2_instance_id: str | None = Field(default=None, alias="ec2InstanceId")
    overall_status: NonEmptyStr = Field(alias="overallStatus")
    health_checks: Annotated[list[HealthCheck], BeforeValidator(_none_to_empty_list)] = Field(
        default_factory=list, alias="healthChecks"
    )


class InstanceStateDetail(_Tolerant):
    cluster_arn: Arn = Field(alias="clusterArn")
    container_instance_arn: Arn = Field(alias="containerInstanceArn")
    ec2_instance_id: str | None = Field(default=None, alias="ec2InstanceId")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    status: NonEmptyStr
    status_reason: str | None = Field(default=None, alias="statusReason")
    drain_reason: str | None = Field(default=None, alias="drainReason")
    """Not documented by AWS today; read if AWS adds a dedicated drain-reason field."""
    version: int | None = None
    agent_connected: bool | None = Field(default=None, alias="agentConnected")
    running_tasks_count: int | None = Field(default=None, alias="runningTasksCount")
    updated_at: UtcDatetime | None = Field(default=None, alias="updatedAt")


class Container(_Tolerant):
    name: str | None = None
    exit_code: int | None = Field(default=None, alias="exitCode")
    reason: str | None = None
    gpu_ids: Annotated[list[str], BeforeValidator(_none_to_empty_list)] = Field(default_factory=list, alias="gpuIds")


class TaskStateDetail(_Tolerant):
    cluster_arn: Arn = Field(alias="clusterArn")
    task_arn: NonEmptyStr = Field(alias="taskArn")
    container_instance_arn: str | None = Field(default=None, alias="containerInstanceArn")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    task_definition_arn: str | None = Field(default=None, alias="taskDefinitionArn")
    group: str | None = None
    last_status: NonEmptyStr = Field(alias="lastStatus")
    desired_status: str | None = Field(default=None, alias="desiredStatus")
    stop_code: str | None = Field(default=None, alias="stopCode")
    stopped_reason: str | None = Field(default=None, alias="stoppedReason")
    stopped_at: UtcDatetime | None = Field(default=None, alias="stoppedAt")
    version: int | None = None
    containers: Annotated[list[Container], BeforeValidator(_none_to_empty_list)] = Field(default_factory=list)


class _EcsEvent(EventBridgeModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    source: Literal["aws.ecs", "fault-responder.drill"]
    """`aws.ecs` from ECS; `fault-responder.drill` from a drill (fault_responder.domain.DRILL_SOURCE)."""
    time: UtcDatetime

    @property
    def is_drill(self) -> bool:
        return self.source == DRILL_SOURCE


class HealthChangeEvent(_EcsEvent):
    detail_type: Literal["ECS Container Instance Health Change"] = Field(alias="detail-type")
    detail: HealthChangeDetail


class InstanceStateEvent(_EcsEvent):
    detail_type: Literal["ECS Container Instance State Change"] = Field(alias="detail-type")
    detail: InstanceStateDetail


class TaskStateEvent(_EcsEvent):
    detail_type: Literal["ECS Task State Change"] = Field(alias="detail-type")
    detail: TaskStateDetail


EcsEvent = HealthChangeEvent | InstanceStateEvent | TaskStateEvent

_MODELS: dict[str, type[EcsEvent]] = {
    HEALTH_CHANGE: HealthChangeEvent,
    STATE_CHANGE: InstanceStateEvent,
    TASK_STATE_CHANGE: TaskStateEvent,
}


class UnsupportedEventError(ValueError):
    """Valid JSON, but not an ECS event this app consumes."""


def parse_ecs_event(raw: Any) -> EcsEvent | AlarmStateChangeEvent:
    """Parse a full EventBridge envelope with the Powertools parser into the model its detail-type names.

    Raises UnsupportedEventError for other detail-types and pydantic.ValidationError for a malformed one.
    """
    detail_type = raw.get("detail-type") if isinstance(raw, dict) else None
    if detail_type == ALARM_STATE_CHANGE:
        from fault_responder.models.alarms import AlarmStateChangeEvent  # noqa: PLC0415 - only the alarm path pays for it

        return parse(event=raw, model=AlarmStateChangeEvent)
    model = _MODELS.get(detail_type) if isinstance(detail_type, str) else None
    if model is None:
        raise UnsupportedEventError(f"not an ECS event this app consumes (detail-type {detail_type!r})")
    return parse(event=raw, model=model)
