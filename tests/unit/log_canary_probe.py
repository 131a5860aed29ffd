"""Fetch canary secrets and send canary credentials over HTTP with every logger at DEBUG; print all logs.

tests/unit/test_log_safety.py runs this in a fresh interpreter, because only a fresh interpreter can run
it without fault_responder's log filters (once imported, they stay for the life of the process), and the
run without them is what shows that the filters are what keeps the canaries out.

    python tests/unit/log_canary_probe.py {unfiltered|filters-first|logging-first}

- unfiltered: fault_responder is never imported.
- filters-first: fault_responder.core.observability (which every function imports) is imported, then logging
  is configured, as a tool that calls logging.basicConfig after its imports would.
- logging-first: logging is configured, then fault_responder.core.observability is imported, as on Lambda,
  where the runtime configures logging before the handler's module is loaded.

The secrets live in Secrets Manager (moto, in process) and are read the way the functions read them,
`parameters.get_secret(name, transform="json")`. The bot token then goes out in an Authorization header,
the routing key in a JSON body, and a POST goes to the webhook's path, all to a loopback HTTP server. The
requests go through urllib3, the functions' HTTP client. All of it runs traced: botocore patched by the X-Ray
SDK as the functions' Tracer does, and each loopback request in a subsegment that records its URL, as the
SDK's `requests` patch would (urllib3 2 bypasses its httplib patch), so the segments the SDK emits (to a
daemon address on loopback) carry every URL and are logged too.
Everything logged goes to stderr; the last line on stdout says what the probe verified. The exit code is
non-zero if a secret did not read back or a request did not arrive, so a broken run cannot look clean.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import urllib3
from aws_lambda_powertools.utilities import parameters
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import patch, xray_recorder
from moto import mock_aws

SLACK_SECRET = "gpu-fault-responder/slack"
PAGERDUTY_SECRET = "gpu-fault-responder/pagerduty"

BOT_TOKEN = "xoxb-CANARY0b0t-7431958026-t0kenC4nary9Q"
WEBHOOK_PATH = "/services/TCANARY0WH/BCANARY0WH/c4naryW3bh00kPathQ91x7Zk"
WEBHOOK_URL = f"https://hooks.slack.com{WEBHOOK_PATH}"
ROUTING_KEY = "CANARYR0UTINGKEY0123456789ABCDEF"
SESSION_TOKEN = "CANARYsessionTOKEN/aB3+xY9=Zq7/Lm2+Wd5=="
SIGNING_SECRET = "c4narySigningS3cret8e1f0a7d2b9c4e6f"
WEBHOOK_SECRET = "c4naryPagerDutyWebh00kS3cret5d2e8a1f"
TASK_TOKEN = "AQCEAAAAKgAAAAMAAAAAAAAAAcanaryTaskT0ken4f1b9e2d7c3a8"
TABLE = "incidents"

# What must never be logged, by name (the webhook's secret is its path, so the path is the canary).
CANARIES = {
    "slack bot token": BOT_TOKEN,
    "slack webhook path": WEBHOOK_PATH,
    "pagerduty routing key": ROUTING_KEY,
    "aws session token": SESSION_TOKEN,
    "slack signing secret": SIGNING_SECRET,
    "pagerduty webhook secret": WEBHOOK_SECRET,
}
OWN_CANARIES = {"step functions task token": TASK_TOKEN}
"""What our own code handles and must never log; no library logs it either, so only the filtered runs (which press
the buttons through SlackActions) look for it."""
MODES = ("unfiltered", "filters-first", "logging-first")
assert len(ROUTING_KEY) == 32


class _Receiver(BaseHTTPRequestHandler):
    """Stands in for Slack and PagerDuty: records each POST and answers as Slack does."""

    server: _LoopbackServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append((self.path, self.headers.get("Authorization", ""), body))
        answer = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the server's access log goes to stderr, which the test reads, and names the path."""


class _LoopbackServer(ThreadingHTTPServer):
    received: list[tuple[str, str, bytes]]


