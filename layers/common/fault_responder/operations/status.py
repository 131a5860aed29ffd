"""`fault-responder status`: what is open, what is held back and why, what the workflow did.

Read from a deployed stack's incidents table (the records its Open index lists, derived as the router derives
them now: the routing file, the hold-down, fleets, inhibition, maintenance windows and silences), or from a
sandbox report (`python -m sandbox replay|run --report`). Everything here is plain data (dicts) and text, so
both sources print the same way.

An organization's stack (docs/organization.md) serves many accounts and Regions: each open incident and fleet
incident then says where it is (`account`, `account_name`, `region`), the view counts them by account and Region
(`accounts`), and the text lists them under each account and Region, the stack's own first. A single-account stack's
view and text say nothing of accounts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.domain import Incident, PersonAction, Where
from fault_responder.incidents.people import VIA
from fault_responder.noise.silences import Silence

RECENT_RESUMES = timedelta(hours=24)
MAX_RESUMES = 20
PLACE_FIELDS = ("account", "account_name", "region")
"""What an organization's rows say of where they are."""


def incident_row(incident: Incident) -> dict[str, Any]:
    """An open incident (or fleet incident) as status shows it."""
    row: dict[str, Any] = {
        "id": incident.id,
        "fingerprint": incident.fingerprint,
        "severity": incident.classification.severity.value,
        "title": incident.classification.title,
        "phase": incident.phase,
        "opened_at": _iso(incident.opened_at),
        "fleet_id": incident.fleet_id,
        "quiet": dict(sorted(incident.muted.items())),
        "acknowledged": _person(incident.acknowledged),
        "assigned": _person(incident.assigned),
    }
    if incident.fleet is not None:
        row["members_open"] = incident.fleet.open
        row["members"] = incident.fleet.total
    return row


def silence_row(silence: Silence, now: datetime) -> dict[str, Any]:
    return {
        "id": silence.id,
        "state": silence.state(now).value,
        "matchers": [str(matcher) for matcher in silence.matchers],
        "starts_at": _iso(silence.starts_at),
        "ends_at": _iso(silence.ends_at),
        "created_by": silence.created_by,
        "comment": silence.comment,
    }


def status(
    incidents: Iterable[Incident],
    silences: Iterable[Silence],
    resumes: Sequence[Mapping[str, Any]],
    now: datetime,
    accounts: Accounts = SINGLE_ACCOUNT,
) -> dict[str, Any]:
    """The status of a stack: open incidents and fleet incidents (most severe first), pending and active silences,
    the workflow's recent executions; with an organization's `accounts`, where each incident is, by account."""
    opened = [incident for incident in incidents if incident.is_open]
    rows = []
    for incident in opened:
        row = incident_row(incident)
        if accounts.organization:
            row.update(_place(incident.where or accounts.where(incident.instance)))
        rows.append(row)
    order = {"critical": 0, "error": 1, "warning": 2, "info": 3}
    rows.sort(key=lambda r: (order.get(r["severity"], 9), r["opened_at"]))
    live = [silence for silence in silences if silence.state(now).value != "expired"]
    view = {
        "at": _iso(now),
        "incidents": [row for row in rows if "members" not in row],
        "fleets": [row for row in rows if "members" in row],
        "silences": [silence_row(silence, now) for silence in sorted(live, key=lambda s: (s.ends_at, s.id))],
        "resumes": list(resumes)[:MAX_RESUMES],
    }
    if accounts.organization:
        view["accounts"] = by_account(rows, accounts.home)
    return view


def _place(where: Where | None) -> dict[str, str]:
    if where is None:
        return dict.fromkeys(PLACE_FIELDS, "")
    return {"account": where.account, "account_name": where.name, "region": where.region}


def by_account(rows: Iterable[Mapping[str, Any]], home: tuple[str, str] | None) -> list[dict[str, Any]]:
    """The open incidents and fleet incidents counted by account and Region: the stack's own first, then by account
    and Region."""
    counted: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (str(row.get("account") or ""), str(row.get("region") or ""))
        place = counted.setdefault(
            key,
            {
                "account": key[0],
                "account_name": str(row.get("account_name") or ""),
                "region": key[1],
                "home": key == home,
                "incidents": 0,
                "fleets": 0,
            },
        )
        place["fleets" if "members" in row else "incidents"] += 1
    return sorted(counted.values(), key=lambda place: (not place["home"], place["account"], place["region"]))


