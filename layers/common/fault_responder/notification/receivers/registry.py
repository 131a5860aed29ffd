"""The receiver kinds, by the routing file's key of their target: the one place that names them.

Everything that reaches a receiver (delivery, the resume workflow's notices, a silence's news, route checks, dry
runs, drills, the CLI, the wiring) asks here for its kind, and asks the kind; none branches on a kind itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fault_responder.core.domain import Incident
from fault_responder.notification.receivers.kind import Capability, ReceiverKind
from fault_responder.routing.router import Receiver

# Each kind is imported from its package when it is first asked for (imports inside these functions): a function
# whose routing file names no receiver of a kind never loads that kind's renderers, and its cold start is shorter.


def _slack() -> ReceiverKind[Any]:
    from fault_responder.notification.receivers.slack import SLACK  # noqa: PLC0415

    return SLACK


def _pagerduty() -> ReceiverKind[Any]:
    from fault_responder.notification.receivers.pagerduty import PAGERDUTY  # noqa: PLC0415

    return PAGERDUTY


def _teams() -> ReceiverKind[Any]:
    from fault_responder.notification.receivers.teams import TEAMS  # noqa: PLC0415

    return TEAMS


def _webhook() -> ReceiverKind[Any]:
    from fault_responder.notification.receivers.webhook import WEBHOOK  # noqa: PLC0415

    return WEBHOOK


class _Kinds(Mapping[str, ReceiverKind[Any]]):
    """The kinds by key, each loaded the first time it is asked for."""

    def __init__(self, loaders: Mapping[str, Callable[[], ReceiverKind[Any]]]) -> None:
        self._loaders = dict(loaders)
        self._loaded: dict[str, ReceiverKind[Any]] = {}

    def __getitem__(self, key: str) -> ReceiverKind[Any]:
        kind = self._loaded.get(key)
        if kind is None:
            kind = self._loaded[key] = self._loaders[key]()  # KeyError: no such kind
        return kind

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


RECEIVER_KINDS: Mapping[str, ReceiverKind[Any]] = _Kinds(
    {"slack": _slack, "pagerduty": _pagerduty, "teams": _teams, "webhook": _webhook}
)
"""Each kind by its key; each key is a field of routing.router.Receiver, whose model is the kind's `target`."""


def kind_of(receiver: Receiver) -> ReceiverKind[Any]:
    kind = RECEIVER_KINDS.get(receiver.kind)
    if kind is None:
        raise LookupError(f"no receiver kind {receiver.kind!r} is registered (known: {', '.join(RECEIVER_KINDS)})")
    return kind


def capabilities(receiver: Receiver) -> frozenset[Capability]:
    return kind_of(receiver).capabilities(receiver.target)


def can(receiver: Receiver, capability: Capability) -> bool:
    return capability in capabilities(receiver)


def with_capability(receivers: Mapping[str, Receiver], capability: Capability) -> frozenset[str]:
    """The names of the receivers that can (e.g. Capability.PAGE: those quiet-when-handled holds back)."""
    return frozenset(name for name, receiver in receivers.items() if can(receiver, capability))


def describe(name: str, receiver: Receiver) -> str:
    """`name (slack #gpu-alerts)`: as route checks, dry runs and the CLI show a receiver."""
    return f"{name} ({kind_of(receiver).describe(receiver.target)})"


def subject(receiver: Receiver, incident: Incident) -> str:
    """The delivery subject under which what the receiver was told of the incident is recorded."""
    return kind_of(receiver).subject(incident)


def hears(receiver: Receiver, paging: str | None) -> bool:
    """Whether the receiver hears a workflow notice whose paging action is `paging`."""
    return kind_of(receiver).hears(paging)
