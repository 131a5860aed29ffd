"""`fault-responder checkpoint-now`: ask a running training job to save now, and wait for the checkpoint that
answers (docs/checkpoint-contract.md, "Checkpoint now").

Glue only: the request, its answer and the wait are fault_responder.resume.checkpoint_now; S3 is
fault_responder.adapters.s3_checkpoints. The clock and the sleep are parameters, so a test can run it without
waiting.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.adapters.deployed_stack import aws_client
from fault_responder.adapters.s3_checkpoints import S3CheckpointRequests, S3CheckpointStore, StoredRequest
from fault_responder.resume.checkpoint_now import (
    Answer,
    CheckpointRequest,
    new_request,
    parse_request,
    wait_for_answer,
)
from fault_responder.resume.checkpoints import Checkpoint, S3Location, find_newest_complete, parse_checkpoint_uri

NOT_ANSWERED = 3
"""Exit status when no checkpoint answered in time (the newest complete one is printed)."""


class CheckpointNowUsageError(Exception):
    """Arguments that parse but cannot be used; exit status 2."""


@dataclass(frozen=True, slots=True)
class Placed:
    """The request the command waits for: its own, or one already pending that it joined."""

    request: CheckpointRequest
    stored: StoredRequest
    joined: bool


def add_command(commands: Any, seconds: Callable[[str], float]) -> None:
    command = commands.add_parser(
        "checkpoint-now",
        help="ask a training job to save a checkpoint now, and wait for it",
        description=(
            "Write a checkpoint-now request under a job's checkpoint prefix (the job's tag "
            "fault-responder:checkpoint-uri) and wait until a complete checkpoint answers it: saved for it, or "
            "finished after it. With --hold, the job then waits at that step for its stop, so moving it loses no "
            "step. Exit 0 answered; 3 not answered by --wait (the newest complete checkpoint is printed); 1 an AWS "
            "error; 2 bad usage (docs/checkpoint-contract.md)."
        ),
    )
    command.add_argument("uri", metavar="CHECKPOINT_URI", help="the job's checkpoint prefix, s3://bucket/prefix/")
    command.add_argument("--wait", type=seconds, default=300.0, metavar="S", help="how long to wait (default 300)")
    command.add_argument(
        "--hold",
        type=seconds,
        metavar="S",
        help="after saving, the job holds at that step for its stop until S seconds after the request (at least "
        "--wait); without it, the job trains on",
    )
    command.add_argument("--reason", default="", help="one line saying why (shown to the job's logs)")
    command.add_argument("--poll-seconds", type=seconds, default=5.0, metavar="S", help="how often S3 is read")
    command.add_argument("--json", action="store_true", help="the outcome as JSON")
    command.add_argument("--region", help="the AWS Region (default: your AWS configuration's)")
    command.add_argument("--endpoint-url", metavar="URL", help="another endpoint for S3 (a moto server, say)")
    command.set_defaults(run=run)


def run(
    args: argparse.Namespace,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    write: Callable[[str], None] = print,
) -> int:
    try:
        location = parse_checkpoint_uri(args.uri)
        request = new_request(
            now(),
            wait=timedelta(seconds=args.wait),
            hold=timedelta(seconds=args.hold) if args.hold is not None else None,
            reason=args.reason,
            requested_by=f"fault-responder checkpoint-now ({_user()})",
        )
    except ValueError as error:
        raise CheckpointNowUsageError(str(error)) from None
    s3 = aws_client("s3", region=args.region, endpoint_url=args.endpoint_url)
    store = S3CheckpointStore(s3)
    requests = S3CheckpointRequests(s3)
    before = find_newest_complete(location.uri, store).checkpoint
    placed = place(requests, location, request, now())
    answer = wait_for_answer(
        placed.request,
        stored_at=placed.stored.stored_at,
        before=before,
        search=lambda: find_newest_complete(location.uri, store),
        now=now,
        sleep=sleep,
        poll_seconds=args.poll_seconds,
        until=request.deadline,
    )
    # Ours, answered and without a hold, or not answered at all: withdrawn, so the job does not save for it late.
    # With a hold the job waits on it for its stop; a request we joined is its author's to withdraw.
    withdrawn = not placed.joined and (answer.answered_by is None or placed.request.hold_until is None)
    if withdrawn:
        withdrawn = requests.withdraw(location, placed.request.id)
    write(_render(answer, placed, withdrawn, as_json=args.json))
    return 0 if answer.answered_by is not None else NOT_ANSWERED


def place(requests: S3CheckpointRequests, location: S3Location, request: CheckpointRequest, moment: datetime) -> Placed:
    """Store `request`, or join the request already pending there (one save answers both); a request no longer
    pending (answered, expired or unreadable) is replaced, only in the version read."""
    for _ in range(3):
        stored = requests.create(location, request)
        if stored is not None:
            return Placed(request, stored, joined=False)
        existing = requests.read(location)
        if existing is None:
            continue  # withdrawn between the two calls: create again
        found = parse_request(existing.body)
        if isinstance(found, CheckpointRequest) and found.pending(moment):
            return Placed(found, existing, joined=True)
        stored = requests.replace(location, request, existing.etag)
        if stored is not None:
            return Placed(request, stored, joined=False)
    raise CheckpointNowUsageError(f"the request at {location.uri} kept changing while it was written; try again")


def _render(answer: Answer, placed: Placed, withdrawn: bool, *, as_json: bool) -> str:
    request = answer.request
    if as_json:
        return json.dumps(
            {
                "request": {"id": request.id, "joined": placed.joined, "withdrawn": withdrawn},
                "answered": answer.answered_by is not None,
                "checkpoint": _checkpoint(answer.answered_by or answer.newest),
                "before": _checkpoint(answer.before),
                "steps_gained": answer.steps_gained,
                "waited_seconds": round(answer.waited.total_seconds(), 1),
                "searches": answer.searches,
                "hold_until": request.hold_until.isoformat() if request.hold_until else None,
            },
            indent=1,
        )
    lines = [f"joined the pending request {request.id} ({request.requested_by})" if placed.joined else ""]
    waited = f"{answer.waited.total_seconds():.0f} s"
    if answer.answered_by is not None:
        saved = answer.answered_by
        gained = f", {answer.steps_gained} steps past step {answer.before.step}" if answer.before else ""
        lines.append(f"answered: step {saved.step} at {saved.uri} after {waited}{gained}")
        if request.hold_until is not None:
            lines.append(f"the job holds at step {saved.step} for its stop until {request.hold_until:%H:%M:%SZ}")
    else:
        newest = answer.newest
        fallback = f"step {newest.step} at {newest.uri}" if newest else "none"
        lines.append(f"not answered within {waited}: the newest complete checkpoint is {fallback}")
        lines.append("request withdrawn" if withdrawn else "the request stays until its deadline")
    return "\n".join(line for line in lines if line)


def _checkpoint(checkpoint: Checkpoint | None) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    written = checkpoint.written_at.isoformat() if checkpoint.written_at else None
    return {"uri": checkpoint.uri, "step": checkpoint.step, "written_at": written, "answers": checkpoint.answers}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in some containers
        return "unknown user"
