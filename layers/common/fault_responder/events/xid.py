"""The NVIDIA XID catalog as ECS uses it, keyed by number only.

AWS and NVIDIA descriptions disagree for several codes (docs/ecs-events.md#xid-catalog), so decisions are keyed
on the number and the descriptions are informational. Sources: the ECS GPU auto-repair guide and the
ECS agent's `wellKnownXIDCodes` / `restartAppXIDCodes`.
"""

from __future__ import annotations

import re
from enum import StrEnum


class XidAction(StrEnum):
    REPLACE_INSTANCE = "replace_instance"
    """One of the XIDs ECS treats as a critical hardware fault (auto-repair drains and replaces)."""
    RESTART_APP = "restart_app"
    """Restart the application, not the host (counted by TaskGPURestartAppXidCount)."""
    UNKNOWN = "unknown"


# The 18 XIDs ECS acts on, with the descriptions AWS gives them.
CRITICAL_XIDS: dict[int, str] = {
    46: "GPU stopped processing",
    48: "Double Bit ECC Error",
    54: "Auxiliary power connector not connected",
    62: "Internal micro-controller halt",
    64: "GPU memory remapping failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    95: "Uncontained memory error",
    109: "Context switch timeout",
    110: "GPU disappeared from the bus",
    136: "GPU memory page retirement limit exceeded",
    140: "Unrecoverable ECC Error",
    142: "GPU memory page retired due to uncorrectable error",
    143: "GPU memory page retired due to correctable error threshold",
    151: "GPU to CPU interconnect error",
    155: "GPU NVLink flit CRC error",
    156: "GPU NVLink lane error",
    158: "GPU InfoROM corrupted",
}

# The 48 XIDs whose NVIDIA immediate action is RESTART_APP.
RESTART_APP_XIDS: frozenset[int] = frozenset(
    {8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86}
    | {88, 89, 94, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 139}
    | set(range(126, 136))
)

_XID_REASON = re.compile(r"^\s*XID[_ ]?(\d{1,5})\b", re.IGNORECASE)


def parse_xid(status_reason: str | None) -> int | None:
    """`XID_79` -> 79. ECS formats the reason as `XID_<decimal>`; anything else is not an XID.

    Bounded as it is read: at most five digits (0..99999, NVIDIA's XIDs are below 200), so a reason such as
    `XID_999…9` is "unrecognised", never a number too large to store or compare."""
    if not status_reason:
        return None
    match = _XID_REASON.match(status_reason)
    return int(match.group(1)) if match else None


def xid_action(xid: int) -> XidAction:
    if xid in CRITICAL_XIDS:
        return XidAction.REPLACE_INSTANCE
    if xid in RESTART_APP_XIDS:
        return XidAction.RESTART_APP
    return XidAction.UNKNOWN


def describe_xid(xid: int) -> str:
    if xid in CRITICAL_XIDS:
        return CRITICAL_XIDS[xid]
    if xid in RESTART_APP_XIDS:
        return "application-level GPU error: restart the application, not the host"
    return "XID not in the ECS catalog"
