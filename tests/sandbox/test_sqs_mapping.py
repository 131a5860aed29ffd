"""The sandbox machinery end to end, in process, on a toy stack: stack creation in moto, rule
delivery, the SQS event source mapping (batches, partial failures, retries, the DLQ) and what the
handler is given (record shape, context, environment)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import eventbridge
from sandbox.eventbridge import EventBus
from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.standins import SLACK_SIGNING_SECRET
from sandbox.template import Template
from tests.sandbox.conftest import toy_event


@pytest.fixture
def toy_sandbox(toy_template: Template) -> Iterator[Sandbox]:
    with Sandbox(toy_template, stack_name="toy") as sandbox:
        yield sandbox


def replay_burst(sandbox: Sandbox, *events: dict[str, Any]) -> dict[str, Any]:
    """Replay the events as one file: they reach the queue together, before the function polls."""
    return replay(sandbox, [EventFile(Path("burst.json"), list(events))], Timeline(None))


def handler_view(invocation: dict[str, Any]) -> dict[str, Any]:
    """What the toy handler printed about its invocation (its first log line)."""
    return dict(json.loads(invocation["logs"][0]))


def queue_depth(sandbox: Sandbox, logical_id: str) -> int:
    attributes = sandbox.aws.sqs.get_queue_attributes(
        QueueUrl=sandbox.stack.resources[logical_id].ref,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


# --- The stack -------------------------------------------------------------------------------------


def test_resources_are_created_from_the_template(toy_sandbox: Sandbox) -> None:
    stack, aws = toy_sandbox.stack, toy_sandbox.aws
    queue, dlq = stack.resources["ToyQueue"], stack.resources["ToyDLQ"]

    assert re.fullmatch(r"toy-ToyQueue-[A-Z2-7]{13}", queue.attributes["QueueName"])
    attributes = aws.sqs.get_queue_attributes(QueueUrl=queue.ref, AttributeNames=["All"])["Attributes"]
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq.attributes["Arn"],
        "maxReceiveCount": 3,
    }
    assert attributes["VisibilityTimeout"] == "60"
    [target] = aws.events.list_targets_by_rule(Rule=stack.rules["ToyRule"].name)["Targets"]
    assert target["Arn"] == queue.attributes["Arn"]
    assert target["DeadLetterConfig"] == {"Arn": stack.resources["RuleDLQ"].attributes["Arn"]}


def test_types_not_emulated_are_reported_as_skipped(toy_sandbox: Sandbox) -> None:
    skipped = {entry.logical_id: entry.resource_type for entry in toy_sandbox.stack.skipped}

    assert skipped == {"ToyTopic": "AWS::SNS::Topic"}


def test_notifier_secrets_are_seeded_under_the_template_names(toy_sandbox: Sandbox) -> None:
    secrets = toy_sandbox.aws.secretsmanager

    slack = json.loads(secrets.get_secret_value(SecretId="toy/slack")["SecretString"])
    pagerduty = json.loads(secrets.get_secret_value(SecretId="toy/pagerduty")["SecretString"])

    assert slack == {
        "bot_token": "xoxb-sandbox-token",
        "webhook_urls": {"gpu-alerts": toy_sandbox.standins.slack_webhook_url},
        "signing_secret": SLACK_SIGNING_SECRET,
    }
    assert [len(key) for key in pagerduty["routing_keys"].values()] == [32]


# --- The event source mapping ----------------------------------------------------------------------


def test_a_failing_message_is_retried_then_dead_lettered_without_blocking_its_neighbours(
    toy_sandbox: Sandbox,
) -> None:
    # Given a burst of three events, the middle one marked to fail, and maxReceiveCount 3
    first, marked, last = toy_event(n=1), toy_event(fail=True), toy_event(n=2)

    # When they are replayed
    report = replay_burst(toy_sandbox, first, marked, last)

    # Then the first batch holds all three and reports only the marked one as failed
    invocations = report["invocations"]
    batch = invocations[0]["message_ids"]
    [failed_id] = invocations[0]["failures"]
    # ...which alone comes back until it has been received maxReceiveCount times
    assert [invocation["message_ids"] for invocation in invocations] == [batch, [failed_id], [failed_id]]
    assert all(invocation["failures"] == [failed_id] for invocation in invocations)
    # ...and then sits in the DLQ, the only message there, while its neighbours were handled once
    assert [(letter["queue"], letter["message_id"], letter["body"]) for letter in report["dlq"]] == [
        ("ToyDLQ", failed_id, marked)
    ]
    assert report["errors"] == [{"event_id": marked["id"], "reason": "marked to fail"}] * 3
    assert queue_depth(toy_sandbox, "ToyQueue") == 0


def test_a_handler_that_raises_fails_its_whole_batch(toy_sandbox: Sandbox) -> None:
    report = replay_burst(toy_sandbox, toy_event(n=1), toy_event(**{"raise": True}))

    invocations = report["invocations"]
    assert len(invocations) == 3
    assert all(invocation["failures"] == invocation["message_ids"] for invocation in invocations)
    assert invocations[0]["error"] == "RuntimeError: toy handler asked to raise"
    assert len(report["dlq"]) == 2


def test_batches_are_filled_up_to_the_batch_size(toy_sandbox: Sandbox) -> None:
    report = replay_burst(toy_sandbox, *(toy_event(n=n) for n in range(12)))

    assert [invocation["batch_size"] for invocation in report["invocations"]] == [10, 2]


def test_the_mapping_skips_the_receives_that_could_only_answer_nothing(toy_sandbox: Sandbox) -> None:
    asked: list[str] = []
    received: list[int] = []  # how many messages each ReceiveMessage of ToyQueue answered

    def answered(parsed: dict[str, Any], **_: Any) -> None:
        if asked.pop() == toy_sandbox.stack.resources["ToyQueue"].ref:  # (the report reads the dead-letter queues)
            received.append(len(parsed.get("Messages", [])))

    events = toy_sandbox.aws.sqs.meta.events
    events.register("provide-client-params.sqs.ReceiveMessage", lambda params, **_: asked.append(params["QueueUrl"]))
    events.register("after-call.sqs.ReceiveMessage", answered)

    # One event: one receive hands it out; none to fill the batch after it, none once the queue is empty
    replay_burst(toy_sandbox, toy_event(n=1))
    assert received == [1]

    # Twelve, in batches of ten: the second batch ends at a receive that answered fewer than asked
    received.clear()
    replay_burst(toy_sandbox, *(toy_event(n=n) for n in range(12)))
    assert received == [10, 2]

    # A failed message is still in the queue after its batch: the queue is asked again (and answers it)
    received.clear()
    report = replay_burst(toy_sandbox, toy_event(fail=True))
    assert received == [1, 1, 1, 0]  # the fourth receive moves it to the DLQ (maxReceiveCount 3)
    assert len(report["dlq"]) == 1


def test_the_handler_gets_a_real_shaped_sqs_event_context_and_environment(toy_sandbox: Sandbox) -> None:
    event = toy_event(n=1)

    report = replay_burst(toy_sandbox, event)

    view = handler_view(report["invocations"][0])
    [record] = view["event"]["Records"]
    queue = toy_sandbox.stack.resources["ToyQueue"]
    function = toy_sandbox.stack.functions["ToyFunction"]
    assert json.loads(record["body"]) == event
    assert record["body"] == json.dumps(event, separators=(",", ":"))  # EventBridge's compact JSON
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()
    assert (record["eventSource"], record["eventSourceARN"], record["awsRegion"]) == (
        "aws:sqs",
        queue.attributes["Arn"],
        "us-east-1",
    )
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"} <= set(record["attributes"])
    assert {"messageId", "receiptHandle", "messageAttributes"} <= set(record)
    context = view["context"]
    assert (context["function_name"], context["memory_limit_in_mb"], context["invoked_function_arn"]) == (
        function.name,
        256,
        function.arn,
    )
    assert 0 < context["remaining_ms"] <= 10_000
    environ = view["environ"]
    assert environ["TOY_QUEUE_URL"] == queue.ref
    assert environ["AWS_ENDPOINT_URL"] == toy_sandbox.moto_endpoint
    assert environ["PAGERDUTY_EVENTS_URL"] == toy_sandbox.standins.pagerduty_url
    assert environ["SLACK_API_URL"] == toy_sandbox.standins.slack_api_url
    assert environ["AWS_LAMBDA_FUNCTION_NAME"] == function.name
    # The function's environment is set only while it runs.
    assert "TOY_QUEUE_URL" not in os.environ


def test_a_refused_page_is_retried_through_the_queue(toy_template: Template) -> None:
    # Given PagerDuty answers the first request with a 500
    with Sandbox(toy_template, stack_name="toy", faults={"pagerduty": [500]}) as sandbox:
        # When an event the handler pages for is replayed
        report = replay_burst(sandbox, toy_event(page=True))

    # Then the first attempt fails the record, SQS redelivers it, and the second page lands
    assert [len(invocation["failures"]) for invocation in report["invocations"]] == [1, 0]
    assert [(r["service"], r["status"], r["fault"]) for r in report["requests"]] == [
        ("pagerduty", 500, True),
        ("pagerduty", 202, False),
    ]
    assert report["requests"][1]["body"]["routing_key"] == "***"  # redacted by the stand-ins
    assert [alert["status"] for alert in report["pagerduty"]] == ["triggered"]
    assert report["dlq"] == []


# --- Rule delivery ---------------------------------------------------------------------------------


def test_an_undeliverable_event_goes_to_the_rule_targets_dlq(toy_sandbox: Sandbox) -> None:
    # Given the rule's target queue no longer exists
    stack, aws = toy_sandbox.stack, toy_sandbox.aws
    aws.sqs.delete_queue(QueueUrl=stack.resources["ToyQueue"].ref)
    event = toy_event(n=1)

    # When an event matching the rule is put on the bus
    delivery = EventBus.default(stack, aws).put_event(event)

    # Then EventBridge's dead-letter message carries the event and why it could not be delivered
    [target] = delivery.targets
    assert (target.delivered, target.dead_lettered) == (False, True)
    [letter] = aws.sqs.receive_message(
        QueueUrl=stack.resources["RuleDLQ"].ref, MessageAttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    assert json.loads(letter["Body"]) == event
    attributes = {name: value["StringValue"] for name, value in letter["MessageAttributes"].items()}
    assert attributes["RULE_ARN"] == stack.rules["ToyRule"].arn
    assert attributes["TARGET_ARN"] == stack.resources["ToyQueue"].attributes["Arn"]
    assert "NonExistentQueue" in attributes["ERROR_CODE"]


def test_a_queue_deleted_after_its_url_was_kept_refuses_the_event_as_one_never_looked_up(toy_sandbox: Sandbox) -> None:
    stack, aws = toy_sandbox.stack, toy_sandbox.aws
    bus = EventBus.default(stack, aws)
    assert bus.put_event(toy_event(n=1)).targets[0].delivered  # ToyQueue's URL is kept from here
    aws.sqs.delete_queue(QueueUrl=stack.resources["ToyQueue"].ref)

    kept = bus.put_event(toy_event(n=2)).targets[0]
    eventbridge._queue_urls.clear()
    looked_up = bus.put_event(toy_event(n=3)).targets[0]

    assert (kept.delivered, kept.dead_lettered) == (looked_up.delivered, looked_up.dead_lettered) == (False, True)
    assert kept.error == looked_up.error
    assert "NonExistentQueue" in str(kept.error)


def test_events_no_rule_matches_are_not_delivered(toy_sandbox: Sandbox) -> None:
    report = replay_burst(toy_sandbox, {**toy_event(n=1), "source": "someone.else"})

    assert report["events"][0]["matched_rules"] == []
    assert report["invocations"] == []
