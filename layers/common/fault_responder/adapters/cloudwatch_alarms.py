"""Amazon CloudWatch for the alarms' reconciliation: the stack's alarms, their contributors and their history.

Answers fault_responder.operations.alarm_reconcile's AlarmSource. DescribeAlarms is read page by page (the stack's
name prefix, metric alarms only, 100 a page); DescribeAlarmContributors page by page (NextToken) up to the limit
asked; DescribeAlarmHistory from a moment on (newest first, 100 a page) up to the limit asked. Throttling is retried
by botocore.

Where the contributors cannot be read, ContributorsUnavailableError says why, and the reconciliation pages the alarm
as a whole: an SDK without DescribeAlarmContributors (botocore 1.35 had none; the Lambda runtime's pinned 1.42.94
has it), an account or a role that refuses it, an alarm CloudWatch does not describe contributors for
(ResourceNotFoundException, a validation error), or any other failure. A page that fails after others were read
leaves the answer incomplete: what was read counts, nothing is concluded from what was not.

CloudWatch's answer is read strictly: an alarm or a contributor whose description does not have the documented shape
is unreadable (with the reason) and nothing is decided about it; a history item that cannot be read is skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, cast

import botocore
from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from fault_responder.events.envelope import EARLIEST
from fault_responder.operations.alarm_reconcile import (
    Contributors,
    ContributorsUnavailableError,
    ObservedAlarm,
    ObservedContributor,
    Transition,
    UnreadableAlarm,
)

log = logging.getLogger(__name__)

PAGE_SIZE = 100
"""DescribeAlarms and DescribeAlarmHistory: MaxRecords is 1 to 100."""
_MAX_REASON = 300
_MAX_STATE_REASON = 2048
"""CloudWatch's reasons are at most 1,023 characters; a longer one is read as absent."""
_CONTRIBUTOR_HISTORY = "AlarmContributorStateUpdate"
_STATE_HISTORY = "StateUpdate"


def _aware(moment: datetime) -> datetime | None:
    if moment.tzinfo is None:
        raise ValueError("a timestamp without a time zone")
    return moment.astimezone(UTC) if moment >= EARLIEST else None


Moment = Annotated[datetime, AfterValidator(_aware)]
Name = Annotated[str, Field(min_length=1, max_length=255)]
State = Annotated[str, Field(min_length=1, max_length=64)]
ContributorId = Annotated[str, Field(min_length=1, max_length=16, pattern=r"^[A-Za-z0-9_.:-]+$")]
AttributeKey = Annotated[str, Field(min_length=1, max_length=255)]
AttributeValue = Annotated[str, Field(max_length=1024)]
Attributes = Annotated[dict[AttributeKey, AttributeValue], Field(max_length=150)]
AlarmArn = Annotated[
    str, Field(min_length=20, max_length=1600, pattern=r"^arn:aws[a-z-]*:cloudwatch:[^:]*:[^:]*:alarm:.+")
]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _Dimension(_Answer):
    name: str = Field(alias="Name", max_length=255)
    value: str = Field(alias="Value", max_length=1024)


class _Metric(_Answer):
    dimensions: list[_Dimension] = Field(default_factory=list, alias="Dimensions", max_length=30)


class _MetricStat(_Answer):
    metric: _Metric = Field(alias="Metric")


class _Query(_Answer):
    metric_stat: _MetricStat | None = Field(default=None, alias="MetricStat")


class _Alarm(_Answer):
    name: Name = Field(alias="AlarmName")
    arn: AlarmArn = Field(alias="AlarmArn")
    state: State = Field(alias="StateValue")
    reason: str | None = Field(default=None, alias="StateReason")
    updated: Moment | None = Field(default=None, alias="StateUpdatedTimestamp")
    transitioned: Moment | None = Field(default=None, alias="StateTransitionedTimestamp")
    dimensions: list[_Dimension] = Field(default_factory=list, alias="Dimensions", max_length=30)
    metrics: list[_Query] = Field(default_factory=list, alias="Metrics", max_length=20)

    @property
    def cluster(self) -> str | None:
        """The ClusterName dimension of its metric (a metric alarm's, or one of its metric math queries')."""
        found = [*self.dimensions, *(d for q in self.metrics if q.metric_stat for d in q.metric_stat.metric.dimensions)]
        return next(
            (dimension.value for dimension in found if dimension.name == "ClusterName" and dimension.value), None
        )


class _Contributor(_Answer):
    id: ContributorId = Field(alias="ContributorId")
    attributes: Attributes = Field(default_factory=dict, alias="ContributorAttributes")
    reason: str | None = Field(default=None, alias="StateReason")
    since: Moment | None = Field(default=None, alias="StateTransitionedTimestamp")


class _HistoryItem(_Answer):
    at: Moment = Field(alias="Timestamp")
    data: str = Field(alias="HistoryData", max_length=100_000)
    contributor: ContributorId | None = Field(default=None, alias="AlarmContributorId")
    attributes: Attributes = Field(default_factory=dict, alias="AlarmContributorAttributes")


class _NewState(_Answer):
    state: State = Field(alias="stateValue")
    reason: str | None = Field(default=None, alias="stateReason")


class _HistoryData(_Answer):
    new_state: _NewState = Field(alias="newState")


