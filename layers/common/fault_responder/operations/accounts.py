"""`fault-responder accounts`: each enrolled account and Region of an organization's stack, as it is now
(docs/organization.md, "Seeing the organization").

For each account and Region the reconciliation acts in (fault_responder.operations.organization.acting_places; with
any account or Region that has open incidents though it is no longer enrolled):

- **its last event**: when the router last noted an event of it (fault_responder.adapters.places_store: written at
  most once a minute, kept 30 days after the last event); none in that time is said so;
- **the member role**, checked now: assumed with the stack's external id, as the reconciliation and the workflow
  assume it (the stack's own account and Region need none: its functions act there with their own credentials);
- **the forwarder**, checked now through that role: the rules of the account's default bus that send to the stack's
  bus, and their state (fault_responder.adapters.forwarder_rules). forwarder.yaml lets its role answer this only
  with AllowForwarderChecks=true: without it, the check says it was not made, and the last event is all there is;
- **its open incidents and fleet incidents**, derived as `status` derives them.

A place is **broken** when its role cannot be assumed (or its check failed or ran out of its time), or its forwarder
is missing, disabled or could not be read. Checks run a few places at a time (`concurrency`), each within a time box
of its own (`box_seconds`): a place that does not answer in time is reported as such, and never holds up the list
(its check is left to end by its clients' own timeouts; its late answer is ignored).

Pure but for the threads the checks run in: the checks themselves are handed in.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from fault_responder.core import elapsed
from fault_responder.core.places import Place
from fault_responder.operations.organization import MAX_PLACES

DEFAULT_CONCURRENCY = 8
DEFAULT_BOX_SECONDS = 15.0
MAX_RULES_SHOWN = 10
SEEN_RETENTION = timedelta(days=30)
"""How long a place's last event is kept (fault_responder.adapters.places_store.RETENTION)."""


class RoleState(StrEnum):
    OWN = "own_credentials"
    """The stack's own account and Region: no role to assume."""
    ASSUMED = "assumed"
    NOT_ASSUMABLE = "not_assumable"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    NOT_CHECKED = "not_checked"
    NOT_ENROLLED = "not_enrolled"


class ForwarderState(StrEnum):
    IN_PLACE = "in_place"
    MISSING = "missing"
    DISABLED = "disabled"
    FAILED = "failed"
    NOT_CHECKED = "not_checked"


BROKEN_ROLES = frozenset({RoleState.NOT_ASSUMABLE, RoleState.FAILED, RoleState.TIMED_OUT})
BROKEN_FORWARDERS = frozenset({ForwarderState.MISSING, ForwarderState.DISABLED, ForwarderState.FAILED})


@dataclass(frozen=True)
class RuleState:
    name: str
    state: str
    """EventBridge's: ENABLED, DISABLED, ..."""


@dataclass(frozen=True)
class ForwarderCheck:
    state: ForwarderState
    detail: str = ""
    rules: tuple[RuleState, ...] = ()

    @classmethod
    def of(cls, rules: Sequence[RuleState], *, more: int = 0, hidden: int = 0) -> ForwarderCheck:
        """The forwarder as its rules say: in place when every rule that sends to the stack's bus is ENABLED."""
        others = f" ({hidden} other rule(s) send there, not forwarder.yaml's: the role may not describe them)"
        if not rules:
            detail = "no rule of this account and Region's default bus sends to the stack's bus"
            return cls(ForwarderState.MISSING, detail + (others if hidden else ""))
        listed = f" and {more} more" if more else ""
        off = [rule for rule in rules if rule.state != "ENABLED"]
        if off:
            names = ", ".join(f"{rule.name} ({rule.state})" for rule in off[:MAX_RULES_SHOWN])
            detail = f"{len(off)} of {len(rules)}{listed} rules that send to the stack's bus are not ENABLED: {names}"
            return cls(ForwarderState.DISABLED, detail, tuple(rules))
        return cls(ForwarderState.IN_PLACE, f"{len(rules)}{listed} rule(s) send to the stack's bus", tuple(rules))


@dataclass(frozen=True)
class RoleCheck:
    state: RoleState
    detail: str = ""


@dataclass(frozen=True)
class PlaceCheck:
    role: RoleCheck
    forwarder: ForwarderCheck


@dataclass(frozen=True)
class PlaceStatus:
    place: Place
    name: str = ""
    home: bool = False
    enrolled: bool = True
    last_event_at: str | None = None
    check: PlaceCheck = field(
        default_factory=lambda: PlaceCheck(RoleCheck(RoleState.NOT_CHECKED), ForwarderCheck(ForwarderState.NOT_CHECKED))
    )
    incidents: int = 0
    fleets: int = 0

    @property
    def broken(self) -> bool:
        return self.check.role.state in BROKEN_ROLES or self.check.forwarder.state in BROKEN_FORWARDERS


