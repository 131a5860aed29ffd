"""fault_responder.actions.interactive: who sent a request (Slack's v0 signature, PagerDuty's v1 webhook signatures),
what a button press asks, and who may press what. Pure: signatures computed here with hmac, as the services document."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest

from fault_responder.actions.interactive import (
    Click,
    Permissions,
    Unauthorized,
    parse_click,
    verify_pagerduty_request,
    verify_slack_request,
)
from fault_responder.notification.buttons import ActionId, BadRequest, approval_id

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
NOW = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
BODY = b"token=x&team_id=T1&payload=%7B%7D"


def slack_headers(body: bytes = BODY, *, secret: str = SECRET, at: datetime = NOW) -> dict[str, str]:
    timestamp = str(int(at.timestamp()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest}"}


def test_a_rightly_signed_request_passes_with_headers_in_any_case() -> None:
    headers = {name.lower(): value for name, value in slack_headers().items()}
    assert verify_slack_request(SECRET, headers, BODY, NOW) == headers["x-slack-signature"]


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "unsigned"),
        (slack_headers(secret="another"), "wrong signature"),
        (slack_headers(at=NOW - timedelta(minutes=6)), "stale timestamp"),
        (slack_headers(at=NOW + timedelta(minutes=6)), "stale timestamp"),
        ({**slack_headers(), "X-Slack-Signature": "v1=" + "0" * 64}, "malformed signature"),
        ({**slack_headers(), "X-Slack-Request-Timestamp": "-5"}, "malformed timestamp"),
    ],
    ids=["unsigned", "wrong-secret", "six-minutes-old", "six-minutes-ahead", "other-version", "bad-timestamp"],
)
def test_a_request_not_signed_rightly_and_recently_is_refused_with_its_reason(
    headers: dict[str, str], reason: str
) -> None:
    with pytest.raises(Unauthorized) as refused:
        verify_slack_request(SECRET, headers, BODY, NOW)
    assert refused.value.reason == reason


def test_a_body_changed_after_signing_is_refused() -> None:
    with pytest.raises(Unauthorized, match="wrong signature"):
        verify_slack_request(SECRET, slack_headers(), BODY + b"&x=1", NOW)


def test_four_minutes_of_skew_are_accepted() -> None:
    verify_slack_request(SECRET, slack_headers(at=NOW - timedelta(minutes=4)), BODY, NOW)


def pagerduty_signature(secret: str, body: bytes) -> str:
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_one_matching_pagerduty_signature_among_several_is_enough() -> None:
    body = b'{"event":{"event_type":"incident.acknowledged"}}'
    header = ", ".join([pagerduty_signature("old-secret", body), pagerduty_signature("new-secret", body)])
    assert verify_pagerduty_request(["new-secret"], {"X-PagerDuty-Signature": header}, body).endswith(
        pagerduty_signature("new-secret", body)[3:]
    )


@pytest.mark.parametrize(
    "headers", [{}, {"X-PagerDuty-Signature": "v1=" + "0" * 64}, {"X-PagerDuty-Signature": ",,"}], ids=str
)
def test_an_unsigned_or_wrongly_signed_pagerduty_webhook_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(Unauthorized):
        verify_pagerduty_request(["secret"], headers, b"{}")


def press(action_id: str = "resume_approve", value: str = "abc", **payload: object) -> bytes:
    body = {
        "type": "block_actions",
        "user": {"id": "U0APPROVER", "username": "ana"},
        "response_url": "https://hooks.slack.com/actions/T1/2/x",
        "actions": [{"type": "button", "action_id": action_id, "value": value}],
        **payload,
    }
    return urlencode({"payload": json.dumps(body)}).encode()


def test_a_press_is_read_from_the_payload_field() -> None:
    click = parse_click(press())
    assert (click.user_id, click.user_name, click.action, click.value) == (
        "U0APPROVER",
        "ana",
        ActionId.APPROVE,
        "abc",
    )
    assert click.response_url == "https://hooks.slack.com/actions/T1/2/x"


@pytest.mark.parametrize(
    "body",
    [
        press("resume_approve_all"),
        press(value=""),
        press(value="v" * 2001),
        press(type="view_submission"),
        press(actions=[]),
        press(user={"id": "not an id"}),
        b"payload=%5B%5D",
        b"payload=1&payload=2",
    ],
    ids=["unknown-action", "no-value", "huge-value", "not-block-actions", "no-action", "bad-user", "list", "twice"],
)
def test_anything_but_one_press_of_a_button_we_render_is_a_bad_request(body: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_click(body)


def test_approving_and_resolving_are_for_the_listed_users_acknowledging_for_anyone() -> None:
    permissions = Permissions.parse(approvers=["U0APPROVER"], resolvers=["U0RESOLVER"])
    approve = parse_click(press("resume_approve"))
    resolve = parse_click(press("incident_resolve"))
    acknowledge = parse_click(press("incident_acknowledge"))
    assert permissions.allows(approve)
    assert not permissions.allows(resolve)  # U0APPROVER is no resolver
    assert permissions.allows(acknowledge)
    assert not Permissions().allows(approve)


def test_a_user_list_with_anything_but_user_ids_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Slack user id"):
        Permissions.parse(approvers=["@ana"], resolvers=[])


def test_the_approval_id_is_stable_and_not_the_token() -> None:
    token = "AQCEAAAAKgAAAAMAAAAAAAAAA" + "t" * 300
    assert approval_id(token) == approval_id(token) and token[:20] not in approval_id(token)
    assert approval_id(token) != approval_id(token + "x")


# --- Who may act: ids and user groups ------------------------------------------------------------------------


class _Groups:
    def __init__(self, members: dict[str, frozenset[str]]) -> None:
        self.members_of = members
        self.asked: list[str] = []

    def members(self, group: str) -> frozenset[str]:
        self.asked.append(group)
        return self.members_of.get(group, frozenset())


def _click(action: ActionId, user: str) -> Click:
    return Click(user, user, action, "v", None, None, None)


def test_a_member_of_a_listed_group_may_resolve_and_a_listed_id_needs_no_lookup() -> None:
    permissions = Permissions.parse([], ["U0RESOLVER", "S0ONCALL01"])
    groups = _Groups({"S0ONCALL01": frozenset({"U0MEMBER01"})})
    assert permissions.allows(_click(ActionId.RESOLVE, "U0RESOLVER"), groups)
    assert groups.asked == []
    assert permissions.allows(_click(ActionId.RESOLVE, "U0MEMBER01"), groups)
    assert not permissions.allows(_click(ActionId.RESOLVE, "U0OUTSIDER"), groups)
    assert not permissions.allows(_click(ActionId.APPROVE, "U0MEMBER01"), groups)  # resolvers do not approve
    assert not permissions.allows(_click(ActionId.RESOLVE, "U0MEMBER01"))  # no way to read groups: nobody by group
    assert permissions.groups == frozenset({"S0ONCALL01"})


def test_anyone_may_acknowledge_and_silence_and_only_ids_and_groups_are_accepted() -> None:
    permissions = Permissions.parse([], [])
    for action in (ActionId.ACKNOWLEDGE, ActionId.SILENCE_1H, ActionId.SILENCE_4H):
        assert permissions.allows(_click(action, "U0ANYONE01"))
    for bad in ("C0CHANNEL1", "jane", "u0lower", "T0TEAM0001"):
        with pytest.raises(ValueError, match="not a Slack user id"):
            Permissions.parse([bad], [])
