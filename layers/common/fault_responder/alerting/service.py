"""The alert router's use case: one ECS event in, its facts recorded, every receiver brought up to date.

`AlertService` is what the wiring and the route check (operations/routecheck.py) call. It builds its parts and
hands each call to the one that decides it: intake.py (events, actions and reconciled facts in: facts written,
incidents derived), membership.py (fleet membership), dispatch.py (receivers flushed under their leases, backoff),
sweep.py (the sweep) and views.py (what a record means now), all reading one context.py. It is built with the
store's three ports (fault_responder.alerting.store.StorePorts: Records, Leases, Fleets), and each part takes only
those it uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fault_responder.alerting.context import Context, Counter, Gauge
from fault_responder.alerting.dispatch import DeliveryPendingError, Dispatch
from fault_responder.alerting.intake import Intake, incident_transitions
from fault_responder.alerting.membership import FleetMembership
from fault_responder.alerting.store import Records, StorePorts
from fault_responder.alerting.sweep import SWEEP_LIMIT, Sweep
from fault_responder.alerting.views import Views
from fault_responder.core.domain import Incident
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import IncidentAction
from fault_responder.incidents.lifecycle import InstanceView
from fault_responder.incidents.record import EventFacts, InstanceRecord
from fault_responder.noise.fleet import FleetView, GroupRecord
from fault_responder.noise.policy import Policy
from fault_responder.notification.delivery import Courier
from fault_responder.routing.router import Grouping, Receiver, Router

__all__ = ["AlertService", "Counter", "DeliveryPendingError", "Gauge", "incident_transitions"]


class AlertService:
    def __init__(
        self,
        ports: StorePorts,
        router: Router,
        courier: Courier,
        settings: lifecycle.Settings,
        *,
        count: Counter = lambda metric, dimension, value: None,
        measure: Gauge = lambda metric, dimension, value, amount: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        epoch: Callable[[], float] = time.time,
        workers: int = 8,
        policy: Policy | None = None,
        grouping: Grouping | None = None,
        on_silence: Callable[[], None] | None = None,
    ) -> None:
        self.store: Records = ports.records
        """The records, as the wiring's reconciliations read them."""
        self.context = Context(
            router=router,
            courier=courier,
            settings=settings,
            count=count,
            measure=measure,
            clock=clock,
            epoch=epoch,
            policy=policy,
            grouping=grouping if grouping is not None and grouping.enabled else None,
        )
        records, leases, fleets = ports.records, ports.leases, ports.fleets
        self.views = Views(fleets=fleets, context=self.context)
        self.dispatch = Dispatch(
            records=records, leases=leases, views=self.views, context=self.context, workers=workers
        )
        self.membership = FleetMembership(
            fleets=fleets, records=records, views=self.views, context=self.context, workers=workers
        )
        self.intake = Intake(
            records=records,
            fleets=fleets,
            views=self.views,
            membership=self.membership,
            dispatch=self.dispatch,
            context=self.context,
            on_silence=on_silence,
        )
        self.sweeper = Sweep(
            records=records,
            fleets=fleets,
            views=self.views,
            intake=self.intake,
            membership=self.membership,
            dispatch=self.dispatch,
            context=self.context,
        )

    # --- Events in (intake.py) ------------------------------------------------------------------------------

    def handle(self, raw: dict[str, Any], *, seconds_left: float = 60.0) -> dict[str, Any]:
        """Process one EventBridge envelope. Raises on malformed input (pydantic ValidationError,
        UnsupportedEventError, BadAction) and DeliveryPendingError when a receiver could not be brought up to date."""
        return self.intake.handle(raw, seconds_left=seconds_left)

    def act(self, action: IncidentAction, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """A person's action on an incident, recorded on the incident's record as a fact and delivered like an
        event's."""
        return self.intake.act(action, seconds_left=seconds_left)

    def observe(self, facts: EventFacts, *, seconds_left: float = 60.0) -> bool:
        """Facts found with no event (the reconciliation sweep, fault_responder.operations.reconcile), recorded and
        delivered exactly as an event's: True if they were news. Raises DeliveryPendingError as handle does."""
        return self.intake.observe(facts, seconds_left=seconds_left)

    # --- The sweep (sweep.py) -------------------------------------------------------------------------------

    def reconcile(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring an instance's receivers up to date with what its facts mean now, with no new event."""
        return self.sweeper.reconcile(arn, seconds_left=seconds_left, sweeping=sweeping)

    def reconcile_group(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring a group's fleet incidents and their receivers up to date."""
        return self.sweeper.reconcile_group(arn, seconds_left=seconds_left, sweeping=sweeping)

    def sweep(self, *, seconds_left: float, limit: int = SWEEP_LIMIT) -> dict[str, int]:
        """Reconcile every record on the sweep's list, bounded by `limit` records and the time left."""
        return self.sweeper.run(seconds_left=seconds_left, limit=limit)

    def open_incidents(self, *, limit: int = SWEEP_LIMIT) -> list[Incident]:
        """The open incidents and fleet incidents as derived now, of at most `limit` records on the sweep's list."""
        return self.sweeper.open_incidents(limit=limit)

    # --- What a record means now (views.py) -----------------------------------------------------------------

    def derive(self, record: InstanceRecord) -> InstanceView:
        return self.views.derive(record)

    def derive_fleet(self, group: GroupRecord) -> FleetView:
        return self.views.derive_fleet(group)

    def load_fleets(self, arn: str, *, counts: bool = True) -> GroupRecord | None:
        """The group's head, and what deriving its fleet incidents reads beside it."""
        return self.views.load_fleets(arn, counts=counts)

    def holds_notes(self, record: InstanceRecord, view: InstanceView) -> bool:
        """Whether the record keeps a held-back notice not told yet."""
        return self.views.holds_notes(record, view)

    # --- What every part reads alike (context.py) -----------------------------------------------------------

    @property
    def router(self) -> Router:
        return self.context.router

    @property
    def receivers(self) -> dict[str, Receiver]:
        return self.context.receivers

    @property
    def courier(self) -> Courier:
        return self.context.courier

    @property
    def settings(self) -> lifecycle.Settings:
        return self.context.settings

    @property
    def grouping(self) -> Grouping | None:
        return self.context.grouping

    @property
    def count(self) -> Counter:
        return self.context.count

    @property
    def measure(self) -> Gauge:
        return self.context.measure

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.context.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self.context.clock = clock

    @property
    def epoch(self) -> Callable[[], float]:
        return self.context.epoch

    @epoch.setter
    def epoch(self, epoch: Callable[[], float]) -> None:
        self.context.epoch = epoch

    @property
    def policy(self) -> Policy | None:
        return self.context.policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        self.context.policy = policy
