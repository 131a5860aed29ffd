"""`python -m sandbox invoke`: the Docker-less twin of `sam local invoke`.

Runs one function from the `sam build` output in a clean interpreter of its runtime (see
`lambda_runtime.run_built_function`), against the same sandbox world as replay: moto with the stack
created from the built template and the secrets seeded, and the Slack/PagerDuty stand-ins.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from sandbox.errors import SandboxError
from sandbox.event_fit import Trigger, check_fit
from sandbox.eventbridge import RuleMatcher
from sandbox.lambda_runtime import (
    Invocation,
    ensure_runtime_boto3,
    find_runtime_interpreter,
    pinned_boto3,
    run_built_function,
)
from sandbox.report import ReportBuilder, Timeline
from sandbox.session import Sandbox
from sandbox.sqs_mapping import batch_failures, wrap_in_sqs_event
from sandbox.stack import FunctionSpec
from sandbox.standins import SLACK_SIGNING_SECRET, StandIns
from sandbox.template import Template, load_template

DEFAULT_BUILD_DIR = Path(".aws-sam/build-host")
DEFAULT_BOTO3_DIR = Path(".aws-sam/lambda-runtime-boto3")
# The boto3 the Lambda runtime provides is stood in for by the version pinned here.
PINNED_REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements" / "lambda-runtime.txt"
_HOST_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def load_built_template(build_dir: Path) -> Template:
    path = build_dir / "template.yaml"
    if not path.is_file():
        raise SandboxError(
            f"no built template at {path}: build first (make build-host, or "
            f"sam build -b {build_dir} --parameter-overrides Architecture=<host architecture>)"
        )
    template = load_template(path)
    _check_build_architecture(template)
    return template


def _check_build_architecture(template: Template) -> None:
    """Native wheels built for another architecture fail to import with obscure errors: say so first."""
    host = _HOST_ARCHITECTURES.get(platform.machine())
    for logical_id, resource in template.resources.items():
        built_for = (resource.get("Metadata") or {}).get("BuildArchitecture")
        if host is not None and isinstance(built_for, str) and built_for != host:
            raise SandboxError(
                f"{logical_id} was built for {built_for} but this host is {host}: "
                f"rebuild with --parameter-overrides Architecture={host}"
            )


def check_build_runtime(template: Template, spec: FunctionSpec) -> None:
    """sam build does not record its --parameter-overrides: a runtime chosen there must be passed again."""
    for logical_id, resource in template.resources.items():
        built_with = (resource.get("Metadata") or {}).get("BuildMethod")
        if isinstance(built_with, str) and built_with.startswith("python") and built_with != spec.runtime:
            raise SandboxError(
                f"{logical_id} was built for {built_with} but {spec.logical_id}'s Runtime resolves to {spec.runtime}: "
                f"pass the build's parameters again (--parameter-overrides PythonRuntime={built_with})"
            )


def require_function(template: Template, logical_id: str) -> None:
    functions = sorted(
        name for name, resource in template.resources.items() if resource.get("Type") == "AWS::Serverless::Function"
    )
    if logical_id not in functions:
        raise SandboxError(f"no function {logical_id!r} in {template.path}; functions: {', '.join(functions)}")


@dataclass(frozen=True)
class PreparedEvent:
    payload: Any
    note: str
    envelopes: list[dict[str, Any]]


def prepare_event(document: Any, spec: FunctionSpec, region: str) -> PreparedEvent:
    """The event as the function's trigger would deliver it."""
    if _is_sqs_event(document):
        return PreparedEvent(document, "an SQS event: passed verbatim", [])
    envelopes = document if isinstance(document, list) else [document]
    is_envelope = bool(envelopes) and all(
        isinstance(item, dict) and "detail-type" in item and "source" in item for item in envelopes
    )
    if not is_envelope:
        return PreparedEvent(document, "passed verbatim", [])
    if not spec.sqs_sources:
        return PreparedEvent(document, "an EventBridge event: passed verbatim", envelopes)
    source = spec.sqs_sources[0]
    bodies = [json.dumps(envelope, separators=(",", ":")) for envelope in envelopes]
    note = (
        f"an EventBridge event, wrapped in {len(bodies)} SQS record(s) from {source.queue_logical_id} "
        f"because {spec.logical_id} is triggered by SQS"
    )
    return PreparedEvent(wrap_in_sqs_event(bodies, source, region), note, envelopes)


