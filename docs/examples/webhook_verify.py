"""Verify a GPU Fault Responder webhook request (docs/webhook.md). Python 3.9+, standard library only."""

import hashlib
import hmac
import time


def verify_webhook(headers, body, secrets, tolerance=300, now=None):
    """True when `body` (the raw request bytes, before any JSON parsing) is signed by one of `secrets` and was
    sent within `tolerance` seconds of now. `headers` maps header names to values (any case)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp = lowered.get("x-signature-timestamp", "")
    if not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False  # stale or replayed
    offered = [part.strip().encode() for part in lowered.get("x-signature", "").split(",")]
    signed = b"v1:" + timestamp.encode() + b":" + body
    for secret in secrets:
        expected = b"v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest().encode()
        if any(hmac.compare_digest(expected, signature) for signature in offered):
            return True
    return False
