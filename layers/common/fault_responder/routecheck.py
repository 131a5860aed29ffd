"""`make route EVENT=<file>`: which route and receivers each event reaches, without sending anything.

Events are applied in order to an in-memory incident store, so a DRAINING after an IMPAIRED is
attributed the way the deployed router would attribute it.

    python -m fault_responder.routecheck [--routing-file FILE] EVENT_FILE...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fault_responder import lifecycle
from fault_responder.dispatch import DeliveryFailure, Dispatcher
from fault_responder.domain import Notification
from fault_responder.models.events import UnsupportedEventError
from fault_responder.routing import Receiver, Router, RoutingConfig, context_for, load_routing
from fault_responder.service import AlertService
from fault_responder.store import MemoryIncidentStore


class _DryRunDispatcher(Dispatcher):
    """Records what would be delivered instead of delivering it."""

    def __init__(self, receivers: dict[str, Receiver]) -> None:
        self.receivers = receivers
        self.deliveries: list[tuple[Notification, list[str]]] = []

    def deliver(self, notification: Notification, receiver_names: list[str]) -> list[DeliveryFailure]:
        self.deliveries.append((notification, receiver_names))
        return []


def describe_receiver(name: str, receiver: Receiver) -> str:
    if receiver.slack is not None:
        target = receiver.slack.channel or f"webhook {receiver.slack.webhook}"
        return f"{name} (slack {target})"
    assert receiver.pagerduty is not None
    return f"{name} (pagerduty {receiver.pagerduty.service})"


def explain(paths: list[Path], routing: RoutingConfig) -> list[str]:
    router = Router(routing)
    dispatcher = _DryRunDispatcher(routing.receivers)
    service = AlertService(MemoryIncidentStore(), router, dispatcher, lifecycle.Settings())
    lines: list[str] = []
    for path in paths:
        for raw in _events_in(path):
            lines.append(f"{path}  (id {raw.get('id')})")
            dispatcher.deliveries.clear()
            try:
                result = service.handle(raw)
            except (ValidationError, UnsupportedEventError) as error:
                lines.append(f"  malformed: {error}".splitlines()[0])
                continue
            if result["ignored"] and not dispatcher.deliveries:
                lines.append(f"  no notification: {result['ignored']}")
            for notification, receivers in dispatcher.deliveries:
                lines.extend(_describe(notification, receivers, router, routing))
    return lines


def _describe(notification: Notification, receivers: list[str], router: Router, routing: RoutingConfig) -> list[str]:
    context = context_for(notification)
    subject = notification.incident.fingerprint if notification.incident else notification.alert.title  # type: ignore[union-attr]
    labels = ", ".join(
        f"{key}={context.value(key)}" for key in ("kind", "fault_class", "severity", "drain_attribution")
    )
    route = notification.incident.route if notification.incident else ",".join(router.route(context).routes)
    pager = "" if notification.page else "  (chat only: this step does not page)"
    if notification.retry:
        pager += "  (event already applied: only deliveries that did not go out are retried)"
    named = ", ".join(describe_receiver(name, routing.receivers[name]) for name in receivers) or "nobody"
    return [
        f"  {notification.action.value}: {subject}",
        f"    labels: {labels}",
        f"    route: {route or 'no route matched'} -> {named}{pager}",
    ]


def _events_in(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fault_responder.routecheck", description=__doc__.splitlines()[0])
    parser.add_argument("events", nargs="+", type=Path, help="EventBridge event files, applied in order")
    parser.add_argument("--routing-file", default="default.yaml", help="packaged name or a path (default.yaml)")
    args = parser.parse_args(argv)
    try:
        routing = load_routing(args.routing_file)
    except (OSError, ValidationError, ValueError) as error:
        print(f"invalid routing file {args.routing_file}: {error}", file=sys.stderr)
        return 2
    missing = [str(path) for path in args.events if not path.is_file()]
    if missing:
        print(f"no such event file: {', '.join(missing)}", file=sys.stderr)
        return 2
    print("\n".join(explain(args.events, routing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
