"""What the responder's Slack buttons carry: their action ids, and an incident button's value. Pure and small: the
renderers import it on the AlertRouter's cold start (fault_responder.actions.interactive, which checks the presses, is
not needed there)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum

MAX_VALUE = 2000
"""Slack's limit on a button's value."""


class BadRequest(Exception):
    """Signed rightly but not something we can act on (malformed, an unknown action): answer 400, do nothing."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ActionId(StrEnum):
    """The buttons we render. An action id we did not render is refused (BadRequest)."""

    ACKNOWLEDGE = "incident_acknowledge"
    RESOLVE = "incident_resolve"
    SILENCE_1H = "incident_silence_1h"
    SILENCE_4H = "incident_silence_4h"
    APPROVE = "resume_approve"
    REJECT = "resume_reject"


@dataclass(frozen=True, slots=True)
class IncidentButton:
    """What an incident root's buttons carry (their `value`, as compact JSON): the instance record, the incident, and
    the labels a silence from the button matches (`cluster`, `instance`). Slack signs the payload that carries it
    back, and only the app's own messages send presses to its URL, so the value is what the responder rendered."""

    record: str
    incident: str
    cluster: str
    instance: str
    """Empty on a fleet incident's buttons (its record is its group's)."""

    @property
    def drill(self) -> bool:
        """On a drill's root: a drill's facts are kept under its instance's ARN and DRILL_MARK, which only a drill's
        events (by their source) give a record. Its buttons act on the drill alone."""
        # Imported here: the endpoints that read presses need no more of the domain than this mark.
        from fault_responder.core.domain import DRILL_MARK  # noqa: PLC0415

        return self.record.endswith(DRILL_MARK)

    def value(self) -> str:
        return json.dumps(
            {"r": self.record, "i": self.incident, "c": self.cluster, "n": self.instance}, separators=(",", ":")
        )

    @classmethod
    def parse(cls, value: str) -> IncidentButton:
        try:
            data = json.loads(value)
        except json.JSONDecodeError:
            raise BadRequest("malformed incident button value") from None
        if not isinstance(data, dict) or set(data) != {"r", "i", "c", "n"}:
            raise BadRequest("malformed incident button value")
        parts = [data["r"], data["i"], data["c"], data["n"]]
        if not all(isinstance(part, str) and len(part) <= MAX_VALUE for part in parts) or not (parts[0] and parts[1]):
            raise BadRequest("malformed incident button value")
        return cls(record=parts[0], incident=parts[1], cluster=parts[2], instance=parts[3])


def approval_id(task_token: str) -> str:
    """The opaque id of a resume approval, which its buttons carry: a digest of the task token, which cannot be
    turned back into the token. The same token always gives the same id, so a notify step that runs twice stores
    one approval and posts the same buttons."""
    return hashlib.sha256(task_token.encode()).hexdigest()[:32]
