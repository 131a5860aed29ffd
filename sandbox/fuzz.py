"""`python -m sandbox fuzz`: mutated EventBridge envelopes through the real AlertRouter.

Every sample event in events/ is a seed. Each fuzzed envelope is a seed with one to three mutations: a key
dropped, a value of another type, text that is huge, not UTF-8-encodable, or a timestamp without a zone,
nesting thousands deep, an array repeated, an id removed or made enormous, a body that is not JSON at all, and
times and numbers at the edges of what anything can hold: Go's zero time, the Unix epoch, the last second of
year 9999 (in any zone), seconds since 1970 instead of text, versions and counts of 10**40, 2**63 or -1.
They go to the AlertRouterFunction loaded in process (its handler, its batch loop, the real
adapters) in SQS batches, against moto and the Slack and PagerDuty stand-ins, which answer normally.

Each envelope ends one of three ways: processed; rejected (dead-lettered at once with a reason); or crashed
(its record failed, so SQS would retry it: with healthy stand-ins that is a bug). Crashes are grouped by
signature (the error's type and the start of its message). Every message in the DLQ must carry a reason.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import SandboxError
from sandbox.lambda_runtime import InProcessFunction
from sandbox.session import Sandbox
from sandbox.sqs_mapping import wrap_in_sqs_event

EVENTS = Path(__file__).resolve().parents[1] / "events"
FUNCTION = "AlertRouterFunction"
ACTION_SOURCE = "fault-responder.actions"
"""A person's action (fault_responder.incidents.incident_actions), which its endpoint puts on the alert queue."""
BATCH = 10

Mutation = Callable[[Any, random.Random], Any]


