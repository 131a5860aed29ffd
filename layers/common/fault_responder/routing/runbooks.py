"""Where a fault class or an XID becomes what on-call should do, with a link to read more.

Every XID the classifier knows (xid.py) and every fault class has a default `Runbook`: one line that says what the
fault is, what ECS does about it by itself, and what is left to a person, and a link to NVIDIA's Xid catalog (XIDs)
or the ECS documentation (everything else). A route of the routing file may replace the line, the link or both for
what it routes (docs/routing.md#runbooks); docs/runbooks.md lists the defaults for people.

Pure: no I/O, and the links are constants, checked by tests/unit/test_runbooks.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol
from urllib.parse import urlsplit

from fault_responder.core.domain import FaultClass, Runbook
from fault_responder.events.xid import CRITICAL_XIDS, RESTART_APP_XIDS

__all__ = [
    "CLASS_RUNBOOKS",
    "MAX_ACTION",
    "MAX_URL",
    "XID_RUNBOOKS",
    "Runbook",
    "RunbookOverride",
    "check_action",
    "check_https_url",
    "default_runbook",
    "runbook_for",
]

MAX_ACTION = 300
"""A line on-call reads on a phone; Slack and PagerDuty would take more."""
MAX_URL = 2048

# --- Links -------------------------------------------------------------------------------------------------------
# NVIDIA's Xid catalog for Ampere and newer GPUs: one row per XID with its description and NVIDIA's immediate and
# investigatory actions. Its rows carry no anchors (only the table as a whole has one), so a link cannot open at one
# XID: the link text names the XID to look for instead.
NVIDIA_XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
# The ECS guide to GPU auto-repair on Managed Instances: the XIDs ECS acts on, its drain-then-replace workflow, its
# rate limit (20% of a capacity provider at a time, one at a time under nine instances), and how to turn it off.
ECS_GPU_AUTO_REPAIR = (
    "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-instances-gpu-auto-repair.html"
)
# The ECS guide to managed daemon auto-repair: a daemon task that stops or turns unhealthy impairs its instance, which
# ECS drains and replaces (turning GPU auto-repair off turns this off too, as the GPU guide says).
ECS_DAEMON_AUTO_REPAIR = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-daemons-auto-repair.html"
# The ECS guide to container instance health: the check types, what each status means, and how to read them with
# describe-container-instances.
ECS_INSTANCE_HEALTH = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-health.html"
# The ECS reference of health change events: among them, an agent that stays disconnected from the ECS control plane
# beyond a threshold marks its instance impaired.
ECS_HEALTH_EVENTS = (
    "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_container_instance_health_events.html"
)
# Where the TaskGPU* metrics of ECS Container Insights with enhanced observability are documented, and alarms.
CONTAINER_INSIGHTS_ECS = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-enhanced-observability-metrics-ECS.html"
CLOUDWATCH_ALARMS = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html"
# The ECS guide to draining: service tasks are replaced elsewhere, tasks started outside a service are left running.
ECS_DRAINING = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-draining.html"
# The ECS reference of stopped-task errors, which the ECS API reference points to for a task's stop code.
ECS_STOPPED_TASKS = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html"

# --- XIDs ----------------------------------------------------------------------------------------------------------
# ECS marks the instance IMPAIRED for each of these and, where auto-repair is on (Managed Instances, the default),
# drains and replaces it; elsewhere (auto-repair off, ECS on EC2) nothing replaces it unless a person does.
_REPLACE = "ECS replaces the instance if auto-repair is on; otherwise drain and replace it."
# What each critical XID is, after ECS's own description of it (xid.CRITICAL_XIDS), in a few words.
_CRITICAL: dict[int, str] = {
    46: "The GPU stopped processing",
    48: "Uncorrectable (double-bit) ECC memory error",
    54: "The GPU's auxiliary power is not connected",
    62: "The GPU's internal micro-controller halted",
    64: "The GPU failed to remap faulty memory",
    74: "NVLink error",
    79: "The GPU fell off the bus",
    95: "Uncontained memory error, every application on the GPU is hit",
    109: "A GPU context switch timed out",
    110: "The GPU disappeared from the bus",
    136: "The GPU reached its limit of retired memory pages",
    140: "Unrecoverable ECC memory error",
    142: "A GPU memory page was retired after an uncorrectable error",
    143: "A GPU memory page was retired after too many correctable errors",
    151: "GPU-to-CPU interconnect error",
    155: "NVLink flit CRC error",
    156: "NVLink lane error",
    158: "The GPU's InfoROM is corrupted",
}
# NVIDIA's immediate action for these is to restart the application, not the host.
_RESTART_APP = (
    "Application-level GPU error: restart the affected task, the instance can stay; if it recurs on this instance, "
    "drain it."
)
# Where NVIDIA's documentation says more than "restart the application".
_RESTART_APP_SPECIAL: dict[int, str] = {
    13: (
        "Graphics engine exception, most often a bug in the application (such as an out-of-range access): restart "
        "the task and check the application; if it recurs only on this instance, drain it."
    ),
    31: (
        "GPU memory page fault, most often an invalid memory access by the application: restart the task and check "
        "the application; if it recurs only on this instance, drain it."
    ),
    94: (
        "Contained ECC memory error: only the application that hit it was stopped and the GPU keeps working without "
        "a reset; restart the task."
    ),
}


def _xid_runbook(xid: int, action: str) -> Runbook:
    return Runbook(action, NVIDIA_XID_CATALOG, f"NVIDIA Xid catalog: Xid {xid}")


XID_RUNBOOKS: Mapping[int, Runbook] = MappingProxyType(
    {
        **{xid: _xid_runbook(xid, f"{_CRITICAL[xid]}: {_REPLACE}") for xid in sorted(CRITICAL_XIDS)},
        **{xid: _xid_runbook(xid, _RESTART_APP_SPECIAL.get(xid, _RESTART_APP)) for xid in sorted(RESTART_APP_XIDS)},
    }
)
"""Every XID the classifier knows: the critical ones and the restart-the-application ones."""

_UNKNOWN_XID = (
    "An XID outside ECS's lists: look it up in NVIDIA's catalog; if the instance stays IMPAIRED, ECS replaces it when "
    "auto-repair is on, otherwise drain and replace it."
)

# --- Fault classes -------------------------------------------------------------------------------------------------
CLASS_RUNBOOKS: Mapping[FaultClass, Runbook] = MappingProxyType(
    {
        FaultClass.XID_CRITICAL: Runbook(
            f"Critical GPU fault: {_REPLACE}", ECS_GPU_AUTO_REPAIR, "ECS: GPU auto-repair on Managed Instances"
        ),
        FaultClass.XID_RESTART_APP: Runbook(_RESTART_APP, NVIDIA_XID_CATALOG, "NVIDIA Xid catalog"),
        FaultClass.XID_UNKNOWN: Runbook(_UNKNOWN_XID, NVIDIA_XID_CATALOG, "NVIDIA Xid catalog"),
        FaultClass.GPU_NO_REASON: Runbook(
            f"GPU impaired with no XID (a failed DCGM health check): {_REPLACE}",
            ECS_GPU_AUTO_REPAIR,
            "ECS: GPU auto-repair on Managed Instances",
        ),
        FaultClass.DAEMON: Runbook(
            "A managed daemon task stopped or is unhealthy: ECS replaces the instance if auto-repair is on; otherwise "
            "find why the daemon failed (describe-tasks), then drain and replace the instance.",
            ECS_DAEMON_AUTO_REPAIR,
            "ECS: managed daemon auto-repair",
        ),
        FaultClass.AGENT_CONNECTIVITY: Runbook(
            "The ECS agent lost its connection to ECS: ECS replaces the instance if auto-repair is on; otherwise check "
            "it runs and can reach ECS, and replace it if the agent stays disconnected.",
            ECS_HEALTH_EVENTS,
            "ECS: container instance health events",
        ),
        FaultClass.CONTAINER_RUNTIME: Runbook(
            "The container runtime (Docker) stopped responding on this EC2 instance, which ECS does not replace: "
            "restart the runtime, or drain and replace the instance.",
            ECS_INSTANCE_HEALTH,
            "ECS: container instance health",
        ),
        FaultClass.INSUFFICIENT_DATA: Runbook(
            "ECS has no recent data for this check: look again in a few minutes; if it persists, check the instance "
            "and its ECS agent.",
            ECS_INSTANCE_HEALTH,
            "ECS: container instance health",
        ),
        FaultClass.UNKNOWN_CHECK: Runbook(
            "A check type or status this app does not know: read the instance's health (describe-container-instances) "
            "and treat it as impaired until you know better.",
            ECS_INSTANCE_HEALTH,
            "ECS: container instance health",
        ),
        FaultClass.RECOVERY: Runbook(
            "Nothing: the check is healthy again.", ECS_INSTANCE_HEALTH, "ECS: container instance health"
        ),
        FaultClass.INSTANCE_LIFECYCLE: Runbook(
            "Nothing for a planned or ECS auto-repair drain, but tasks started outside a service stay until you stop "
            "them; for a failed registration, read its reason.",
            ECS_DRAINING,
            "ECS: draining container instances",
        ),
        FaultClass.GPU_TEMPERATURE: Runbook(
            "A GPU runs hot: ECS does not act on temperature. Find the task (Container Insights, TaskGPUTemperature), "
            "check the instance's cooling and power, and move the work off it if it stays hot.",
            CONTAINER_INSIGHTS_ECS,
            "CloudWatch: Container Insights for ECS",
        ),
        FaultClass.GPU_RESTART_APP_XIDS: Runbook(_RESTART_APP, NVIDIA_XID_CATALOG, "NVIDIA Xid catalog"),
        FaultClass.RESPONDER_HEALTH: Runbook(
            "GPU faults may not be paged while this fires: read the router's logs and the alert DLQ (docs/alarms.md "
            "in the responder's repository), fix the cause, then redrive the DLQ.",
            CLOUDWATCH_ALARMS,
            "CloudWatch: alarms",
        ),
        FaultClass.ALARM: Runbook(
            "A CloudWatch alarm fired: read its reason and the metric it watches in the CloudWatch console.",
            CLOUDWATCH_ALARMS,
            "CloudWatch: alarms",
        ),
        FaultClass.TASK_INTERRUPTION: Runbook(
            "The infrastructure stopped a task (Spot, a termination notice, an unhealthy instance): a service replaces "
            "it by itself; start a task run outside a service again yourself.",
            ECS_STOPPED_TASKS,
            "ECS: stopped task errors",
        ),
    }
)
"""Every fault class; for an XID class, what applies when the XID itself has no runbook of its own."""


class RunbookOverride(Protocol):
    """What a route may give (routing.RouteRunbook): a line, a link, or both."""

    @property
    def action(self) -> str | None: ...

    @property
    def url(self) -> str | None: ...


def default_runbook(fault_class: FaultClass, xid: int | None = None) -> Runbook:
    """The XID's runbook when there is an XID, else the fault class's."""
    if xid is None:
        return CLASS_RUNBOOKS[fault_class]
    return XID_RUNBOOKS.get(xid) or _xid_runbook(xid, _UNKNOWN_XID)


def runbook_for(fault_class: FaultClass, xid: int | None = None, *, override: RunbookOverride | None = None) -> Runbook:
    """The default runbook, with what a route gives in place of its line, its link, or both."""
    runbook = default_runbook(fault_class, xid)
    if override is None:
        return runbook
    if override.url is None:
        return Runbook(override.action or runbook.action, runbook.url, runbook.link_text)
    return Runbook(override.action or runbook.action, override.url, f"Runbook ({urlsplit(override.url).hostname})")


def check_https_url(url: str) -> str:
    """`url` if it is an absolute https link Slack and PagerDuty can carry as is; else ValueError saying why."""
    if len(url) > MAX_URL:
        raise ValueError(f"a runbook url has at most {MAX_URL} characters, got {len(url)}")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise ValueError(f"a runbook url has no spaces or control characters: {url!r}")
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"a runbook url must be https://host/...: {url!r}")
    return url


def check_action(action: str) -> str:
    """`action` if it is one line of at most MAX_ACTION characters; else ValueError saying why."""
    if not action.strip():
        raise ValueError("a runbook action must say something")
    if "\n" in action or "\r" in action:
        raise ValueError("a runbook action is one line")
    if len(action) > MAX_ACTION:
        raise ValueError(f"a runbook action has at most {MAX_ACTION} characters, got {len(action)}")
    return action
