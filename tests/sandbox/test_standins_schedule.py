"""The stand-ins' fault schedules (issue 14's worst day): per service, the first requests answered as usual, the next
N failing as written (a status, Slack's ok:false, a delay), then recovered; the list of faults SANDBOX_FAULTS and
scenario files always took still means "from the first request". Every request here goes over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from sandbox.errors import SandboxError
from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, StandIns

KEY = "gpu-training/0f1e2d3c4b5a6978/ACCELERATED_COMPUTE"


def trigger(standins: StandIns, dedup_key: str = KEY) -> int:
    event = {
        "routing_key": SANDBOX_ROUTING_KEY,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": {"summary": "XID 79 on gpu-a", "source": "gpu-a", "severity": "critical"},
    }
    return requests.post(standins.pagerduty_url, json=event, timeout=5).status_code


def post_message(standins: StandIns, text: str) -> tuple[int, Any]:
    """The HTTP status and the body (JSON, or the text of an injected error)."""
    answer = requests.post(
        f"{standins.slack_api_url}/chat.postMessage",
        json={"channel": "gpu-alerts", "text": text},
        headers={"Authorization": f"Bearer {DEFAULT_SLACK_TOKEN}"},
        timeout=5,
    )
    is_json = answer.headers["Content-Type"].startswith("application/json")
    return answer.status_code, answer.json() if is_json else answer.text


@pytest.fixture
def scheduled(request: pytest.FixtureRequest) -> Iterator[StandIns]:
    with StandIns(faults=request.param) as running:
        yield running


@pytest.mark.parametrize(
    "scheduled", [{"pagerduty": [{"pass": 2}, {"fail": 500, "times": 3}, 429, {"fail": 503}]}], indirect=True
)
def test_a_pagerduty_schedule_answers_exactly_as_written_then_recovers(scheduled: StandIns) -> None:
    # Given PagerDuty scheduled to answer two requests, then 500 three times, 429 once and 503 once
    # When nine triggers arrive, one after the other, each with its own dedup key
    answered = [trigger(scheduled, f"{KEY}#{n}") for n in range(9)]

    # Then they are answered in that order, and from the eighth on as usual (recovered)
    assert answered == [202, 202, 500, 500, 500, 429, 503, 202, 202]
    assert [r["fault"] for r in scheduled.requests] == [False, False, True, True, True, True, True, False, False]
    # and only what was answered 202 took effect: the failing requests opened no alert
    assert [a["dedup_key"] for a in scheduled.pagerduty_alerts()] == [f"{KEY}#{n}" for n in (0, 1, 7, 8)]
    assert scheduled.requests[5]["response"]["status"] == "throttled"


@pytest.mark.parametrize(
    "scheduled", [{"slack": ["ok_false", {"pass": 1}, {"fail": {"delay": 0.3}, "times": 2}]}], indirect=True
)
def test_a_slack_schedule_mixes_ok_false_passes_and_delays(scheduled: StandIns) -> None:
    # Given Slack scheduled to answer ok:false once, one request as usual, then two answers 0.3 s late
    # When four messages are posted
    answers, took = [], []
    for n in range(4):
        started = time.monotonic()
        answers.append(post_message(scheduled, f"message {n}"))
        took.append(time.monotonic() - started)

    # Then the first is refused with ok:false, the other three posted; the two after the pass came late
    assert [(status, body["ok"]) for status, body in answers] == [(200, False), (200, True), (200, True), (200, True)]
    assert took[2] >= 0.3 and took[3] >= 0.3
    assert took[1] < 0.3
    assert [m["text"] for m in scheduled.slack_channels()["gpu-alerts"]] == ["message 1", "message 2", "message 3"]
    assert [r.get("delay_seconds") for r in scheduled.requests] == [None, None, 0.3, 0.3]


@pytest.mark.parametrize("scheduled", [{"slack": [429, 500], "pagerduty": [500]}], indirect=True)
def test_a_plain_list_still_means_from_the_first_request(scheduled: StandIns) -> None:
    # Given the faults as SANDBOX_FAULTS always took them: a list per service
    # When three Slack posts and two PagerDuty triggers arrive
    slack = [post_message(scheduled, f"message {n}")[0] for n in range(3)]
    pagerduty = [trigger(scheduled, f"{KEY}#{n}") for n in range(2)]

    # Then the first requests of each service get those answers, in order, and the rest are answered as usual
    assert slack == [429, 500, 200]
    assert pagerduty == [500, 202]


def test_sandbox_faults_take_a_schedule() -> None:
    # Given SANDBOX_FAULTS with a schedule, as the README shows it
    environ = {"SANDBOX_FAULTS": '{"pagerduty": [{"pass": 1}, {"fail": 500, "times": 2}]}'}

    # When the stand-ins start with it and four triggers arrive
    with StandIns(faults=StandIns.faults_from_env(environ)) as standins:
        answered = [trigger(standins, f"{KEY}#{n}") for n in range(4)]

    # Then the first passed, the next two failed, and PagerDuty recovered
    assert answered == [202, 500, 500, 202]


@pytest.mark.parametrize(
    ("faults", "says"),
    [
        ('{"pagerduty": [{"pass": 0}]}', r"entry 1 of 1 \{'pass': 0\}: pass must be a whole number of requests from 1"),
        ('{"pagerduty": [500, {"fail": 500, "times": 1.5}]}', r"entry 2 of 2 .*: times must be a whole number"),
        ('{"pagerduty": [{"fail": 500, "times": 100001}]}', r"times must be .* to 100000, got 100001"),
        ('{"pagerduty": [{"times": 3}]}', r"times goes with fail, e\.g\."),
        ('{"pagerduty": [{"fail": 500, "tmes": 3}]}', r"unknown keys \['tmes'\]"),
        ('{"pagerduty": [{"pass": 1, "fail": 500}]}', r"\{\"pass\": n\} takes nothing else"),
        ('{"pagerduty": [{"fail": "ok_false"}]}', r"fail is not an HTTP status .*\{\"delay\": seconds\}$"),
        ('{"pagerduty": [{"fail": {"fail": 500}}]}', r"fail is not an HTTP status"),
        ('{"slack": [{"fail": {"delay": 121}, "times": 2}]}', r"delay must be a number of seconds from 0 to 120"),
        (
            '{"slack": [{"pause": 2}]}',
            r"is not an HTTP status .*, \{\"fail\": fault, \"times\": n\} or \{\"pass\": n\}",
        ),
        ('{"slack": {"faults": [{"pass": -1}], "latency": 1}}', r"pass must be a whole number"),
        ('{"slack": 500}', r"must be a list, e\.g\. \[429, 500\] or \[\{\"pass\": 1\}"),
    ],
)
def test_a_schedule_that_makes_no_sense_is_refused_saying_what_to_write(faults: str, says: str) -> None:
    # Given SANDBOX_FAULTS with a mistake; When it is read; Then the error names the service, the entry and the fix
    with pytest.raises(SandboxError, match=r"^faults: (slack|pagerduty): .*" + says):
        StandIns.faults_from_env({"SANDBOX_FAULTS": faults})
