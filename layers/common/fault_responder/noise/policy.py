"""Who hears nothing new, and why: silences, maintenance windows, inhibition, fleets, and the resume workflow.

Routing says who is told of an incident; the policy says who is not told *now*. A muted receiver gets no new
message (no root, no reply, no notice, no PagerDuty trigger); what it already has is still kept true in place
(a root is updated, an open alert is resolved), and the facts, the timeline and the metrics are recorded as
ever. A mute is a reason, shown to people and in `status`; when the reason ends while the incident is open
(a silence expires, a window closes, a deadline passes) the incident notifies then, at the next event for its
instance or the sweep. The training auto-resume workflow's notices are held back the same way (by `Incident.held`),
and told by the same delivery then, open incident or not (fault_responder.notification.delivery, `held_notes`).

- **Silences** match an incident's or notice's labels (fault_responder.routing.matchers) between their start and end.
- **Maintenance windows**: a route's mute_time_intervals (and active_time_intervals) mute its receivers.
- **Inhibition** (the routing file's inhibit_rules): while an open incident matches a rule's source
  matchers, an incident, notice or report that matches its target matchers and has the same values for its
  `equal` labels is muted. Sources are the open incidents of the same instance (a fleet incident mutes its
  members itself).
- **Fleets**: an incident that joined an open fleet incident is muted; the fleet incident tells its story, the
  workflow's notices about it included (`Incident.held` is what holds those back: the other mutes).
- **Quiet when handled**: on a capacity provider whose faults the training auto-resume workflow handles, an
  incident of a check it handles pages nobody on PagerDuty while the workflow works: not when the jobs are
  resumed, not when the workflow pages itself (give-up, approval, ...: one page, its own, with the evidence),
  and only if neither has happened by the deadline. Slack hears of it at once, as always.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from fault_responder.core import elapsed
from fault_responder.core.domain import Alert, EntryKind, Incident, TimelineEntry
from fault_responder.incidents.record import NoticeFact
from fault_responder.noise.silences import Silence, iso, silencing
from fault_responder.routing.matchers import Labels, alert_labels, incident_labels, matches_all
from fault_responder.routing.router import InhibitRule

log = logging.getLogger(__name__)
_SYNCHRONOUS_EVERY = 1.0
"""Seconds: with no refresh interval, the silences are read again before an event at most this often, and a copy
holds something back this long; and a failed read is tried again on the way to holding something back at most this
often."""

Silencer = Callable[[Labels, datetime], str | None]
"""Labels, now -> why they are silenced (naming the silence), or None."""
WindowMutes = Callable[[tuple[str, ...], datetime], dict[str, str]]
"""Matched route names, now -> receiver: why its routes are muted now (a maintenance window)."""
RESUMED = "resumed"
ECS_OWNS_RECOVERY = "ecs_owns_recovery"
"""The workflow found ECS auto-repair on the provider and does nothing: the fault is not handled, it pages."""
QUIET_REASON_PREFIX = "the training auto-resume workflow"
"""How every quiet-when-handled reason begins (the workflow's own notices are not held back by it)."""


@dataclass(frozen=True, slots=True)
class QuietWhenHandled:
    capacity_providers: frozenset[str]
    check_types: frozenset[str]
    deadline: timedelta = timedelta(minutes=30)
    """Pages if the workflow has neither resumed the jobs nor paged itself by this long after the fault."""
    home: tuple[str, str] | None = None
    """(account, Region) whose faults the workflow acts on, when faults of others reach the router (the
    organization's bus); None: every fault that reaches it."""

    def applies(self, incident: Incident) -> bool:
        return (
            not incident.instance.drill  # the workflow never runs for a drill, so it must page
            and (self.home is None or (incident.instance.account, incident.instance.region) == self.home)
            # A fleet incident is a mass fault, which the workflow does not resume (its guard pages, on the fleet's key)
            and incident.fleet is None
            and incident.instance.capacity_provider in self.capacity_providers
            and incident.check_type in self.check_types
        )


@dataclass(frozen=True)
class Policy:
    silencer: Silencer | None = None
    window_mutes: WindowMutes | None = None
    inhibit_rules: Sequence[InhibitRule] = ()
    quiet: QuietWhenHandled | None = None
    pagerduty_receivers: frozenset[str] = field(default_factory=frozenset)

    def apply(
        self,
        incidents: list[Incident],
        alerts: list[Alert],
        notices: Collection[NoticeFact],
        now: datetime | None,
    ) -> list[Alert]:
        """Set each incident's and notice's mutes (incidents in place; notices are returned anew), and mark
        inhibited reports in the timelines."""
        open_sources = [(incident, incident_labels(incident)) for incident in incidents if incident.is_open]
        for incident in incidents:
            labels = incident_labels(incident)
            reason = self._common(labels, incident.id, open_sources, now)
            muted = dict.fromkeys(incident.receivers, reason) if reason else {}
            # What holds back the workflow's notices about it: all but the fleet incident (whose thread tells them)
            # and quiet-when-handled (whose point is that those notices are what the receiver hears).
            held = dict(muted)
            if incident.fleet_id is not None:
                muted.update(dict.fromkeys(incident.receivers, f"part of fleet incident {incident.fleet_id}"))
            if now is not None and self.window_mutes is not None and incident.route:
                for receiver, why in self.window_mutes(tuple(incident.route.split(",")), now).items():
                    muted.setdefault(receiver, why)
                    held.setdefault(receiver, why)
            incident.held = {receiver: why for receiver, why in held.items() if receiver in incident.receivers}
            quiet = _quiet_reason(self.quiet, incident, notices, now) if self.quiet else None
            if quiet is not None:
                for receiver in incident.receivers:
                    if receiver in self.pagerduty_receivers:
                        muted.setdefault(receiver, quiet)
            incident.muted = {receiver: why for receiver, why in muted.items() if receiver in incident.receivers}
            if self.inhibit_rules:
                incident.timeline = [self._report(entry, incident, labels, open_sources) for entry in incident.timeline]
        return [self._alert(alert, open_sources, now) for alert in alerts]

    def _common(
        self, labels: Labels, own_id: str | None, sources: Sequence[tuple[Incident, Labels]], now: datetime | None
    ) -> str | None:
        if self.silencer is not None and now is not None:
            silenced = self.silencer(labels, now)
            if silenced:
                return silenced
        return self._inhibited(labels, own_id, sources)

    def _inhibited(self, labels: Labels, own_id: str | None, sources: Sequence[tuple[Incident, Labels]]) -> str | None:
        for rule in self.inhibit_rules:
            if not matches_all(rule.targets, labels):
                continue
            for source, source_labels in sources:
                if source.id == own_id or not matches_all(rule.sources, source_labels):
                    continue
                if all(labels.get(name, "") == source_labels.get(name, "") for name in rule.equal):
                    return f"inhibited by {rule.name} (incident {source.id})"
        return None

    def _report(
        self, entry: TimelineEntry, incident: Incident, labels: Labels, sources: Sequence[tuple[Incident, Labels]]
    ) -> TimelineEntry:
        """A report inside an incident that is less than the incident (XID 13 while XID 79 is open) is muted when
        a rule says so, with the incident itself as a possible source."""
        if entry.kind != EntryKind.CHANGED or entry.classification is None or entry.page:
            return entry
        report = {
            **labels,
            "xid": "" if entry.classification.xid is None else str(entry.classification.xid),
            "severity": entry.classification.severity.value,
            "fault_class": entry.classification.fault_class.value,
        }
        reason = self._inhibited(report, None, [*sources, (incident, labels)] if incident.is_open else sources)
        return replace(entry, muted=reason) if reason else entry

    def _alert(self, alert: Alert, sources: Sequence[tuple[Incident, Labels]], now: datetime | None) -> Alert:
        labels = alert_labels(alert)
        reason = self._common(labels, None, sources, now)
        muted = dict.fromkeys(alert.receivers, reason) if reason else {}
        return replace(alert, muted=muted) if muted else alert


@dataclass(frozen=True, slots=True)
class _Copy:
    silences: tuple[Silence, ...]
    read_at: float
    """When the read that made this copy started (the cache's clock): the copy is as old as that, at least."""


class SilenceCache:
    """The silences, read at most every `refresh_seconds`; a silence holds something back only when they were read
    at most that long ago.

    - The first read is made before the first event is handled. Later reads happen in the background when they are
      due, so nothing that is let through ever waits for one: what no silence in the copy holds back is told at
      once, and a new silence may let a page through until the next read.
    - Before a silence holds an incident or notice back, the copy it is in must be no older than `refresh_seconds`.
      An older copy is read again first, at once (one read, whoever asks first; the others wait for it), and only
      what the new copy silences is held back: a silence expired more than `refresh_seconds` ago never holds back
      anything, however long the router was idle.
    - With `refresh_seconds` 0 every read is made at once, before the event is handled, at most once a second; a
      copy holds something back for a second.
    - A read that fails keeps the copy as it was, and as old. When it is too old to hold something back and cannot
      be read again, that is let through (logged): a page that goes out despite a silence is the safe mistake, one
      that never goes out is not. After a failed read the next is tried when due, or after a second on that path.
    - Reads may overlap (one in the background, one at once): the copy kept is the one whose read started last.
    - `refresh()` reads at once (the sweep, a silence just made), and raises if the silences cannot be read.

    Ages are measured with `clock`, the product's elapsed-time clock (fault_responder.core.elapsed), which the
    sandbox moves on with a scenario's delays.
    """

    def __init__(
        self,
        load: Callable[[], Iterable[Silence]],
        refresh_seconds: float = 30.0,
        clock: Callable[[], float] = elapsed.monotonic,
    ) -> None:
        self._load = load
        self._refresh_seconds = refresh_seconds
        self._holds_for = refresh_seconds if refresh_seconds > 0 else _SYNCHRONOUS_EVERY
        """How old a copy may be and still hold something back."""
        self._clock = clock
        self._copy: _Copy | None = None
        self._tried_at: float | None = None
        """When the latest read started, whatever its outcome: the next one is due from then."""
        self._failed_at: float | None = None
        """When the latest read that failed started."""
        self._state = threading.Lock()
        self._reading = threading.Lock()
        """One read at once (before an event, or before holding something back) at a time."""
        self._loading = threading.Lock()
        """One read in the background at a time."""

    def refresh(self) -> None:
        """Read the silences now; raises if they cannot be read."""
        self._read(raising=True)

    def refresh_or_keep(self) -> None:
        """Read the silences now; when they cannot be read, the copy is kept as it was (and as old), and logged."""
        self._read(raising=False)

    def silencer(self, labels: Labels, now: datetime) -> str | None:
        copy = self._before_judging()
        silence = silencing(copy.silences, labels, now) if copy is not None else None
        if copy is None or silence is None:
            self._keep_fresh()
            return None
        if self._clock() - copy.read_at > self._holds_for:
            fresh = self._read_before_holding(copy)
            if fresh is None:
                log.warning(
                    "silence %s would hold this back, but the silences were read %.0f s ago and cannot be read "
                    "now: let through",
                    silence.id,
                    self._clock() - copy.read_at,
                )
                return None
            silence = silencing(fresh.silences, labels, now)
            if silence is None:
                return None
        return f"silenced by {silence.id} ({silence.created_by}: {silence.comment}) until {iso(silence.ends_at)}"

    def _before_judging(self) -> _Copy | None:
        """The copy to judge by: read first when there is none yet, or with `refresh_seconds` 0 when one is due."""
        if self._tried_at is None:
            self._read_once(lambda: self._tried_at is None)
        elif self._refresh_seconds <= 0 and self._due(_SYNCHRONOUS_EVERY):
            self._read_once(lambda: self._due(_SYNCHRONOUS_EVERY))
        return self._copy

    def _keep_fresh(self) -> None:
        """On the way to letting something through: a read in the background, when one is due."""
        if self._refresh_seconds > 0 and self._due(self._refresh_seconds) and self._loading.acquire(blocking=False):
            threading.Thread(target=self._background, daemon=True, name="silences").start()

    def _due(self, every: float) -> bool:
        tried_at = self._tried_at
        return tried_at is None or self._clock() - tried_at >= every

    def _read_once(self, still_due: Callable[[], bool]) -> None:
        with self._reading:
            if still_due():  # (else another thread read them while this one waited)
                self._read(raising=False)

    def _read_before_holding(self, stale: _Copy) -> _Copy | None:
        """A copy read at most `refresh_seconds` ago: read now unless another thread just did (None: it cannot be
        read, or a read that started after `stale` failed less than a second ago)."""
        with self._reading:
            now = self._clock()
            copy = self._copy
            if copy is not None and now - copy.read_at <= self._holds_for:
                return copy
            failed_at = self._failed_at
            if failed_at is not None and failed_at >= stale.read_at and now - failed_at < _SYNCHRONOUS_EVERY:
                return None
            return self._read(raising=False)

    def _background(self) -> None:
        try:
            self._read(raising=False)
        finally:
            self._loading.release()

    def _read(self, *, raising: bool) -> _Copy | None:
        """Read the silences; returns the copy kept after it (None when the read failed and `raising` is off)."""
        started = self._clock()
        with self._state:
            self._tried_at = started if self._tried_at is None else max(self._tried_at, started)
        try:
            silences = tuple(self._load())
        except Exception as error:
            with self._state:
                self._failed_at = started if self._failed_at is None else max(self._failed_at, started)
            if raising:
                raise
            log.warning("silences could not be read; the copy read before is kept (%s)", type(error).__name__)
            return None
        with self._state:
            # A read that started before the copy's (a slow read in the background) is older news: dropped.
            if self._copy is None or started >= self._copy.read_at:
                self._copy = _Copy(silences, started)
            return self._copy


def _quiet_reason(
    quiet: QuietWhenHandled, incident: Incident, notices: Collection[NoticeFact], now: datetime | None
) -> str | None:
    if not quiet.applies(incident):
        return None
    if incident.found:
        # The workflow starts on the fault's event: a fault no event announced (the reconciliation sweep found it)
        # has no workflow handling it. Should the event have arrived too, a page is the safer mistake.
        return None
    mine = [n for n in notices if n.check_type == incident.check_type and _within(n, incident)]
    if any(n.kind == ECS_OWNS_RECOVERY for n in mine):
        return None
    if any(n.kind == RESUMED for n in mine):
        return f"{QUIET_REASON_PREFIX} resumed the jobs"
    if any(n.pages for n in mine):
        return f"{QUIET_REASON_PREFIX} paged for it itself"
    # The deadline runs from when the fault was known here (the workflow starts then), not from when it began.
    due = max(incident.opened_at, incident.known_at or incident.opened_at) + quiet.deadline
    if now is None or now >= due or not incident.is_open:
        return None
    return f"{QUIET_REASON_PREFIX} is handling it (pages at {due:%H:%M} UTC if the jobs are not resumed)"


def _within(notice: NoticeFact, incident: Incident) -> bool:
    ends = incident.closed_at
    return incident.opened_at <= notice.fault_at and (ends is None or notice.fault_at <= ends)
