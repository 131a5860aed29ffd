"""What moto's CloudWatch does not model, and the alarms' reconciliation reads (docs/sandbox.md#cloudwatch).

Installed as patches on moto's CloudWatch response class, like sandbox/ecs_emulation.py, so it works in decorator
mode and with the in-process moto server alike. While installed:

- An alarm can be set to a state as CloudWatch would put it there (`set_alarm`): its state, reason and the moment
  it changed, with its contributors in ALARM when it is a multi time series alarm. DescribeAlarms shows the moment
  its state value last changed as StateTransitionedTimestamp (moto has none) and StateUpdatedTimestamp, and answers
  in pages (MaxRecords up to 100, NextToken), which moto does not.
- DescribeAlarmContributors, which moto does not implement, lists the contributors in ALARM as last set, in pages of
  `contributor_page_size` (NextToken), each with its id, attributes, reason and StateTransitionedTimestamp; or
  answers the error set for the alarm (AccessDeniedException, ResourceNotFoundException, ...), as an account
  without the API or a role without the permission would. An alarm with no contributors set has none.
- DescribeAlarmHistory, which moto does not implement, lists the state changes `set_alarm` made (StateUpdate) and
  its contributors' (AlarmContributorStateUpdate: in ALARM when listed, OK when no longer listed), with CloudWatch's
  HistoryData (oldState, newState), from StartDate to EndDate, newest first unless ScanBy says otherwise, in pages.

Alarms are kept per account and Region, as moto keeps them (the account from the caller's credentials): `set_alarm`
sets one of `account_id` and `region` unless told another.

Only what the reconciliation reads is modelled: alarms are not evaluated against metrics, and no event is put on any
bus (a scenario replays an alarm's events as steps of their own, or loses them).
"""

from __future__ import annotations

import itertools
import json
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.cloudwatch import models as cloudwatch_models
from moto.cloudwatch.exceptions import ValidationError
from moto.cloudwatch.responses import CloudWatchResponse
from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
MAX_PAGE = 100
"""DescribeAlarms and DescribeAlarmHistory: MaxRecords from 1 to 100."""
CONTRIBUTOR_ERRORS = frozenset(
    {"AccessDeniedException", "ResourceNotFoundException", "ValidationError", "InvalidParameterValue"}
)
"""The errors DescribeAlarmContributors can be set to answer."""


