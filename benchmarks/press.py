"""How soon a press of Acknowledge is answered, and how soon PagerDuty and the Slack root follow.

Slack wants an answer to a button press within three seconds. SlackActionsFunction answers after its checks and one
SQS SendMessage; the AlertRouter then takes the action from the alert queue, acknowledges PagerDuty with the
incident's dedup key and updates the root. Both functions run in process against the sandbox (moto on loopback, the
stand-ins over HTTP), warm (a first, unmeasured press loads them). Each measured press is on a new fault's root, the
press signed as Slack signs it. See benchmarks/README.md for the method and the results.

    .venv/bin/python benchmarks/press.py [--presses 100] [--out reports/press.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "common")]

from benchmarks.first_page import fault, percentile  # noqa: E402
from sandbox.function_url import request_event  # noqa: E402
from sandbox.lambda_runtime import InProcessFunction  # noqa: E402
from sandbox.session import Sandbox  # noqa: E402
from sandbox.sqs_mapping import SqsEventSourceMapping, wrap_in_sqs_event  # noqa: E402
from sandbox.standins import signed_click  # noqa: E402
from sandbox.template import load_template  # noqa: E402


def _button(sandbox: Sandbox, dedup_key: str) -> str:
    """The Acknowledge button's value on the root of the incident with this dedup key."""
    for channel in sandbox.standins.slack_channels().values():
        for message in channel:
            for block in message.get("blocks") or []:
                for element in block.get("elements") or [] if block.get("type") == "actions" else []:
                    if element.get("action_id") == "incident_acknowledge" and dedup_key in element.get("value", ""):
                        return str(element["value"])
    raise LookupError(f"no Acknowledge button for {dedup_key}")


def measure(presses: int) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    with Sandbox(load_template(ROOT / "template.yaml"), calls_over_http=True) as sandbox:
        router_spec = sandbox.stack.functions["AlertRouterFunction"]
        actions_spec = sandbox.stack.functions["SlackActionsFunction"]
        url = actions_spec.function_url
        if url is None:
            raise RuntimeError("SlackActionsFunction has no function URL in template.yaml")
        source = router_spec.sqs_sources[0]
        with (
            InProcessFunction(router_spec, sandbox.function_environment(router_spec)) as router,
            InProcessFunction(actions_spec, sandbox.function_environment(actions_spec)) as actions,
        ):
            mapping = SqsEventSourceMapping(source, router, sandbox.aws, sandbox.identity.region)
            for number in range(presses + 1):
                event = fault(number)
                router.invoke(wrap_in_sqs_event([json.dumps(event)], source, sandbox.identity.region))
                ident = event["detail"]["containerInstanceArn"].rsplit("/", 1)[-1]
                dedup_key = f"my-cluster/{ident}/ACCELERATED_COMPUTE"
                headers, body = signed_click(
                    action_id="incident_acknowledge",
                    value=_button(sandbox, dedup_key),
                    user_id="U0ONCALL01",
                    response_url=sandbox.standins.response_url(uuid.uuid4().hex),
                    timestamp=int(time.time()),
                )
                before = len(sandbox.standins.requests)
                started = time.perf_counter()
                answer = actions.invoke(request_event(url, headers, body))
                answered = time.perf_counter()
                status = (answer.result or {}).get("statusCode") if isinstance(answer.result, dict) else None
                if status != 200:
                    raise RuntimeError(f"press {number} answered {status}: {answer.error}")
                mapping.drain()
                followed = time.perf_counter()
                sent = sandbox.standins.requests[before:]
                acked = [
                    r for r in sent if r["service"] == "pagerduty" and r["body"].get("event_action") == "acknowledge"
                ]
                updated = [r for r in sent if r["service"] == "slack" and r["path"].endswith("chat.update")]
                if [r["body"]["dedup_key"] for r in acked] != [dedup_key] or not updated:
                    raise RuntimeError(f"press {number}: PagerDuty or the root did not follow ({len(sent)} requests)")
                if number:  # the first press loads both functions: not measured
                    samples.append(
                        {"answer_ms": (answered - started) * 1000, "followed_ms": (followed - answered) * 1000}
                    )
    answers = [s["answer_ms"] for s in samples]
    follows = [s["followed_ms"] for s in samples]
    return {
        "presses": len(samples),
        "answer_ms": {
            "median": round(statistics.median(answers), 1),
            "p99": round(percentile(answers, 0.99), 1),
            "max": round(max(answers), 1),
        },
        "pagerduty_and_root_after_answer_ms": {
            "median": round(statistics.median(follows), 1),
            "p99": round(percentile(follows, 0.99), 1),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=100)
    parser.add_argument("--out", type=Path)
    arguments = parser.parse_args()
    result = measure(arguments.presses)
    text = json.dumps(result, indent=2)
    print(text)
    if arguments.out:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
