"""Recurring time intervals (maintenance windows, business hours), as Alertmanager's `time_intervals` define them.

An interval has optional fields; it contains a moment when every field it gives contains it, read on the wall
clock of its `location` (default UTC), so a window at 02:00 Europe/Berlin is at 02:00 local time on both sides
of a daylight-saving change:

- `times`: `start_time`/`end_time` as "HH:MM"; the start minute is included, the end minute is not, and "24:00"
  ends a range at midnight. A range cannot cross midnight: write two.
- `weekdays`: names, or inclusive ranges "monday:friday" (sunday is the first day: "saturday:sunday" is not a
  range; write [saturday, sunday]).
- `days_of_month`: 1 to 31, or -1 (the last day) to -31, or inclusive ranges "1:7", "-3:-1", "1:-1". A range
  is clamped to the month, and one that starts after the month's last day is skipped (30 in February).
- `months`: names or numbers 1 to 12, or inclusive ranges "january:march", "4:6".
- `years`: numbers or inclusive ranges "2026:2027".
- `location`: an IANA time zone name (`Europe/Berlin`), or `UTC`.

Names are case-insensitive. A field left out contains every moment; a field given as an empty list is refused
(Alertmanager would read it as "never"). A named set of intervals contains a moment when any of them does.

Zones other than UTC need the IANA database: the system's, else the `tzdata` package (pinned in the layer's
requirements.txt), which `zoneinfo` reads only when the system has no database and a zone other than UTC is named.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, PrivateAttr, model_validator

WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
"""Index = the day's number, Sunday first, as in Alertmanager (and Go)."""
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
MINUTES_PER_DAY = 24 * 60
_TIME = re.compile(r"^(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]|24:00)$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True, slots=True)
class DayRange:
    """An inclusive range of whole numbers (weekdays, days of the month, months, years) and how it was written."""

    begin: int
    end: int
    text: str

    def contains(self, value: int) -> bool:
        return self.begin <= value <= self.end


def _parts(value: Any, what: str) -> tuple[str, str, str]:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"a {what} is a string or a number, not {value!r}")
    text = str(value).strip().lower()
    if text.count(":") > 1:
        raise ValueError(f"{value!r} is not a {what} or a range of them (begin:end)")
    begin, _, end = text.partition(":")
    return text, begin, end or begin


def _weekday(value: Any) -> DayRange:
    text, begin, end = _parts(value, "weekday")
    days = [_named(part, WEEKDAYS, "weekday") for part in (begin, end)]
    if days[0] > days[1]:
        raise ValueError(
            f"{text!r}: {end} comes before {begin} in the week (the week starts on sunday); list the days instead"
        )
    return DayRange(days[0], days[1], text)


def _month(value: Any) -> DayRange:
    text, begin, end = _parts(value, "month")
    months = [_month_number(part) for part in (begin, end)]
    if months[0] > months[1]:
        raise ValueError(f"{text!r}: the end month is before the start month")
    return DayRange(months[0], months[1], text)


def _month_number(text: str) -> int:
    return _number(text, 1, 12, "month") if _INTEGER.match(text) else 1 + _named(text, MONTHS, "month")


def _day_of_month(value: Any) -> DayRange:
    text, begin, end = _parts(value, "day of the month")
    days = [_number(part, -31, 31, "day of the month") for part in (begin, end)]
    if 0 in days:
        raise ValueError(f"{text!r}: days of the month are 1 to 31, or -1 (the last day) to -31")
    if days[0] < 0 < days[1]:
        raise ValueError(f"{text!r}: a range that starts from the end of the month (negative) must end there too")
    # Within the shortest month (28 days) a range must not end before it starts, whatever the signs.
    shortest = [day if day > 0 else 28 + day + 1 for day in days]
    if shortest[0] > shortest[1]:
        raise ValueError(f"{text!r}: the range ends before it starts")
    return DayRange(days[0], days[1], text)


def _year(value: Any) -> DayRange:
    text, begin, end = _parts(value, "year")
    years = [_number(part, 1, 9999, "year") for part in (begin, end)]
    if years[0] > years[1]:
        raise ValueError(f"{text!r}: the end year is before the start year")
    return DayRange(years[0], years[1], text)


def _named(text: str, names: Sequence[str], what: str) -> int:
    if text not in names:
        raise ValueError(f"{text!r} is not a {what} ({', '.join(names)})")
    return names.index(text)


