"""The seam every receiver kind plugs into: what a kind can do, how it plans and performs the steps that bring one
receiver up to date, how it tells the training auto-resume workflow's notices and a silence's news, and how it
describes its target. One package per kind implements `ReceiverKind` (receivers/slack/, receivers/pagerduty/), and
receivers/registry.py names each by the routing file's key of its target.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from fault_responder.core.domain import Alert, FleetPlace, Incident, InstanceRef, Severity, Where
from fault_responder.incidents.record import Delivery
from fault_responder.noise.silences import Muted, Phase, Silence
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.steps import Step, Told, View
from fault_responder.notification.render.pagerduty import MAX_SUMMARY, clip_text

TargetT = TypeVar("TargetT", bound=BaseModel)


class Capability(StrEnum):
    """What a receiver can do. The first five are the verbs its steps use (`Step.verb`)."""

    OPEN = "open"
    """Post a root (a message of its own) or trigger an alert."""
    UPDATE = "update"
    """Edit in place what it posted (a root, a notice), or send an open alert again with what changed."""
    THREAD = "thread"
    """Reply under what it posted: the incident's thread. A workflow notice waits for that thread to exist."""
    RESOLVE = "resolve"
    """Close what it opened."""
    ACKNOWLEDGE = "acknowledge"
    """Hear an acknowledgement made elsewhere (from a Slack button)."""
    TIMELINE = "timeline"
    """It is told an incident's steps one by one (thread replies, or a message per step), so a fleet incident's member
    updates are batched for it and kept by the journal's cursor; a kind without it is told an incident's state."""
    PAGE = "page"
    """What it opens pages a person: quiet-when-handled holds it back while the workflow handles the fault, and a
    drill's page hop is its delivery."""
    NEWS = "news"
    """It is told news that belongs to no incident: a silence's start and end."""


class Outbox(Protocol):
    """What performing a step needs: the clients (the wiring's channels, which provide what each registered kind's
    package asks of them), the clock, and the dashboard every root links to."""

    @property
    def channels(self) -> Any: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def dashboard_url(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Outlet:
    """An Outbox of its own (the resume workflow's notices, a silence's news)."""

    channels: Any
    clock: Callable[[], datetime]
    dashboard_url: str | None = None


@dataclass(frozen=True, slots=True)
class Work:
    """What one receiver's plan reads: the incidents and notices routed to it (or told to it before), what it was told,
    and the view they were derived in. Roots are compared as they are rendered: with `dashboard_url`."""

    incidents: list[Incident]
    alerts: list[Alert]
    record: Told
    view: View
    dashboard_url: str | None = None


@dataclass(frozen=True, slots=True)
class ResumeNotice:
    """One of the training auto-resume workflow's notices, as every kind renders it (fault_responder.resume decides
    what it says; the kind how)."""

    title: str
    text: str
    severity: Severity
    kind: str
    """The notice's kind (a page's class)."""
    instance: InstanceRef
    host: str
    cluster: str
    capacity_provider: str
    fault_title: str
    fault_label: str
    """The fault as a summary names it (e.g. "XID 79")."""
    incident_id: str
    """The incident it is about, as its context names it (the fault's fingerprint)."""
    dedup_key: str
    """The page's dedup key, unless the fleet's alert takes it."""
    paging: str | None = None
    """What a paging receiver hears: "trigger" (a page), "change" (a change event, never a page) or None (nothing)."""
    job_id: str | None = None
    approval_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    where: Where | None = None
    """In organization mode, the fault's account and Region."""
    key: str = ""
    """The notice's own key (fault_responder.resume.notices.Notice.key): what names it for its life."""

    @property
    def summary(self) -> str:
        """One line: what happened, to which fault, where (a page's summary, a held-back notice's)."""
        place = f"cluster {self.cluster}" + (f", {self.where}" if self.where is not None else "")
        return clip_text(f"{self.title} ({self.fault_label} on {self.host}, {place})", MAX_SUMMARY)


@dataclass(frozen=True, slots=True)
class NoticeAt:
    """Where a workflow notice goes for one receiver: about `incident` (None: none exists yet, a message of its own),
    told by the fleet incident `fleet` belongs to when given (its thread; next to its alert)."""

    incident: Incident | None
    fleet: FleetPlace | None = None


Once = Callable[[str, Callable[[], object]], None]
"""Sends a notice's step once (`once("reply", send)`): a retried workflow step does not send it again."""


@dataclass(frozen=True, slots=True)
class News:
    """A silence's start or end, told to a receiver with `Capability.NEWS`."""

    silence: Silence
    phase: Phase
    muted: Sequence[Muted]
    marker: str
    """What the post's metadata names, to find it again when its outcome is unknown."""
    event_type: str


def shortened(text: str, limit: int) -> str:
    """`text`, or its start ending with SHORTENED (the one mark of a text cut to fit) when longer than `limit`."""
    return clip_text(text, limit)


class ReceiverKind(ABC, Generic[TargetT]):
    """A kind of receiver: `key` is the routing file's key of its target, `target` the target's model
    (fault_responder.routing.router). Every method is told the receiver's target."""

    key: ClassVar[str]
    target: ClassVar[type[BaseModel]]

    @abstractmethod
    def capabilities(self, target: TargetT) -> frozenset[Capability]:
        """What a receiver with this target can do."""

    @abstractmethod
    def describe(self, target: TargetT) -> str:
        """The target as route checks, dry runs, drills and the CLI name it ("slack #gpu-alerts")."""

    @abstractmethod
    def subject(self, incident: Incident) -> str:
        """The delivery subject under which what this kind was told of the incident is recorded."""

    @abstractmethod
    def hears(self, paging: str | None) -> bool:
        """Whether it hears a workflow notice whose paging action is `paging` (ResumeNotice.paging)."""

    @abstractmethod
    def plan(self, name: str, target: TargetT, work: Work) -> list[Step]:
        """The steps that bring receiver `name` up to date, in the order they must go out."""

    @abstractmethod
    def perform(self, target: TargetT, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
        """Perform one step; the receiver's delivery record afterwards. Raises DeliveryError."""

    @abstractmethod
    def notify(
        self, name: str, target: TargetT, notice: ResumeNotice, at: NoticeAt, *, out: Outbox, once: Once
    ) -> None:
        """Tell a workflow notice where it goes (`at`), each send through `once`. Raises DeliveryError."""

    def announce(
        self, target: TargetT, news: News, out: Outbox, *, since: datetime | None, intend: Callable[[], None]
    ) -> bool:
        """Tell a silence's news (`Capability.NEWS`): True when posted now, False when an earlier post of it (intended
        `since`, outcome unknown) stands. `intend` records the intent just before posting."""
        raise NotImplementedError(f"a {self.key} receiver is told no news")

    def is_auth_failure(self, error: DeliveryError) -> bool:
        """Whether the error may be a secret rotated since it was read: it is read again and the step tried once
        more."""
        return False
