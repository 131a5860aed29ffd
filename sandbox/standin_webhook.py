"""A stand-in for a consumer of the responder's signed webhook (docs/webhook.md), served by StandIns at
`/webhook/<endpoint>`.

It checks what a careful consumer checks, and nothing of the responder's own code: the signature and its timestamp
(HMAC-SHA256 of `v1:<timestamp>:<body>` with one of its signing secrets, within five minutes of its clock; 401 when
not), the size (413 past the documented maximum), and the payload against Alertmanager's documented webhook format,
version 4, strictly (400 with every problem found): the required keys and no others, their types, the status values,
RFC 3339 times, label names, a firing alert's zero endsAt, a resolved one's end not before its start, the group's
status (firing while any alert fires), and commonLabels, commonAnnotations and groupLabels as Alertmanager derives
them. It keeps every payload it accepted, in order, as the Slack stand-in keeps its messages.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from http import HTTPStatus
from typing import Any

WEBHOOK_RECEIVER_PATH = "/webhook/"
SANDBOX_WEBHOOK_ENDPOINT = "sandbox"
SANDBOX_WEBHOOK_SECRET = "sandbox-webhook-signing-secret-0123456789abcdef"  # nosec B105  # the stand-in's own
TOLERANCE_SECONDS = 300
MAX_BODY_BYTES = 256 * 1024
"""The documented maximum (fault_responder.notification.receivers.webhook.payload.MAX_BODY_BYTES), written out: the
stand-in checks the documentation's promise, not the code's constant."""
ZERO_TIME = "0001-01-01T00:00:00Z"

_TOP = {
    "version": str,
    "groupKey": str,
    "truncatedAlerts": int,
    "status": str,
    "receiver": str,
    "groupLabels": dict,
    "commonLabels": dict,
    "commonAnnotations": dict,
    "externalURL": str,
    "alerts": list,
}
_OPTIONAL_TOP = {"notification_reason": str}
"""Documented by newer Alertmanager releases; the responder does not send it, a consumer must accept it."""
_ALERT = {
    "status": str,
    "labels": dict,
    "annotations": dict,
    "startsAt": str,
    "endsAt": str,
    "generatorURL": str,
    "fingerprint": str,
}
_STATUSES = ("firing", "resolved")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")


class WebhookConsumer:
    """The endpoints' consumer: its signing secrets (two while a rotation is under way), what it accepted, and the
    answers it is told to give next (an HTTP status for each of the next requests, before any check)."""

    def __init__(self, secrets: Sequence[str] = (SANDBOX_WEBHOOK_SECRET,), clock: Callable[[], float] = time.time):
        self._secrets = tuple(secrets)
        self._clock = clock
        self._received: list[dict[str, Any]] = []
        self._faults: deque[int] = deque()

    def rotate(self, secrets: Sequence[str]) -> None:
        self._secrets = tuple(secrets)

    def fail_next(self, status: int, times: int = 1) -> None:
        self._faults.extend([status] * times)

    @property
    def received(self) -> list[dict[str, Any]]:
        """What it accepted, in order: the endpoint, the signature's timestamp and the payload."""
        return list(self._received)

    def receive(self, path: str, headers: Mapping[str, str], raw: bytes, payload: Any) -> tuple[int, Any]:
        """Answer one POST to `path`: its body `raw`, and `payload`, that body read as JSON (any other value if not)."""
        if self._faults:
            status = self._faults.popleft()
            return status, HTTPStatus(status).phrase
        endpoint = path.removeprefix(WEBHOOK_RECEIVER_PATH)
        if not endpoint or "/" in endpoint:
            return HTTPStatus.NOT_FOUND, "no such endpoint"
        unsigned = self._signature_problem(headers, raw)
        if unsigned is not None:
            return HTTPStatus.UNAUTHORIZED, {"error": unsigned}
        if len(raw) > MAX_BODY_BYTES:
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body of {len(raw)} bytes"}
        problems = payload_errors(payload)
        if problems:
            return HTTPStatus.BAD_REQUEST, {"errors": problems}
        stamp = int(_header(headers, "X-Signature-Timestamp"))
        self._received.append({"endpoint": endpoint, "timestamp": stamp, "payload": payload})
        return HTTPStatus.OK, {"status": "accepted"}

    def _signature_problem(self, headers: Mapping[str, str], raw: bytes) -> str | None:
        stamp = _header(headers, "X-Signature-Timestamp")
        if not stamp.isdigit():
            return "X-Signature-Timestamp is missing or not Unix seconds"
        if abs(self._clock() - int(stamp)) > TOLERANCE_SECONDS:
            return "X-Signature-Timestamp is too far from now"
        offered = [part.strip().encode() for part in _header(headers, "X-Signature").split(",")]
        expected = [
            b"v1="
            + hmac.new(secret.encode(), b"v1:" + stamp.encode() + b":" + raw, hashlib.sha256).hexdigest().encode()
            for secret in self._secrets
        ]
        if not any(hmac.compare_digest(mine, theirs) for mine in expected for theirs in offered):
            return "no signature matches"
        return None


