"""Where a health check result becomes a fault class and a severity."""

from __future__ import annotations

from fault_responder.core.domain import Classification, FaultClass, Severity
from fault_responder.events.ecs import HealthCheck
from fault_responder.events.xid import CRITICAL_XIDS, RESTART_APP_XIDS, describe_xid, parse_xid

_CHECK_CLASSES = {
    "DAEMON": (FaultClass.DAEMON, Severity.ERROR, "Managed daemon unhealthy"),
    "AGENT_CONNECTIVITY": (FaultClass.AGENT_CONNECTIVITY, Severity.ERROR, "ECS agent lost connectivity"),
    "CONTAINER_RUNTIME": (FaultClass.CONTAINER_RUNTIME, Severity.ERROR, "Container runtime unhealthy"),
}


def classify_health_check(check: HealthCheck) -> Classification:
    """Classify one health check result. Never raises: unknown input is labelled unknown, not dropped."""
    reason = check.status_reason or None
    if check.status == "OK":
        return Classification(FaultClass.RECOVERY, Severity.INFO, f"{check.type} healthy again", reason=reason)
    if check.status == "INSUFFICIENT_DATA":
        return Classification(
            FaultClass.INSUFFICIENT_DATA,
            Severity.WARNING,
            f"{check.type}: ECS has insufficient data about this check",
            reason=reason,
        )
    if check.status != "IMPAIRED":
        return Classification(
            FaultClass.UNKNOWN_CHECK,
            Severity.ERROR,
            f"{check.type} reports unknown status {check.status}",
            reason=reason,
        )
    if check.type == "ACCELERATED_COMPUTE":
        return _classify_gpu(reason)
    if check.type in _CHECK_CLASSES:
        fault_class, severity, title = _CHECK_CLASSES[check.type]
        return Classification(fault_class, severity, title, reason=reason)
    return Classification(
        FaultClass.UNKNOWN_CHECK,
        Severity.ERROR,
        f"Unknown health check type {check.type} is {check.status}",
        reason=reason,
    )


def _classify_gpu(reason: str | None) -> Classification:
    xid = parse_xid(reason)
    if xid is None:
        # The ECS agent marks a GPU unhealthy on a DCGM health-check failure without any reason.
        title = "GPU impaired (no XID reported)" if not reason else "GPU impaired (unrecognised reason)"
        return Classification(FaultClass.GPU_NO_REASON, Severity.ERROR, title, reason=reason)
    title = f"XID {xid}: {describe_xid(xid)}"
    if xid in CRITICAL_XIDS:
        return Classification(FaultClass.XID_CRITICAL, Severity.CRITICAL, title, xid=xid, reason=reason)
    if xid in RESTART_APP_XIDS:
        return Classification(FaultClass.XID_RESTART_APP, Severity.WARNING, title, xid=xid, reason=reason)
    return Classification(FaultClass.XID_UNKNOWN, Severity.ERROR, title, xid=xid, reason=reason)