@contextmanager
def loopback_server() -> Iterator[_LoopbackServer]:
    server = _LoopbackServer(("127.0.0.1", 0), _Receiver)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def configure_debug_logging() -> None:
    """The root logger and every logger that exists so far at DEBUG, one handler on stderr for all."""
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, force=True, format="%(name)s %(levelname)s %(message)s")
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            logger.setLevel(logging.DEBUG)
            logger.disabled = False


def _traced_post(
    pool: urllib3.PoolManager, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    with xray_recorder.in_subsegment("remote") as subsegment:
        subsegment.put_http_meta("url", url)
        subsegment.put_http_meta("method", "POST")
        response = pool.request("POST", url, json=body, headers=headers)
        subsegment.put_http_meta("status", response.status)


def _press_approve_and_a_forgery() -> list[int]:
    """SlackActions as SlackActionsFunction wires it (secret, replay guard, approvals, task answers): an approval
    stored, an approver's signed press of Approve (SendTaskSuccess with the token), then a forged press."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from fault_responder.actions.interactive import Permissions  # noqa: PLC0415
    from fault_responder.actions.slack_actions import SlackActions  # noqa: PLC0415
    from fault_responder.adapters.interaction_store import DynamoDBInteractionStore  # noqa: PLC0415
    from fault_responder.adapters.slack_actions_io import StepFunctionsTaskAnswers  # noqa: PLC0415
    from fault_responder.core.observability import count, logger  # noqa: PLC0415
    from fault_responder.wiring.slack_actions import SigningSecret, _fetch_json_secret  # noqa: PLC0415
    from sandbox.standins import signed_click  # noqa: PLC0415

    store = DynamoDBInteractionStore(TABLE)
    ident = store.put_approval(TASK_TOKEN, 300, "execution")
    actions = SlackActions(
        signing_secret=SigningSecret(SLACK_SECRET, _fetch_json_secret),
        replay_guard=store,
        approvals=store,
        tasks=StepFunctionsTaskAnswers(),
        replies=_NoReplies(),
        permissions=Permissions.parse(["U0APPROVER"], []),
        clock=lambda: datetime.now(UTC),
        count=count,
        log=lambda message, extra: logger.info(message, extra=extra),
    )
    statuses = []
    for secret in (SIGNING_SECRET, "not-the-signing-secret"):
        headers, body = signed_click(
            action_id="resume_approve",
            value=ident,
            user_id="U0APPROVER",
            response_url="https://hooks.slack.com/actions/T0/1/x",
            timestamp=int(datetime.now(UTC).timestamp()),
            secret=secret,
        )
        statuses.append(actions.handle(headers, body).status)
    return statuses


def _send_a_webhook_and_a_forgery() -> list[int]:
    """PagerDutyWebhook as PagerDutyWebhookFunction wires it (the webhook secrets read from the PagerDuty secret, the
    alert queue): a webhook signed with the secret (queued), then one signed with another."""
    from fault_responder.actions.interactive import pagerduty_signature  # noqa: PLC0415
    from fault_responder.actions.pagerduty_webhook import PagerDutyWebhook  # noqa: PLC0415
    from fault_responder.adapters.action_queue import ActionQueue  # noqa: PLC0415
    from fault_responder.core.observability import count, logger  # noqa: PLC0415
    from fault_responder.wiring.pagerduty_webhook import WebhookSecrets, _fetch_json_secret  # noqa: PLC0415

    queue_url = boto3.client("sqs").create_queue(QueueName="alerts")["QueueUrl"]
    webhook = PagerDutyWebhook(
        secrets=WebhookSecrets(PAGERDUTY_SECRET, _fetch_json_secret),
        actions=ActionQueue(queue_url, "us-east-1", "123456789012"),
        count=count,
        log=lambda message, extra: logger.info(message, extra=extra),
    )
    event = {
        "id": "01CANARYEVENT",
        "event_type": "incident.acknowledged",
        "occurred_at": "2026-01-01T00:00:00Z",
        "agent": {"type": "user_reference", "summary": "Jane Doe"},
        "data": {"incident_key": "gpu/canary/ACCELERATED_COMPUTE"},
    }
    body = json.dumps({"event": event}).encode()
    return [
        webhook.handle({"x-pagerduty-signature": pagerduty_signature(secret, body)}, body).status
        for secret in (WEBHOOK_SECRET, "not-the-webhook-secret")
    ]


class _NoReplies:
    def ephemeral(self, response_url: str, text: str) -> bool:
        """The probe has no Slack to answer: the press's work, and its logs, are what it is about."""
        return True


def main(mode: str) -> int:
    if mode not in MODES:
        print(f"mode must be one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    os.environ.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_SESSION_TOKEN=SESSION_TOKEN,
    )
    with mock_aws():
        secrets = boto3.client("secretsmanager")
        secrets.create_secret(
            Name=SLACK_SECRET,
            SecretString=json.dumps(
                {"bot_token": BOT_TOKEN, "webhook_urls": {"ops": WEBHOOK_URL}, "signing_secret": SIGNING_SECRET}
            ),
        )
        boto3.client("dynamodb").create_table(
            TableName=TABLE,
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
        )
        stored_pagerduty = {"routing_keys": {"gpu": ROUTING_KEY}, "webhook_secrets": [WEBHOOK_SECRET]}
        secrets.create_secret(Name=PAGERDUTY_SECRET, SecretString=json.dumps(stored_pagerduty))

        if mode == "filters-first":
            importlib.import_module("fault_responder.core.observability")
        configure_debug_logging()
        if mode == "logging-first":
            importlib.import_module("fault_responder.core.observability")

            configure_debug_logging()

        # As Tracer(patch_modules=None) does on Lambda (off Lambda, Powertools' Tracer turns the SDK off);
        # nothing listens on the daemon's loopback port.
        global_sdk_config.set_sdk_enabled(True)
        xray_recorder.configure(sampling=False, context_missing="LOG_ERROR", daemon_address="127.0.0.1:2000")
        patch(["botocore"])
        xray_recorder.begin_segment("log-canary-probe")
        slack = parameters.get_secret(SLACK_SECRET, transform="json")
        pagerduty = parameters.get_secret(PAGERDUTY_SECRET, transform="json")
        stored = {"bot_token": BOT_TOKEN, "webhook_urls": {"ops": WEBHOOK_URL}, "signing_secret": SIGNING_SECRET}
        if slack != stored or pagerduty != stored_pagerduty:
            print("probe: the secrets did not read back as stored")
            return 3
        # The unfiltered run imports nothing of fault_responder (its import installs the filters).
        answers = [200, 401] if mode == "unfiltered" else _press_approve_and_a_forgery()
        if answers != [200, 401]:
            print(f"probe: the presses were answered {answers}, not [200, 401]")
            return 5
        webhooks = [200, 401] if mode == "unfiltered" else _send_a_webhook_and_a_forgery()
        if webhooks != [200, 401]:
            print(f"probe: the webhooks were answered {webhooks}, not [200, 401]")
            return 6

    with loopback_server() as server, urllib3.PoolManager() as pool:
        origin = f"http://127.0.0.1:{server.server_address[1]}"
        token = slack["bot_token"]
        _traced_post(pool, f"{origin}/api/chat.postMessage", {"text": "hi"}, {"Authorization": f"Bearer {token}"})
        webhook_path = slack["webhook_urls"]["ops"].removeprefix("https://hooks.slack.com")
        _traced_post(pool, origin + webhook_path, {"text": "hi"})
        key = pagerduty["routing_keys"]["gpu"]
        _traced_post(pool, f"{origin}/v2/enqueue", {"routing_key": key, "event_action": "trigger"})
        received = list(server.received)
    xray_recorder.end_segment()

    paths = [path for path, _, _ in received]
    if (
        paths != ["/api/chat.postMessage", WEBHOOK_PATH, "/v2/enqueue"]
        or received[0][1] != f"Bearer {BOT_TOKEN}"
        or json.loads(received[2][2])["routing_key"] != ROUTING_KEY
    ):
        print("probe: the loopback server did not receive the three requests with their credentials")
        return 4
    logging.shutdown()
    print(f"probe: ok ({mode}): 2 secrets read back, 3 requests delivered with their credentials")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
