"""Times as people and APIs read them, in one place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def as_utc(moment: datetime) -> datetime:
    # A naive datetime can only come from our own code (events carry zones); read it as UTC.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def iso_utc(moment: datetime) -> str:
    return as_utc(moment).isoformat()


def format_duration(delta: timedelta) -> str:
    """`45s`, `8m 30s`, `2h 05m`, `3d 04h`: the two largest units are enough to judge an outage or lost work."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"