def seeds() -> list[dict[str, Any]]:
    """Every EventBridge envelope in events/ (SQS batches and Lambda payloads are not envelopes)."""
    found = []
    for path in sorted(EVENTS.rglob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        for item in document if isinstance(document, list) else [document]:
            if isinstance(item, dict) and "detail-type" in item:
                found.append(item)
    if not found:
        raise SandboxError(f"no sample events under {EVENTS}")
    return found


# --- Mutations -------------------------------------------------------------------------------------


def _paths(value: Any) -> Iterator[tuple[Any, ...]]:
    """Every path into the document (without recursion: a fuzzed document can nest very deep)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        current, prefix = stack.pop()
        yield prefix
        if isinstance(current, dict):
            stack.extend((item, (*prefix, key)) for key, item in current.items())
        elif isinstance(current, list):
            stack.extend((item, (*prefix, index)) for index, item in enumerate(current))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _at(document, path[:-1])[path[-1]] = value
    return document


def _pick(document: Any, rng: random.Random) -> tuple[Any, ...]:
    return rng.choice(list(_paths(document)))


_TEXTS = [
    "",
    " ",
    "x" * 200_000,
    "\ud800 lone surrogate \udfff",
    "<!channel> <@U123> & *bold* ```code```",
    "日本語のテキスト 🚨",
    "\x00\x01\x1f",
    "XID_" + "9" * 5000,
    "2026-04-11T00:48:53",
    "2026-04-11T00:48:53+14:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "not a time",
    "NaN",
    "arn:aws:ecs:" + "a" * 3000,
]
_VALUES: list[Any] = [None, True, 0, -1, 2**63, 10**40, 1.5e308, [], {}, [None], {"": None}, 1796000000]


_EXTREME_TIMES: list[Any] = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00-14:00",
    "1970-01-01T00:00:00Z",
    "2014-12-31T23:59:59Z",
    "2200-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-14:00",
    "9999-12-31T23:59:59.999999+14:00",
    "2026-04-11T00:48:53.123456789Z",
    "10000-01-01T00:00:00Z",
    0,
    -1,
    253_402_300_800,
    10**40,
]
"""Times no event carries: each must be refused at once (the event's own) or read as absent (its detail's)."""
_EXTREME_NUMBERS: list[Any] = [10**40, -(10**40), 10**400, 2**53, 2**63, 2**64, -1, 1e308, -0.0, 1.5, 10**38]
"""Numbers past what a DynamoDB number (38 digits), a float or a 64-bit integer holds, and ones below zero."""
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:?\d\d)?")


def extreme_times_and_numbers(document: Any, rng: random.Random) -> Any:
    """Every time and number the document holds (the envelope's time, detail.version, a count, a check's times),
    each with even odds, replaced by one at the edge of what anything can hold; at least one is."""
    paths = [
        path
        for path in _paths(document)
        if path
        and (
            (isinstance(_at(document, path), str) and _TIME.fullmatch(_at(document, path)))
            or (isinstance(_at(document, path), int | float) and not isinstance(_at(document, path), bool))
        )
    ]
    chosen = [path for path in paths if rng.random() < 0.5] or paths[:1]
    for path in chosen:
        extremes = _EXTREME_TIMES if isinstance(_at(document, path), str) else _EXTREME_NUMBERS
        _set(document, path, copy.deepcopy(rng.choice(extremes)))
    return document


def replace_value(document: Any, rng: random.Random) -> Any:
    path = _pick(document, rng)
    value = rng.choice(_TEXTS) if rng.random() < 0.6 else copy.deepcopy(rng.choice(_VALUES))
    return _set(document, path, value)


def drop_key(document: Any, rng: random.Random) -> Any:
    paths = [p for p in _paths(document) if p and isinstance(_at(document, p[:-1]), dict)]
    if paths:
        path = rng.choice(paths)
        del _at(document, path[:-1])[path[-1]]
    return document


_DEEP = "__deeply_nested_{}__"


def nest_deeply(document: Any, rng: random.Random) -> Any:
    """A marker, replaced in the JSON text by arrays or objects nested thousands deep (which json.dumps
    could not write)."""
    return _set(document, _pick(document, rng), _DEEP.format(rng.choice((40, 300, 3000, 60_000))))


def _expand_deep(body: str) -> str:
    def nested(match: re.Match[str]) -> str:
        depth = int(match.group(1))
        return '{"n":' * depth + "0" + "}" * depth if depth % 2 else "[" * depth + "0" + "]" * depth

    return re.sub(r'"__deeply_nested_(\d+)__"', nested, body)


def repeat_array(document: Any, rng: random.Random) -> Any:
    lists = [p for p in _paths(document) if isinstance(_at(document, p), list) and _at(document, p)]
    if lists:
        path = rng.choice(lists)
        items = _at(document, path)
        _set(document, path, [copy.deepcopy(items[0]) for _ in range(rng.choice((20, 500, 3000)))])
    return document


def naive_times(document: Any, rng: random.Random) -> Any:
    for path in list(_paths(document)):
        value = _at(document, path)
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", value):
            _set(document, path, value.removesuffix("Z"))
    return document


def mangle_envelope(document: Any, rng: random.Random) -> Any:
    if not isinstance(document, dict):
        return document
    key = rng.choice(["id", "detail-type", "source", "time", "region", "account", "detail"])
    choice = rng.random()
    if choice < 0.3:
        document.pop(key, None)
    elif choice < 0.6:
        document[key] = rng.choice(_TEXTS)
    else:
        document[key] = copy.deepcopy(rng.choice(_VALUES))
    return document


MUTATIONS: list[tuple[Mutation, int]] = [
    (replace_value, 5),
    (drop_key, 2),
    (naive_times, 2),
    (extreme_times_and_numbers, 3),
    (repeat_array, 2),
    (nest_deeply, 1),
    (mangle_envelope, 1),
]
"""Each with its weight: most envelopes stay close enough to an ECS event to get deep into the router."""


def mutated(document: Any, rng: random.Random) -> Any:
    for _ in range(rng.randint(1, 3)):
        [mutation] = rng.choices([m for m, _ in MUTATIONS], weights=[w for _, w in MUTATIONS])
        document = mutation(document, rng)
    return document


def fuzzed_bodies(count: int, rng: random.Random) -> Iterator[str]:
    """`count` SQS message bodies: mostly mutated envelopes, some not JSON at all, all within 256 KB of text
    that SQS would carry."""
    samples = seeds()
    for number in range(count):
        roll = rng.random()
        if roll < 0.03:
            yield rng.choice(["", "{", "[1, 2]", '"text"', "null", "{'single': 'quotes'}", "\ufeff{}"])
            continue
        document: Any = copy.deepcopy(rng.choice(samples))
        # A unique id; a person's action keeps its id's form (`slack:…`, `pagerduty:…`), so its mutations reach
        # past the id check into the action's detail and the router's handling of it.
        via = str(document.get("id", "")).partition(":")[0] if document.get("source") == ACTION_SOURCE else ""
        document["id"] = f"{via}:fuzz-{number}" if via else f"fuzz-{number}"
        body = _expand_deep(json.dumps(mutated(document, rng)))
        if len(body.encode("utf-8", "surrogatepass")) > 260_000:
            body = body[:260_000]
        yield body


# --- Running -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    processed: int = 0
    rejected: int = 0
    crashed: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0
    without_reason: int = 0
    rejections: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.processed + self.rejected + sum(self.crashed.values())

    def lines(self) -> list[str]:
        crashed = sum(self.crashed.values())
        lines = [
            f"envelopes: {self.total}",
            f"processed: {self.processed}",
            f"rejected (dead-lettered at once, with a reason): {self.rejected}",
            f"crashed (would be retried): {crashed}",
        ]
        lines += [f"  {count:6d}  {signature}" for signature, count in self.crashed.most_common()]
        lines.append(f"dead-letter messages: {self.dead_letters}, without a reason: {self.without_reason}")
        lines.append("rejections by reason:")
        lines += [f"  {count:6d}  {reason}" for reason, count in self.rejections.most_common(15)]
        return lines


def run_fuzz(sandbox: Sandbox, count: int, seed: int, progress: Callable[[int], None] | None = None) -> Tally:
    """Fuzz the started sandbox's AlertRouter with `count` envelopes from `seed`."""
    spec = sandbox.stack.functions.get(FUNCTION)
    if spec is None or not spec.sqs_sources:
        raise SandboxError(f"the template has no {FUNCTION} with an SQS event source")
    source = spec.sqs_sources[0]
    tally = Tally()
    rng = random.Random(seed)  # nosec B311  # reproducible mutations, not cryptography
    bodies = list(fuzzed_bodies(count, rng))
    with InProcessFunction(spec, sandbox.function_environment(spec)) as function:
        for start in range(0, len(bodies), BATCH):
            batch = bodies[start : start + BATCH]
            event = wrap_in_sqs_event(batch, source, sandbox.identity.region)
            invocation = function.invoke(event)
            ids = [record["messageId"] for record in event["Records"]]
            if invocation.error is not None:
                signature = _signature(f"{invocation.error.get('errorType')}: {invocation.error.get('errorMessage')}")
                tally.crashed[f"whole batch: {signature}"] += len(batch)
                continue
            failed = {item["itemIdentifier"] for item in (invocation.result or {}).get("batchItemFailures") or []}
            reasons = {error.get("event_id"): error.get("reason", "") for error in invocation.errors}
            for message_id, body in zip(ids, batch, strict=True):
                if message_id in failed:
                    tally.crashed[_signature(reasons.get(_event_id(body), "no reason logged"))] += 1
            tally.processed += len(batch) - len(failed)
            _count_dead_letters(sandbox, tally)
            if progress is not None:
                progress(start + len(batch))
    tally.rejected = tally.dead_letters
    tally.processed -= tally.rejected
    return tally


def _count_dead_letters(sandbox: Sandbox, tally: Tally) -> None:
    """Every message the dead-letter queues hold, counted with its reason and deleted: taken after each batch, so a
    run of any length counts each message once (sandbox.report's collection stops at its first thousand)."""
    for queue in sandbox.stack.dead_letter_queues():
        while True:
            messages = sandbox.aws.sqs.receive_message(
                QueueUrl=queue.ref, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                break
            for message in messages:
                tally.dead_letters += 1
                reason = (message.get("MessageAttributes") or {}).get("reason", {}).get("StringValue")
                if not reason:
                    tally.without_reason += 1
                else:
                    tally.rejections[_signature(str(reason))] += 1
                sandbox.aws.sqs.delete_message(QueueUrl=queue.ref, ReceiptHandle=message["ReceiptHandle"])


def _event_id(body: str) -> str | None:
    with contextlib.suppress(ValueError, RecursionError):
        document = json.loads(body)
        if isinstance(document, dict) and isinstance(document.get("id"), str):
            return str(document["id"])[:256]
    return None


def _signature(text: str) -> str:
    """What a failure is, without the parts that differ between envelopes (ids, numbers, long values)."""
    text = re.sub(r"fuzz-\d+", "<id>", text)
    text = re.sub(r"\d+", "<n>", text)
    return text[:140]
