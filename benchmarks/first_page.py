"""How soon a new fault's first page goes out: from the handler receiving the event to the first request to
Slack and to PagerDuty, how many DynamoDB round trips it waits for (calls made at the same time count once), and
how much of the wait is our own code.

The AlertRouterFunction runs in process against the sandbox (moto on loopback, the stand-ins over HTTP), warm
(a first, unmeasured fault loads it and reads the secrets). Each measured fault is a new instance on a capacity
provider of its own (a lone fault: grouped, but no fleet to join), one SQS record per invocation. The DynamoDB calls
are timed where the router makes them (botocore's client), so calls it makes at once are seen at once (moto answers
them one after the other). See benchmarks/README.md for the method and the results.

    .venv/bin/python benchmarks/first_page.py [--faults 200] [--out reports/first_page.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import botocore.client  # noqa: E402

from sandbox.lambda_runtime import InProcessFunction  # noqa: E402
from sandbox.session import Sandbox  # noqa: E402
from sandbox.sqs_mapping import wrap_in_sqs_event  # noqa: E402
from sandbox.template import load_template  # noqa: E402

SAMPLE = ROOT / "events" / "aws-docs" / "health-change-accelerated-compute-xid46.json"


def fault(number: int) -> dict[str, Any]:
    event = copy.deepcopy(json.loads(SAMPLE.read_text()))
    event["id"] = f"first-page-{number}"
    event["detail"]["containerInstanceArn"] = event["detail"]["containerInstanceArn"] + f"-{number}"
    event["detail"]["capacityProviderName"] = f"p5-{number}"
    event["detail"]["healthChecks"][0]["statusReason"] = "XID_79"
    return event


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class ClientCalls:
    """Every DynamoDB call the router's clients make: (started, ended, operation), epoch seconds."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float, str]] = []
        self._original = botocore.client.BaseClient._make_api_call

    def __enter__(self) -> ClientCalls:
        original, calls = self._original, self.calls

        def timed(client: Any, operation: str, parameters: Any) -> Any:
            if client.meta.service_model.service_name != "dynamodb":
                return original(client, operation, parameters)
            started = time.time()
            try:
                return original(client, operation, parameters)
            finally:
                calls.append((started, time.time(), operation))

        botocore.client.BaseClient._make_api_call = timed
        return self

    def __exit__(self, *exc: object) -> None:
        botocore.client.BaseClient._make_api_call = self._original


def _handovers() -> list[float]:
    """When the router handed each record to its deliveries (Dispatch._submit), from its loaded dispatch module.

    What a page waits for is what was asked before that moment; a call made after it (the member's own write) runs
    beside the delivery, even when a busy machine starts the delivery's thread after that call has answered."""
    dispatch = sys.modules["fault_responder.alerting.dispatch"].Dispatch
    moments: list[float] = []
    original = dispatch._submit

    def submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        moments.append(time.time())
        return original(self, *args, **kwargs)

    dispatch._submit = submit
    return moments


def round_trips(calls: list[tuple[float, float, str]]) -> int:
    """The longest chain of calls each made after the one before it had answered: the round trips waited for."""
    chain: dict[int, int] = {}
    ordered = sorted(calls)
    for index, (started, _, _) in enumerate(ordered):
        before = [chain[other] for other in range(index) if ordered[other][1] <= started]
        chain[index] = 1 + max(before, default=0)
    return max(chain.values(), default=0)


def measure(faults: int) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    with Sandbox(load_template(ROOT / "template.yaml"), calls_over_http=True) as sandbox, ClientCalls() as client:
        spec = sandbox.stack.functions["AlertRouterFunction"]
        source = spec.sqs_sources[0]
        with InProcessFunction(spec, sandbox.function_environment(spec)) as function:
            handovers = _handovers()
            for number in range(faults + 1):
                body = json.dumps(fault(number))
                event = wrap_in_sqs_event([body], source, sandbox.identity.region)
                before_requests = len(sandbox.standins.requests)
                started = time.time()
                invocation = function.invoke(event)
                if invocation.error or (invocation.result or {}).get("batchItemFailures"):
                    raise SystemExit(f"fault {number} failed: {invocation.error or invocation.errors}")
                if number == 0:
                    continue  # the cold one: imports, clients, secrets
                requests = sandbox.standins.requests[before_requests:]
                first = {
                    service: min(r["at"] for r in requests if r["service"] == service)
                    for service in ("slack", "pagerduty")
                }
                earliest = min(first.values())
                # What the page waited for: the calls made before the record was handed to its deliveries (the
                # member's own write goes on meanwhile, beside them).
                handed = min([at for at in handovers if at >= started], default=earliest)
                calls = [call for call in client.calls if started <= call[0] < handed]
                served = [call for call in sandbox.dynamodb_calls() if call[0] >= started and call[1] <= earliest]
                waited = sum(end - begin for begin, end, _ in served)
                samples.append(
                    {
                        "slack_ms": (first["slack"] - started) * 1000,
                        "pagerduty_ms": (first["pagerduty"] - started) * 1000,
                        "first_ms": (earliest - started) * 1000,
                        "dynamodb_ms": waited * 1000,
                        "ours_ms": (earliest - started - waited) * 1000,
                        "dynamodb_calls_before": [operation for _, _, operation in sorted(calls)],
                        "round_trips_before": round_trips(calls),
                    }
                )
    return {"faults": faults, "samples": samples, "summary": summarise(samples)}


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key in ("first_ms", "slack_ms", "pagerduty_ms", "dynamodb_ms", "ours_ms"):
        values = [sample[key] for sample in samples]
        summary[key] = {"median": statistics.median(values), "p99": percentile(values, 0.99)}
    counts = [len(sample["dynamodb_calls_before"]) for sample in samples]
    operations = sorted({" + ".join(sample["dynamodb_calls_before"]) for sample in samples})
    summary["dynamodb_calls_before"] = {"max": max(counts), "min": min(counts), "sequences": operations}
    trips = [sample["round_trips_before"] for sample in samples]
    summary["round_trips_before"] = {"max": max(trips), "min": min(trips), "median": statistics.median(trips)}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=200, help="new faults to measure (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write every sample and the summary here as JSON")
    args = parser.parse_args()
    result = measure(args.faults)
    summary = result["summary"]
    print(f"{args.faults} new faults, warm AlertRouter, one record per invocation")
    for key, label in (
        ("first_ms", "event -> first request"),
        ("slack_ms", "event -> Slack post"),
        ("pagerduty_ms", "event -> PagerDuty trigger"),
        ("dynamodb_ms", "  of which DynamoDB calls"),
        ("ours_ms", "  of which our code"),
    ):
        print(f"{label:<28} median {summary[key]['median']:7.1f} ms   p99 {summary[key]['p99']:7.1f} ms")
    calls, trips = summary["dynamodb_calls_before"], summary["round_trips_before"]
    print(
        f"DynamoDB calls before the first request: {calls['min']} to {calls['max']} ({'; '.join(calls['sequences'])}),"
        f" in {trips['min']} to {trips['max']} round trip(s) waited for"
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    # The check is of the code, not of the machine: a router that waited for two round trips would do so on every
    # fault, while a loaded machine that starts one of two calls made at once after the other answered (two here)
    # does so on a few. So most faults must wait for one.
    return 0 if trips["median"] <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