def _is_sqs_event(document: Any) -> bool:
    records = document.get("Records") if isinstance(document, dict) else None
    return (
        isinstance(records, list)
        and bool(records)
        and all(isinstance(r, dict) and r.get("eventSource") == "aws:sqs" for r in records)
    )


def invoke(
    sandbox: Sandbox,
    function_id: str,
    event_path: Path,
    document: Any,
    *,
    python: Path | None,
    boto3_dir: Path,
    timeline: Timeline,
) -> tuple[dict[str, Any], str | None]:
    """Invoke the function once; returns the report and why the invocation failed (None when it did not): the
    function raised, or its function URL answered an error status."""
    spec = sandbox.stack.functions[function_id]
    check_build_runtime(sandbox.template, spec)
    trigger = check_fit(sandbox.template, function_id, document, event_path)
    interpreter = python or find_runtime_interpreter(spec.runtime)
    runtime_version = spec.runtime.removeprefix("python")
    boto3_path = ensure_runtime_boto3(boto3_dir, pinned_boto3(PINNED_REQUIREMENTS), interpreter, runtime_version)
    if trigger is Trigger.URL:
        prepared = prepare_request(document, sandbox.standins)
    else:
        prepared = prepare_event(document, spec, sandbox.identity.region)

    report = ReportBuilder()
    # Matching only: invoke hands the event to the function directly, so no target type matters here.
    rules = RuleMatcher(sandbox.stack.rules.values(), "default")
    timeline.header(sandbox)
    timeline.file(1, event_path)
    for envelope in prepared.envelopes:
        # Informational: invoke hands the event to the function directly, past the rules.
        matched = [rule.logical_id for rule in rules.matching_rules(envelope)]
        report.add_event(event_path, envelope, matched, [])
        timeline.would_match(envelope, matched)
    timeline.invoking(spec.logical_id, interpreter, prepared.note)

    invocation = run_built_function(spec, prepared.payload, sandbox.function_environment(spec), interpreter, boto3_path)
    entry = _invocation_entry(spec, prepared.payload, invocation)
    report.add_invocation(entry, invocation.errors)
    timeline.invocation_result(entry)
    result = report.finish(sandbox)
    timeline.on_call_view(result)
    return result, failure(spec.logical_id, trigger, invocation)


def failure(logical_id: str, trigger: Trigger, invocation: Invocation) -> str | None:
    """Why the invocation counts as failed: the handler raised, or (behind a function URL) answered 4xx or 5xx."""
    if invocation.error is not None:
        return f"{logical_id} raised {invocation.error.get('errorType')}: {invocation.error.get('errorMessage')}"
    result = invocation.result
    status = result.get("statusCode") if isinstance(result, dict) else None
    if trigger is Trigger.URL and (not isinstance(status, int) or status >= 400):
        body = str(result.get("body", ""))[:200] if isinstance(result, dict) else ""
        return f"{logical_id} answered its function URL request with status {status}" + (f" ({body})" if body else "")
    return None


# --- Function URL requests -------------------------------------------------------------------------

SANDBOX_KEY = "_sandbox"
"""A sample request's instructions to `invoke` (events/README.md), removed before the function sees the request:
`{"resign": "slack"}` asks for a fresh Slack timestamp and signature."""
_SLACK_TIMESTAMP = "x-slack-request-timestamp"
_SLACK_SIGNATURE = "x-slack-signature"


