"""The webhook's signature, checked by the responder's own `verify` and by the consumer's code docs/webhook.md shows
(docs/examples/webhook_verify.py, loaded from the file the page embeds)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from fault_responder.notification.receivers.webhook.signing import (
    SignatureError,
    signature,
    signature_headers,
    verify,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "webhook_verify.py"
CURRENT = "c" * 32 + "current-signing-secret"
PREVIOUS = "p" * 32 + "previous-signing-secret"
BODY = b'{"version": "4", "status": "firing"}'
SENT_AT = 1_764_902_400


def _documented() -> Callable[..., bool]:
    spec = importlib.util.spec_from_file_location("webhook_verify", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.verify_webhook  # type: ignore[no-any-return]


def _ours(headers: Mapping[str, str], body: bytes, secrets: Sequence[str], now: float) -> bool:
    try:
        verify(headers, body, secrets, now=now)
    except SignatureError:
        return False
    return True


def _docs(headers: Mapping[str, str], body: bytes, secrets: Sequence[str], now: float) -> bool:
    return _documented()(headers, body, secrets, now=now)


VERIFIERS = {"verify": _ours, "docs/examples/webhook_verify.py": _docs}


@pytest.fixture(params=sorted(VERIFIERS))
def verifies(request: pytest.FixtureRequest) -> Callable[..., bool]:
    return VERIFIERS[request.param]


def test_the_headers_are_the_documented_scheme() -> None:
    headers = signature_headers([CURRENT], SENT_AT, BODY)

    assert headers == {"X-Signature-Timestamp": str(SENT_AT), "X-Signature": signature(CURRENT, SENT_AT, BODY)}
    assert headers["X-Signature"].startswith("v1=") and len(headers["X-Signature"]) == 3 + 64


def test_a_good_signature_verifies_within_the_tolerance(verifies: Callable[..., bool]) -> None:
    headers = signature_headers([CURRENT], SENT_AT, BODY)

    assert verifies(headers, BODY, [CURRENT], SENT_AT + 299)
    assert verifies({name.lower(): value for name, value in headers.items()}, BODY, [CURRENT], SENT_AT - 299)


def test_a_changed_body_or_another_secret_does_not(verifies: Callable[..., bool]) -> None:
    headers = signature_headers([CURRENT], SENT_AT, BODY)

    assert not verifies(headers, BODY.replace(b"firing", b"resolved"), [CURRENT], SENT_AT)
    assert not verifies(headers, BODY, [PREVIOUS], SENT_AT)
    assert not verifies({**headers, "X-Signature": "v1=" + "0" * 64}, BODY, [CURRENT], SENT_AT)
    assert not verifies({"X-Signature-Timestamp": str(SENT_AT)}, BODY, [CURRENT], SENT_AT)


def test_a_stale_or_future_timestamp_does_not(verifies: Callable[..., bool]) -> None:
    headers = signature_headers([CURRENT], SENT_AT, BODY)

    assert not verifies(headers, BODY, [CURRENT], SENT_AT + 301)  # replayed six minutes later
    assert not verifies(headers, BODY, [CURRENT], SENT_AT - 301)
    # The timestamp is signed: moving it forward breaks the signature.
    moved = {**headers, "X-Signature-Timestamp": str(SENT_AT + 600)}
    assert not verifies(moved, BODY, [CURRENT], SENT_AT + 600)


def test_during_a_rotation_either_secret_verifies(verifies: Callable[..., bool]) -> None:
    # The endpoint has both secrets: every request carries a signature by each.
    headers = signature_headers([CURRENT, PREVIOUS], SENT_AT, BODY)

    assert headers["X-Signature"].count("v1=") == 2
    assert verifies(headers, BODY, [PREVIOUS], SENT_AT)  # a consumer not yet moved on
    assert verifies(headers, BODY, [CURRENT], SENT_AT)  # a consumer already moved on
    assert verifies(headers, BODY, [CURRENT, PREVIOUS], SENT_AT)
    # Once the previous secret is gone from the endpoint, a consumer holding only it is refused.
    assert not verifies(signature_headers([CURRENT], SENT_AT, BODY), BODY, [PREVIOUS], SENT_AT)


def test_our_verify_says_why() -> None:
    headers = signature_headers([CURRENT], SENT_AT, BODY)

    with pytest.raises(SignatureError, match="stale or replayed"):
        verify(headers, BODY, [CURRENT], now=SENT_AT + 301)
    with pytest.raises(SignatureError, match="no v1 signature matches"):
        verify(headers, BODY, [PREVIOUS], now=SENT_AT)
    with pytest.raises(ValueError, match="1 to 2 secrets"):
        signature_headers([CURRENT, PREVIOUS, "x" * 32], SENT_AT, BODY)


def test_the_page_shows_the_verification_code_the_tests_run() -> None:
    page = (ROOT / "docs/webhook.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", page, flags=re.DOTALL | re.MULTILINE)

    assert blocks == [EXAMPLE.read_text(encoding="utf-8")]