def from_report(report: Mapping[str, Any], silences: Iterable[Silence], now: datetime) -> dict[str, Any]:
    """The same, from a sandbox report's derived incidents (plain dicts) and its executions; an organization's stack
    (its parameters name OrganizationId or EnrolledAccounts) says where each is, as `status` does."""
    home = _report_home(report)
    rows = []
    for item in report.get("incidents") or []:
        if item.get("status") != "OPEN":
            continue
        fleet = item.get("fleet") or None
        row: dict[str, Any] = {
            "id": item["id"],
            "fingerprint": item["fingerprint"],
            "severity": item["classification"]["severity"],
            "title": item["classification"]["title"],
            "phase": item["phase"],
            "opened_at": item["opened_at"],
            "fleet_id": item.get("fleet_id"),
            "quiet": dict(sorted((item.get("muted") or {}).items())),
            "acknowledged": _person_from_report(item.get("acknowledged")),
            "assigned": _person_from_report(item.get("assigned")),
        }
        if fleet:
            row["members"] = int(fleet.get("total") or 0)
            row["members_open"] = int(fleet.get("open") or 0)
        if home is not None:
            row.update(_place_from_report(item))
        rows.append(row)
    order = {"critical": 0, "error": 1, "warning": 2, "info": 3}
    rows.sort(key=lambda r: (order.get(r["severity"], 9), r["opened_at"]))
    live = [silence for silence in silences if silence.state(now).value != "expired"]
    resumes = [
        {
            "execution": execution.get("name"),
            "status": execution.get("status"),
            "started_at": execution.get("started_at"),
            "stopped_at": execution.get("stopped_at"),
        }
        for execution in report.get("executions") or []
    ]
    view = {
        "at": _iso(now),
        "incidents": [row for row in rows if "members" not in row],
        "fleets": [row for row in rows if "members" in row],
        "silences": [silence_row(silence, now) for silence in sorted(live, key=lambda s: (s.ends_at, s.id))],
        "resumes": resumes[:MAX_RESUMES],
    }
    if home is not None:
        view["accounts"] = by_account(rows, home)
    return view


def _report_home(report: Mapping[str, Any]) -> tuple[str, str] | None:
    """The stack's own account and Region when the report's stack serves an organization; None otherwise."""
    stack = report.get("stack")
    if not isinstance(stack, Mapping):
        return None
    parameters = stack.get("parameters")
    if not isinstance(parameters, Mapping) or not (
        parameters.get("OrganizationId") or parameters.get("EnrolledAccounts")
    ):
        return None
    return str(stack.get("account_id") or ""), str(stack.get("region") or "")


def _place_from_report(item: Mapping[str, Any]) -> dict[str, str]:
    where = item.get("where")
    if isinstance(where, Mapping) and where.get("account"):
        return {
            "account": str(where["account"]),
            "account_name": str(where.get("name") or ""),
            "region": str(where.get("region") or ""),
        }
    instance = item.get("instance")
    if isinstance(instance, Mapping):
        return {
            "account": str(instance.get("account") or ""),
            "account_name": "",
            "region": str(instance.get("region") or ""),
        }
    return dict.fromkeys(PLACE_FIELDS, "")


def render(view: Mapping[str, Any]) -> str:
    """The status as terminal text: one table per section, and what each quiet receiver is held back by; an
    organization's incidents and fleet incidents under each account and Region."""
    lines = [f"Status at {view['at']}", ""]
    places = view.get("accounts")
    incidents = view["incidents"]
    lines.append(f"Open incidents: {len(incidents)}{_spread(incidents, places)}")
    lines.extend(_grouped(incidents, places, _incident_lines))
    fleets = view["fleets"]
    lines += ["", f"Open fleet incidents: {len(fleets)}{_spread(fleets, places)}"]
    lines.extend(_grouped(fleets, places, _fleet_lines))
    silences = view["silences"]
    lines += ["", f"Silences, active and pending: {len(silences)}"]
    cells: list[tuple[str, ...]] = [
        (s["id"], s["state"], ", ".join(s["matchers"]), _short(s["ends_at"]), s["created_by"], s["comment"])
        for s in silences
    ]
    lines.extend(_table(("ID", "STATE", "MATCHERS", "ENDS", "AUTHOR", "COMMENT"), cells))
    resumes = view["resumes"]
    lines += ["", f"Recent training resumes: {len(resumes)}"]
    cells = [
        (
            str(r.get("execution") or ""),
            str(r.get("status") or ""),
            _short(r.get("started_at")),
            _short(r.get("stopped_at")),
        )
        for r in resumes
    ]
    lines.extend(_table(("EXECUTION", "STATUS", "STARTED", "STOPPED"), cells))
    return "\n".join(lines).rstrip() + "\n"


