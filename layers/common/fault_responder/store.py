"""The incident store: what the lifecycle needs from persistence, and an in-memory implementation.

The DynamoDB implementation is fault_responder.adapters.dynamodb_store; the in-memory one serves the
routing CLI (`make route`) and unit tests. Both keep the same contract: writes are conditional on the
version read, so two concurrent writers cannot both win.
"""

from __future__ import annotations

import copy
from typing import Protocol

from fault_responder.domain import Incident, InstanceState


class ConcurrentUpdateError(Exception):
    """Someone else changed the item since we read it; the event is retried from a fresh read."""


class IncidentStore(Protocol):
    def load(self, container_instance_arn: str) -> tuple[dict[str, Incident], InstanceState]:
        """The incidents on a container instance keyed by health check type, and its state."""
        ...

    def save_incident(self, incident: Incident) -> None:
        """Write if the stored version is still incident.version, then bump the version."""
        ...

    def save_instance_state(self, state: InstanceState) -> None:
        """Write if the stored version is still state.version, then bump the version."""
        ...

    def delivered(self, key: str) -> bool:
        """Whether a delivery (event, receiver, step) already went out."""
        ...

    def mark_delivered(self, key: str) -> None: ...


class MemoryIncidentStore:
    def __init__(self) -> None:
        self._incidents: dict[str, dict[str, Incident]] = {}
        self._states: dict[str, InstanceState] = {}
        self._delivered: set[str] = set()

    def load(self, container_instance_arn: str) -> tuple[dict[str, Incident], InstanceState]:
        incidents = copy.deepcopy(self._incidents.get(container_instance_arn, {}))
        state = copy.deepcopy(self._states.get(container_instance_arn)) or InstanceState(container_instance_arn)
        return incidents, state

    def save_incident(self, incident: Incident) -> None:
        arn = incident.instance.container_instance_arn
        stored = self._incidents.get(arn, {}).get(incident.check_type)
        if (stored.version if stored else 0) != incident.version:
            raise ConcurrentUpdateError(incident.fingerprint)
        incident.version += 1
        self._incidents.setdefault(arn, {})[incident.check_type] = copy.deepcopy(incident)

    def save_instance_state(self, state: InstanceState) -> None:
        stored = self._states.get(state.container_instance_arn)
        if (stored.version if stored else 0) != state.version:
            raise ConcurrentUpdateError(state.container_instance_arn)
        state.version += 1
        self._states[state.container_instance_arn] = copy.deepcopy(state)

    def delivered(self, key: str) -> bool:
        return key in self._delivered

    def mark_delivered(self, key: str) -> None:
        self._delivered.add(key)