def prepare_request(document: Any, standins: StandIns) -> PreparedEvent:
    """A function URL request as the function receives it. A Slack request older than Slack's five minutes cannot
    be checked as it was signed; a sample marked `"_sandbox": {"resign": "slack"}` whose signature verifies with the
    sandbox's signing secret at its own timestamp is signed again now, its reply URL pointed at the Slack stand-in."""
    request = {key: value for key, value in document.items() if key != SANDBOX_KEY}
    marks = document.get(SANDBOX_KEY)
    if not (isinstance(marks, dict) and marks.get("resign") == "slack"):
        return PreparedEvent(request, "a function URL request: passed verbatim", [])
    headers = {str(name).lower(): str(value) for name, value in (request.get("headers") or {}).items()}
    body = _request_body(request)
    timestamp = headers.get(_SLACK_TIMESTAMP, "")
    signed = headers.get(_SLACK_SIGNATURE, "")
    if body is None or not timestamp.isdigit() or not hmac.compare_digest(signed, slack_signature(timestamp, body)):
        return PreparedEvent(
            request,
            "a function URL request, passed verbatim: its Slack signature does not verify, so not re-signed",
            [],
        )
    now = int(time.time())
    fields = [
        (name, _reply_url_to_standins(value, standins) if name == "payload" else value)
        for name, value in parse_qsl(body.decode(), keep_blank_values=True)
    ]
    fresh = urlencode(fields).encode()
    headers[_SLACK_TIMESTAMP] = str(now)
    headers[_SLACK_SIGNATURE] = slack_signature(str(now), fresh)
    context = dict(request.get("requestContext") or {})
    context["time"] = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now))
    context["timeEpoch"] = now * 1000
    request.update(headers=headers, requestContext=context, body=base64.b64encode(fresh).decode(), isBase64Encoded=True)
    note = (
        f"a function URL request, signed by Slack at {timestamp}: signed again now ({now}) with the sandbox's "
        "signing secret, its response_url the Slack stand-in's, as the sample asks"
    )
    return PreparedEvent(request, note, [])


def slack_signature(timestamp: str, body: bytes, secret: str = SLACK_SIGNING_SECRET) -> str:
    """Slack's v0 request signature: hex HMAC-SHA256 of `v0:<timestamp>:<body>`."""
    return "v0=" + hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()


def _request_body(request: dict[str, Any]) -> bytes | None:
    body = request.get("body")
    if not isinstance(body, str):
        return None
    if not request.get("isBase64Encoded"):
        return body.encode()
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None


def _reply_url_to_standins(payload: str, standins: StandIns) -> str:
    """The interactive payload with its response_url the stand-in's, so a reply stays on this machine."""
    try:
        parsed = json.loads(payload)
    except json.JSONDecodeError:
        return payload
    if not isinstance(parsed, dict) or "response_url" not in parsed:
        return payload
    parsed["response_url"] = standins.response_url("invoke")
    return json.dumps(parsed)


def _invocation_entry(spec: FunctionSpec, payload: Any, invocation: Invocation) -> dict[str, Any]:
    """The report entry, shaped like replay's, plus the function's result and Lambda's error object."""
    records = payload.get("Records", []) if isinstance(payload, dict) else []
    message_ids = [str(record.get("messageId")) for record in records if isinstance(record, dict)]
    source = spec.sqs_sources[0] if spec.sqs_sources else None
    reports_items = source is not None and source.report_batch_item_failures
    failures, batch_error = batch_failures(invocation, message_ids, reports_items)
    return {
        "function": spec.logical_id,
        "queue": source.queue_logical_id if source is not None and records else None,
        "request_id": invocation.request_id,
        "batch_size": len(records),
        "message_ids": message_ids,
        "failures": failures,
        "error": batch_error,
        "duration_ms": invocation.duration_ms,
        "logs": invocation.logs,
        "result": invocation.result,
        "error_detail": invocation.error,
    }