Check = Callable[[Place], PlaceCheck]
Failed = Callable[[Place, Exception], PlaceCheck]
"""What a check that raised says (an adapter classifies the error for the place)."""


def timed_out(box_seconds: float) -> PlaceCheck:
    return PlaceCheck(
        RoleCheck(RoleState.TIMED_OUT, f"no answer within {box_seconds:g}s"),
        ForwarderCheck(ForwarderState.NOT_CHECKED, "its check did not end in time"),
    )


def survey(
    places: Sequence[Place],
    check: Check,
    failed: Failed,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    box_seconds: float = DEFAULT_BOX_SECONDS,
    clock: Callable[[], float] = elapsed.monotonic,
) -> dict[Place, PlaceCheck]:
    """Each place's check, at most `concurrency` running at once, each given `box_seconds` from its start: one that
    has not answered by then is reported as timed out, and the next place starts in its stead."""
    answers: queue.Queue[tuple[Place, PlaceCheck]] = queue.Queue()

    def run(place: Place) -> None:
        try:
            answer = check(place)
        except Exception as error:  # a check's failure is the place's: reported, never the list's
            answer = failed(place, error)
        answers.put((place, answer))

    waiting = list(places)
    running: dict[Place, float] = {}
    results: dict[Place, PlaceCheck] = {}
    while waiting or running:
        while waiting and len(running) < max(1, concurrency):
            place = waiting.pop(0)
            running[place] = clock()
            threading.Thread(target=run, args=(place,), name=f"accounts-{place}", daemon=True).start()
        earliest = min(running.values()) + box_seconds
        try:
            place, answer = answers.get(timeout=max(0.0, earliest - clock()))
        except queue.Empty:
            now = clock()
            for place, started in list(running.items()):
                if now - started >= box_seconds:
                    results[place] = timed_out(box_seconds)
                    del running[place]
            continue
        if running.pop(place, None) is not None:
            results[place] = answer
        # else: the late answer of a check already reported as timed out
    return results


def statuses(
    places: Sequence[Place],
    *,
    home: Place,
    names: Callable[[str], str],
    seen: Mapping[Place, str],
    checks: Mapping[Place, PlaceCheck],
    open_counts: Mapping[Place, tuple[int, int]],
) -> list[PlaceStatus]:
    """Each place as shown: the enrolled ones in order (the stack's own first), then those with open incidents that
    are not enrolled (any more)."""
    listed = list(places)
    others = sorted(set(open_counts) - set(listed))
    rows = []
    for place in [*listed, *others]:
        enrolled = place in listed
        check = checks.get(place) if enrolled else None
        if check is None:
            state = RoleState.NOT_CHECKED if enrolled else RoleState.NOT_ENROLLED
            detail = "" if enrolled else "not among the places the stack acts in: its open incidents are shown"
            check = PlaceCheck(RoleCheck(state, detail), ForwarderCheck(ForwarderState.NOT_CHECKED))
        incidents, fleets = open_counts.get(place, (0, 0))
        rows.append(
            PlaceStatus(
                place,
                names(place.account),
                place == home,
                enrolled,
                seen.get(place),
                check,
                incidents,
                fleets,
            )
        )
    return rows


def view(
    rows: Iterable[PlaceStatus], *, at: datetime, stack: str | None, left_out: Sequence[Place] = ()
) -> dict[str, Any]:
    """The command's JSON."""
    places = [
        {
            "account": row.place.account,
            "account_name": row.name,
            "region": row.place.region,
            "home": row.home,
            "enrolled": row.enrolled,
            "last_event_at": row.last_event_at,
            "role": {"state": row.check.role.state.value, "detail": row.check.role.detail},
            "forwarder": {
                "state": row.check.forwarder.state.value,
                "detail": row.check.forwarder.detail,
                "rules": [{"name": rule.name, "state": rule.state} for rule in row.check.forwarder.rules],
            },
            "open": {"incidents": row.incidents, "fleets": row.fleets},
            "broken": row.broken,
        }
        for row in rows
    ]
    return {
        "at": at.astimezone(UTC).isoformat(),
        "stack": stack,
        "places": places,
        "broken": sum(1 for place in places if place["broken"]),
        "left_out": [str(place) for place in left_out],
    }


_ROLE_TEXT = {
    RoleState.OWN: "own credentials",
    RoleState.ASSUMED: "assumed",
    RoleState.NOT_ASSUMABLE: "NOT ASSUMABLE",
    RoleState.FAILED: "FAILED",
    RoleState.TIMED_OUT: "TIMED OUT",
    RoleState.NOT_CHECKED: "not checked",
    RoleState.NOT_ENROLLED: "not enrolled",
}


