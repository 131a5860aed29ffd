"""`fault-responder checkpoint-now`: ask running training jobs to save now, and wait for the checkpoints that
answer (docs/checkpoint-contract.md, "Checkpoint now").

The jobs are named by their checkpoint prefix, or found by their tags: every job with a task on a container
instance (before draining it), or one job of a cluster. Each job gets its own request, and they are waited for
at the same time, each in a thread of its own.

Glue only: the request, its answer and the wait are fault_responder.resume.checkpoint_now; S3 is
fault_responder.adapters.s3_checkpoints, ECS fault_responder.adapters.ecs. The clock and the sleep are
parameters, so a test can run it without waiting.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.adapters.deployed_stack import aws_client
from fault_responder.adapters.ecs import EcsAdapter
from fault_responder.adapters.s3_checkpoints import S3CheckpointRequests, S3CheckpointStore
from fault_responder.cli.targets import operator_name
from fault_responder.resume.checkpoint_now import (
    Answer,
    Placed,
    job_prefixes,
    new_request,
    wait_for_answer,
)
from fault_responder.resume.checkpoints import Checkpoint, S3Location, find_newest_complete, parse_checkpoint_uri

NOT_ANSWERED = 3
"""Exit status when a job's checkpoint did not answer in time (the newest complete one is printed), or a job
could not be asked."""
MAX_AT_ONCE = 16
"""Jobs waited for at the same time; more wait for a thread (a host runs a handful)."""


class CheckpointNowUsageError(Exception):
    """Arguments that parse but cannot be used; exit status 2."""


class JobNotFoundError(Exception):
    """--job names no job with a running task in the cluster; exit status 1."""


@dataclass(frozen=True, slots=True)
class Target:
    """One job to ask: its id when found by tags (None when named by its prefix), and its prefix."""

    job: str | None
    location: S3Location


def add_command(commands: Any, seconds: Callable[[str], float]) -> None:
    command = commands.add_parser(
        "checkpoint-now",
        help="ask training jobs to save a checkpoint now, and wait for them",
        description=(
            "Write a checkpoint-now request under each job's checkpoint prefix (its tag "
            "fault-responder:checkpoint-uri) and wait until a complete checkpoint answers it: saved for it, or "
            "finished after it. Name the prefix, or let the jobs be found: every job with a task on --instance (before "
            "you drain it), or --job. With --hold, a job then waits at that step for its stop, so moving it loses no "
            "step. Exit 0 every job answered; 3 a job did not by --wait (the newest complete checkpoint is printed) "
            "or could not be asked; 1 an AWS error or no such job; 2 bad usage (docs/checkpoint-contract.md)."
        ),
    )
    command.add_argument(
        "uri", nargs="?", metavar="CHECKPOINT_URI", help="a job's checkpoint prefix, s3://bucket/prefix/"
    )
    found = command.add_argument_group("or find the jobs by their tags")
    found.add_argument("--cluster", help="the cluster the jobs run in")
    which = found.add_mutually_exclusive_group()
    which.add_argument("--instance", metavar="ID", help="every job with a task on this container instance (id or ARN)")
    which.add_argument("--job", metavar="JOB_ID", help="the job tagged fault-responder:job-id=JOB_ID")
    command.add_argument("--wait", type=seconds, default=300.0, metavar="S", help="how long to wait (default 300)")
    command.add_argument(
        "--hold",
        type=seconds,
        metavar="S",
        help="after saving, a job holds at that step for its stop until S seconds after the request (at least "
        "--wait); without it, the job trains on",
    )
    command.add_argument("--reason", default="", help="one line saying why (shown in the jobs' logs)")
    command.add_argument("--poll-seconds", type=seconds, default=5.0, metavar="S", help="how often S3 is read")
    command.add_argument("--json", action="store_true", help="the outcome as JSON")
    command.add_argument("--region", help="the AWS Region (default: your AWS configuration's)")
    command.add_argument("--endpoint-url", metavar="URL", help="another endpoint for AWS (a moto server, say)")
    command.set_defaults(run=run)


def run(
    args: argparse.Namespace,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    write: Callable[[str], None] = print,
) -> int:
    try:
        # Checked before anything is read or written.
        new_request(now(), wait=_wait(args), hold=_hold(args), reason=args.reason)
    except ValueError as error:
        raise CheckpointNowUsageError(str(error)) from None
    targets, problems = _targets(args)
    if not targets and not problems:
        write(f"no checkpointed training job has a task on {args.instance} in {args.cluster}: nothing to ask")
        return 0
    s3 = aws_client("s3", region=args.region, endpoint_url=args.endpoint_url)
    # One store and one request writer for every job's thread (the client is thread-safe; a store per job would
    # register its request counter on the shared client once more each time).
    store, requests = S3CheckpointStore(s3), S3CheckpointRequests(s3)
    requested_by = f"fault-responder checkpoint-now ({operator_name()})"

    def ask(target: Target) -> tuple[Target, Answer, Placed, bool]:
        return (target, *_ask(store, requests, target, args, requested_by, now=now, sleep=sleep))

    with ThreadPoolExecutor(max_workers=max(1, min(len(targets), MAX_AT_ONCE))) as pool:
        outcomes = list(pool.map(ask, targets))
    write(_render(outcomes, problems, as_json=args.json))
    answered = all(answer.answered_by is not None for _, answer, _, _ in outcomes)
    return 0 if answered and not problems else NOT_ANSWERED


def _targets(args: argparse.Namespace) -> tuple[list[Target], dict[str, str]]:
    """The jobs to ask, and the jobs found that cannot be asked (job id -> why)."""
    if args.uri is not None:
        if args.cluster or args.instance or args.job:
            raise CheckpointNowUsageError("give a CHECKPOINT_URI, or --cluster with --instance or --job, not both")
        try:
            return [Target(None, parse_checkpoint_uri(args.uri))], {}
        except ValueError as error:
            raise CheckpointNowUsageError(str(error)) from None
    if not args.cluster or not (args.instance or args.job):
        raise CheckpointNowUsageError("give a CHECKPOINT_URI, or --cluster with --instance or --job")
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    # (EcsAdapter's EC2 client is for awsvpc tasks' network interfaces, which finding jobs never reads)
    ecs = EcsAdapter(aws_client("ecs", **where), aws_client("ec2", **where))
    found = job_prefixes(ecs.running_task_tags(args.cluster, args.instance), job=args.job)
    if args.job and not found.prefixes and not found.problems:
        raise JobNotFoundError(f"no running task in cluster {args.cluster} is tagged fault-responder:job-id={args.job}")
    targets = [Target(job, parse_checkpoint_uri(uri)) for job, uri in found.prefixes.items()]
    return targets, found.problems


def _ask(
    store: S3CheckpointStore,
    requests: S3CheckpointRequests,
    target: Target,
    args: argparse.Namespace,
    requested_by: str,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
) -> tuple[Answer, Placed, bool]:
    """Ask one job, wait for its answer, and withdraw the request when it is ours and no longer needed."""
    location = target.location
    request = new_request(now(), wait=_wait(args), hold=_hold(args), reason=args.reason, requested_by=requested_by)
    before = find_newest_complete(location.uri, store).checkpoint
    placed = requests.place(location, request, now())
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
    return answer, placed, withdrawn


def _render(outcomes: list[tuple[Target, Answer, Placed, bool]], problems: dict[str, str], *, as_json: bool) -> str:
    if as_json:
        return json.dumps(
            {
                "answered": all(answer.answered_by is not None for _, answer, _, _ in outcomes) and not problems,
                "requests": [_as_json(*outcome) for outcome in outcomes],
                "not_asked": problems,
            },
            indent=1,
        )
    lines: list[str] = []
    for target, answer, placed, withdrawn in outcomes:
        named = f"job {target.job}: " if target.job else ""
        lines.extend(f"{named}{line}" for line in _outcome_lines(answer, placed, withdrawn))
    lines.extend(f"job {job}: not asked: {why}" for job, why in problems.items())
    return "\n".join(lines)


def _outcome_lines(answer: Answer, placed: Placed, withdrawn: bool) -> list[str]:
    request = answer.request
    lines = [f"joined the pending request {request.id} ({request.requested_by})"] if placed.joined else []
    waited = f"{answer.waited.total_seconds():.0f} s"
    if answer.answered_by is not None:
        saved = answer.answered_by
        gained = f", {answer.steps_gained} steps past step {answer.before.step}" if answer.before else ""
        lines.append(f"answered: step {saved.step} at {saved.uri} after {waited}{gained}")
        if request.hold_until is not None:
            lines.append(f"holds at step {saved.step} for its stop until {request.hold_until:%H:%M:%SZ}")
    else:
        newest = answer.newest
        fallback = f"step {newest.step} at {newest.uri}" if newest else "none"
        lines.append(f"not answered within {waited}: the newest complete checkpoint is {fallback}")
        lines.append("request withdrawn" if withdrawn else "the request stays until its deadline")
    return lines


def _as_json(target: Target, answer: Answer, placed: Placed, withdrawn: bool) -> dict[str, Any]:
    request = answer.request
    return {
        "job": target.job,
        "uri": target.location.uri,
        "request": {"id": request.id, "joined": placed.joined, "withdrawn": withdrawn},
        "answered": answer.answered_by is not None,
        "checkpoint": _checkpoint(answer.answered_by or answer.newest),
        "before": _checkpoint(answer.before),
        "steps_gained": answer.steps_gained,
        "waited_seconds": round(answer.waited.total_seconds(), 1),
        "searches": answer.searches,
        "hold_until": request.hold_until.isoformat() if request.hold_until else None,
    }


def _checkpoint(checkpoint: Checkpoint | None) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    written = checkpoint.written_at.isoformat() if checkpoint.written_at else None
    return {"uri": checkpoint.uri, "step": checkpoint.step, "written_at": written, "answers": checkpoint.answers}


def _wait(args: argparse.Namespace) -> timedelta:
    return timedelta(seconds=args.wait)


def _hold(args: argparse.Namespace) -> timedelta | None:
    return timedelta(seconds=args.hold) if args.hold is not None else None
