"""`python -m sandbox replay`: EventBridge events through the rules, the queues and the handlers.

For each event file in order: every envelope in it goes onto the default bus (a file holding a list
is a burst that arrives together), then every SQS event source mapping drains its queue into its
function, in process. At the end the report adds what the world looks like.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.errors import SandboxError
from sandbox.eventbridge import EventBus, send_to_queue_arn
from sandbox.lambda_runtime import InProcessFunction
from sandbox.report import ReportBuilder, Timeline
from sandbox.session import Sandbox
from sandbox.sqs_mapping import BatchOutcome, SqsEventSourceMapping


@dataclass(frozen=True)
class EventFile:
    path: Path
    events: list[dict[str, Any]]


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SandboxError(f"cannot read event file {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise SandboxError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise SandboxError(f"{path} is not UTF-8 text: {exc.reason}") from exc


def load_event_file(path: Path) -> EventFile:
    """An event file: one EventBridge envelope (a JSON object) or a JSON list of them."""
    document = read_json_file(path)
    events = document if isinstance(document, list) else [document]
    if not events or not all(isinstance(event, dict) for event in events):
        raise SandboxError(f"{path}: expected an EventBridge event (a JSON object) or a non-empty list of them")
    return EventFile(path, events)


def replay(
    sandbox: Sandbox,
    files: Sequence[EventFile],
    timeline: Timeline,
    after_file: Mapping[int, Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """Run the files through the started sandbox; returns the report. `after_file` (by file number) changes
    the world between files, once their events were handled (a test rotating a secret, say)."""
    report = ReportBuilder()
    bus = EventBus.default(sandbox.stack, sandbox.aws)
    timeline.header(sandbox)
    with contextlib.ExitStack() as loaded:
        mappings = _event_source_mappings(sandbox, loaded, timeline)
        for number, event_file in enumerate(files, start=1):
            timeline.file(number, event_file.path)
            for event in event_file.events:
                if event.get("source") == ACTIONS_SOURCE:
                    # A person's action (fault_responder.incidents.incident_actions): its endpoint sends it to the
                    # alert queue itself, past EventBridge (no rule matches its source).
                    arn = alert_queue_arn(sandbox)
                    send_to_queue_arn(sandbox.aws, arn, json.dumps(event))
                    rule = "(none: its endpoint sends it)"
                    direct: dict[str, Any] = {
                        "rule": rule,
                        "target_id": ACTIONS_QUEUE,
                        "type": "sqs",
                        "arn": arn,
                        "delivered": True,
                        "error": None,
                        "dead_lettered": False,
                    }
                    report.add_event(event_file.path, event, [], [direct])
                    timeline.event(event, [], [direct])
                    continue
                delivery = bus.put_event(event)
                targets = [target.to_json() for target in delivery.targets]
                report.add_event(event_file.path, event, delivery.matched_rules, targets)
                timeline.event(event, delivery.matched_rules, targets)
            for mapping in mappings:
                _drain(mapping, report, timeline)
            if after_file and number in after_file:
                after_file[number]()
    result = report.finish(sandbox)
    timeline.on_call_view(result)
    return result


ACTIONS_SOURCE = "fault-responder.actions"
"""fault_responder.incidents.incident_actions.ACTIONS_SOURCE (the sandbox does not import the layer: its functions
do)."""
ACTIONS_QUEUE = "AlertQueue"
"""Where SlackActionsFunction and PagerDutyWebhookFunction send people's actions."""


def alert_queue_arn(sandbox: Sandbox) -> str:
    return str(sandbox.stack.resources[ACTIONS_QUEUE].attributes["Arn"])


def _event_source_mappings(
    sandbox: Sandbox, loaded: contextlib.ExitStack, timeline: Timeline
) -> list[SqsEventSourceMapping]:
    """Load each function that an enabled SQS event source drives, once (a warm environment)."""
    mappings: list[SqsEventSourceMapping] = []
    for spec in sandbox.stack.functions.values():
        sources = [source for source in spec.sqs_sources if source.enabled]
        if not sources:
            continue
        function = loaded.enter_context(InProcessFunction(spec, sandbox.function_environment(spec)))
        for source in sources:
            timeline.event_source(source, spec.logical_id, function.init_logs)
            mappings.append(SqsEventSourceMapping(source, function, sandbox.aws, sandbox.identity.region))
    return mappings


def _drain(mapping: SqsEventSourceMapping, report: ReportBuilder, timeline: Timeline) -> None:
    def record(outcome: BatchOutcome) -> None:
        entry = outcome.to_json()
        report.add_invocation(entry, outcome.invocation.errors)
        timeline.batch(entry, outcome.invocation.errors)

    result = mapping.drain(on_batch=record)
    if not result.drained:
        warning = (
            f"{mapping.source.queue_logical_id} still had messages after {len(result.outcomes)} batches "
            "(a message that never succeeds and has no dead-letter queue?); stopped polling it"
        )
        report.warnings.append(warning)
        timeline.warning(warning)
