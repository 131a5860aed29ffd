"""SlackActionsFunction (functions/slack_actions/app.py) as Lambda runs it behind its function URL: real signed
button presses (the Slack stand-in's `signed_click`), the signing secret read from Secrets Manager, the replay guard
and approvals in the incidents table (moto, as the template defines it), ephemeral replies over real HTTP to the
stand-in's response_url.

Given / When / Then: a refused request answers 401 and changes nothing (no item written but the replay guard's for
a request that was signed rightly, no Step Functions answer, no reply in Slack)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from fault_responder.actions.interactive import Permissions
from fault_responder.actions.slack_actions import SlackActions
from fault_responder.adapters.interaction_store import DynamoDBInteractionStore, approval_id
from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.adapters.slack_actions_io import GROUP_CACHE_SECONDS, ResponseUrlReplies, StepFunctionsTaskAnswers
from fault_responder.core import elapsed
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via, parse_action
from fault_responder.notification.buttons import IncidentButton
from fault_responder.wiring import slack_actions as actions_bootstrap
from sandbox.standins import DEFAULT_SLACK_TOKEN, ONCALL_GROUP, SLACK_SIGNING_SECRET, StandIns, signed_click
from tests.integration.function_urls import FunctionContext, function_url_event, load_app
from tests.integration.tables import create_incidents_table

TABLE = "incidents"
SECRET_NAME = "gpu-fault-responder/slack"
APPROVER = "U0APPROVER"
RESOLVER = "U0RESOLVER"
STRANGER = "U0STRANGER"
TOKEN = "AQCEAAAAKgAAAAMAAAAAAAAAAf-sandbox-task-token-" + "x" * 40  # nosec B105  # a made-up task token


@cache
def _app() -> ModuleType:
    return load_app("slack_actions")


class Deployed:
    def __init__(self, dynamodb: Any, sfn: Any, standins: StandIns, queue: str) -> None:
        self.queue = queue
        self.dynamodb = dynamodb
        self.sfn = sfn
        self.standins = standins
        self.store = DynamoDBInteractionStore(TABLE, dynamodb)

    def press(
        self,
        action_id: str,
        value: str,
        user: str = APPROVER,
        *,
        age_seconds: int = 0,
        secret: str = SLACK_SIGNING_SECRET,
        drop: tuple[str, ...] = (),
    ) -> tuple[dict[str, Any], dict[str, str], bytes]:
        headers, body = signed_click(
            action_id=action_id,
            value=value,
            user_id=user,
            response_url=self.standins.response_url(str(uuid.uuid4())),
            timestamp=int(time.time()) - age_seconds,
            secret=secret,
        )
        headers = {name: v for name, v in headers.items() if name not in drop}
        return self.send(headers, body), headers, body

    def send(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        answer: dict[str, Any] = _app().lambda_handler(
            function_url_event(headers, body), FunctionContext("SlackActionsFunction")
        )
        return answer

    def items(self) -> list[dict[str, Any]]:
        return self.dynamodb.scan(TableName=TABLE)["Items"]  # type: ignore[no-any-return]

    def queued(self) -> list[IncidentAction]:
        """The actions on the alert queue (taken off it), as the router reads them."""
        sqs = boto3.client("sqs", region_name="us-east-1")
        found: list[IncidentAction] = []
        while True:
            messages = sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return found
            for message in messages:
                found.append(parse_action(json.loads(message["Body"])))
                sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployed]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("INCIDENTS_TABLE", TABLE)
    monkeypatch.setenv("SLACK_SECRET_NAME", SECRET_NAME)
    monkeypatch.setenv("RESUME_APPROVERS", APPROVER)
    monkeypatch.setenv("INCIDENT_RESOLVERS", f"{RESOLVER},{APPROVER},{ONCALL_GROUP}")
    with mock_aws(), StandIns() as standins:
        monkeypatch.setenv("SLACK_RESPONSE_URL_PREFIX", standins.base_url + "/actions/")
        monkeypatch.setenv("SLACK_API_URL", standins.slack_api_url)
        queue = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="alert-queue")["QueueUrl"]
        monkeypatch.setenv("ALERT_QUEUE_URL", queue)
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(dynamodb, TABLE)
        boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name=SECRET_NAME,
            SecretString=json.dumps({"bot_token": DEFAULT_SLACK_TOKEN, "signing_secret": SLACK_SIGNING_SECRET}),
        )
        actions_bootstrap.reset()
        yield Deployed(dynamodb, boto3.client("stepfunctions", region_name="us-east-1"), standins, queue)
        actions_bootstrap.reset()


def _a_waiting_approval(deployed: Deployed) -> str:
    return deployed.store.put_approval(TOKEN, 300, "arn:aws:states:us-east-1:123456789012:execution:resume:x")


# --- Refused: 401, nothing changes ------------------------------------------------------------------------------


def test_an_unsigned_request_is_refused_and_changes_nothing(deployed: Deployed) -> None:
    # Given an approval waiting for a person
    ident = _a_waiting_approval(deployed)
    before = deployed.items()
    # When an approver's press arrives without Slack's signature headers
    answer, _, _ = deployed.press("resume_approve", ident, drop=("x-slack-signature", "x-slack-request-timestamp"))
    # Then it is refused, the approval still waits, and nobody is told anything
    assert answer["statusCode"] == 401
    assert deployed.items() == before
    assert deployed.standins.ephemeral_replies() == []


def test_a_wrongly_signed_request_is_refused_and_changes_nothing(deployed: Deployed) -> None:
    ident = _a_waiting_approval(deployed)
    before = deployed.items()
    answer, _, _ = deployed.press("resume_approve", ident, secret="not-the-signing-secret")
    assert answer["statusCode"] == 401
    assert deployed.items() == before
    assert deployed.standins.ephemeral_replies() == []


def test_a_request_signed_six_minutes_ago_is_refused_and_changes_nothing(deployed: Deployed) -> None:
    ident = _a_waiting_approval(deployed)
    before = deployed.items()
    # Signed rightly, but with a timestamp six minutes old (a recorded request sent again later)
    answer, _, _ = deployed.press("resume_approve", ident, age_seconds=6 * 60)
    assert answer["statusCode"] == 401
    assert deployed.items() == before
    assert deployed.standins.ephemeral_replies() == []


def test_a_replayed_request_is_refused_and_changes_nothing(deployed: Deployed) -> None:
    # Given a press of Reject that was acted on (the approval is gone)
    ident = _a_waiting_approval(deployed)
    first, headers, body = deployed.press("resume_reject", ident)
    assert first["statusCode"] == 200
    assert deployed.store.take_approval(ident) is None
    # and a new approval waiting under the same id (a replay must not reach it either)
    deployed.store.put_approval(TOKEN, 300, "execution")
    before = deployed.items()
    replies = deployed.standins.ephemeral_replies()
    # When the very same signed request arrives again, within its five minutes
    again = deployed.send(headers, body)
    # Then it is refused and the approval still waits
    assert again["statusCode"] == 401
    assert deployed.items() == before
    assert deployed.standins.ephemeral_replies() == replies


def test_a_request_signed_with_a_rotated_secret_is_accepted_without_a_cold_start(deployed: Deployed) -> None:
    # Given the function has read the signing secret once
    ident = _a_waiting_approval(deployed)
    assert deployed.press("resume_approve", ident, user=STRANGER)[0]["statusCode"] == 200
    # When the secret is rotated in Secrets Manager and Slack signs with the new one
    boto3.client("secretsmanager", region_name="us-east-1").put_secret_value(
        SecretId=SECRET_NAME, SecretString=json.dumps({"signing_secret": "rotated-signing-secret"})
    )
    answer, _, _ = deployed.press("resume_approve", ident, secret="rotated-signing-secret")
    # Then the press is accepted (the secret was read again on the mismatch)
    assert answer["statusCode"] == 200
    assert deployed.store.take_approval(ident) is None


# --- Malformed: 400, nothing changes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"payload=%7Bnot+json", b"nothing=here", b"payload=" + b"%7B%22type%22%3A%22view_submission%22%7D", b"\xff\xfe"],
    ids=["not-json", "no-payload", "not-block-actions", "not-utf8"],
)
def test_a_rightly_signed_but_malformed_body_is_a_bad_request(deployed: Deployed, body: bytes) -> None:
    import hashlib  # noqa: PLC0415
    import hmac  # noqa: PLC0415

    timestamp = str(int(time.time()))
    signature = (
        "v0=" + hmac.new(SLACK_SIGNING_SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    )
    answer = deployed.send({"x-slack-request-timestamp": timestamp, "x-slack-signature": signature}, body)
    assert answer["statusCode"] == 400
    assert [i for i in deployed.items() if not i["pk"]["S"].startswith("REPLAY#")] == []


def test_an_unknown_action_id_is_a_bad_request(deployed: Deployed) -> None:
    ident = _a_waiting_approval(deployed)
    answer, _, _ = deployed.press("resume_approve_everything", ident)
    assert answer["statusCode"] == 400
    assert deployed.store.take_approval(ident) == TOKEN


def test_a_huge_body_is_refused_before_it_is_read(deployed: Deployed) -> None:
    answer = deployed.send(
        {"x-slack-request-timestamp": str(int(time.time())), "x-slack-signature": "v0=00"}, b"a" * 200_000
    )
    assert answer["statusCode"] == 401
    assert deployed.items() == []


# --- Who may act ------------------------------------------------------------------------------------------------


def test_approve_by_someone_not_allowed_changes_nothing_and_says_why(deployed: Deployed) -> None:
    ident = _a_waiting_approval(deployed)
    answer, _, _ = deployed.press("resume_approve", ident, user=STRANGER)
    assert answer["statusCode"] == 200
    (reply,) = deployed.standins.ephemeral_replies()
    assert reply["response_type"] == "ephemeral"
    assert "not allowed to approve" in reply["text"]
    # the token is still there, untouched, for an approver
    assert deployed.store.take_approval(ident) == TOKEN


def test_approve_by_an_approver_answers_the_workflow_once(deployed: Deployed) -> None:
    ident = _a_waiting_approval(deployed)
    assert ident == approval_id(TOKEN) and TOKEN not in ident
    answer, _, _ = deployed.press("resume_approve", ident)
    assert answer["statusCode"] == 200
    # the approval was taken (so a second press, or Reject, finds nothing to answer)
    assert deployed.store.take_approval(ident) is None
    second, _, _ = deployed.press("resume_reject", ident)
    assert second["statusCode"] == 200
    first_reply, second_reply = deployed.standins.ephemeral_replies()
    assert first_reply["text"].startswith("Approved by")
    assert "already answered or has timed out" in second_reply["text"]
    assert all(TOKEN not in r["text"] for r in deployed.standins.ephemeral_replies())


def test_a_reply_slack_does_not_take_is_reported_not_raised() -> None:
    # Given Slack answering the response_url with a 500
    with StandIns(faults={"slack": [500]}) as standins:
        replies = ResponseUrlReplies()
        # When the function replies to a press whose work is done
        delivered = replies.ephemeral(standins.response_url("press-1"), "Approved by ana")
        # Then it says so (and the press is still answered 200 by SlackActions), and Slack has no reply
        assert delivered is False
        assert standins.ephemeral_replies() == []
        assert [r["status"] for r in standins.requests] == [500]


def test_an_answer_step_functions_did_not_take_puts_the_approval_back_for_the_next_press(deployed: Deployed) -> None:
    # Given an approval, and Step Functions throttling the first SendTaskSuccess (botocore's Stubber)
    ident = _a_waiting_approval(deployed)
    throttled = boto3.client("stepfunctions", region_name="us-east-1")
    stubber = Stubber(throttled)
    stubber.add_client_error("send_task_success", "ThrottlingException", http_status_code=400)

    def actions(client: Any) -> SlackActions:
        return SlackActions(
            signing_secret=lambda force: SLACK_SIGNING_SECRET,
            replay_guard=deployed.store,
            approvals=deployed.store,
            tasks=StepFunctionsTaskAnswers(client),
            replies=ResponseUrlReplies(),
            permissions=Permissions.parse([APPROVER], []),
            response_url_prefix=deployed.standins.base_url,
            clock=lambda: datetime.now(UTC),
        )

    def signed() -> tuple[dict[str, str], bytes]:
        return signed_click(
            action_id="resume_approve",
            value=ident,
            user_id=APPROVER,
            response_url=deployed.standins.response_url(str(uuid.uuid4())),
            timestamp=int(time.time()),
        )

    # When an approver presses Approve and the answer fails
    with stubber, pytest.raises(ClientError):
        actions(throttled).handle(*signed())
    # Then the approval is back, and the next press answers the workflow
    assert actions(deployed.sfn).handle(*signed()).status == 200
    assert deployed.store.take_approval(ident) is None
    assert [r["text"].split(":")[0] for r in deployed.standins.ephemeral_replies()] == [
        f"Approved by {APPROVER.lower()} ({APPROVER})"
    ]


# --- Incident buttons ----------------------------------------------------------------------------------------------

BUTTON = IncidentButton(
    record="arn:aws:ecs:us-east-1:123456789012:container-instance/gpu/ci-1",
    incident="gpu/ci-1/ACCELERATED_COMPUTE@2026-11-01T08:00:00+00:00",
    cluster="gpu",
    instance="ci-1",
).value()


def test_acknowledge_by_anyone_in_the_channel_goes_to_the_router_naming_who_and_which_incident(
    deployed: Deployed,
) -> None:
    answer, _, _ = deployed.press("incident_acknowledge", BUTTON, user=STRANGER)
    assert answer["statusCode"] == 200
    [action] = deployed.queued()
    assert (action.kind, action.via, action.record, action.incident) == (
        ActionKind.ACKNOWLEDGE,
        Via.SLACK,
        "arn:aws:ecs:us-east-1:123456789012:container-instance/gpu/ci-1",
        "gpu/ci-1/ACCELERATED_COMPUTE@2026-11-01T08:00:00+00:00",
    )
    assert action.by.endswith(f"({STRANGER})") and action.key.startswith("slack:")
    [reply] = deployed.standins.ephemeral_replies()
    assert reply["text"].startswith("Acknowledged")


def test_resolve_by_someone_not_allowed_queues_nothing_and_says_why(deployed: Deployed) -> None:
    answer, _, _ = deployed.press("incident_resolve", BUTTON, user=STRANGER)
    assert answer["statusCode"] == 200
    assert deployed.queued() == []
    [reply] = deployed.standins.ephemeral_replies()
    assert "not allowed to resolve" in reply["text"]


def test_resolve_by_a_resolver_and_by_a_member_of_a_resolver_group_goes_to_the_router(deployed: Deployed) -> None:
    assert deployed.press("incident_resolve", BUTTON, user=RESOLVER)[0]["statusCode"] == 200
    assert deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")[0]["statusCode"] == 200
    assert deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")[0]["statusCode"] == 200
    actions = deployed.queued()
    assert [a.kind for a in actions] == [ActionKind.RESOLVE] * 3
    assert len({a.key for a in actions}) == 3  # three presses, three actions (the router acts on the first)
    reads = [r for r in deployed.standins.requests if r["path"].endswith("usergroups.users.list")]
    assert len(reads) == 1  # the group's members are kept, not read per press


def test_a_groups_members_are_read_again_once_five_minutes_passed_on_the_products_clock(deployed: Deployed) -> None:
    # (fault_responder.core.elapsed: the clock a scenario's delay moves on, docs/sandbox.md#clocks)
    assert deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")[0]["statusCode"] == 200
    elapsed.skip(GROUP_CACHE_SECONDS - 30)
    assert deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")[0]["statusCode"] == 200
    elapsed.skip(30)
    assert deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")[0]["statusCode"] == 200
    reads = [r for r in deployed.standins.requests if r["path"].endswith("usergroups.users.list")]
    assert len(reads) == 2


def test_a_group_that_cannot_be_read_lets_no_one_in(monkeypatch: pytest.MonkeyPatch, deployed: Deployed) -> None:
    boto3.client("secretsmanager", region_name="us-east-1").put_secret_value(
        SecretId=SECRET_NAME,
        SecretString=json.dumps({"bot_token": "xoxb-revoked", "signing_secret": SLACK_SIGNING_SECRET}),
    )
    actions_bootstrap.reset()
    answer, _, _ = deployed.press("incident_resolve", BUTTON, user="U0ONCALL01")
    assert answer["statusCode"] == 200
    assert deployed.queued() == []
    assert "not allowed to resolve" in deployed.standins.ephemeral_replies()[0]["text"]


def test_silence_makes_a_silence_for_the_instance_at_once_and_tells_the_router(deployed: Deployed) -> None:
    before = datetime.now(UTC)
    answer, _, _ = deployed.press("incident_silence_4h", BUTTON, user=STRANGER)
    assert answer["statusCode"] == 200
    [silence] = DynamoDBSilenceStore(TABLE, deployed.dynamodb).active(datetime.now(UTC))
    assert [(m.name, m.value) for m in silence.matchers] == [
        ("cluster", "gpu"),
        ("instance", "ci-1"),
        ("drill", "false"),
    ]
    assert 4 * 3600 - 60 < (silence.ends_at - before).total_seconds() <= 4 * 3600 + 60
    assert STRANGER in silence.created_by
    [action] = deployed.queued()
    assert action.kind is ActionKind.SILENCE and action.note is not None and silence.id in action.note
    assert silence.id in deployed.standins.ephemeral_replies()[0]["text"]


def test_silence_on_a_drills_root_makes_a_silence_of_the_instances_drills_alone(deployed: Deployed) -> None:
    # Given the buttons of a drill's root (its record is the instance's ARN marked as a drill's)
    drill = IncidentButton(
        record="arn:aws:ecs:us-east-1:123456789012:container-instance/gpu/ci-1#drill",
        incident="drill/gpu/ci-1/ACCELERATED_COMPUTE@2026-11-01T08:00:00+00:00",
        cluster="gpu",
        instance="ci-1",
    ).value()
    # When someone presses Silence 1 h on it
    answer, _, _ = deployed.press("incident_silence_1h", drill, user=STRANGER)
    # Then the silence matches the instance's drills, never its real faults, and the answer says so
    assert answer["statusCode"] == 200
    [silence] = DynamoDBSilenceStore(TABLE, deployed.dynamodb).active(datetime.now(UTC))
    assert [(m.name, m.value) for m in silence.matchers] == [
        ("cluster", "gpu"),
        ("instance", "ci-1"),
        ("drill", "true"),
    ]
    assert "its real faults still page" in deployed.standins.ephemeral_replies()[0]["text"]
    [action] = deployed.queued()
    assert action.record is not None and action.record.endswith("#drill")


@pytest.mark.parametrize("value", ["fp", '{"r": "x"}', json.dumps({"r": "a", "i": "b", "c": "c", "n": 5})])
def test_an_incident_button_with_a_value_we_never_rendered_is_a_bad_request(deployed: Deployed, value: str) -> None:
    answer, _, _ = deployed.press("incident_acknowledge", value, user=STRANGER)
    assert answer["statusCode"] == 400
    assert deployed.queued() == []
