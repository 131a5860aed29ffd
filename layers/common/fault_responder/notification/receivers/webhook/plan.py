"""The webhook's plan: one payload per incident change, each the incident's whole state, as Alertmanager sends a
group's.

An incident's steps not told yet go out as one payload (the newest step names the change; the payload says the rest),
so steps learned together make one request, never a burst of payloads that all show the same state. A fleet
incident's member updates wait for their batch (FLEET_BATCH, or a minute), then go out as one payload however many
they are; its resolution goes out at once. The payload that tells an incident's resolution is a RESOLVE step: it
closes, at the consumer, the alert the earlier payloads opened. A notice that belongs to no incident is one payload,
and each notice the training auto-resume workflow held back from the receiver one more, once nothing holds it back.
"""

from __future__ import annotations

from fault_responder.core.domain import Alert, EntryKind, Incident
from fault_responder.notification.receivers.steps import WEBHOOK_POSTED, Step, StepKind, Told, held_notes
from fault_responder.notification.receivers.timeline import fleet_batch_due, told


def webhook_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
    steps: list[Step] = []
    for incident in incidents:
        sent = record.delivery(name, incident.id)
        steps.extend(Step(StepKind.NOTE, incident.id, entry) for entry, _ in held_notes(name, incident, sent))
        if (name not in incident.receivers and not sent.steps) or name in incident.muted:
            continue
        unsent = [
            entry
            for entry in incident.timeline
            if entry.kind != EntryKind.NOTICE and entry.muted is None and not told(entry, sent, incident)
        ]
        if not unsent:
            continue
        if incident.fleet is not None and incident.is_open and not fleet_batch_due(incident, unsent, sent):
            continue  # the member updates wait for their batch; the next event or the sweep sends them
        kind = StepKind.POST_STEP if incident.is_open else StepKind.RESOLVE
        steps.append(Step(kind, incident.id, unsent[-1], batch=tuple(unsent)))
    for alert in alerts:
        sent = record.delivery(name, alert.key)
        if (
            alert.superseded_by is None
            and name in alert.receivers
            and name not in alert.muted
            and WEBHOOK_POSTED not in sent.steps
        ):
            steps.append(Step(StepKind.POST_NOTICE, alert.key))
    return steps
