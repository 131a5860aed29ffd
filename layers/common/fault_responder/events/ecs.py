"""pydantic v2 models of the ECS events we consume, parsed with the Powertools EventBridge envelope.

A tolerant reader (docs/reliability.md, "Reading an event: what is required, what is bounded"). Only what says
which instance failed and how is required: for a Health Change the cluster and container instance ARNs and each
listed check's type and status; for a State Change the cluster, the container instance and its status; for a Task
State Change the cluster, the task ARN, its lastStatus, and the container instance ARN when there is one. A
required field that is missing, of another type or out of range refuses the event at once (pydantic's
ValidationError, which the router dead-letters with the reason).

Any other field that is of another JSON type, does not parse or is out of range is read as absent, and so the
fault still pages: an AWS schema change to a field we only show can never silence a page. Each such field is
reported as schema drift (a `SchemaDrift` count per field and one log line per event naming the fields and the
event, never the values); so is a missing field that ECS always sends and we read (`expected_keys`).

Every time and number is bounded as it is parsed (fault_responder.events.envelope has the bounds): a time before
EARLIEST or more than AHEAD past the event's own time is out of range, as is a count or version outside
0..MAX_COUNT. Unknown fields are kept (extra="allow"), and every enum ECS may extend is an open string: the known
values are listed as constants so code can compare against them, and an unknown value is classified as unknown
downstream, never rejected here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from fault_responder.core.domain import DRILL_SOURCE
from fault_responder.events.envelope import AHEAD, EXIT_CODES, MAX_COUNT, MAX_ID, in_utc_range

log = logging.getLogger(__name__)

HEALTH_CHANGE = "ECS Container Instance Health Change"
STATE_CHANGE = "ECS Container Instance State Change"
TASK_STATE_CHANGE = "ECS Task State Change"
ALARM_STATE_CHANGE = "CloudWatch Alarm State Change"
ALARM_CONTRIBUTOR_STATE_CHANGE = "CloudWatch Alarm Contributor State Change"
"""Of the stack's own CloudWatch alarms (fault_responder.events.cloudwatch, which events/parse.py imports only when
one arrives)."""

KNOWN_CHECK_TYPES = frozenset({"CONTAINER_RUNTIME", "ACCELERATED_COMPUTE", "DAEMON", "AGENT_CONNECTIVITY"})
KNOWN_HEALTH_STATUSES = frozenset({"OK", "IMPAIRED", "INSUFFICIENT_DATA", "INITIALIZING"})
INFRASTRUCTURE_STOP_CODES = frozenset({"SpotInterruption", "TerminationNotice", "InfrastructureHealth"})
DRAINING_STOP_REASON = "Task stopped during instance draining"
MAX_DRIFT_FIELDS = 32
"""Fields reported as drift for one event at most: a hostile event cannot make its log line or its counts grow."""

# --- Schema drift --------------------------------------------------------------------------------------

_drift: ContextVar[list[str] | None] = ContextVar("schema_drift", default=None)
"""The drifted fields of the event being parsed in this thread (parse_ecs_event sets it; elsewhere it is None)."""


@contextmanager
def collecting_drift() -> Iterator[list[str]]:
    """The fields read as absent while parsing inside, in the order met (at most MAX_DRIFT_FIELDS)."""
    drifted: list[str] = []
    token = _drift.set(drifted)
    try:
        yield drifted
    finally:
        _drift.reset(token)


def _drifted(path: str) -> None:
    found = _drift.get()
    if found is not None and path not in found and len(found) < MAX_DRIFT_FIELDS:
        found.append(path)


def report_drift(event_id: str, fields: list[str]) -> None:
    """One `SchemaDrift` count per field (dimension `Field`, its path) and one log line naming the fields and the
    event: the paths are the models' own, so neither the counts' dimensions nor the line grow with the input."""
    # Imported here: only an event with drift pays for Powertools' metrics, and the models stay cheap to import.
    from fault_responder.core.observability import count  # noqa: PLC0415

    for path in fields:
        count("SchemaDrift", "Field", path)
    log.warning(
        "schema drift: fields read as absent (missing, of another type, unparseable or out of range)",
        extra={"event_id": event_id[:MAX_ID], "fields": fields},
    )


# --- Field types ---------------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _iso_text(value: Any) -> Any:
    # ECS writes times as ISO 8601 text; pydantic would read a number as seconds since 1970, which no ECS event is.
    if isinstance(value, str | datetime):
        return value
    raise ValueError(f"a time is ISO 8601 text, not a JSON {_json_type(value)}")


def _bounded_time(value: datetime) -> datetime:
    # A timestamp without a zone (seen in hand-written and forwarded events) is read as UTC, so it can be
    # compared with every other time; one with a zone is converted to UTC.
    return in_utc_range(value.replace(tzinfo=UTC) if value.tzinfo is None else value)


UtcDatetime = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_bounded_time)]
"""A time in UTC, from ISO 8601 text, not before EARLIEST (a time in detail is also at most AHEAD past its event)."""


def _received(moment: datetime) -> datetime:
    latest = datetime.now(UTC) + AHEAD
    if moment > latest:
        raise ValueError(
            f"{moment.isoformat()} is more than {AHEAD.total_seconds() / 3600:g} h after the event was received"
        )
    return moment


EventTime = Annotated[UtcDatetime, AfterValidator(_received)]
"""The envelope's `time`: the time of every fact that has none of its own, so it is required and bounded by the
clock of whoever receives it (at most AHEAD ahead)."""

Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
"""A version or a count: a JSON whole number (not text, not a boolean) within 0..MAX_COUNT."""
ExitCode = Annotated[StrictInt, Field(ge=EXIT_CODES[0], le=EXIT_CODES[1])]


def _none_to_empty_list(value: Any) -> Any:
    return [] if value is None else value


NonEmptyStr = Annotated[str, Field(min_length=1)]
Arn = Annotated[str, Field(min_length=20, pattern=r"^arn:aws[a-z-]*:ecs:")]


# defer_build: each model's validator is built when it first validates, not at import. A function that
# only ever sees health events (the resume workflow) never builds the others, and every cold start of the
# AlertRouter builds only the models of the event types it is given.
class Tolerant(BaseModel):
    """An object of an event's detail: its required fields (those without a default) must be right; any other
    that does not validate is read as its default (absent) and reported as drift under `drift_path`.`alias`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    drift_path: ClassVar[str] = "detail"
    """Where objects of this model are in the event (list indexes left out), e.g. `detail.healthChecks`."""
    expected_keys: ClassVar[tuple[str, ...]] = ()
    """Keys ECS always sends and we read: one missing is drift too (an AWS rename would otherwise go unnoticed)."""
    items_required: ClassVar[frozenset[str]] = frozenset()
    """Lists that may be absent, but whose every item must be right (each health check's type and status)."""
    refused_if_wrong: ClassVar[frozenset[str]] = frozenset()
    """Optional fields that, when present, must be right: they say which instance the event is about."""

    @classmethod
    def path(cls, name: str) -> str:
        field = cls.model_fields[name]
        return f"{cls.drift_path}.{field.alias or name}"

    @model_validator(mode="before")
    @classmethod
    def _missing_is_drift(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in cls.expected_keys:
                if key not in data:
                    _drifted(f"{cls.drift_path}.{key}")
        return data

    @field_validator("*", mode="wrap")
    @classmethod
    def _absent_if_unreadable(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        name = info.field_name
        if name is None:
            return handler(value)
        field = cls.model_fields[name]
        if field.is_required() or name in cls.refused_if_wrong:
            return handler(value)
        if name in cls.items_required and isinstance(value, list):
            return handler(value)
        try:
            return handler(value)
        except ValidationError:
            _drifted(cls.path(name))
            return field.get_default(call_default_factory=True)


def times_after(model: BaseModel, latest: datetime) -> None:
    """Every optional time in `model` (and the objects it holds) past `latest` read as absent, as drift."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, datetime) and isinstance(model, Tolerant) and value > latest:
            setattr(model, name, None)
            _drifted(type(model).path(name))
        elif isinstance(value, BaseModel):
            times_after(value, latest)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, BaseModel):
                    times_after(item, latest)


# --- The events ----------------------------------------------------------------------------------------


class HealthCheck(Tolerant):
    drift_path = "detail.healthChecks"
    expected_keys = ("lastStatusChange",)
    type: NonEmptyStr
    status: NonEmptyStr
    last_status_change: UtcDatetime | None = Field(default=None, alias="lastStatusChange")
    last_updated: UtcDatetime | None = Field(default=None, alias="lastUpdated")
    status_reason: str | None = Field(default=None, alias="statusReason")


class DrillDetail(Tolerant):
    """What a drill says of itself (docs/drills.md): who started it. Read only from a drill's event (its source)."""

    drift_path = "detail.drill"
    started_by: str | None = Field(default=None, alias="startedBy")


class HealthChangeDetail(Tolerant):
    expected_keys = ("overallStatus", "healthChecks")
    items_required = frozenset({"health_checks"})
    cluster_arn: Arn = Field(alias="clusterArn")
    container_instance_arn: Arn = Field(alias="containerInstanceArn")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    ec2_instance_id: str | None = Field(default=None, alias="ec2InstanceId")
    overall_status: NonEmptyStr | None = Field(default=None, alias="overallStatus")
    """None when absent or unreadable: the checks say what failed (with none listed, see lifecycle)."""
    health_checks: Annotated[list[HealthCheck], BeforeValidator(_none_to_empty_list)] = Field(
        default_factory=list, alias="healthChecks"
    )
    drill: DrillDetail | None = None
    """Only a drill's event carries it (ECS never sends it); an event of ECS's source is never read for it."""


class InstanceStateDetail(Tolerant):
    expected_keys = ("version", "updatedAt")
    cluster_arn: Arn = Field(alias="clusterArn")
    container_instance_arn: Arn = Field(alias="containerInstanceArn")
    ec2_instance_id: str | None = Field(default=None, alias="ec2InstanceId")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    status: NonEmptyStr
    status_reason: str | None = Field(default=None, alias="statusReason")
    drain_reason: str | None = Field(default=None, alias="drainReason")
    """Not documented by AWS today; read if AWS adds a dedicated drain-reason field."""
    version: Count | None = None
    agent_connected: StrictBool | None = Field(default=None, alias="agentConnected")
    running_tasks_count: Count | None = Field(default=None, alias="runningTasksCount")
    updated_at: UtcDatetime | None = Field(default=None, alias="updatedAt")


class Container(Tolerant):
    drift_path = "detail.containers"
    name: str | None = None
    exit_code: ExitCode | None = Field(default=None, alias="exitCode")
    reason: str | None = None
    gpu_ids: Annotated[list[str], BeforeValidator(_none_to_empty_list)] = Field(default_factory=list, alias="gpuIds")


class TaskStateDetail(Tolerant):
    refused_if_wrong = frozenset({"container_instance_arn"})
    cluster_arn: Arn = Field(alias="clusterArn")
    task_arn: NonEmptyStr = Field(alias="taskArn")
    container_instance_arn: str | None = Field(default=None, alias="containerInstanceArn")
    """Absent for a task on Fargate (nothing of an instance to say); when present it must be text."""
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    task_definition_arn: str | None = Field(default=None, alias="taskDefinitionArn")
    group: str | None = None
    last_status: NonEmptyStr = Field(alias="lastStatus")
    desired_status: str | None = Field(default=None, alias="desiredStatus")
    stop_code: str | None = Field(default=None, alias="stopCode")
    stopped_reason: str | None = Field(default=None, alias="stoppedReason")
    stopped_at: UtcDatetime | None = Field(default=None, alias="stoppedAt")
    version: Count | None = None
    containers: Annotated[list[Container], BeforeValidator(_none_to_empty_list)] = Field(default_factory=list)


class _EcsEvent(EventBridgeModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    source: Literal["aws.ecs", "fault-responder.drill"]
    """`aws.ecs` from ECS; `fault-responder.drill` from a drill (fault_responder.core.domain.DRILL_SOURCE)."""
    time: EventTime

    @property
    def is_drill(self) -> bool:
        return self.source == DRILL_SOURCE

    @model_validator(mode="after")
    def _detail_not_ahead_of_the_event(self) -> _EcsEvent:
        if isinstance(self.detail, BaseModel):  # (always: each event's model names its detail's)
            times_after(self.detail, self.time + AHEAD)
        return self


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

MODELS: dict[str, type[EcsEvent]] = {
    HEALTH_CHANGE: HealthChangeEvent,
    STATE_CHANGE: InstanceStateEvent,
    TASK_STATE_CHANGE: TaskStateEvent,
}


class UnsupportedEventError(ValueError):
    """Valid JSON, but not an ECS event this app consumes."""
