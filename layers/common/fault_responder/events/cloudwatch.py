"""The "CloudWatch Alarm State Change" event (source aws.cloudwatch), as EventBridge delivers it.

Only the stack's own alarms reach the router (AlarmStateChangeRule matches their name prefix), but the model
trusts nothing: the alarm's ARN must be a CloudWatch alarm ARN, the name is bounded, and every state is an open
string (ALARM, OK and INSUFFICIENT_DATA today), so a state CloudWatch adds is shown as itself, never refused.
CloudWatch writes state timestamps as `2019-10-02T17:04:40.989+0000` (no colon in the offset), which is
accepted along with ISO 8601.

Read as tolerantly as an ECS event (fault_responder.events.ecs): the alarm's ARN, its name and the state it
entered are required; anything else that does not validate (a state's timestamp or reason, the previous state,
the configuration) is read as absent and reported as schema drift. A state's timestamp is bounded as every time
in an event's detail is; without one, the event's time stands in (fault_responder.incidents.alarms).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from fault_responder.events.ecs import EventTime, Tolerant, UtcDatetime, times_after
from fault_responder.events.envelope import AHEAD

MAX_ALARM_NAME = 255
"""CloudWatch's own limit on an alarm's name."""

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


class AlarmStateDetail(Tolerant):
    alarm_name: Annotated[str, Field(min_length=1, max_length=MAX_ALARM_NAME)] = Field(alias="alarmName")
    state: AlarmState
    previous_state: PreviousAlarmState | None = Field(default=None, alias="previousState")
    configuration: AlarmConfiguration | None = None


class AlarmStateChangeEvent(EventBridgeModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    source: Literal["aws.cloudwatch"]
    detail_type: Literal["CloudWatch Alarm State Change"] = Field(alias="detail-type")
    time: EventTime
    resources: Annotated[list[AlarmArn], Field(min_length=1, max_length=1)]
    detail: AlarmStateDetail

    @model_validator(mode="after")
    def _names_its_alarm(self) -> AlarmStateChangeEvent:
        if not self.resources[0].endswith(f":alarm:{self.detail.alarm_name}"):
            raise ValueError("resources[0] is not the ARN of the alarm detail.alarmName names")
        times_after(self.detail, self.time + AHEAD)
        return self

    @property
    def alarm_arn(self) -> str:
        return self.resources[0]