class CloudWatchAlarms:
    """fault_responder.operations.alarm_reconcile.AlarmSource over boto3's CloudWatch client."""

    def __init__(self, cloudwatch: BaseClient, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._cloudwatch = cast(Any, cloudwatch)
        self._clock = clock

    def alarms(self, prefix: str) -> Iterator[ObservedAlarm | UnreadableAlarm]:
        paginator = self._cloudwatch.get_paginator("describe_alarms")
        pages = paginator.paginate(
            AlarmNamePrefix=prefix, AlarmTypes=["MetricAlarm"], PaginationConfig={"PageSize": PAGE_SIZE}
        )
        for page in pages:
            alarms = page.get("MetricAlarms") if isinstance(page, dict) else None
            if not isinstance(alarms, list):
                yield UnreadableAlarm(prefix, "DescribeAlarms answered no list of MetricAlarms")
                continue
            for raw in alarms:
                yield read_alarm(raw)

    def contributors(self, name: str, limit: int) -> Contributors:
        describe = getattr(self._cloudwatch, "describe_alarm_contributors", None)
        if describe is None:
            raise ContributorsUnavailableError(
                f"this SDK (botocore {botocore.__version__}) has no DescribeAlarmContributors"
            )
        at = self._clock()
        listed: list[ObservedContributor] = []
        token: str | None = None
        while True:
            try:
                page = describe(AlarmName=name, **({"NextToken": token} if token else {}))
            except (ClientError, BotoCoreError) as error:
                reason = _refusal(error)
                if not listed:
                    raise ContributorsUnavailableError(reason) from None
                return Contributors(tuple(listed), at, complete=False, why=reason)
            read, why = read_contributors(page)
            listed.extend(read)
            token = page.get("NextToken") if isinstance(page, dict) else None
            if why is not None:
                return Contributors(tuple(listed[:limit]), at, complete=False, why=why)
            if len(listed) > limit or (len(listed) == limit and token):
                return Contributors(tuple(listed[:limit]), at, complete=False, why=f"more than {limit} in ALARM")
            if not token:
                return Contributors(tuple(listed), at)

    def history(self, name: str, since: datetime, *, contributors: bool, limit: int) -> list[Transition]:
        kind = _CONTRIBUTOR_HISTORY if contributors else _STATE_HISTORY
        paginator = self._cloudwatch.get_paginator("describe_alarm_history")
        pages = paginator.paginate(
            AlarmName=name,
            HistoryItemType=kind,
            StartDate=since,
            ScanBy="TimestampDescending",
            PaginationConfig={"PageSize": PAGE_SIZE, "MaxItems": limit},
        )
        transitions: list[Transition] = []
        for page in pages:
            items = page.get("AlarmHistoryItems") if isinstance(page, dict) else None
            for raw in items if isinstance(items, list) else []:
                transition = read_transition(raw, contributors=contributors)
                if transition is not None:
                    transitions.append(transition)
        return transitions[:limit]


def read_alarm(raw: Any) -> ObservedAlarm | UnreadableAlarm:
    """One MetricAlarm of DescribeAlarms' answer, or why it cannot be read."""
    try:
        alarm = _Alarm.model_validate(raw)
    except ValidationError as error:
        name = raw.get("AlarmName") if isinstance(raw, dict) else None
        return UnreadableAlarm(str(name or "an alarm")[:255], _reason(error))
    return ObservedAlarm(
        name=alarm.name,
        arn=alarm.arn,
        state=alarm.state,
        reason=_state_reason(alarm.reason),
        since=alarm.transitioned or alarm.updated,
        updated=alarm.updated,
        cluster=alarm.cluster,
    )


def read_contributors(page: Any) -> tuple[list[ObservedContributor], str | None]:
    """The contributors of one DescribeAlarmContributors page, and why the answer is not whole when one of them (or
    the page) cannot be read."""
    raws = page.get("AlarmContributors") if isinstance(page, dict) else None
    if not isinstance(raws, list):
        return [], "DescribeAlarmContributors answered no list of AlarmContributors"
    listed: list[ObservedContributor] = []
    unreadable: list[str] = []
    for raw in raws:
        try:
            contributor = _Contributor.model_validate(raw)
        except ValidationError as error:
            unreadable.append(_reason(error))
            continue
        attributes = tuple(sorted(contributor.attributes.items()))
        listed.append(
            ObservedContributor(contributor.id, attributes, _state_reason(contributor.reason), contributor.since)
        )
    why = f"a contributor could not be read ({unreadable[0]})" if unreadable else None
    return listed, why


def read_transition(raw: Any, *, contributors: bool) -> Transition | None:
    """One history item as the state it entered; None for one that cannot be read, or one of the other kind."""
    try:
        item = _HistoryItem.model_validate(raw)
        data = _HistoryData.model_validate(json.loads(item.data))
    except (ValidationError, ValueError):
        return None
    if contributors != (item.contributor is not None):
        return None
    contributor = None
    if item.contributor is not None:
        contributor = ObservedContributor(item.contributor, tuple(sorted(item.attributes.items())))
    return Transition(data.new_state.state, item.at, _state_reason(data.new_state.reason), contributor)


def _state_reason(reason: str | None) -> str | None:
    return reason if reason and len(reason) <= _MAX_STATE_REASON else None


def _refusal(error: Exception) -> str:
    """Why DescribeAlarmContributors gave no answer, as on-call is told it: CloudWatch's error code (its message, which
    may name the role and the account, is logged only)."""
    log.warning("DescribeAlarmContributors gave no answer: %s", str(error)[:500])
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code") or "an error")[:100]
        return f"DescribeAlarmContributors answered {code}"
    return f"DescribeAlarmContributors failed ({type(error).__name__})"


def _reason(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(p) for p in e['loc'])[:100]}: {e['msg'][:100]}" for e in error.errors()[:3]]
    return ("; ".join(problems))[:_MAX_REASON]
