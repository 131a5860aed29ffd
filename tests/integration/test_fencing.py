"""A stalled lease holder never posts: each call to Slack or PagerDuty must end before the lease it is made under
can pass to another worker, checked immediately before the request goes out (fault_responder.adapters.http.fenced).

Two routers (two Lambdas) share the incidents store and the real HTTP stand-ins. The first handles a new fault
inside a short invocation and stalls between its budget check and its Slack post; while it stalls its lease
expires, and the second (the sweep) takes the lease and posts the root. When the first wakes, it must not post.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from fault_responder.adapters import http
from fault_responder.adapters.http import Budget, RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.alerting.service import AlertService, DeliveryPendingError
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.notification.delivery import Courier
from fault_responder.routing.router import Router, load_routing
from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, StandIns
from tests.conftest import load_event, vary

RUNS = 20
INVOCATION_SECONDS = 2.0
"""The stalled worker's time left: its lease ends then."""
STALL_SECONDS = 3.0
"""Longer than the invocation: the lease expires during the stall, and the sweep takes it over."""
SWEEP_AFTER = 2.3
FAST = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)


@pytest.fixture
def stand_ins() -> Iterator[StandIns]:
    with StandIns(pagerduty_routing_keys={SANDBOX_ROUTING_KEY}) as running:
        yield running


def router(store: MemoryInstanceStore, stand_ins: StandIns) -> tuple[AlertService, SecretChannels]:
    """An AlertRouter's service: its own channels (and budget), the shared store."""
    secrets = {
        "slack": {"bot_token": DEFAULT_SLACK_TOKEN, "webhook_urls": {}},
        "pagerduty": {"routing_keys": {"gpu-oncall": SANDBOX_ROUTING_KEY}},
    }
    channels = SecretChannels(
        fetch_secret=lambda name, force: secrets[name],
        slack_secret_name="slack",
        pagerduty_secret_name="pagerduty",
        slack_api_url=stand_ins.slack_api_url,
        pagerduty_url=stand_ins.pagerduty_url,
        policy=FAST,
    )
    courier = Courier(channels, clock=lambda: datetime.now(UTC))
    # A delivery thread for each of the runs' receivers, so that every run's Slack post starts (and stalls) at once.
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        courier,
        lifecycle.Settings(),
        workers=2 * RUNS,
    )
    return service, channels


class _Sessions:
    """The HTTP sessions (one per delivery thread) of one router's channels."""

    def __init__(self, channels: SecretChannels) -> None:
        self._channels = channels

    def __contains__(self, session: object) -> bool:
        return session is getattr(self._channels._local, "session", None)


def a_fault(run: int) -> dict[str, Any]:
    event = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    arn = event["detail"]["containerInstanceArn"] + f"r{run:02d}x"
    # A provider of its own: each run is a lone fault (no fleet incident gathers the runs).
    return vary(event, event_id=f"stall-{run}", containerInstanceArn=arn, capacityProviderName=f"p5-stall-{run}")


def test_a_holder_stalled_past_its_lease_never_posts_while_another_worker_posts_the_root(
    stand_ins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a store shared by two routers, and a stall injected into the first router's Slack posts between its
    # budget check and the send (the first post of each delivery thread of that router)
    store = MemoryInstanceStore()
    stalled, stalled_channels = router(store, stand_ins)
    sweeper, _ = router(store, stand_ins)
    stalled_channels.budget = Budget(INVOCATION_SECONDS, margin=0.0)
    original = http._post_once
    stalls = threading.local()
    stalled_posts: list[str] = []

    def stall_then_send(session: Any, url: str, payload: Any, **arguments: Any) -> Any:
        # After send_json's budget check, before the request is handed to the transport.
        if "chat.postMessage" in url and session in stalled_sessions and not getattr(stalls, "done", False):
            stalls.done = True
            stalled_posts.append(url)
            time.sleep(STALL_SECONDS)
        return original(session, url, payload, **arguments)

    stalled_sessions = _Sessions(stalled_channels)
    monkeypatch.setattr(http, "_post_once", stall_then_send)

    def run(number: int) -> str | None:
        try:
            stalled.handle(a_fault(number), seconds_left=INVOCATION_SECONDS)
        except DeliveryPendingError as error:
            return str(error)
        return None

    # When 20 faults are handled at once by the stalled router, and the sweep runs after their leases expired
    with ThreadPoolExecutor(max_workers=RUNS) as pool:
        handled = [pool.submit(run, number) for number in range(RUNS)]
        time.sleep(SWEEP_AFTER)
        swept = sweeper.sweep(seconds_left=60.0)
        outcomes = [job.result() for job in handled]

    # Then each fault has exactly one Slack root, the sweep's, and the stalled router says why it sent nothing
    roots = [m for messages in stand_ins.slack_channels().values() for m in messages if not m["thread_ts"]]
    per_fault = dict.fromkeys(range(RUNS), 0)
    for message in roots:
        for number in range(RUNS):
            if f"r{number:02d}x" in str(message.get("metadata")):
                per_fault[number] += 1
    assert swept["records"] >= RUNS
    assert per_fault == dict.fromkeys(range(RUNS), 1), per_fault
    # (refused by the fence, or finding the lease taken when it wakes; a fault whose Slack flush had not started when
    # the sweep took it over has nothing to say)
    assert all(outcome is None or "lease" in outcome for outcome in outcomes), outcomes
    assert len(stalled_posts) == RUNS  # every one of the stalled router's posts was reached, and stalled