def _header(headers: Mapping[str, str], name: str) -> str:
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), "")


def payload_errors(payload: Any) -> list[str]:
    """Every way `payload` departs from Alertmanager's webhook format, version 4; empty when it is one."""
    if not isinstance(payload, dict):
        return ["the body is not a JSON object"]
    errors = _keys(payload, _TOP, _OPTIONAL_TOP, "")
    if errors:
        return errors
    if payload["version"] != "4":
        errors.append(f"version is {payload['version']!r}, not '4'")
    if not payload["groupKey"]:
        errors.append("groupKey is empty")
    if isinstance(payload["truncatedAlerts"], bool) or payload["truncatedAlerts"] < 0:
        errors.append("truncatedAlerts is not a count")
    if payload["status"] not in _STATUSES:
        errors.append(f"status {payload['status']!r} is not firing or resolved")
    for name in ("groupLabels", "commonLabels"):
        errors.extend(_label_errors(payload[name], f"/{name}", empty=True))
    errors.extend(_string_map_errors(payload["commonAnnotations"], "/commonAnnotations"))
    alerts = payload["alerts"]
    if not alerts:
        errors.append("alerts is empty")
    for index, alert in enumerate(alerts):
        errors.extend(_alert_errors(alert, f"/alerts/{index}"))
    if errors:
        return errors
    firing = any(alert["status"] == "firing" for alert in alerts)
    if payload["status"] != ("firing" if firing else "resolved"):
        errors.append(f"status {payload['status']!r}, but {'an' if firing else 'no'} alert fires")
    for name, key in (("commonLabels", "labels"), ("commonAnnotations", "annotations")):
        if payload[name] != _common([alert[key] for alert in alerts]):
            errors.append(f"{name} is not what every alert's {key} have in common")
    for index, alert in enumerate(alerts):
        if any(alert["labels"].get(name) != value for name, value in payload["groupLabels"].items()):
            errors.append(f"/alerts/{index}/labels lack the groupLabels")
    return errors


def _alert_errors(alert: Any, pointer: str) -> list[str]:
    if not isinstance(alert, dict):
        return [f"{pointer} is not an object"]
    errors = _keys(alert, _ALERT, {}, pointer)
    if errors:
        return errors
    if alert["status"] not in _STATUSES:
        errors.append(f"{pointer}/status {alert['status']!r} is not firing or resolved")
    errors.extend(_label_errors(alert["labels"], f"{pointer}/labels", empty=False))
    errors.extend(_string_map_errors(alert["annotations"], f"{pointer}/annotations"))
    if not _FINGERPRINT.match(alert["fingerprint"]):
        errors.append(f"{pointer}/fingerprint is not 16 hex digits")
    starts, ends = _time(alert["startsAt"]), _time(alert["endsAt"])
    if starts is None:
        errors.append(f"{pointer}/startsAt is not an RFC 3339 time")
    if ends is None:
        errors.append(f"{pointer}/endsAt is not an RFC 3339 time")
    elif alert["status"] == "firing" and alert["endsAt"] != ZERO_TIME:
        errors.append(f"{pointer}/endsAt of a firing alert is not {ZERO_TIME}")
    elif alert["status"] == "resolved" and starts is not None and (alert["endsAt"] == ZERO_TIME or ends < starts):
        errors.append(f"{pointer}/endsAt of a resolved alert is not its end")
    return errors


def _keys(obj: dict[str, Any], required: Mapping[str, type], optional: Mapping[str, type], pointer: str) -> list[str]:
    errors = [f"{pointer}/{key} is missing" for key in required if key not in obj]
    errors += [f"{pointer}/{key} is not documented" for key in obj if key not in required and key not in optional]
    for key, kind in {**required, **optional}.items():
        if key in obj and not isinstance(obj[key], kind):
            errors.append(f"{pointer}/{key} is not a {kind.__name__}")
    return errors


def _label_errors(labels: dict[str, Any], pointer: str, *, empty: bool) -> list[str]:
    errors = _string_map_errors(labels, pointer)
    errors += [f"{pointer}/{name} is not a label name" for name in labels if not _LABEL_NAME.match(name)]
    if not labels and not empty:
        errors.append(f"{pointer} is empty")
    return errors


def _string_map_errors(values: dict[str, Any], pointer: str) -> list[str]:
    return [f"{pointer}/{name} is not a string" for name, value in values.items() if not isinstance(value, str)]


def _time(text: str) -> datetime | None:
    if not _RFC3339.match(text):
        return None
    # Python reads at most six digits of a fraction: the rest do not change the order of two times that differ.
    whole, _, rest = text.partition(".")
    if rest:
        digits = re.match(r"\d+", rest)
        fraction = digits.group(0) if digits else ""
        text = f"{whole}.{fraction[:6]}{rest[len(fraction) :]}"
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _common(sets: list[dict[str, str]]) -> dict[str, str]:
    first, *rest = sets
    return {name: value for name, value in first.items() if all(other.get(name) == value for other in rest)}
