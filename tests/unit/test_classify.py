"""Where an XID or a health check becomes a class and a severity."""

from __future__ import annotations

import pytest

from fault_responder.core.domain import FaultClass, Severity
from fault_responder.events.ecs import HealthCheck
from fault_responder.events.xid import CRITICAL_XIDS, RESTART_APP_XIDS, parse_xid
from fault_responder.incidents.classify import classify_health_check


def gpu(reason: str | None, status: str = "IMPAIRED") -> HealthCheck:
    return HealthCheck(type="ACCELERATED_COMPUTE", status=status, statusReason=reason)


def test_catalog_has_the_18_critical_and_48_restart_app_xids_and_no_overlap() -> None:
    assert len(CRITICAL_XIDS) == 18
    assert len(RESTART_APP_XIDS) == 48
    assert not set(CRITICAL_XIDS) & RESTART_APP_XIDS


@pytest.mark.parametrize("xid", sorted(CRITICAL_XIDS))
def test_critical_xids_are_critical(xid: int) -> None:
    result = classify_health_check(gpu(f"XID_{xid}"))
    assert (result.fault_class, result.severity, result.xid) == (FaultClass.XID_CRITICAL, Severity.CRITICAL, xid)


@pytest.mark.parametrize("xid", sorted(RESTART_APP_XIDS))
def test_restart_app_xids_are_warnings(xid: int) -> None:
    result = classify_health_check(gpu(f"XID_{xid}"))
    assert (result.fault_class, result.severity) == (FaultClass.XID_RESTART_APP, Severity.WARNING)


def test_an_unknown_xid_still_alerts_labelled_unknown() -> None:
    result = classify_health_check(gpu("XID_999"))
    assert (result.fault_class, result.severity, result.xid) == (FaultClass.XID_UNKNOWN, Severity.ERROR, 999)
    assert "XID 999" in result.title


@pytest.mark.parametrize("reason", [None, "", "DCGM health check failed"])
def test_an_impaired_gpu_without_an_xid_is_an_error(reason: str | None) -> None:
    result = classify_health_check(gpu(reason))
    assert (result.fault_class, result.severity, result.xid) == (FaultClass.GPU_NO_REASON, Severity.ERROR, None)


@pytest.mark.parametrize(
    ("check_type", "fault_class"),
    [
        ("DAEMON", FaultClass.DAEMON),
        ("AGENT_CONNECTIVITY", FaultClass.AGENT_CONNECTIVITY),
        ("CONTAINER_RUNTIME", FaultClass.CONTAINER_RUNTIME),
    ],
)
def test_each_non_gpu_check_type_has_its_own_class(check_type: str, fault_class: FaultClass) -> None:
    result = classify_health_check(HealthCheck(type=check_type, status="IMPAIRED", statusReason="why"))
    assert (result.fault_class, result.severity, result.reason) == (fault_class, Severity.ERROR, "why")


def test_an_unknown_check_type_still_alerts_labelled_unknown() -> None:
    result = classify_health_check(HealthCheck(type="NETWORK_FABRIC", status="IMPAIRED"))
    assert (result.fault_class, result.severity) == (FaultClass.UNKNOWN_CHECK, Severity.ERROR)
    assert "NETWORK_FABRIC" in result.title


def test_an_unknown_status_still_alerts_labelled_unknown() -> None:
    result = classify_health_check(gpu("XID_79", status="DEGRADED"))
    assert (result.fault_class, result.severity) == (FaultClass.UNKNOWN_CHECK, Severity.ERROR)
    assert "DEGRADED" in result.title


def test_ok_is_a_recovery() -> None:
    assert classify_health_check(gpu(None, status="OK")).fault_class == FaultClass.RECOVERY


def test_insufficient_data_is_a_warning() -> None:
    result = classify_health_check(gpu(None, status="INSUFFICIENT_DATA"))
    assert (result.fault_class, result.severity) == (FaultClass.INSUFFICIENT_DATA, Severity.WARNING)


@pytest.mark.parametrize(
    ("reason", "xid"),
    [("XID_79", 79), ("xid_46", 46), ("XID 48", 48), (" XID_13 extra", 13), ("XID_", None), ("79", None), (None, None)],
)
def test_parse_xid_reads_the_ecs_reason_format(reason: str | None, xid: int | None) -> None:
    assert parse_xid(reason) == xid
