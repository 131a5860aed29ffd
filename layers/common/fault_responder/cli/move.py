"""`fault-responder move`: move one training job off one host through the resume workflow, as a planned move: the
job is asked for a checkpoint first and restarts from it elsewhere; the host is not drained and its other tasks stay
(docs/auto-resume.md#operating-it)."""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fault_responder.adapters.deployed_stack import aws_client
from fault_responder.adapters.ecs import EcsAdapter
from fault_responder.cli.targets import operator_name
from fault_responder.resume.fault import MoveRequest, move_event
from fault_responder.resume.jobs import JOB_ID_TAG

NOT_MOVED = 3
"""Exit status when, waited for, the workflow did not resume the job."""
_NAME = re.compile(r"[^A-Za-z0-9_-]")


class MoveUsageError(Exception):
    """Arguments that parse but cannot be used; exit status 2."""


class JobNotRunningError(Exception):
    """The job has no running task in the cluster, or none on the host named; exit status 1."""


def add_command(commands: Any, seconds: Callable[[str], float], run: Callable[[argparse.Namespace], int]) -> None:
    command = commands.add_parser(
        "move",
        help="move a training job off a host: checkpoint now, then restart elsewhere (the resume workflow)",
        description=(
            "Start the stack's resume workflow for one job: it asks the job for a checkpoint now "
            "(CheckpointNowSeconds), stops its tasks (all of a gang), and restarts them from that checkpoint, never "
            "on --off again. The host is not drained and its other tasks stay. Exit 0 the workflow was started (with "
            "--wait: it resumed the job); 3 with --wait, it did not in time or did not resume it; 1 an AWS error or "
            "the job has no task on --off; 2 bad usage."
        ),
    )
    target = command.add_argument_group("the workflow (one of --stack and --state-machine)")
    which = target.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", metavar="NAME", help="a deployed stack: its ResumeTrainingStateMachine")
    which.add_argument("--state-machine", metavar="ARN", help="the ResumeTraining state machine, by ARN")
    target.add_argument("--region", help="the AWS Region (default: your AWS configuration's)")
    target.add_argument("--endpoint-url", metavar="URL", help="another endpoint for AWS (a moto server, say)")
    command.add_argument("--cluster", required=True, help="the cluster the job runs in (name or ARN)")
    command.add_argument("--job", required=True, metavar="JOB_ID", help="the job tagged fault-responder:job-id")
    command.add_argument(
        "--off",
        required=True,
        metavar="INSTANCE",
        help="the host to move it off: a container instance id or ARN, or an EC2 instance id, running a task of it",
    )
    command.add_argument("--reason", default="", help="one line saying why (in the notices and the job's request)")
    command.add_argument("--wait", type=seconds, metavar="S", help="wait up to S seconds for the workflow to finish")
    command.add_argument("--json", action="store_true", help="the outcome as JSON")
    command.set_defaults(run=run)


def run(
    args: argparse.Namespace,
    state_machine: str,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    write: Callable[[str], None] = print,
) -> int:
    if len(args.reason) > 256 or "\n" in args.reason:
        raise MoveUsageError("--reason must be one line of at most 256 characters")
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    client = aws_client("ecs", **where)
    clusters = client.describe_clusters(clusters=[args.cluster]).get("clusters") or []
    if not clusters:
        raise JobNotRunningError(f"no cluster {args.cluster}")
    cluster_arn = str(clusters[0]["clusterArn"])
    ecs = EcsAdapter(client, aws_client("ec2", **where))
    tasks = [task for task in ecs.running_tasks(cluster_arn) if task.tags.get(JOB_ID_TAG) == args.job]
    if not tasks:
        raise JobNotRunningError(f"no running task in cluster {args.cluster} is tagged {JOB_ID_TAG}={args.job}")
    on_host = [task for task in tasks if args.off in _names(task.container_instance_arn, task.ec2_instance_id)]
    if not on_host:
        hosts = sorted({task.ec2_instance_id or task.container_instance_arn or "?" for task in tasks})
        raise JobNotRunningError(f"job {args.job} has no task on {args.off}; it runs on {', '.join(hosts)}")
    task = on_host[0]
    if not task.container_instance_arn or not task.capacity_provider_name:
        raise MoveUsageError(f"the job's task on {args.off} names no container instance or capacity provider")
    provider = ecs.describe_capacity_providers([task.capacity_provider_name], cluster_arn).get(
        task.capacity_provider_name
    )
    if provider is not None and not provider.supports_instance_exclusion:
        raise MoveUsageError(
            f"{task.capacity_provider_name} is a Managed Instances provider: a relaunch cannot be kept off one host "
            f"there by placement; drain {args.off} instead, and the workflow moves its jobs (MoveJobsOnDrain)"
        )
    request = MoveRequest(
        cluster_arn=cluster_arn,
        container_instance_arn=task.container_instance_arn,
        ec2_instance_id=task.ec2_instance_id,
        capacity_provider=task.capacity_provider_name,
        job_id=args.job,
        reason=args.reason,
        requested_by=f"fault-responder move ({operator_name()})",
    )
    moment = now()
    _, _, _, region, account, _ = cluster_arn.split(":", 5)
    event = move_event(request, event_id=str(uuid.uuid4()), region=region, account=account, at=moment)
    name = _NAME.sub("-", f"move-{args.job}-{moment:%Y%m%dT%H%M%S}-{event['id'][:8]}")[:80]
    sfn = aws_client("stepfunctions", **where)
    execution = sfn.start_execution(stateMachineArn=state_machine, name=name, input=json.dumps(event))["executionArn"]
    outcome: dict[str, Any] = {"job": args.job, "off": task.ec2_instance_id or args.off, "execution": execution}
    status = 0
    if args.wait:
        described = _wait(sfn, execution, args.wait, sleep)
        results = json.loads(described.get("output") or "{}").get("results") or []
        outcome["status"] = described["status"]
        outcome["outcome"] = next((r.get("outcome") for r in results if r.get("job_id") == args.job), None)
        status = 0 if outcome["outcome"] == "resumed" else NOT_MOVED
    if args.json:
        write(json.dumps(outcome, indent=2))
    else:
        line = f"Moving {args.job} off {outcome['off']}: {execution}"
        if args.wait:
            line += f"\n{outcome['status']}: {outcome['outcome'] or 'the job was not resumed'}"
        write(line)
    return status


def _wait(sfn: Any, execution: str, seconds: float, sleep: Callable[[float], None]) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING" or time.monotonic() >= deadline:
            return described
        sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def _names(container_instance_arn: str | None, ec2_instance_id: str | None) -> set[str]:
    names = {ec2_instance_id} if ec2_instance_id else set()
    if container_instance_arn:
        names |= {container_instance_arn, container_instance_arn.rsplit("/", 1)[-1]}
    return names
