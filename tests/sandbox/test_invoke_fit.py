"""`python -m sandbox invoke` takes only events its function's trigger delivers; a marked Slack sample is signed
again; a function URL's error answer fails the invocation; and the timeline's plainer lines."""

from __future__ import annotations

import base64
import io
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from fault_responder.actions.interactive import verify_slack_request
from sandbox.__main__ import main
from sandbox.errors import SandboxError
from sandbox.event_fit import Trigger, check_fit, trigger_of
from sandbox.invoke import failure, prepare_request
from sandbox.lambda_runtime import Invocation
from sandbox.report import SCHEDULED, Timeline, _blocks_text, skipped_summary
from sandbox.standins import SLACK_SIGNING_SECRET
from sandbox.template import load_template
from tests.sandbox.conftest import REPO_ROOT, TEMPLATE

EVENTS = REPO_ROOT / "events"
XID46 = EVENTS / "aws-docs" / "health-change-accelerated-compute-xid46.json"
SLACK = EVENTS / "function-url" / "slack-acknowledge.json"
TASKS = ("ClaimFaultFunction", "CheckGuardsFunction", "QuarantineInstanceFunction", "FindJobsFunction",
         "PlanJobFunction", "RequestCheckpointFunction", "CheckCheckpointFunction", "StopJobFunction",
         "CheckTasksFunction", "RelaunchJobFunction", "PlanRetryFunction", "NotifyFunction")  # fmt: skip
SAMPLES = {
    "AlertRouterFunction": XID46,
    "SweepFunction": EVENTS / "schedule" / "sweep.json",
    "ReconcileFunction": EVENTS / "schedule" / "reconcile.json",
    "SlackActionsFunction": SLACK,
    "PagerDutyWebhookFunction": EVENTS / "function-url" / "pagerduty-incident-acknowledged.json",
    "ClaimFaultFunction": EVENTS / "lambda" / "claim-fault.json",
    **{name: EVENTS / "lambda" / f"{name.removesuffix('Function').replace('Job', '-job').lower()}.json"
       for name in ("PlanJobFunction", "StopJobFunction", "RelaunchJobFunction", "FindJobsFunction")},
}  # fmt: skip


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_each_function_has_the_trigger_template_yaml_gives_it() -> None:
    template = load_template(TEMPLATE)
    assert trigger_of(template, "AlertRouterFunction") is Trigger.QUEUE
    assert {trigger_of(template, name) for name in ("SweepFunction", "ReconcileFunction")} == {Trigger.SCHEDULE}
    assert {trigger_of(template, name) for name in ("SlackActionsFunction", "PagerDutyWebhookFunction")} == {
        Trigger.URL
    }
    assert {trigger_of(template, name) for name in TASKS} == {Trigger.TASK}


@pytest.mark.parametrize("function", sorted(SAMPLES))
def test_each_sample_fits_its_function_and_no_other_trigger(function: str) -> None:
    template = load_template(TEMPLATE)
    path = SAMPLES[function]
    check_fit(template, function, _load(path), path)
    for other in ("AlertRouterFunction", "SweepFunction", "SlackActionsFunction", "PlanJobFunction"):
        if trigger_of(template, other) is not trigger_of(template, function):
            with pytest.raises(SandboxError, match=f"does not fit {other}"):
                check_fit(template, other, _load(path), path)


def test_invoke_refuses_an_ecs_event_for_the_slack_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a build whose template is the stack's (the event is refused before anything runs)
    shutil.copy(TEMPLATE, tmp_path / "template.yaml")

    # When an ECS event is invoked on SlackActionsFunction, Then it exits 2 saying why, on standard error
    assert main(["invoke", "SlackActionsFunction", str(XID46), "--build-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "is an EventBridge event, which does not fit SlackActionsFunction" in error
    assert "function URL request" in error


class _StandIns:
    def response_url(self, press: str) -> str:
        return f"http://127.0.0.1:1/actions/{press}"


def _body(request: dict[str, Any]) -> bytes:
    return base64.b64decode(request["body"])


def test_a_marked_slack_sample_is_signed_again_now_with_its_reply_url_on_the_stand_in() -> None:
    prepared = prepare_request(_load(SLACK), _StandIns())  # type: ignore[arg-type]

    request = prepared.payload
    assert "_sandbox" not in request
    body = _body(request)
    verify_slack_request(SLACK_SIGNING_SECRET, request["headers"], body, datetime.now(UTC))
    payload = json.loads(parse_qs(body.decode())["payload"][0])
    assert payload["response_url"] == "http://127.0.0.1:1/actions/invoke"
    assert payload["actions"][0]["action_id"] == "incident_acknowledge"
    assert "signed again now" in prepared.note


def test_a_marked_sample_whose_signature_does_not_verify_is_not_signed_again() -> None:
    sample = _load(SLACK)
    sample["headers"]["x-slack-signature"] = "v0=" + "0" * 64

    prepared = prepare_request(sample, _StandIns())  # type: ignore[arg-type]

    assert prepared.payload["headers"]["x-slack-signature"] == "v0=" + "0" * 64
    assert "not re-signed" in prepared.note


def _invocation(result: Any, error: dict[str, Any] | None = None) -> Invocation:
    return Invocation("F", "r", result, error, [], [], 1.0)


def test_a_function_url_answering_an_error_fails_the_invocation() -> None:
    answered = failure("SlackActionsFunction", Trigger.URL, _invocation({"statusCode": 401, "body": "unauthorized"}))
    assert answered == "SlackActionsFunction answered its function URL request with status 401 (unauthorized)"
    assert failure("SlackActionsFunction", Trigger.URL, _invocation({"statusCode": 200, "body": ""})) is None
    assert failure("SweepFunction", Trigger.SCHEDULE, _invocation({"statusCode": 500})) is None
    raised = failure("PlanJobFunction", Trigger.TASK, _invocation(None, {"errorType": "E", "errorMessage": "m"}))
    assert raised == "PlanJobFunction raised E: m"


# --- the timeline ---------------------------------------------------------------------------------


def test_a_roots_buttons_read_as_buttons() -> None:
    message = {
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*XID 79*"}},
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": label}, "action_id": action}
                    for label, action in (("Acknowledge", "a"), ("Resolve", "r"), ("Silence 1h", "s"))
                ],
            },
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "runbook"}]},
        ]
    }
    assert _blocks_text(message) == ["XID 79", "[Acknowledge] [Resolve] [Silence 1h]", "runbook"]


def test_skipped_resources_are_counted_by_type_on_one_line() -> None:
    summary = skipped_summary(["AWS::CloudWatch::Alarm", "AWS::IAM::Role", "AWS::CloudWatch::Alarm"])
    assert summary == (
        "3 resources the sandbox does not emulate: 2 AWS::CloudWatch::Alarm, 1 AWS::IAM::Role (--verbose lists them)"
    )


def test_a_scheduled_run_is_labelled_as_one_not_as_a_batch() -> None:
    out = io.StringIO()
    entry = {"function": "ReconcileFunction", "queue": SCHEDULED, "batch_size": 0, "duration_ms": 12.0,
             "error": None, "failures": []}  # fmt: skip
    Timeline(out).batch(entry, [])
    assert out.getvalue().strip() == "scheduled run of ReconcileFunction, 12 ms: ok"
