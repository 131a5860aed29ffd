"""Telling the channels a silence mutes that it started, and that it ended (docs/silences.md, "Who is told").

The sweep does it, at each run (every minute): a silence that became active since it last looked has its start told,
one that expired has its end told, each once, within ANNOUNCE_WITHIN of happening (a start or an end the sweep notices
later than that, such as the silences there were before this was deployed, is told nobody).

- **The channels it mutes** are the Slack receivers (channels and webhooks) routed for the open incidents its matchers
  match when its start is told (an instance's incident or a fleet incident, whatever its state of mute otherwise); its
  end is told to those told of its start and to those of the open incidents it matches then. A silence that matches no
  open incident when it starts is told nowhere. PagerDuty is not told: a silence is no page.
- **Once, never twice**, across sweeps running at once and one that dies: a sweep claims a silence's start (or end)
  with a conditional write on how far it went (kept with the silence: adapters/silence_store.py), writes that a post
  to a receiver is on its way before it posts (the post carries a marker in its metadata), and records each receiver
  told. A sweep taking over from one that died looks for the marked message in the channel before posting again, as
  every post of the router does (fault_responder.notification.delivery); a webhook cannot be looked in, so one whose
  post's outcome is not known is not posted to again (at most once).
- **Bounded**: at most MAX_PER_RUN silences a run, one read of the open incidents a run (and none when nothing is due),
  within the run's time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from fault_responder.core.accounts import Accounts
from fault_responder.core.domain import Incident
from fault_responder.noise.silences import Announcement, Muted, Phase, Silence, due, muted_by
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.delivery import Channels
from fault_responder.notification.receivers.kind import Capability, News, Outlet
from fault_responder.notification.receivers.registry import can, kind_of
from fault_responder.routing.router import Receiver

log = logging.getLogger(__name__)

ANNOUNCE_WITHIN = timedelta(hours=1)
MAX_PER_RUN = 20
EVENT_TYPE = "gpu_fault_silence_news"
"""The metadata event type of the messages (a sweep taking over looks for its marker)."""
MIN_SECONDS = 10.0
"""Less time left than this in the run: nothing is claimed, the next run tells it."""

Counter = Callable[[str, str, str], None]


class SilenceNews(Protocol):
    """Where a silence's announcements are kept (adapters/silence_store.py)."""

    def announcements(self, now: datetime, within: timedelta) -> list[tuple[Silence, dict[Phase, Announcement]]]: ...

    def write_announcement(self, silence_id: str, phase: Phase, read: int, announcement: Announcement) -> bool: ...


class _Lost(Exception):
    """Someone else wrote the announcement since this sweep did: it is theirs now."""