def render(shown: Mapping[str, Any]) -> str:
    """The command's text: one row per account and Region, then what is wrong or unchecked, then the verdict."""
    at = datetime.fromisoformat(str(shown["at"]))
    places = list(shown["places"])
    title = f" of stack {shown['stack']}" if shown.get("stack") else ""
    lines = [f"Accounts and Regions{title}, checked at {at:%Y-%m-%d %H:%MZ}", ""]
    header = ("ACCOUNT", "REGION", "LAST EVENT", "ROLE", "FORWARDER", "OPEN")
    cells = [
        (
            _account_text(place),
            str(place["region"]),
            _last_event(place.get("last_event_at"), at),
            _ROLE_TEXT.get(RoleState(place["role"]["state"]), place["role"]["state"]),
            _forwarder_text(place["forwarder"]),
            _open_text(place["open"]),
        )
        for place in places
    ]
    widths = [max(len(row[column]) for row in [header, *cells]) for column in range(len(header) - 1)]
    for row in [header, *cells]:
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  " + "  ".join([*padded, row[-1]]).rstrip())
    notes = [line for place in places for line in _notes(place)]
    if notes:
        lines += ["", *notes]
    left_out = list(shown.get("left_out") or [])
    if left_out:
        limit = f"the stack acts in at most {MAX_PLACES} accounts and Regions a run"
        lines += ["", f"{len(left_out)} more not listed: {limit}"]
    broken = [place for place in places if place["broken"]]
    lines.append("")
    if broken:
        named = ", ".join(f"{_account_text(place)} {place['region']}" for place in broken[:MAX_RULES_SHOWN])
        more = f" and {len(broken) - MAX_RULES_SHOWN} more" if len(broken) > MAX_RULES_SHOWN else ""
        lines.append(f"{len(broken)} of {len(places)} {_places(len(places))} broken: {named}{more}")
    else:
        lines.append(f"{len(places)} {_places(len(places))}, none broken")
    return "\n".join(lines) + "\n"


def _places(count: int) -> str:
    return "account and Region" if count == 1 else "accounts and Regions"


def _account_text(place: Mapping[str, Any]) -> str:
    name = "".join(c if c.isprintable() else "?" for c in str(place.get("account_name") or ""))
    text = f"{name} ({place['account']})" if name else str(place["account"])
    return f"{text} (this stack's)" if place.get("home") else text


def _last_event(moment: Any, now: datetime) -> str:
    if not moment:
        return f"none in {SEEN_RETENTION.days} days"
    try:
        at = datetime.fromisoformat(str(moment).replace("Z", "+00:00"))
    except ValueError:
        return str(moment)[:40]
    ago = max(timedelta(0), now - at)
    if ago < timedelta(minutes=1):
        age = "just now"
    elif ago < timedelta(hours=1):
        age = f"{int(ago.total_seconds() // 60)}m ago"
    elif ago < timedelta(days=1):
        age = f"{int(ago.total_seconds() // 3600)}h ago"
    else:
        age = f"{ago.days}d ago"
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%MZ} ({age})"


def _forwarder_text(forwarder: Mapping[str, Any]) -> str:
    state = ForwarderState(forwarder["state"])
    rules = forwarder.get("rules") or []
    if state is ForwarderState.IN_PLACE:
        return f"in place ({len(rules)} rule{'s' if len(rules) != 1 else ''})"
    if state is ForwarderState.DISABLED:
        off = sum(1 for rule in rules if rule["state"] != "ENABLED")
        return f"DISABLED ({off} of {len(rules)})"
    return {ForwarderState.MISSING: "MISSING", ForwarderState.FAILED: "FAILED"}.get(state, "not checked")


def _open_text(counts: Mapping[str, int]) -> str:
    incidents, fleets = int(counts.get("incidents") or 0), int(counts.get("fleets") or 0)
    if not incidents and not fleets:
        return "none"
    parts = []
    if incidents:
        parts.append(f"{incidents} incident{'s' if incidents != 1 else ''}")
    if fleets:
        parts.append(f"{fleets} fleet incident{'s' if fleets != 1 else ''}")
    return ", ".join(parts)


def _notes(place: Mapping[str, Any]) -> list[str]:
    """What is wrong, or was not checked, at one place (nothing when all is well)."""
    where = f"{_account_text(place)} {place['region']}"
    notes = []
    role, forwarder = place["role"], place["forwarder"]
    if role["state"] not in (RoleState.OWN, RoleState.ASSUMED) and role.get("detail"):
        notes.append(f"{where}: role {str(role['state']).replace('_', ' ')}: {role['detail']}")
    if forwarder["state"] != ForwarderState.IN_PLACE and forwarder.get("detail"):
        notes.append(f"{where}: forwarder {str(forwarder['state']).replace('_', ' ')}: {forwarder['detail']}")
    return notes