def _incident_lines(rows: Sequence[Mapping[str, Any]], indent: str) -> list[str]:
    lines = _table(("SEVERITY", "INCIDENT", "PHASE", "OPENED", "TITLE"), _incident_cells(rows), indent)
    return lines + _quiet_lines(rows, indent) + _people_lines(rows, indent)


def _fleet_lines(rows: Sequence[Mapping[str, Any]], indent: str) -> list[str]:
    cells: list[tuple[str, ...]] = [
        (
            r["severity"],
            r["fingerprint"],
            f"{r['members_open']} of {r['members']} impaired",
            _short(r["opened_at"]),
            r["title"],
        )
        for r in rows
    ]
    lines = _table(("SEVERITY", "FLEET", "MEMBERS", "OPENED", "TITLE"), cells, indent)
    return lines + _quiet_lines(rows, indent) + _people_lines(rows, indent)


def _spread(rows: Sequence[Mapping[str, Any]], places: Sequence[Mapping[str, Any]] | None) -> str:
    """`, in 2 accounts and Regions` for an organization's section (nothing for a single-account stack's)."""
    if places is None or not rows:
        return ""
    count = len({(row.get("account"), row.get("region")) for row in rows})
    return f", in {count} account and Region" if count == 1 else f", in {count} accounts and Regions"


def _grouped(
    rows: Sequence[Mapping[str, Any]],
    places: Sequence[Mapping[str, Any]] | None,
    lines_of: Callable[[Sequence[Mapping[str, Any]], str], list[str]],
) -> list[str]:
    """A section's lines: one table (a single-account stack), or one per account and Region, in the order of
    `places` (the stack's own first), each under `name (id), Region: count`."""
    if places is None or not rows:
        return lines_of(rows, "  ")
    lines: list[str] = []
    for place in places:
        here = [row for row in rows if (row.get("account"), row.get("region")) == (place["account"], place["region"])]
        if here:
            lines.append(f"  {place_text(place)}: {len(here)}")
            lines.extend(lines_of(here, "    "))
    return lines


def place_text(place: Mapping[str, Any]) -> str:
    """`prod-ml (111111111111), us-west-2`, the id alone when the name is not known, and `(this stack's)` for the
    stack's own account and Region."""
    account, name = str(place.get("account") or ""), str(place.get("account_name") or "")
    text = f"{_printable(name)} ({account})" if name else account or "account unknown"
    text = f"{text}, {place.get('region') or 'Region unknown'}"
    return f"{text} (this stack's)" if place.get("home") else text


def _incident_cells(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    return [(r["severity"], r["fingerprint"], r["phase"], _short(r["opened_at"]), r["title"]) for r in rows]


def _quiet_lines(rows: Sequence[Mapping[str, Any]], indent: str = "  ") -> list[str]:
    lines = []
    for row in rows:
        for receiver, reason in row["quiet"].items():
            lines.append(f"{indent}  {row['fingerprint']}: quiet for {receiver}: {reason}")
    return lines


def _people_lines(rows: Sequence[Mapping[str, Any]], indent: str = "  ") -> list[str]:
    """Who is on it: who acknowledged it (from Slack or in PagerDuty), and PagerDuty's last assignment."""
    lines = []
    for row in rows:
        acknowledged, assigned = row.get("acknowledged"), row.get("assigned")
        if acknowledged:
            where = VIA.get(acknowledged["via"], acknowledged["via"])
            lines.append(
                f"{indent}  {row['fingerprint']}: acknowledged by {acknowledged['by']} {where}"
                f" at {_short(acknowledged['at'])}"
            )
        if assigned:
            where = VIA.get(assigned["via"], assigned["via"])
            to = f" {assigned['note']}" if assigned.get("note") else ""
            lines.append(
                f"{indent}  {row['fingerprint']}: reassigned {where}{to} by {assigned['by']}"
                f" at {_short(assigned['at'])}"
            )
    return lines


def _person(action: PersonAction | None) -> dict[str, Any] | None:
    if action is None:
        return None
    return {"by": _printable(action.by), "via": action.via, "at": _iso(action.at), "note": _printable(action.note)}


def _person_from_report(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, Mapping) or not item.get("by"):
        return None
    return {
        "by": _printable(item["by"]),
        "via": str(item.get("via") or ""),
        "at": item.get("at"),
        "note": _printable(item.get("note")),
    }


def _printable(text: Any) -> Any:
    """A person's name comes from Slack or PagerDuty: no control characters (a terminal's escapes) reach the
    terminal from it."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else "?" for c in str(text))


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    if not rows:
        return [f"{indent}(none)"]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header) - 1)]
    return [
        indent + "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in [header, *rows]
    ]


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def _short(value: Any) -> str:
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")
    except ValueError:
        return str(value)
