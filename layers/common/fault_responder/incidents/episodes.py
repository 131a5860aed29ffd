"""A health check's transitions cut into episodes, and how severe an episode is (incidents/lifecycle.py's rules).

An episode is one fault of one check: a non-OK transition opens it when none is open, later non-OK transitions
belong to it, an OK held for the hold-down closes it (a relapse within it continues it, flapping), and the instance
leaving the cluster closes what is still open. It is classified by its most severe report, the latest among equals.
Pure functions over the facts, in any arrival order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fault_responder.core.domain import Classification
from fault_responder.events.ecs import HealthCheck
from fault_responder.incidents.alarms import classify_alarm, is_alarm_check
from fault_responder.incidents.classify import classify_health_check
from fault_responder.incidents.record import HealthFact, StatusFact

LEFT_CLUSTER = "INACTIVE"


def left_cluster(statuses: Iterable[StatusFact]) -> StatusFact | None:
    """When the instance left the cluster (its first INACTIVE): every episode still open closes then."""
    gone = [fact for fact in statuses if fact.status == LEFT_CLUSTER]
    return min(gone, key=lambda fact: fact.at) if gone else None


@dataclass(slots=True)
class Episode:
    """One fault of one check, from its first non-OK report to the OK or the departure that closed it."""

    check_type: str
    reports: list[HealthFact]
    """The non-OK transitions, in time order."""
    closed_at: datetime | None = None
    close: HealthFact | None = None
    close_reason: str | None = None
    relapsed: list[HealthFact] = field(default_factory=list)
    """OKs the check did not hold (a non-OK came within the hold-down): the incident flapped."""
    recovering: HealthFact | None = None
    """An OK still inside its hold-down: the incident resolves at `resolves_at` unless the check relapses."""
    resolves_at: datetime | None = None

    @property
    def flapping(self) -> bool:
        return bool(self.relapsed)

    @property
    def opened_at(self) -> datetime:
        return self.reports[0].at

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    def contains(self, moment: datetime) -> bool:
        return self.opened_at <= moment and (self.closed_at is None or moment <= self.closed_at)

    def holds(self, moment: datetime) -> bool:
        """Whether a transition at `moment` is one of this episode's: within its bounds, or among its reports when it
        was closed from the start (an instance that had already left the cluster when its fault was reported)."""
        if self.closed_at is None:
            return self.opened_at <= moment
        return self.opened_at <= moment <= max(self.closed_at, self.reports[-1].at)

    def open_at(self, moment: datetime) -> bool:
        """Whether the fault was ongoing at `moment` (a drain then belongs to it)."""
        return self.opened_at <= moment and (self.closed_at is None or moment < self.closed_at)


def episodes(
    check_type: str,
    facts: Iterable[HealthFact],
    gone: StatusFact | None,
    hold_down: timedelta = timedelta(0),
    now: datetime | None = None,
) -> list[Episode]:
    """A check's transitions cut into episodes; an instance that left the cluster closes what is still open.

    An OK ends the episode once the check has held OK for `hold_down` (as of `now`; None: long after every
    fact); a non-OK report within the hold-down is a relapse of the same episode, not a new one.
    """
    found: list[Episode] = []
    current: Episode | None = None
    for fact in sorted(facts, key=lambda f: (f.at, f.status == "OK")):
        if fact.status == "OK":
            if current is not None and current.recovering is None:
                current.recovering = fact
        elif current is None:
            current = Episode(check_type, [fact])
        elif current.recovering is None:
            current.reports.append(fact)
        elif fact.at - current.recovering.at < hold_down:
            current.relapsed.append(current.recovering)
            current.recovering = None
            current.reports.append(fact)
        else:
            found.append(_closed(current, current.recovering))
            current = Episode(check_type, [fact])
    if current is not None:
        ok = current.recovering
        if ok is not None and (now is None or not hold_down or now - ok.at >= hold_down):
            found.append(_closed(current, ok))
        else:
            if ok is not None:
                current.resolves_at = ok.at + hold_down
            found.append(current)
    if gone is not None:
        for episode in found:
            if episode.is_open and episode.recovering is not None and episode.recovering.at <= gone.at:
                _closed(episode, episode.recovering)
                episode.resolves_at = None
            elif episode.is_open:
                episode.recovering, episode.resolves_at = None, None
                left_before = gone.at < episode.opened_at
                episode.closed_at = episode.opened_at if left_before else gone.at
                episode.close_reason = (
                    "the instance had already left the cluster" if left_before else "the instance left the cluster"
                )
    return found


def _closed(episode: Episode, ok: HealthFact) -> Episode:
    episode.recovering = None
    episode.closed_at, episode.close = ok.at, ok
    episode.close_reason = (
        "the alarm is OK" if is_alarm_check(episode.check_type) else f"{episode.check_type} health check OK"
    )
    return episode


def classify_episode(episode: Episode) -> Classification:
    """The most severe report; among equally severe ones, the latest."""
    best = max(
        episode.reports,
        key=lambda f: (classify_fact(f).severity.rank, f.at, f.event_id),
    )
    return classify_fact(best)


def classify_fact(fact: HealthFact) -> Classification:
    """One report's fault class, severity and title: an alarm's, or a health check's (incidents/classify.py)."""
    if is_alarm_check(fact.check_type):
        return classify_alarm(fact.check_type, fact.status, fact.reason)
    return classify_health_check(HealthCheck(type=fact.check_type, status=fact.status, statusReason=fact.reason))
