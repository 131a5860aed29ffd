"""Recurring time intervals with Alertmanager's time_intervals semantics: times (24:00 included), weekday,
day-of-month (negative days), month and year ranges, locations across daylight-saving changes, and the errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.routing.timeintervals import TimeInterval, contains_any
from tests.conftest import ROOT

MINUTE = timedelta(minutes=1)


def interval(**fields: Any) -> TimeInterval:
    return TimeInterval.model_validate(fields)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def minutes_inside(window: TimeInterval, day: datetime) -> list[datetime]:
    """Every minute of the UTC day starting at `day` that the interval contains."""
    return [day + n * MINUTE for n in range(24 * 60) if window.contains(day + n * MINUTE)]


# --- Times ----------------------------------------------------------------------------------------------


def test_a_time_range_includes_its_start_minute_and_excludes_its_end_minute() -> None:
    window = interval(times=[{"start_time": "02:00", "end_time": "04:00"}])

    assert not window.contains(utc(2026, 11, 2, 1, 59, 59))
    assert window.contains(utc(2026, 11, 2, 2, 0))
    assert window.contains(utc(2026, 11, 2, 3, 59, 59))
    assert not window.contains(utc(2026, 11, 2, 4, 0))


def test_24_00_ends_a_range_at_midnight() -> None:
    window = interval(times=[{"start_time": "22:00", "end_time": "24:00"}])

    assert window.contains(utc(2026, 11, 2, 23, 59, 59))
    assert not window.contains(utc(2026, 11, 3, 0, 0))
    assert len(minutes_inside(window, utc(2026, 11, 2))) == 120


def test_a_night_window_is_written_as_two_ranges() -> None:
    night = interval(times=[{"start_time": "22:00", "end_time": "24:00"}, {"start_time": "00:00", "end_time": "06:00"}])

    assert night.contains(utc(2026, 11, 2, 23, 0))
    assert night.contains(utc(2026, 11, 3, 5, 59))
    assert not night.contains(utc(2026, 11, 3, 6, 0))


@pytest.mark.parametrize(
    ("times", "says"),
    [
        ({"start_time": "04:00", "end_time": "02:00"}, "must be after start_time"),
        ({"start_time": "22:00", "end_time": "02:00"}, "cannot cross midnight"),
        ({"start_time": "02:00", "end_time": "02:00"}, "must be after start_time"),
        ({"start_time": "24:00", "end_time": "24:00"}, "must be after start_time"),
        ({"start_time": "7:00", "end_time": "08:00"}, "'7:00' is not a time of day"),
        ({"start_time": "00:00", "end_time": "24:01"}, "'24:01' is not a time of day"),
        ({"start_time": "00:60", "end_time": "01:00"}, "'00:60' is not a time of day"),
        ({"start_time": 120, "end_time": "04:00"}, "120 is not a time of day"),
        ({"start_time": "02:00"}, "end_time"),
    ],
)
def test_a_bad_time_range_is_refused_naming_the_field(times: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says) as error:
        interval(times=[times])

    assert error.value.errors()[0]["loc"][:2] == ("times", 0)


# --- Weekdays, days of the month, months, years ---------------------------------------------------------


def test_a_weekday_range_is_inclusive_and_names_are_case_insensitive() -> None:
    workdays = interval(weekdays=["Monday:FRIDAY"])
    monday = utc(2026, 11, 2, 12, 0)

    assert [workdays.contains(monday + timedelta(days=n)) for n in range(7)] == [True] * 5 + [False] * 2


def test_a_weekend_is_two_days_not_a_range_that_wraps() -> None:
    weekend = interval(weekdays=["saturday", "sunday"])
    assert [weekend.contains(utc(2026, 11, 2 + n, 12, 0)) for n in range(7)] == [False] * 5 + [True] * 2

    with pytest.raises(ValidationError, match="sunday comes before saturday") as error:
        interval(weekdays=["saturday:sunday"])
    assert error.value.errors()[0]["loc"] == ("weekdays", 0)


@pytest.mark.parametrize(
    ("days", "month", "expected"),
    [
        (["-1"], (2026, 2), [28]),
        (["-1"], (2028, 2), [29]),  # a leap year
        (["-1"], (2026, 1), [31]),
        (["-3:-1"], (2026, 4), [28, 29, 30]),
        (["1:-1"], (2026, 2), list(range(1, 29))),
        ([1, -1], (2026, 6), [1, 30]),  # numbers as YAML reads them
        (["30"], (2026, 2), []),  # after the month's last day: skipped
        (["25:31"], (2026, 2), [25, 26, 27, 28]),  # clamped to the month
        (["-31:-28"], (2026, 2), [1]),  # begins before the month's first day: clamped to it
        (["-31:-29"], (2026, 2), []),  # ends before it: never
        (["1:7"], (2026, 11), [1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_days_of_the_month_count_from_either_end(days: list[Any], month: tuple[int, int], expected: list[int]) -> None:
    window = interval(days_of_month=days)
    first = utc(*month, 1, 12, 0)
    in_month = [first + timedelta(days=n) for n in range(31) if (first + timedelta(days=n)).month == month[1]]

    assert [moment.day for moment in in_month if window.contains(moment)] == expected


@pytest.mark.parametrize(
    ("days", "says"),
    [
        (["0"], "1 to 31, or -1"),
        (["32"], "32 is not a day of the month"),
        (["-32"], "-32 is not a day of the month"),
        (["-1:5"], "must end there too"),
        (["10:5"], "ends before it starts"),
        (["-1:-3"], "ends before it starts"),
        (["first"], "'first' is not a day of the month"),
        (["1:2:3"], "not a day of the month or a range"),
    ],
)
def test_a_bad_day_of_the_month_is_refused(days: list[str], says: str) -> None:
    with pytest.raises(ValidationError, match=says) as error:
        interval(days_of_month=days)

    assert error.value.errors()[0]["loc"] == ("days_of_month", 0)


def test_months_by_name_or_number_and_ranges() -> None:
    winter = interval(months=["january:february", "12"])
    spring = interval(months=["3:May"])

    assert [month for month in range(1, 13) if winter.contains(utc(2026, month, 15))] == [1, 2, 12]
    assert [month for month in range(1, 13) if spring.contains(utc(2026, month, 15))] == [3, 4, 5]


@pytest.mark.parametrize(
    ("months", "says"),
    [(["december:january"], "end month is before"), (["13"], "13 is not a month"), (["smarch"], "not a month")],
)
def test_a_bad_month_is_refused(months: list[str], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        interval(months=months)


def test_years_and_year_ranges() -> None:
    window = interval(years=[2026, "2028:2029"])

    assert [year for year in range(2025, 2031) if window.contains(utc(year, 6, 1))] == [2026, 2028, 2029]
    with pytest.raises(ValidationError, match="end year is before"):
        interval(years=["2027:2026"])


# --- Fields together, sets, locations -------------------------------------------------------------------


def test_every_field_given_must_contain_the_moment() -> None:
    # Given Saturdays 02:00-06:00 in the first week of November 2026
    window = interval(
        times=[{"start_time": "02:00", "end_time": "06:00"}],
        weekdays=["saturday"],
        days_of_month=["1:7"],
        months=["november"],
        years=[2026],
    )

    assert window.contains(utc(2026, 11, 7, 3, 0))
    assert not window.contains(utc(2026, 11, 7, 7, 0))  # the time
    assert not window.contains(utc(2026, 11, 14, 3, 0))  # the day of the month
    assert not window.contains(utc(2026, 11, 6, 3, 0))  # the weekday
    assert not window.contains(utc(2027, 11, 6, 3, 0))  # a Saturday in November 2027: the year


def test_an_interval_with_no_fields_contains_every_moment_and_a_set_any_of_its_intervals() -> None:
    weekend = interval(weekdays=["saturday", "sunday"])
    nights = interval(times=[{"start_time": "00:00", "end_time": "06:00"}])

    assert interval().contains(utc(2026, 11, 2, 12, 0))
    assert contains_any([weekend, nights], utc(2026, 11, 2, 3, 0))  # a Monday night
    assert contains_any([weekend, nights], utc(2026, 11, 7, 12, 0))  # a Saturday noon
    assert not contains_any([weekend, nights], utc(2026, 11, 2, 12, 0))  # a Monday noon
    assert not contains_any([], utc(2026, 11, 2, 12, 0))


def test_an_empty_list_is_refused_rather_than_read_as_never() -> None:
    with pytest.raises(ValidationError, match="at least 1 item") as error:
        interval(weekdays=[])

    assert error.value.errors()[0]["loc"] == ("weekdays",)


def test_a_window_in_a_location_follows_its_wall_clock_through_the_year() -> None:
    # Given 09:00-17:00 on the wall clock of New York
    office = interval(times=[{"start_time": "09:00", "end_time": "17:00"}], location="America/New_York")

    # Then it is 13:00-21:00 UTC in January (EST) and 14:00-22:00 UTC in July (EDT)
    assert (minutes_inside(office, utc(2026, 1, 15))[0], minutes_inside(office, utc(2026, 1, 15))[-1]) == (
        utc(2026, 1, 15, 14, 0),
        utc(2026, 1, 15, 21, 59),
    )
    assert minutes_inside(office, utc(2026, 7, 15))[0] == utc(2026, 7, 15, 13, 0)


def test_a_window_in_the_hour_that_spring_forward_skips_does_not_happen_that_day() -> None:
    # Given 02:00-03:00 Europe/Berlin: clocks go from 02:00 to 03:00 on Sunday 29 March 2026
    window = interval(times=[{"start_time": "02:00", "end_time": "03:00"}], location="Europe/Berlin")

    # Then the day before it is 01:00-02:00 UTC, on the day it does not happen, and the day after 00:00-01:00 UTC
    assert minutes_inside(window, utc(2026, 3, 28))[0] == utc(2026, 3, 28, 1, 0)
    assert minutes_inside(window, utc(2026, 3, 29)) == []
    assert minutes_inside(window, utc(2026, 3, 30))[0] == utc(2026, 3, 30, 0, 0)


def test_a_window_in_the_hour_that_fall_back_repeats_happens_twice() -> None:
    # Given 02:00-03:00 Europe/Berlin: clocks go from 03:00 back to 02:00 on Sunday 25 October 2026
    window = interval(times=[{"start_time": "02:00", "end_time": "03:00"}], location="Europe/Berlin")

    inside = minutes_inside(window, utc(2026, 10, 25))

    assert len(inside) == 120
    assert (inside[0], inside[-1]) == (utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 59))


def test_the_weekday_and_day_are_those_of_the_location() -> None:
    # Given Mondays in Tokyo: Sunday 15:00 UTC is already Monday 00:00 there
    tokyo_mondays = interval(weekdays=["monday"], days_of_month=["2"], location="Asia/Tokyo")

    assert tokyo_mondays.contains(utc(2026, 11, 1, 15, 0))
    assert not tokyo_mondays.contains(utc(2026, 11, 2, 15, 0))


def test_a_moment_with_an_offset_is_the_same_moment() -> None:
    window = interval(times=[{"start_time": "02:00", "end_time": "04:00"}])

    assert window.contains(datetime(2026, 11, 2, 5, 0, tzinfo=timezone(timedelta(hours=2))))


@pytest.mark.parametrize(
    ("location", "says"),
    [
        ("Europe/Atlantis", "not a time zone this runtime knows"),
        ("/etc/localtime", "not a time zone this runtime knows"),
        ("Local", "Lambda's local time is UTC"),
        ("", "IANA time zone name"),
    ],
)
def test_an_unknown_location_is_refused(location: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as error:
        interval(location=location)

    assert error.value.errors()[0]["loc"] == ("location",)


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        interval().contains(datetime(2026, 11, 2, 3, 0))


def test_an_interval_says_what_it_is() -> None:
    window = interval(
        times=[{"start_time": "02:00", "end_time": "04:00"}], weekdays=["saturday", "sunday"], location="Europe/Berlin"
    )

    assert str(window) == "02:00-04:00; weekdays saturday, sunday; Europe/Berlin"
    assert str(interval()) == "always (UTC)"


def test_utc_needs_no_zone_database_and_another_zone_says_what_is_missing(tmp_path: Any) -> None:
    # Given a Python with no zone database at all: an empty TZPATH and no tzdata package
    script = textwrap.dedent(
        """
        import sys
        sys.modules["tzdata"] = None
        from datetime import UTC, datetime
        from pydantic import ValidationError
        from fault_responder.routing.timeintervals import TimeInterval
        utc = TimeInterval.model_validate({"weekdays": ["monday"], "location": "UTC"})
        print(utc.contains(datetime(2026, 11, 2, 12, 0, tzinfo=UTC)))
        try:
            TimeInterval.model_validate({"location": "Europe/Berlin"})
        except ValidationError as error:
            print(error.errors()[0]["msg"])
        print("tzdata" in sys.modules and sys.modules["tzdata"] is not None)
        """
    )
    environment = {**os.environ, "PYTHONTZPATH": str(tmp_path), "PYTHONPATH": str(ROOT / "layers" / "common")}

    # When it checks a UTC interval and loads a Berlin one
    completed = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True
    )

    # Then UTC works, and Berlin is refused with what is missing
    lines = completed.stdout.splitlines()
    assert lines[0] == "True"
    assert "'Europe/Berlin' is not a time zone this runtime knows" in lines[1]
    assert "tzdata package" in lines[1]
    assert lines[2] == "False"
