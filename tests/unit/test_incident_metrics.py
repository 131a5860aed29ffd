"""IncidentsOpened and IncidentsResolved by class: what the dashboard charts as incidents opened and resolved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fault_responder.alerting.service import AlertService, incident_transitions
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import KnownIncident
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import load_event, vary

AT = datetime(2026, 4, 11, 1, 0, tzinfo=UTC)


def known(status: str, fault_class: str | None = "xid_critical", incident_id: str = "i-1") -> dict[str, list[Any]]:
    return {
        "ACCELERATED_COMPUTE": [
            KnownIncident(incident_id, "ACCELERATED_COMPUTE", AT, status=status, fault_class=fault_class)
        ]
    }


class Counted:
    def __init__(self) -> None:
        self.counts: list[tuple[str, str, str]] = []
        store = MemoryInstanceStore()
        self.service = AlertService(
            StorePorts(store, store, store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(RecordingChannels()),
            lifecycle.Settings(),
            count=lambda metric, dimension, value: self.counts.append((metric, dimension, value)),
        )

    def incident_counts(self, event: dict[str, Any]) -> list[tuple[str, str, str]]:
        self.counts.clear()
        self.service.handle(event)
        return [count for count in self.counts if count[0].startswith("Incidents")]


def test_a_new_open_incident_is_opened() -> None:
    assert incident_transitions({}, known("OPEN")) == (["xid_critical"], [])


def test_an_open_incident_that_closes_is_resolved() -> None:
    assert incident_transitions(known("OPEN"), known("CLOSED")) == ([], ["xid_critical"])


def test_a_fault_learned_when_already_over_is_opened_and_resolved() -> None:
    assert incident_transitions({}, known("CLOSED", "daemon")) == (["daemon"], ["daemon"])


def test_an_incident_a_late_event_reopens_is_opened_again() -> None:
    assert incident_transitions(known("CLOSED"), known("OPEN")) == (["xid_critical"], [])


def test_an_incident_whose_status_did_not_change_counts_nothing() -> None:
    assert incident_transitions(known("OPEN"), known("OPEN")) == ([], [])
    assert incident_transitions(known("CLOSED"), known("CLOSED")) == ([], [])


def test_an_incident_with_no_class_recorded_counts_as_unknown() -> None:
    assert incident_transitions({}, known("OPEN", None)) == (["unknown"], [])


def test_the_router_counts_an_incident_opened_then_resolved_once_each(xid46: dict[str, Any]) -> None:
    # Given the alert router with a metrics counter
    world = Counted()
    ok = load_event("health/accelerated-compute-xid46-ok.json")

    # When the fault arrives, arrives again, and then its OK
    opened = world.incident_counts(xid46)
    again = world.incident_counts(vary(xid46, event_id="a-copy-of-the-fault"))
    resolved = world.incident_counts(ok)

    # Then one incident was opened and one resolved, by its class, and the copy counted nothing
    assert opened == [("IncidentsOpened", "Class", "xid_critical")]
    assert again == []
    assert resolved == [("IncidentsResolved", "Class", "xid_critical")]