def _number(text: str, low: int, high: int, what: str) -> int:
    if not _INTEGER.match(text):
        raise ValueError(f"{text!r} is not a {what}")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{number} is not a {what} ({low} to {high})")
    return number


def _minute(value: Any) -> int:
    if not isinstance(value, str) or not _TIME.match(value):
        raise ValueError(f'{value!r} is not a time of day: write "HH:MM", from "00:00" to "24:00"')
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


def _location(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a location is an IANA time zone name such as Europe/Berlin, or UTC")
    if value == "Local":
        raise ValueError("'Local' is not accepted: Lambda's local time is UTC; name the zone (Europe/Berlin)")
    _zone(value)
    return value


def _zone(name: str) -> tzinfo:
    if name in ("UTC", "Etc/UTC"):
        return UTC
    # Imported here: a routing file without a location other than UTC never loads a zone database.
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone this runtime knows (an IANA name such as Europe/Berlin or America/New_York;"
            " the zone database comes from the system, else from the tzdata package)"
        ) from None


Weekday = Annotated[DayRange, PlainValidator(_weekday)]
DayOfMonth = Annotated[DayRange, PlainValidator(_day_of_month)]
Month = Annotated[DayRange, PlainValidator(_month)]
Year = Annotated[DayRange, PlainValidator(_year)]
Minute = Annotated[int, PlainValidator(_minute)]
Location = Annotated[str, PlainValidator(_location)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeRange(_Strict):
    start_time: Minute
    end_time: Minute

    @model_validator(mode="after")
    def _forwards(self) -> TimeRange:
        if self.start_time >= self.end_time:
            raise ValueError(
                f"end_time {_clock(self.end_time)} must be after start_time {_clock(self.start_time)}"
                " (a range cannot cross midnight: write two)"
            )
        return self

    def contains(self, minute_of_day: int) -> bool:
        return self.start_time <= minute_of_day < self.end_time

    def __str__(self) -> str:
        return f"{_clock(self.start_time)}-{_clock(self.end_time)}"


def _nonempty(field: str) -> Any:
    return Field(default=None, min_length=1, description=f"Leave {field} out to match every moment.")


class TimeInterval(_Strict):
    times: list[TimeRange] | None = _nonempty("times")
    weekdays: list[Weekday] | None = _nonempty("weekdays")
    days_of_month: list[DayOfMonth] | None = _nonempty("days_of_month")
    months: list[Month] | None = _nonempty("months")
    years: list[Year] | None = _nonempty("years")
    location: Location | None = None

    _zone: tzinfo = PrivateAttr(default=UTC)

    def model_post_init(self, context: Any, /) -> None:
        if self.location is not None:
            self._zone = _zone(self.location)

    def contains(self, moment: datetime) -> bool:
        """Whether `moment` (timezone-aware) falls in this interval, on the wall clock of its location."""
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"a time interval is checked against a timezone-aware time, not {moment!r}")
        local = moment.astimezone(self._zone)
        if self.times is not None and not any(span.contains(local.hour * 60 + local.minute) for span in self.times):
            return False
        weekday = (local.weekday() + 1) % 7  # Python counts from Monday, Alertmanager from Sunday
        if self.weekdays is not None and not any(days.contains(weekday) for days in self.weekdays):
            return False
        if self.days_of_month is not None and not any(_day_in(days, local) for days in self.days_of_month):
            return False
        if self.months is not None and not any(months.contains(local.month) for months in self.months):
            return False
        return self.years is None or any(years.contains(local.year) for years in self.years)

    def __str__(self) -> str:
        parts = []
        if self.times is not None:
            parts.append(" or ".join(str(span) for span in self.times))
        for name, ranges in (
            ("weekdays", self.weekdays),
            ("days_of_month", self.days_of_month),
            ("months", self.months),
            ("years", self.years),
        ):
            if ranges is not None:
                parts.append(f"{name} {', '.join(item.text for item in ranges)}")
        parts.append(self.location or "UTC")
        return "; ".join(parts) if len(parts) > 1 else f"always ({parts[0]})"


def contains_any(intervals: Sequence[TimeInterval], moment: datetime) -> bool:
    """A named set of intervals contains a moment when any of its intervals does."""
    return any(interval.contains(moment) for interval in intervals)


def _day_in(days: DayRange, local: datetime) -> bool:
    last = calendar.monthrange(local.year, local.month)[1]
    begin = days.begin if days.begin > 0 else last + days.begin + 1
    end = days.end if days.end > 0 else last + days.end + 1
    if begin > last:
        return False
    return max(begin, 1) <= local.day <= min(end, last)


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"
