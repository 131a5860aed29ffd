"""Why an instance is draining.

AWS documents no drain reason code (docs/ecs-events.md#drain-reasons). We read whatever reason the event
carries, and attribute the cause from what we know, in this order:
1. this app quarantined the instance (the resume workflow records that before it drains);
2. a fault on the instance was ongoing, or ended within the window -> ECS auto-repair;
3. ECS said something about it -> reported by ECS, with its words;
4. nothing -> a manual or scheduled drain, no health fault.

The facts behind 1 and 2 may arrive after the drain; the lifecycle derives the attribution again whenever
they do, so a drain first announced as manual is re-attributed when its fault arrives.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fault_responder.core.domain import DrainAttribution, DrainCause
from fault_responder.incidents.record import QuarantineFact

_CLOCK_SKEW = timedelta(minutes=1)


def attribute_drain(
    *,
    at: datetime,
    reason: str | None,
    quarantine: QuarantineFact | None,
    fault: str | None,
    window: timedelta,
) -> DrainAttribution:
    """`fault` names the newest fault ongoing at `at` or ended within `window` before it ("XID 79"), if any."""
    reason = (reason or "").strip() or None
    # The quarantine is recorded (Lambda's clock) just before the drain (ECS's clock): allow a little skew.
    if quarantine is not None and -_CLOCK_SKEW <= at - quarantine.at <= window:
        detail = f": {quarantine.reason}" if quarantine.reason else ""
        return DrainAttribution(DrainCause.FAULT_RESPONDER_QUARANTINE, f"fault-responder quarantine{detail}", reason)
    if fault is not None:
        return DrainAttribution(DrainCause.ECS_AUTO_REPAIR, f"ECS auto-repair ({fault})", reason)
    if reason is not None:
        return DrainAttribution(DrainCause.ECS_REPORTED, f"reported by ECS: {reason}", reason)
    return DrainAttribution(DrainCause.MANUAL_OR_SCHEDULED, "manual or scheduled drain (no health fault)", None)
