"""What an incident's timeline says: each report, change of severity, relapse, recovery, instance status, task stop
and resume notice within its episode, in time order, at most MAX_TIMELINE entries (the first and the latest).

Pure: the entries come from the record's facts and the episode (incidents/episodes.py); their keys are stable, so
a receiver told an entry is never told it again.
"""

from __future__ import annotations

from datetime import datetime

from fault_responder.core.domain import Classification, EntryKind, TimelineEntry
from fault_responder.core.timefmt import iso_utc
from fault_responder.incidents.episodes import LEFT_CLUSTER, Episode, classify_fact
from fault_responder.incidents.people import KIND_ORDER, MAX_TIMELINE
from fault_responder.incidents.record import HealthFact, InstanceRecord, StatusFact, TaskStopFact


def incident_timeline(record: InstanceRecord, episode: Episode, statuses: list[StatusFact]) -> list[TimelineEntry]:
    check = episode.check_type
    entries: list[TimelineEntry] = []
    previous: Classification | None = None
    relapsed_at = sorted(ok.at for ok in episode.relapsed)
    for fact in episode.reports:
        classification = classify_fact(fact)
        relapses = sum(1 for at in relapsed_at if at <= fact.at)
        if previous is None:
            text = f"{check} {fact.status}: {classification.title}"
            entries.append(_health_entry(fact, text, EntryKind.OPENED, page=True))
        elif relapses and not any(entry.key.startswith(f"relapse:{relapses}:") for entry in entries):
            text = f"{check} {fact.status} again: {classification.title} (relapse {relapses}: flapping)"
            entries.append(_health_entry(fact, text, EntryKind.CHANGED, page=False, prefix=f"relapse:{relapses}"))
        elif classification != previous:
            escalated = classification.severity.rank > previous.severity.rank
            text = f"{check} now reports {fact.status}: {classification.title}"
            if escalated:
                text += f" (severity {previous.severity} → {classification.severity})"
            entries.append(_health_entry(fact, text, EntryKind.CHANGED, page=escalated))
        previous = classification
    for ok in episode.relapsed:
        entries.append(_health_entry(ok, f"{check} OK, briefly", EntryKind.RECOVERED, page=False))
    if episode.recovering is not None and episode.resolves_at is not None:
        text = f"{check} is OK; resolves at {_clock(episode.resolves_at)} if it stays OK"
        entries.append(_health_entry(episode.recovering, text, EntryKind.RECOVERED, page=False))
    if episode.close is not None:
        entries.append(_health_entry(episode.close, f"{check} is OK again", EntryKind.RECOVERED, page=True))
    for status in statuses:
        entries.append(_status_entry(status))
    for task in record.tasks:
        if episode.contains(task.at):
            entries.append(_task_entry(task))
    for notice in record.notices:
        if notice.check_type == check and episode.contains(notice.fault_at):
            key = f"notice:{notice.key}"
            entries.append(
                TimelineEntry(
                    key, notice.at, key, "RESUME", notice.title, EntryKind.NOTICE, notice.pages, note=notice.note
                )
            )
    entries.sort(key=lambda entry: (entry.at, KIND_ORDER[entry.kind], entry.key))
    if len(entries) > MAX_TIMELINE:
        entries = [entries[0], *entries[-(MAX_TIMELINE - 1) :]]
    return entries


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M UTC")


def _health_entry(fact: HealthFact, text: str, kind: EntryKind, *, page: bool, prefix: str = "health") -> TimelineEntry:
    key = f"{prefix}:{fact.check_type}:{fact.status}:{iso_utc(fact.at)}"
    phase = "RECOVERED" if fact.status == "OK" else fact.status
    classification = None if fact.status == "OK" else classify_fact(fact)
    return TimelineEntry(key, fact.at, fact.event_id, phase, text, kind, page, classification=classification)


def _status_entry(fact: StatusFact) -> TimelineEntry:
    texts = {
        "DRAINING": "Instance set to DRAINING",
        "DEREGISTERING": "Instance DEREGISTERING",
        LEFT_CLUSTER: "Instance left the cluster (INACTIVE)",
        "ACTIVE": "Instance ACTIVE again",
    }
    text = texts.get(fact.status, f"Instance status {fact.status}")
    page = fact.status in ("DRAINING", LEFT_CLUSTER)
    key = f"status:{fact.event_id}"
    return TimelineEntry(key, fact.at, fact.event_id, fact.status, text, EntryKind.INSTANCE, page)


def _task_entry(task: TaskStopFact) -> TimelineEntry:
    code = f" [{task.stop_code}]" if task.stop_code else ""
    text = f"Task {task.family} ({task.task_id}) stopped: {task.reason}{code}"
    return TimelineEntry(f"task:{task.task_arn}", task.at, task.event_id, "TASK_STOPPED", text, EntryKind.TASK)