class _Refused(ServiceException):
    """An error CloudWatch answers (its code is the instance's)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class Contributor:
    """One series of a multi time series alarm in ALARM."""

    id: str
    attributes: Mapping[str, str]
    reason: str
    since: datetime


@dataclass
class _Alarm:
    contributors: dict[str, Contributor] = field(default_factory=dict)
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CloudWatchEmulation:
    """Use as a context manager (or install()/uninstall()); one installed at a time per process."""

    account_id: str = DEFAULT_ACCOUNT
    region: str = DEFAULT_REGION
    contributor_page_size: int = 100
    """DescribeAlarmContributors' page size (CloudWatch does not document one; a scenario may make it small)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Every DescribeAlarmContributors and DescribeAlarmHistory request, in order: operation, alarm, error."""
    _alarms: dict[tuple[str, str, str], _Alarm] = field(default_factory=dict)
    """(account, Region, alarm name) -> what moto does not keep of it."""
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _tokens: itertools.count[int] = field(default_factory=itertools.count)

    # --- Setting alarms --------------------------------------------------------------------------------

    def set_alarm(
        self,
        name: str,
        state: str,
        reason: str,
        at: datetime,
        *,
        contributors: Sequence[Contributor] | None = None,
        error: str | None = None,
        account: str | None = None,
        region: str | None = None,
    ) -> None:
        """The alarm (created in moto before) is in `state` from `at` on, with `reason`; `contributors`, when given,
        are the series in ALARM from now on (each one's own moment), those no longer listed OK since `at`; `error` is
        what DescribeAlarmContributors answers instead of them (None: it answers). In `account` and `region` (default:
        the emulation's)."""
        if error and error not in CONTRIBUTOR_ERRORS:
            raise ValueError(f"DescribeAlarmContributors cannot be set to answer {error}: {sorted(CONTRIBUTOR_ERRORS)}")
        at = at.astimezone(UTC)
        where = (account or self.account_id, region or self.region)
        with self._lock:
            alarm = self._moto_alarm(name, *where)
            kept = self._alarms.setdefault((*where, name), _Alarm())
            before = (alarm.state_value, alarm.state_reason)
            if state != alarm.state_value or not hasattr(alarm, "state_transitioned_timestamp"):
                alarm.state_transitioned_timestamp = at
            alarm.update_state(reason, json.dumps({"version": "1.0"}), state)
            alarm.state_updated_timestamp = at
            if before != (state, reason):
                kept.history.append(_history_item(name, "StateUpdate", at, before, (state, reason)))
            if contributors is not None:
                self._contribute(name, kept, list(contributors), at)
            kept.error = error

    def contributors(self, name: str, account: str | None = None, region: str | None = None) -> list[Contributor]:
        with self._lock:
            kept = self._alarms.get((account or self.account_id, region or self.region, name))
            return list(kept.contributors.values()) if kept else []

    def _contribute(self, name: str, kept: _Alarm, contributors: list[Contributor], at: datetime) -> None:
        now = {contributor.id: contributor for contributor in contributors}
        for gone in kept.contributors.values():
            if gone.id not in now:
                before, after = ("ALARM", gone.reason), ("OK", "Threshold Crossed: no longer breaching")
                kept.history.append(_history_item(name, "AlarmContributorStateUpdate", at, before, after, gone))
        for new in contributors:
            old = kept.contributors.get(new.id)
            if old is None or old.since != new.since:
                before = ("OK", "") if old is None else ("ALARM", old.reason)
                item = _history_item(name, "AlarmContributorStateUpdate", new.since, before, ("ALARM", new.reason), new)
                kept.history.append(item)
        kept.contributors = now

    def _moto_alarm(self, name: str, account: str, region: str) -> Any:
        alarm = cloudwatch_models.cloudwatch_backends[account][region].alarms.get(name)
        if alarm is None:
            raise ValueError(f"no alarm {name!r} in moto: create it (PutMetricAlarm) before setting its state")
        return alarm

    # --- Installation ----------------------------------------------------------------------------------

    @property
    def backend(self) -> cloudwatch_models.CloudWatchBackend:
        return cloudwatch_models.cloudwatch_backends[self.account_id][self.region]

    def install(self) -> CloudWatchEmulation:
        with _install_lock:
            if _installed.active is not None:
                raise RuntimeError("a CloudWatchEmulation is already installed")
            _installed.active = self
            for name, replacement in _PATCHES.items():
                _originals[name] = CloudWatchResponse.__dict__.get(name)
                setattr(CloudWatchResponse, name, replacement)
        return self

    def uninstall(self) -> None:
        with _install_lock:
            if _installed.active is not self:
                return
            for name, original in _originals.items():
                if original is None:
                    delattr(CloudWatchResponse, name)
                else:
                    setattr(CloudWatchResponse, name, original)
            _originals.clear()
            _installed.active = None

    def __enter__(self) -> CloudWatchEmulation:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    # --- What the patches answer -------------------------------------------------------------------------

    def describe_alarms(self, response: CloudWatchResponse) -> ActionResult:
        original = _originals["describe_alarms"]
        if original is None:
            raise RuntimeError("moto's CloudWatch has no DescribeAlarms to page")
        answer = original(response)
        if not isinstance(answer, ActionResult) or not isinstance(answer.result, dict):
            raise RuntimeError("moto's DescribeAlarms answered something else than a result to page")
        result = dict(answer.result)
        alarms = sorted(result.get("MetricAlarms", []), key=lambda alarm: alarm.name)
        page, token = self._page(alarms, response, "describe_alarms")
        return ActionResult({**result, "MetricAlarms": page, **({"NextToken": token} if token else {})})

    def describe_alarm_contributors(self, response: CloudWatchResponse) -> ActionResult:
        name = str(response._get_param("AlarmName") or "")
        with self._lock:
            kept = self._alarms.get((response.current_account, response.region, name))
            self.requests.append(
                {"operation": "DescribeAlarmContributors", "alarm": name, "error": kept and kept.error}
            )
            if kept is not None and kept.error:
                raise _Refused(kept.error, f"DescribeAlarmContributors is set to answer {kept.error} for {name}")
            if name not in response.cloudwatch_backend.alarms:
                raise _Refused("ResourceNotFoundException", f"Alarm {name} does not exist.")
            listed = [
                {
                    "ContributorId": contributor.id,
                    "ContributorAttributes": dict(contributor.attributes),
                    "StateReason": contributor.reason,
                    "StateTransitionedTimestamp": contributor.since,
                }
                for contributor in (kept.contributors.values() if kept else [])
            ]
        page, token = self._page(listed, response, "contributors", size=self.contributor_page_size)
        return ActionResult({"AlarmContributors": page, **({"NextToken": token} if token else {})})

    def describe_alarm_history(self, response: CloudWatchResponse) -> ActionResult:
        name = str(response._get_param("AlarmName") or "")
        kind = response._get_param("HistoryItemType")
        start, end = _moment(response._get_param("StartDate")), _moment(response._get_param("EndDate"))
        with self._lock:
            self.requests.append({"operation": "DescribeAlarmHistory", "alarm": name, "type": kind})
            kept = self._alarms.get((response.current_account, response.region, name))
            items = [
                item
                for item in (kept.history if kept else [])
                if (kind is None or item["HistoryItemType"] == kind)
                and (start is None or item["Timestamp"] >= start)
                and (end is None or item["Timestamp"] <= end)
            ]
        newest_first = response._get_param("ScanBy") != "TimestampAscending"
        items.sort(key=lambda item: item["Timestamp"], reverse=newest_first)
        page, token = self._page(items, response, "history")
        return ActionResult({"AlarmHistoryItems": page, **({"NextToken": token} if token else {})})

    def _page(
        self, items: list[Any], response: CloudWatchResponse, operation: str, *, size: int | None = None
    ) -> tuple[list[Any], str | None]:
        """One page of `items` from the NextToken given (an offset this emulation handed out), and the next token."""
        limit = size or int(response._get_param("MaxRecords") or MAX_PAGE)
        if not 1 <= limit <= MAX_PAGE and size is None:
            raise ValidationError(f"MaxRecords must be from 1 to {MAX_PAGE}")
        token = response._get_param("NextToken")
        start = 0
        if token:
            kind, _, offset = str(token).partition(":")
            if kind != operation or not offset.isdigit():
                raise _Refused("InvalidNextToken", "The next token specified is invalid.")
            start = int(offset)
        page = items[start : start + limit]
        more = start + limit < len(items)
        return page, f"{operation}:{start + limit}" if more else None


