"""Declarative routing: which receivers hear about what, in the spirit of Alertmanager.

A routing file (YAML, packaged under fault_responder/routing/routes/) names receivers (Slack channels,
Slack webhooks, PagerDuty services, Microsoft Teams Workflows webhooks, signed webhooks) and an ordered list of
routes. Each route has matchers; the first route that matches wins, unless it says `continue: true`, in which case
later routes are tried too. A route may name recurring time intervals (fault_responder.routing.timeintervals)
during which its receivers are muted (`mute_time_intervals`), or outside of which they are (`active_time_intervals`).
See docs/routing.md and docs/silences.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator, model_validator

from fault_responder.core.domain import Alert, Incident, Severity, Where
from fault_responder.routing.matchers import LABEL_NAMES, Matcher, MatcherError, parse_matcher
from fault_responder.routing.runbooks import check_action, check_https_url
from fault_responder.routing.timeintervals import TimeInterval, contains_any

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
MATCHER_KEYS = (
    "kind",
    "cluster",
    "capacity_provider",
    "check_type",
    "fault_class",
    "severity",
    "drain_attribution",
    "fleet",
    "drill",
    "account",
    "account_name",
    "region",
)
GroupLabel = Literal[
    "cluster", "capacity_provider", "check_type", "fault_class", "xid", "severity", "account", "account_name", "region"
]
"""What fleet incidents may be grouped by. A fleet never spans accounts or Regions, whatever this says
(fault_responder.noise.fleet): `account` and `region` only put them first in its key and its name, and `account_name`
groups as `account` does (an account has one name, which may change; its id does not)."""
_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def parse_duration(text: str) -> timedelta:
    """`90s`, `10m`, `1h30m`, `2h`: a positive duration."""
    found = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if found is None or not any(found.groupdict().values()):
        raise ValueError(f"{text!r} is not a duration: write e.g. 90s, 10m, 1h30m")
    hours, minutes, seconds = (int(found[part] or 0) for part in ("h", "m", "s"))
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackTarget(_Strict):
    channel: str | None = Field(default=None, min_length=1, description="Bot-token mode: channel name or id.")
    webhook: Name | None = Field(default=None, description="Webhook mode: a key of the Slack secret's webhook_urls.")

    @model_validator(mode="after")
    def _one_mode(self) -> SlackTarget:
        if (self.channel is None) == (self.webhook is None):
            raise ValueError("a slack receiver needs exactly one of 'channel' (bot token) or 'webhook'")
        return self


class PagerDutyTarget(_Strict):
    service: Name = Field(description="A key of the PagerDuty secret's routing_keys.")


class TeamsTarget(_Strict):
    """`teams: {webhook: <name>}`: the name of a URL in the Teams secret's `webhook_urls` (docs/teams.md). The URL
    itself is the secret; the routing file never holds it. (Here, with the schema it is a field of; posting to it is
    fault_responder.notification.receivers.teams.)"""

    webhook: Name = Field(description="A key of the Teams secret's webhook_urls.")


WEBHOOK_DEFAULT_MAX_ALERTS = 100
"""Alerts one webhook payload carries at most unless its target says otherwise; the rest are counted in
truncatedAlerts."""
WEBHOOK_MOST_ALERTS = 1000


class WebhookTarget(_Strict):
    """`webhook: {endpoint: ops-tool, max_alerts: 100}`: an endpoint of the webhook secret, whose URL and signing
    secrets live in Secrets Manager, never in the routing file (docs/webhook.md,
    fault_responder.notification.receivers.webhook)."""

    endpoint: Name = Field(description="A key of the webhook secret's endpoints: its url and signing_secrets.")
    max_alerts: int = Field(
        default=WEBHOOK_DEFAULT_MAX_ALERTS,
        ge=0,
        le=WEBHOOK_MOST_ALERTS,
        description="Alerts one payload carries at most (0: as many as fit in MAX_BODY_BYTES); the alerts left "
        "out are counted in truncatedAlerts, as Alertmanager's max_alerts does.",
    )


class Receiver(_Strict):
    """A receiver of the routing file: exactly one target, under its kind's key. A kind of receiver is a field here
    (its key and its target's model) and a package of fault_responder.notification.receivers, registered by that key
    (docs/architecture.md, "Where to add a receiver"); nothing else names a kind."""

    slack: SlackTarget | None = None
    pagerduty: PagerDutyTarget | None = None
    teams: TeamsTarget | None = None
    webhook: WebhookTarget | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Receiver:
        given = [key for key in KINDS if getattr(self, key) is not None]
        if len(given) != 1:
            known = ", ".join(f"'{key}'" for key in KINDS)
            raise ValueError(f"a receiver needs exactly one of {known} (given: {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> str:
        """Its kind: the routing file's key of its target ("slack", "pagerduty", "teams", "webhook")."""
        return next(key for key in KINDS if getattr(self, key) is not None)

    @property
    def target(self) -> BaseModel:
        """Its target, of its kind's model."""
        target: BaseModel = getattr(self, self.kind)
        return target


KINDS: tuple[str, ...] = tuple(Receiver.model_fields)
"""The kinds of receiver a routing file may name, by their key."""


class RouteRunbook(_Strict):
    """A route's own runbook for what it routes, in place of the defaults (fault_responder.routing.runbooks)."""

    url: str | None = Field(default=None, description="An https link that replaces the default link.")
    action: str | None = Field(default=None, description="One line that replaces the default what-to-do.")

    @field_validator("url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        return None if value is None else check_https_url(value)

    @field_validator("action")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return None if value is None else check_action(value)

    @model_validator(mode="after")
    def _says_something(self) -> RouteRunbook:
        if self.url is None and self.action is None:
            raise ValueError("a runbook needs 'url', 'action' or both")
        return self


class Route(_Strict):
    name: Name
    match: dict[str, list[str]] = Field(default_factory=dict)
    receivers: list[Name] = Field(min_length=1)
    continue_: bool = Field(default=False, alias="continue")
    runbook: RouteRunbook | None = None
    mute_time_intervals: list[Name] = Field(default_factory=list)
    """Its receivers hear nothing from this route while any of these intervals contains the moment."""
    active_time_intervals: list[Name] = Field(default_factory=list)
    """When given, its receivers hear nothing from this route while none of these intervals contains the moment."""

    @field_validator("match", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: [item] if isinstance(item, str) else item for key, item in value.items()}
        return value

    @field_validator("match")
    @classmethod
    def _known_keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        unknown = sorted(set(value) - set(MATCHER_KEYS))
        if unknown:
            raise ValueError(f"unknown matcher {unknown}; use {list(MATCHER_KEYS)}")
        return value


def _duration(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


Duration = Annotated[timedelta, BeforeValidator(_duration)]


def _default_group() -> list[GroupLabel]:
    return ["cluster", "capacity_provider", "check_type"]


class Grouping(_Strict):
    """Fleet incidents: `threshold` open faults of one group within `window` become one incident."""

    enabled: bool = True
    by: list[GroupLabel] = Field(default_factory=_default_group, min_length=1)
    threshold: int = Field(default=3, ge=2, le=1000)
    window: Duration = timedelta(minutes=10)

    @field_validator("window")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0) or value > timedelta(days=1):
            raise ValueError("window must be more than 0s and at most 24h")
        return value


class Flapping(_Strict):
    """A check must hold OK for `hold_down` before its incident resolves; a relapse within it is the same one."""

    hold_down: Duration = timedelta(minutes=10)

    @field_validator("hold_down")
    @classmethod
    def _bounded(cls, value: timedelta) -> timedelta:
        if value < timedelta(0) or value > timedelta(hours=6):
            raise ValueError("hold_down must be between 0s and 6h")
        return value


class InhibitRule(_Strict):
    """While an open incident matches `source_matchers`, what matches `target_matchers` and has the same values
    for the `equal` labels notifies nobody (it is still recorded)."""

    name: Name
    source_matchers: list[str] = Field(min_length=1)
    target_matchers: list[str] = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)

    @field_validator("source_matchers", "target_matchers")
    @classmethod
    def _readable(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                parse_matcher(text)
            except MatcherError as error:
                raise ValueError(str(error)) from None
        return value

    @field_validator("equal")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(LABEL_NAMES))
        if unknown:
            raise ValueError(f"unknown labels {unknown} in equal; labels are {list(LABEL_NAMES)}")
        return value

    @property
    def sources(self) -> tuple[Matcher, ...]:
        return tuple(parse_matcher(text) for text in self.source_matchers)

    @property
    def targets(self) -> tuple[Matcher, ...]:
        return tuple(parse_matcher(text) for text in self.target_matchers)


class RoutingConfig(_Strict):
    version: Literal[1] = 1
    receivers: dict[Name, Receiver] = Field(min_length=1)
    routes: list[Route] = Field(min_length=1)
    time_intervals: dict[Name, Annotated[list[TimeInterval], Field(min_length=1)]] = Field(default_factory=dict)
    grouping: Grouping = Field(default_factory=Grouping)
    flapping: Flapping = Field(default_factory=Flapping)
    inhibit_rules: list[InhibitRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> RoutingConfig:
        names = [route.name for route in self.routes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"route names must be unique: {duplicates}")
        for route in self.routes:
            missing = [name for name in route.receivers if name not in self.receivers]
            if missing:
                raise ValueError(f"route {route.name!r} names unknown receivers {missing}")
            for field in ("mute_time_intervals", "active_time_intervals"):
                unknown = [name for name in getattr(route, field) if name not in self.time_intervals]
                if unknown:
                    known = sorted(self.time_intervals) or "none: define them under time_intervals"
                    raise ValueError(f"route {route.name!r} names unknown {field} {unknown} (known: {known})")
        rules = [rule.name for rule in self.inhibit_rules]
        repeated = sorted({name for name in rules if rules.count(name) > 1})
        if repeated:
            raise ValueError(f"inhibit rule names must be unique: {repeated}")
        return self


@dataclass(frozen=True, slots=True)
class RouteContext:
    """The labels a route can match on; None matches only the literal value "none"."""

    kind: str
    cluster: str
    capacity_provider: str | None
    check_type: str | None
    fault_class: str
    severity: Severity
    drain_attribution: str | None
    fleet: str = "false"
    """"true" for a fleet incident."""
    drill: str = "false"
    """"true" for what a drill reported (source fault-responder.drill)."""
    account: str = ""
    """The account it happened in (the event's `account`)."""
    region: str = ""
    """The Region it happened in (the event's `region`)."""
    account_name: str | None = None
    """The account's name, in organization mode (AccountNames, else AWS Organizations); None when not known."""

    def value(self, key: str) -> str:
        raw = getattr(self, key)
        return "none" if raw is None else str(raw)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    routes: tuple[str, ...]
    receivers: tuple[str, ...]
    runbook: RouteRunbook | None = None
    """The runbook of the first matched route that has one: what it routes uses it instead of the defaults."""


class Router:
    def __init__(self, config: RoutingConfig) -> None:
        self.config = config

    def route(self, context: RouteContext) -> RouteDecision:
        routes: list[str] = []
        receivers: list[str] = []
        for route in self.config.routes:
            if not _matches(route, context):
                continue
            routes.append(route.name)
            receivers.extend(name for name in route.receivers if name not in receivers)
            if not route.continue_:
                break
        return RouteDecision(tuple(routes), tuple(receivers), self._runbook(routes))

    def _runbook(self, matched: list[str]) -> RouteRunbook | None:
        return next((r.runbook for r in self.config.routes if r.name in matched and r.runbook is not None), None)

    def muted_receivers(self, routes: tuple[str, ...], now: datetime) -> dict[str, str]:
        """Of the receivers of these matched routes (a decision's `routes`), those muted at `now`, each with why.

        A receiver is muted when every one of these routes that lists it is muted: `now` is inside one of the
        route's mute_time_intervals, or the route has active_time_intervals and `now` is inside none of them.
        """
        by_name = {route.name: route for route in self.config.routes}
        unknown = [name for name in routes if name not in by_name]
        if unknown:
            raise ValueError(f"no routes named {unknown} in the routing file")
        reasons: dict[str, list[str]] = {}
        heard: set[str] = set()
        for name in routes:
            route = by_name[name]
            why = self._muted(route, now)
            for receiver in route.receivers:
                if why is None:
                    heard.add(receiver)
                else:
                    reasons.setdefault(receiver, []).append(why)
        return {receiver: "; ".join(why) for receiver, why in reasons.items() if receiver not in heard}

    def _muted(self, route: Route, now: datetime) -> str | None:
        intervals = self.config.time_intervals
        for name in route.mute_time_intervals:
            if contains_any(intervals[name], now):
                return f"route {route.name}: in mute time interval {name}"
        if route.active_time_intervals and not any(
            contains_any(intervals[name], now) for name in route.active_time_intervals
        ):
            return f"route {route.name}: outside active time intervals {', '.join(route.active_time_intervals)}"
        return None


def _matches(route: Route, context: RouteContext) -> bool:
    return all(
        any(fnmatchcase(context.value(key), pattern) for pattern in patterns) for key, patterns in route.match.items()
    )


def name_of(where: Where | None) -> str | None:
    """The `account_name` a route matches: the account's name, None (matched as `none`) when it is not known."""
    return where.name or None if where is not None else None


def incident_context(incident: Incident) -> RouteContext:
    """An incident is routed as the fault it is (kind `health_impaired`, or `alarm` for an alarm's), from its open
    to its resolve."""
    return RouteContext(
        kind=incident.kind.value,
        cluster=incident.instance.cluster_name,
        capacity_provider=incident.instance.capacity_provider,
        check_type=incident.check_type,
        fault_class=incident.classification.fault_class.value,
        severity=incident.classification.severity,
        drain_attribution=incident.drain.cause.value if incident.drain else None,
        drill="true" if incident.instance.drill else "false",
        account=incident.instance.account,
        region=incident.instance.region,
        account_name=name_of(incident.where),
    )


def alert_context(alert: Alert) -> RouteContext:
    return RouteContext(
        kind=alert.kind.value,
        cluster=alert.instance.cluster_name,
        capacity_provider=alert.instance.capacity_provider,
        check_type=None,
        fault_class=alert.fault_class.value,
        severity=alert.severity,
        drain_attribution=alert.drain.cause.value if alert.drain else None,
        drill="true" if alert.instance.drill else "false",
        account=alert.instance.account,
        region=alert.instance.region,
        account_name=name_of(alert.where),
    )


def load_routing(name_or_path: str) -> RoutingConfig:
    """Load a packaged routing file by name (e.g. "default.yaml"), or any file by path."""
    path = Path(name_or_path)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
    else:
        if "/" in name_or_path or "\\" in name_or_path:
            raise FileNotFoundError(f"routing file not found: {name_or_path}")
        packaged = resources.files("fault_responder.routing") / "routes" / name_or_path
        if not packaged.is_file():
            raise FileNotFoundError(f"no packaged routing file named {name_or_path!r}")
        text = packaged.read_text(encoding="utf-8")
    return RoutingConfig.model_validate(read_yaml(text))


def read_yaml(text: str) -> Any:
    """YAML as a person writes a routing file: `start_time: 17:00` is the text "17:00".

    PyYAML follows YAML 1.1, where digits separated by colons are a number in base 60 (17:00 is 1020, and a
    day range 1:5 is 65). Alertmanager's files write times and ranges that way, so they are read here as text;
    every other scalar resolves as `yaml.safe_load` resolves it.
    """
    # PyYAML is imported by the functions that load a routing file, when they load it: the resume steps
    # that never page do not pay for it.
    import yaml  # noqa: PLC0415

    class RoutingLoader(yaml.SafeLoader):
        pass

    sexagesimal = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    RoutingLoader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag not in sexagesimal]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    RoutingLoader.add_implicit_resolver(sexagesimal[0], _INT, list("-+0123456789"))
    RoutingLoader.add_implicit_resolver(sexagesimal[1], _FLOAT, list("-+0123456789."))
    return yaml.load(text, Loader=RoutingLoader)  # noqa: S506  # nosec B506  # a SafeLoader, two resolvers replaced


# yaml.SafeLoader's int and float patterns without their base-60 forms.
_INT = re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