class Announcer:
    def __init__(
        self,
        store: SilenceNews,
        channels: Channels,
        receivers: dict[str, Receiver],
        open_incidents: Callable[[], Sequence[Incident]],
        accounts: Accounts,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        epoch: Callable[[], float],
        dashboard_url: str | None = None,
        count: Counter = lambda metric, dimension, value: None,
    ) -> None:
        self.store = store
        self.channels = channels
        self.receivers = receivers
        self.open_incidents = open_incidents
        self.accounts = accounts
        self.clock = clock
        self.epoch = epoch
        self.dashboard_url = dashboard_url
        self.count = count

    def run(self, *, seconds_left: float) -> dict[str, int]:
        """Tell what is due; how many silences' starts and ends were told, and how many are left for the next run."""
        tally = {"silences_told": 0, "silences_left": 0}
        now = self.clock()
        ends = self.epoch() + seconds_left
        due_now = [
            (silence, phase, announced)
            for silence, announced in self.store.announcements(now, ANNOUNCE_WITHIN)
            if (phase := due(silence, announced, now, ANNOUNCE_WITHIN)) is not None
        ]
        if not due_now:
            return tally
        incidents = list(self.open_incidents())
        for number, (silence, phase, announced) in enumerate(due_now):
            if number >= MAX_PER_RUN or ends - self.epoch() < MIN_SECONDS:
                tally["silences_left"] += len(due_now) - number
                break
            try:
                if self._announce(silence, phase, announced, incidents, until=ends):
                    tally["silences_told"] += 1
            except _Lost:
                continue  # another sweep took it over
            except Exception as error:  # one silence's failure must not stop the others'
                tally["silences_left"] += 1
                log.warning(
                    "silence %s's %s could not be told (the next run tries again): %s", silence.id, phase, error
                )
        return tally

    def _announce(
        self,
        silence: Silence,
        phase: Phase,
        announced: dict[Phase, Announcement],
        incidents: Sequence[Incident],
        *,
        until: float,
    ) -> bool:
        told = announced.get(phase) or Announcement()
        if told.owner is not None and told.until > self.epoch():
            return False  # another sweep is telling it
        muted = muted_by(silence, incidents, self.accounts)
        receivers = told.receivers if told.decided else self._channels(muted, announced.get(Phase.STARTED), phase)
        current = self._write(silence, phase, told, owner=uuid.uuid4().hex, until=until, receivers=receivers)
        for name in current.left():
            current = self._tell(silence, phase, current, name, muted)
        self._write(silence, phase, current, owner=None, until=0.0, done=True)
        if current.receivers:
            log.info("silence %s %s: told %s", silence.id, phase.value, ", ".join(current.receivers))
        return True

    def _channels(self, muted: list[Muted], started: Announcement | None, phase: Phase) -> tuple[str, ...]:
        """The Slack receivers of the open incidents it matches; for its end, those told of its start too."""
        names = [name for item in muted for name in item.receivers]
        if phase is Phase.ENDED and started is not None:
            names = [*started.receivers, *names]
        told = [name for name in names if name in self.receivers and can(self.receivers[name], Capability.NEWS)]
        return tuple(dict.fromkeys(told))

    def _tell(
        self, silence: Silence, phase: Phase, current: Announcement, name: str, muted: list[Muted]
    ) -> Announcement:
        """Tell one receiver (once), and record it."""
        receiver = self.receivers.get(name)
        since = current.pending_since(name)
        if receiver is not None and can(receiver, Capability.NEWS):
            news = News(silence, phase, muted, marker=f"silence:{silence.id}:{phase.value}", event_type=EVENT_TYPE)
            intent: list[Announcement] = []

            def intend() -> None:
                pending = (*((n, at) for n, at in current.pending if n != name), (name, self.epoch()))
                intent.append(self._write(silence, phase, current, pending=pending))

            try:
                posted = kind_of(receiver).announce(
                    receiver.target,
                    news,
                    Outlet(self.channels, self.clock, self.dashboard_url),
                    since=None if since is None else datetime.fromtimestamp(since, UTC),
                    intend=intend,
                )
            except DeliveryError as error:
                if not intent:
                    raise
                current = intent[-1]
                if not error.unknown_outcome:
                    current = self._write(silence, phase, current, pending=_without(current.pending, name))
                self._write(silence, phase, current, owner=None, until=0.0)
                raise
            current = intent[-1] if intent else current
            if posted:
                self.count("SilenceNews", "Phase", phase.value)
        # (else no longer a receiver of the routing file told such news: nothing to tell it)
        return self._write(silence, phase, current, told=(*current.told, name), pending=_without(current.pending, name))

    def _write(
        self,
        silence: Silence,
        phase: Phase,
        current: Announcement,
        **changes: object,
    ) -> Announcement:
        written = replace(current, version=current.version + 1, **changes)  # type: ignore[arg-type]
        if not self.store.write_announcement(silence.id, phase, current.version, written):
            raise _Lost(silence.id)
        return written


def _without(pending: tuple[tuple[str, float], ...], name: str) -> tuple[tuple[str, float], ...]:
    return tuple((n, at) for n, at in pending if n != name)
