"""Shared builders: events come from events/ (the same files users replay), varied per test."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"


def load_event(relative: str) -> dict[str, Any]:
    return json.loads((EVENTS / relative).read_text(encoding="utf-8"))


def vary(
    event: dict[str, Any], *, event_id: str | None = None, time: str | None = None, **detail: Any
) -> dict[str, Any]:
    """A copy of an event with a new id/time and some detail fields replaced."""
    varied = copy.deepcopy(event)
    if event_id is not None:
        varied["id"] = event_id
    if time is not None:
        varied["time"] = time
    varied["detail"].update(detail)
    return varied


def health_check(event: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of a Health Change event whose single health check has some fields replaced."""
    varied = copy.deepcopy(event)
    varied["detail"]["healthChecks"][0].update(fields)
    return varied


@pytest.fixture
def xid46() -> dict[str, Any]:
    return load_event("aws-docs/health-change-accelerated-compute-xid46.json")
