"""`fault-responder route EVENT_FILE...` (`make route EVENT=<file>`): the route and receivers each event reaches,
sending nothing.

Events go through the real service, in order, against an in-memory store and channels that record what
would be sent instead of sending it, so a DRAINING after an IMPAIRED is attributed the way the deployed
router would attribute it, and each event shows only what it adds. When the routing file has time intervals,
they are listed first, and each subject whose routes name some says which receivers they mute at `--at`
(default: now).

    fault-responder route [--routing-file FILE] [--at ISO8601] [--organization ACCOUNT/REGION
                          [--account-names ID=NAME,...]] EVENT_FILE...

With `--organization` (the stack's own account and Region, as the organization's stack has them), events of other
accounts and Regions are handled as that stack handles them: the labels `account`, `account_name` and `region` that
routes may match, the accounts named by `--account-names` (as its AccountNames parameter).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts, accounts_of
from fault_responder.core.domain import Alert, Incident, Runbook
from fault_responder.events.ecs import UnsupportedEventError
from fault_responder.events.envelope import RejectedEvent, read_envelope
from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy
from fault_responder.noise.silences import iso
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.notification.receivers.kind import Capability
from fault_responder.notification.receivers.registry import describe, with_capability
from fault_responder.routing.router import (
    Receiver,
    RouteDecision,
    Router,
    RoutingConfig,
    alert_context,
    incident_context,
    load_routing,
)

_LABELS = ("kind", "fault_class", "severity", "drain_attribution")
_ORGANIZATION_LABELS = ("account", "account_name", "region")


def describe_receiver(name: str, receiver: Receiver) -> str:
    return describe(name, receiver)


def describe_time_intervals(routing: RoutingConfig) -> list[str]:
    if not routing.time_intervals:
        return []
    lines = ["time intervals:"]
    for name, intervals in routing.time_intervals.items():
        lines.append(f"  {name}: {' | '.join(str(interval) for interval in intervals)}")
    for route in routing.routes:
        if route.mute_time_intervals:
            lines.append(f"  route {route.name} is muted during {', '.join(route.mute_time_intervals)}")
        if route.active_time_intervals:
            lines.append(f"  route {route.name} is active only during {', '.join(route.active_time_intervals)}")
    return lines


def explain(
    paths: list[Path], routing: RoutingConfig, at: datetime | None = None, accounts: Accounts = SINGLE_ACCOUNT
) -> list[str]:
    router = Router(routing)
    channels = RecordingChannels()
    store = MemoryInstanceStore()
    # Each event is handled as of when it happened (its envelope's time), unless --at places them all at one
    # moment; after the last one, the sweep shows how things stand now.
    clock = _Clock(at)
    pagerduty = with_capability(routing.receivers, Capability.PAGE)
    policy = Policy(
        window_mutes=router.muted_receivers, inhibit_rules=tuple(routing.inhibit_rules), pagerduty_receivers=pagerduty
    )
    service = AlertService(
        StorePorts(store, store, store),
        router,
        ReceiverCourier(channels, clock=clock),
        lifecycle.Settings(hold_down=routing.flapping.hold_down, accounts=accounts),
        clock=clock,
        policy=policy,
        grouping=routing.grouping,
    )
    lines: list[str] = describe_time_intervals(routing)
    for path in paths:
        for raw in _events_in(path):
            lines.append(f"{path}  (id {raw.get('id')})")
            clock.reached(raw.get("time"))
            channels.sent.clear()
            try:
                result = service.handle(read_envelope(json.dumps(raw)))
            except (ValidationError, UnsupportedEventError, RejectedEvent) as error:
                lines.append(f"  malformed: {error}".splitlines()[0])
                continue
            if result["ignored"] and not channels.sent:
                lines.append(f"  no notification: {result['ignored']}")
            arn = _instance_arn(raw)
            record = store.load(arn) if arn else None
            view = service.derive(record) if record is not None else None
            receivers = {str(sent.receiver) for sent in channels.sent}
            if view is not None:
                labels = _LABELS + _ORGANIZATION_LABELS if accounts.organization else _LABELS
                lines.extend(_subjects(view.incidents, view.alerts, receivers, router, clock(), shown=labels))
                lines.extend(_quiet(view.incidents, view.alerts))
                lines.extend(_fleets(service, view.incidents))
            lines.extend(_sent(channels))
    if at is None:
        clock.now = datetime.now(UTC)
        channels.sent.clear()
        service.sweep(seconds_left=60.0)
        if channels.sent:
            lines.append(f"now ({iso(clock.now)}), the sweep: hold-downs over, updates that waited")
            lines.extend(_sent(channels))
    return lines


class _Clock:
    def __init__(self, at: datetime | None) -> None:
        self.fixed = at is not None
        self.now = at or datetime(1970, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def reached(self, stamp: object) -> None:
        if self.fixed or not isinstance(stamp, str):
            return
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return
        if moment.tzinfo is not None:
            self.now = max(self.now, moment)


def _sent(channels: RecordingChannels) -> list[str]:
    lines = []
    for sent in sorted(channels.sent, key=lambda sent: str(sent.receiver)):
        text = sent.text.splitlines()[0][:160] if sent.text else sent.target
        lines.append(f"    -> {sent.receiver}: {sent.service} {sent.action}: {text}")
    return lines


def _subjects(
    incidents: list[Incident],
    alerts: list[Alert],
    receivers: set[str],
    router: Router,
    at: datetime,
    *,
    shown: tuple[str, ...] = _LABELS,
) -> list[str]:
    routing = router.config
    lines: list[str] = []
    for incident in incidents:
        if not receivers & set(incident.receivers):
            continue
        context = incident_context(incident)
        action = "open" if incident.is_open else "resolve"
        labels = ", ".join(f"{key}={context.value(key)}" for key in shown)
        lines.append(f"  {action}: {incident.fingerprint} ({incident.phase})")
        lines.append(f"    labels: {labels}")
        lines.append(f"    route: {incident.route or 'no route matched'} -> {_named(incident.receivers, routing)}")
        lines.extend(_runbook(incident.runbook, router.route(context), routing))
        lines.extend(_muting(tuple(incident.route.split(",")) if incident.route else (), router, at))
    for alert in alerts:
        if alert.superseded_by is not None or not receivers & set(alert.receivers):
            continue
        context = alert_context(alert)
        labels = ", ".join(f"{key}={context.value(key)}" for key in shown)
        decision = router.route(context)
        route = ",".join(decision.routes) or "no route matched"
        lines.append(f"  notice: {alert.title}")
        lines.append(f"    labels: {labels}")
        lines.append(f"    route: {route} -> {_named(list(alert.receivers), routing)}")
        lines.extend(_runbook(alert.runbook, decision, routing))
        lines.extend(_muting(decision.routes, router, at))
    return lines


def _runbook(runbook: Runbook | None, decision: RouteDecision, routing: RoutingConfig) -> list[str]:
    """The line on-call will read and its link, and whether a route gave them or they are the defaults."""
    if runbook is None:
        return []
    given = next(
        (route.name for route in routing.routes if route.name in decision.routes and route.runbook is not None), None
    )
    source = f"from route {given}" if given else "default"
    return [f"    runbook ({source}): {runbook.action}", f"      link: {runbook.url}"]


def _muting(routes: tuple[str, ...], router: Router, at: datetime) -> list[str]:
    """What the routes' time intervals mute at `at`; nothing when they name none."""
    named = {route.name: route for route in router.config.routes}
    if not any(named[name].mute_time_intervals or named[name].active_time_intervals for name in routes):
        return []
    muted = router.muted_receivers(routes, at)
    if not muted:
        return [f"    at {iso(at)}: no receiver muted by time intervals"]
    return [f"    at {iso(at)}: {receiver} muted ({why})" for receiver, why in muted.items()]


