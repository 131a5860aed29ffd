"""What a test reads back from the stand-ins: a copy it may change freely, and with `where`, only what it selects
(tests/integration/test_concurrency.py reads after each of its runs, among every earlier run's messages)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.standins import StandIns
from tests.sandbox.test_standins_schedule import KEY, post_message, trigger


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns() as running:
        yield running


def test_where_selects_messages_alerts_and_requests_and_what_is_read_is_a_copy(standins: StandIns) -> None:
    # Given two Slack messages and two PagerDuty alerts
    for text in ("run 1", "run 2"):
        assert post_message(standins, text)[0] == 200
    assert trigger(standins, f"{KEY}#1") == 202
    assert trigger(standins, f"{KEY}#2") == 202

    # When a test reads those of the second only
    channels = standins.slack_channels(where=lambda message: message["text"] == "run 2")
    alerts = standins.pagerduty_alerts(where=lambda alert: alert["dedup_key"].endswith("#2"))
    requests = standins.requests_since(0, where=lambda request: "#2" in str(request["body"]))

    # Then it gets those, and nothing else
    assert [m["text"] for m in channels["gpu-alerts"]] == ["run 2"]
    assert [a["dedup_key"] for a in alerts] == [f"{KEY}#2"]
    assert len(requests) == 1 and requests[0]["body"]["dedup_key"] == f"{KEY}#2"

    # And changing what it read changes nothing the stand-ins keep
    channels["gpu-alerts"][0]["text"] = "changed"
    alerts[0]["dedup_key"] = "changed"
    requests[0]["body"]["dedup_key"] = "changed"
    assert [m["text"] for m in standins.slack_channels()["gpu-alerts"]] == ["run 1", "run 2"]
    assert [a["dedup_key"] for a in standins.pagerduty_alerts()] == [f"{KEY}#1", f"{KEY}#2"]
    assert [r["body"].get("dedup_key") for r in standins.requests][-2:] == [f"{KEY}#1", f"{KEY}#2"]