def _history_item(
    name: str,
    kind: str,
    at: datetime,
    before: tuple[str, str],
    after: tuple[str, str],
    contributor: Contributor | None = None,
) -> dict[str, Any]:
    data = {
        "version": "1.0",
        "oldState": {"stateValue": before[0], "stateReason": before[1]},
        "newState": {"stateValue": after[0], "stateReason": after[1]},
    }
    item: dict[str, Any] = {
        "AlarmName": name,
        "AlarmType": "MetricAlarm",
        "Timestamp": at,
        "HistoryItemType": kind,
        "HistorySummary": f"Alarm updated from {before[0]} to {after[0]}",
        "HistoryData": json.dumps(data),
    }
    if contributor is not None:
        item["AlarmContributorId"] = contributor.id
        item["AlarmContributorAttributes"] = dict(contributor.attributes)
    return item


def _moment(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# --- Installation --------------------------------------------------------------------------------------


@dataclass
class _Installed:
    active: CloudWatchEmulation | None = None


_installed = _Installed()
_install_lock = threading.Lock()
_originals: dict[str, Callable[..., Any] | None] = {}


def _emulation() -> CloudWatchEmulation:
    if _installed.active is None:
        raise RuntimeError("CloudWatchEmulation is not installed")
    return _installed.active


def _patched_describe_alarms(self: CloudWatchResponse) -> ActionResult:
    return _emulation().describe_alarms(self)


def _patched_describe_alarm_contributors(self: CloudWatchResponse) -> ActionResult:
    return _emulation().describe_alarm_contributors(self)


def _patched_describe_alarm_history(self: CloudWatchResponse) -> ActionResult:
    return _emulation().describe_alarm_history(self)


_PATCHES: dict[str, Callable[[CloudWatchResponse], ActionResult]] = {
    "describe_alarms": _patched_describe_alarms,
    "describe_alarm_contributors": _patched_describe_alarm_contributors,
    "describe_alarm_history": _patched_describe_alarm_history,
}

# moto warns when an error code is not one of the operation's modelled errors (AccessDeniedException is a common
# error, not in CloudWatch's model): what a client sees is CloudWatch's answer all the same.
warnings.filterwarnings("ignore", message=r"Exception\(\w+\) with code \w+ does not match an error shape")
