"""`fault-responder status`: what is open, what is held back and why, what the workflow did.

Read from a deployed stack's incidents table (the records its Open index lists, derived as the router derives
them now: the routing file, the hold-down, fleets, inhibition, maintenance windows and silences), or from a
sandbox report (`python -m sandbox replay|run --report`). Everything here is plain data (dicts) and text, so
both sources print the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.core.domain import Incident, PersonAction
from fault_responder.incidents.people import VIA
from fault_responder.noise.silences import Silence

RECENT_RESUMES = timedelta(hours=24)
MAX_RESUMES = 20


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
) -> dict[str, Any]:
    """The status of a stack: open incidents and fleet incidents (most severe first), pending and active silences,
    the workflow's recent executions."""
    opened = [incident for incident in incidents if incident.is_open]
    order = {"critical": 0, "error": 1, "warning": 2, "info": 3}
    rows = sorted((incident_row(i) for i in opened), key=lambda r: (order.get(r["severity"], 9), r["opened_at"]))
    live = [silence for silence in silences if silence.state(now).value != "expired"]
    return {
        "at": _iso(now),
        "incidents": [row for row in rows if "members" not in row],
        "fleets": [row for row in rows if "members" in row],
        "silences": [silence_row(silence, now) for silence in sorted(live, key=lambda s: (s.ends_at, s.id))],
        "resumes": list(resumes)[:MAX_RESUMES],
    }


def from_report(report: Mapping[str, Any], silences: Iterable[Silence], now: datetime) -> dict[str, Any]:
    """The same, from a sandbox report's derived incidents (plain dicts) and its executions."""
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
    return {
        "at": _iso(now),
        "incidents": [row for row in rows if "members" not in row],
        "fleets": [row for row in rows if "members" in row],
        "silences": [silence_row(silence, now) for silence in sorted(live, key=lambda s: (s.ends_at, s.id))],
        "resumes": resumes[:MAX_RESUMES],
    }


def render(view: Mapping[str, Any]) -> str:
    """The status as terminal text: one table per section, and what each quiet receiver is held back by."""
    lines = [f"Status at {view['at']}", ""]
    incidents = view["incidents"]
    lines.append(f"Open incidents: {len(incidents)}")
    lines.extend(_table(("SEVERITY", "INCIDENT", "PHASE", "OPENED", "TITLE"), _incident_cells(incidents)))
    lines.extend(_quiet_lines(incidents))
    lines.extend(_people_lines(incidents))
    fleets = view["fleets"]
    lines += ["", f"Open fleet incidents: {len(fleets)}"]
    cells: list[tuple[str, ...]] = [
        (
            r["severity"],
            r["fingerprint"],
            f"{r['members_open']} of {r['members']} impaired",
            _short(r["opened_at"]),
            r["title"],
        )
        for r in fleets
    ]
    lines.extend(_table(("SEVERITY", "FLEET", "MEMBERS", "OPENED", "TITLE"), cells))
    lines.extend(_quiet_lines(fleets))
    lines.extend(_people_lines(fleets))
    silences = view["silences"]
    lines += ["", f"Silences, active and pending: {len(silences)}"]
    cells = [
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


def _incident_cells(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    return [(r["severity"], r["fingerprint"], r["phase"], _short(r["opened_at"]), r["title"]) for r in rows]


def _quiet_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        for receiver, reason in row["quiet"].items():
            lines.append(f"    {row['fingerprint']}: quiet for {receiver}: {reason}")
    return lines


def _people_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Who is on it: who acknowledged it (from Slack or in PagerDuty), and PagerDuty's last assignment."""
    lines = []
    for row in rows:
        acknowledged, assigned = row.get("acknowledged"), row.get("assigned")
        if acknowledged:
            where = VIA.get(acknowledged["via"], acknowledged["via"])
            lines.append(
                f"    {row['fingerprint']}: acknowledged by {acknowledged['by']} {where}"
                f" at {_short(acknowledged['at'])}"
            )
        if assigned:
            where = VIA.get(assigned["via"], assigned["via"])
            to = f" {assigned['note']}" if assigned.get("note") else ""
            lines.append(
                f"    {row['fingerprint']}: reassigned {where}{to} by {assigned['by']} at {_short(assigned['at'])}"
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


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    if not rows:
        return ["  (none)"]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header) - 1)]
    return [
        "  " + "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]).rstrip()
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
