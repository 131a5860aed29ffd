"""What every part of the alert service reads alike: the routes and receivers, the courier, the lifecycle's
settings, the noise policy and the fleet grouping, the clocks and the metrics.

One object, shared by intake, fleet membership, dispatch and the sweep: what is changed on it after the service
was built (a clock, the policy) reaches every part at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy
from fault_responder.notification.delivery import Courier
from fault_responder.routing.router import Grouping, Receiver, Router

Counter = Callable[[str, str, str], None]
"""count(metric, dimension name, dimension value)."""
Gauge = Callable[[str, str, str, float], None]
"""measure(metric, dimension name, dimension value, amount)."""

MAX_WRITE_CONFLICTS = 10


@dataclass(slots=True)
class Context:
    router: Router
    courier: Courier
    settings: lifecycle.Settings
    count: Counter
    measure: Gauge
    clock: Callable[[], datetime]
    epoch: Callable[[], float]
    policy: Policy | None
    grouping: Grouping | None
    """None when fleet incidents are off."""
    receivers: dict[str, Receiver] = field(init=False)
    """The routing file's receivers, by name."""

    def __post_init__(self) -> None:
        self.receivers = dict(self.router.config.receivers)
