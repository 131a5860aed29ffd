"""The webhook's signature: HMAC-SHA256 over the time and the exact body, in two headers (docs/webhook.md).

    X-Signature-Timestamp: 1764902400
    X-Signature: v1=<64 hex digits>[, v1=<64 hex digits>]

Each `v1=` is the hex HMAC-SHA256, keyed with one signing secret, of `v1:<timestamp>:` followed by the body's bytes,
as Slack signs its requests (`v0:`) and Stripe its events (one signature per secret while a secret is rolled). While
a secret is being rotated the endpoint has two, and every request carries a signature by each, so a consumer holding
either verifies it. A consumer refuses a timestamp further than its tolerance from its own clock (a replayed or
delayed request).

Pure: no I/O. The consumer's side is `verify`; docs/examples/webhook_verify.py is the same check, standalone.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence

SCHEME = "v1"
TIMESTAMP_HEADER = "X-Signature-Timestamp"
SIGNATURE_HEADER = "X-Signature"
TOLERANCE_SECONDS = 300
"""How far a request's timestamp may be from the consumer's clock, either way: Slack's five minutes."""
MOST_SECRETS = 2
"""An endpoint's signing secrets: its current one, and the one it replaces while a rotation is under way."""
MIN_SECRET_LENGTH = 32


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`v1=<hex>`: the HMAC-SHA256, keyed with `secret`, of `v1:<timestamp>:<body>`."""
    signed = f"{SCHEME}:{timestamp}:".encode() + body
    return f"{SCHEME}={hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()}"


def signature_headers(secrets: Sequence[str], timestamp: int, body: bytes) -> dict[str, str]:
    """The two headers for `body` sent at `timestamp` (Unix seconds), signed by each of `secrets` (one, or two
    during a rotation)."""
    if not 1 <= len(secrets) <= MOST_SECRETS:
        raise ValueError(f"a webhook is signed with 1 to {MOST_SECRETS} secrets, got {len(secrets)}")
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: ", ".join(signature(secret, timestamp, body) for secret in secrets),
    }


class SignatureError(ValueError):
    """A request whose signature does not verify; the message says why (never a secret)."""


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str],
    *,
    now: float,
    tolerance: int = TOLERANCE_SECONDS,
) -> None:
    """Raise SignatureError unless `body` carries a `v1` signature by one of `secrets` over its timestamp, and the
    timestamp is within `tolerance` seconds of `now`. Header names are matched without regard to case."""
    lowered = {name.lower(): value for name, value in headers.items()}
    stamp = lowered.get(TIMESTAMP_HEADER.lower(), "")
    if not stamp.isdigit() or len(stamp) > 12:
        raise SignatureError(f"{TIMESTAMP_HEADER} is missing or not Unix seconds")
    timestamp = int(stamp)
    if abs(now - timestamp) > tolerance:
        raise SignatureError(f"{TIMESTAMP_HEADER} is more than {tolerance} s from now: a stale or replayed request")
    offered = [part.strip() for part in lowered.get(SIGNATURE_HEADER.lower(), "").split(",")]
    offered = [part for part in offered if part.startswith(f"{SCHEME}=")]
    if not offered:
        raise SignatureError(f"{SIGNATURE_HEADER} has no {SCHEME}= signature")
    expected = [signature(secret, timestamp, body).encode() for secret in secrets]
    # Every comparison is made (compare_digest, no early exit), so the time taken tells nothing of a near match.
    matched = [hmac.compare_digest(mine, theirs.encode("utf-8", "replace")) for mine in expected for theirs in offered]
    if not any(matched):
        raise SignatureError(f"no {SCHEME} signature matches a signing secret")
