"""The "CloudWatch Alarm State Change" and "CloudWatch Alarm Contributor State Change" events (source aws.cloudwatch),
as EventBridge delivers them.

Only the stack's own alarms reach the router (AlarmStateChangeRule matches their name prefix), but the model
trusts nothing: the alarm's ARN must be a CloudWatch alarm ARN, the name is bounded, and every state is an open
string (ALARM, OK and INSUFFICIENT_DATA today), so a state CloudWatch adds is shown as itself, never refused.
CloudWatch writes state timestamps as `2019-10-02T17:04:40.989+0000` (no colon in the offset), which is
accepted along with ISO 8601.

Read as tolerantly as an ECS event (fault_responder.events.ecs): the alarm's ARN, its name and the state it
entered are required; anything else that does not validate (a state's timestamp or reason, the previous state,
the configuration) is read as absent and reported as schema drift. A state's timestamp is bounded as every time
in an event's detail is; without one, the event's time stands in (fault_responder.incidents.alarms).

A contributor event is one time series of a multi time series alarm (a Metrics Insights query with GROUP BY): its
contributor's id and attributes (the series' dimensions, `{"ClusterName": ...}`) are read strictly, within
CloudWatch's own limits (an id of 1 to 16 characters, at most 150 attributes, keys of 255 characters, values of
1,024): anything else refuses the event. It carries no previous state. No alarm's name may contain
CONTRIBUTOR_MARK, which separates an alarm's ARN from a contributor's id where the contributor's facts are kept.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, model_validator

from fault_responder.core.domain import CONTRIBUTOR_MARK
from fault_responder.events.ecs import EventTime, Tolerant, UtcDatetime, times_after
from fault_responder.events.envelope import AHEAD

MAX_ALARM_NAME = 255
"""CloudWatch's own limit on an alarm's name."""
MAX_CONTRIBUTOR_ID = 16
MAX_CONTRIBUTOR_ATTRIBUTES = 150
MAX_ATTRIBUTE_KEY = 255
MAX_ATTRIBUTE_VALUE = 1024
MAX_STATE_REASON = 2048
"""CloudWatch's reasons are at most 1,023 characters; a longer one is read as absent (drift)."""

_OFFSET_WITHOUT_COLON = re.compile(r"([+-]\d{2})(\d{2})$")

AlarmArn = Annotated[
    str, Field(min_length=20, max_length=1600, pattern=r"^arn:aws[a-z-]*:cloudwatch:[^:]*:[^:]*:alarm:.+")
]


def _iso_offset(value: Any) -> Any:
    return _OFFSET_WITHOUT_COLON.sub(r"\1:\2", value) if isinstance(value, str) else value


AlarmTime = Annotated[UtcDatetime, BeforeValidator(_iso_offset)]


class AlarmState(Tolerant):
    drift_path = "detail.state"
    expected_keys = ("timestamp",)
    value: Annotated[str, Field(min_length=1, max_length=64)]
    timestamp: AlarmTime | None = None
    reason: str | None = None


class PreviousAlarmState(AlarmState):
    drift_path = "detail.previousState"


class MetricRef(Tolerant):
    drift_path = "detail.configuration.metrics.metricStat.metric"
    namespace: str | None = None
    name: str | None = None
    dimensions: dict[str, str] = Field(default_factory=dict)


class MetricStat(Tolerant):
    drift_path = "detail.configuration.metrics.metricStat"
    metric: MetricRef


class AlarmMetric(Tolerant):
    drift_path = "detail.configuration.metrics"
    id: str | None = None
    metric_stat: MetricStat | None = Field(default=None, alias="metricStat")
    expression: str | None = None
    return_data: bool | None = Field(default=None, alias="returnData")


class AlarmConfiguration(Tolerant):
    drift_path = "detail.configuration"
    description: str | None = None
    metrics: Annotated[list[AlarmMetric], Field(max_length=20)] = Field(default_factory=list)


AlarmName = Annotated[str, Field(min_length=1, max_length=MAX_ALARM_NAME)]


class AlarmStateDetail(Tolerant):
    alarm_name: AlarmName = Field(alias="alarmName")
    state: AlarmState
    previous_state: PreviousAlarmState | None = Field(default=None, alias="previousState")
    configuration: AlarmConfiguration | None = None


class _OneAlarmsEvent(EventBridgeModel):
    """What both of an alarm's events hold: CloudWatch's source, the alarm's ARN as the one resource (naming the
    alarm its detail names), and no time in its detail ahead of the event's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    source: Literal["aws.cloudwatch"]
    time: EventTime
    resources: Annotated[list[AlarmArn], Field(min_length=1, max_length=1)]
    detail: AlarmStateDetail | ContributorStateDetail

    @model_validator(mode="after")
    def _names_its_alarm(self) -> Self:
        _check_alarm(self.resources[0], self.detail.alarm_name)
        times_after(self.detail, self.time + AHEAD)
        return self

    @property
    def alarm_arn(self) -> str:
        return self.resources[0]


class AlarmStateChangeEvent(_OneAlarmsEvent):
    detail_type: Literal["CloudWatch Alarm State Change"] = Field(alias="detail-type")
    detail: AlarmStateDetail


def _check_alarm(arn: str, name: str) -> None:
    if not arn.endswith(f":alarm:{name}"):
        raise ValueError("resources[0] is not the ARN of the alarm detail.alarmName names")
    if CONTRIBUTOR_MARK in name:
        raise ValueError(f"an alarm's name may not contain {CONTRIBUTOR_MARK!r}")


# --- Contributors of a multi time series alarm ---------------------------------------------------------

ContributorId = Annotated[StrictStr, Field(min_length=1, max_length=MAX_CONTRIBUTOR_ID, pattern=r"^[A-Za-z0-9_.:-]+$")]
AttributeKey = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ATTRIBUTE_KEY)]
AttributeValue = Annotated[StrictStr, Field(max_length=MAX_ATTRIBUTE_VALUE)]


class AlarmContributor(BaseModel):
    """Which time series: CloudWatch's id for it and its dimensions. Strict: every part must be right."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    id: ContributorId
    attributes: Annotated[dict[AttributeKey, AttributeValue], Field(max_length=MAX_CONTRIBUTOR_ATTRIBUTES)] = Field(
        default_factory=dict
    )


class ContributorState(AlarmState):
    drift_path = "detail.state"
    reason: Annotated[str, Field(max_length=MAX_STATE_REASON)] | None = None


class ContributorStateDetail(Tolerant):
    alarm_name: AlarmName = Field(alias="alarmName")
    alarm_contributor: AlarmContributor = Field(alias="alarmContributor")
    state: ContributorState
    configuration: AlarmConfiguration | None = None


class AlarmContributorStateChangeEvent(_OneAlarmsEvent):
    detail_type: Literal["CloudWatch Alarm Contributor State Change"] = Field(alias="detail-type")
    detail: ContributorStateDetail


AlarmEvent = AlarmStateChangeEvent | AlarmContributorStateChangeEvent
"""Either event of the stack's alarms (events/parse.py reads the one its detail-type names)."""