def _named(names: list[str], routing: RoutingConfig) -> str:
    return ", ".join(describe_receiver(name, routing.receivers[name]) for name in names) or "nobody"


def _instance_arn(raw: dict[str, Any]) -> str | None:
    detail = raw.get("detail")
    value = detail.get("containerInstanceArn") if isinstance(detail, dict) else None
    return value if isinstance(value, str) else None


def _quiet(incidents: list[Incident], alerts: list[Alert]) -> list[str]:
    """Who hears nothing new of what this event touched, and why (a silence, an inhibition, a fleet, ...)."""
    lines: list[str] = []
    for subject, muted in [(i.fingerprint, i.muted) for i in incidents] + [(a.title, a.muted) for a in alerts]:
        lines.extend(f"  quiet for {receiver}: {why} ({subject})" for receiver, why in sorted(muted.items()))
    for incident in incidents:
        for entry in incident.timeline:
            if entry.muted:
                lines.append(f"  not posted: {entry.text} ({entry.muted})")
    if lines:
        return sorted(set(lines), key=lines.index)
    return []


def _fleets(service: AlertService, incidents: list[Incident]) -> list[str]:
    """The fleet incident an incident is part of, with how many instances it holds."""
    lines: list[str] = []
    for fleet_id in sorted({i.fleet_id for i in incidents if i.fleet_id}):
        lines.append(f"  part of fleet incident {fleet_id}")
    return lines


def _events_in(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def main(argv: Sequence[str] | None = None, prog: str = "fault-responder route") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("events", nargs="+", type=Path, help="EventBridge event files, applied in order")
    parser.add_argument("--routing-file", default="default.yaml", help="packaged name or a path (default.yaml)")
    parser.add_argument(
        "--at",
        type=_moment,
        help="the time at which time intervals are evaluated, ISO 8601 with an offset (default: now)",
    )
    parser.add_argument(
        "--organization",
        metavar="ACCOUNT/REGION",
        help="the organization's stack's own account and Region: events are handled as that stack handles them",
    )
    parser.add_argument("--account-names", metavar="ID=NAME,...", default="", help="with --organization: AccountNames")
    args = parser.parse_args(argv)
    accounts = SINGLE_ACCOUNT
    if args.organization is not None or args.account_names:
        home_account, _, home_region = (args.organization or "").partition("/")
        try:
            accounts = accounts_of(True, home_account, home_region, args.account_names, lambda: None)
        except RuntimeError as error:
            print(f"--organization ACCOUNT/REGION and --account-names: {error}", file=sys.stderr)
            return 2
    try:
        routing = load_routing(args.routing_file)
    except (OSError, ValidationError, ValueError) as error:
        print(f"invalid routing file {args.routing_file}: {error}", file=sys.stderr)
        return 2
    missing = [str(path) for path in args.events if not path.is_file()]
    if missing:
        print(f"no such event file: {', '.join(missing)}", file=sys.stderr)
        return 2
    print("\n".join(explain(args.events, routing, args.at, accounts)))
    return 0


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (2026-11-07T03:00:00Z)") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset: add Z or +HH:MM")
    return moment


if __name__ == "__main__":
    sys.exit(main())
