"""What the `fault-responder` commands share: where a command reads from (a deployed stack's records, parameters
and outputs, or a sandbox report), who runs it, and the two errors any command may end with."""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from botocore.exceptions import ClientError

from fault_responder.adapters.deployed_stack import aws_client, responder_stack, stack_resource

INCIDENTS_TABLE = "IncidentsTable"


class UsageError(Exception):
    """Arguments that parse but cannot be used; exit status 2."""


class TargetError(Exception):
    """The stack or table named cannot be reached or found; exit status 1."""


def add_records_target(parser: argparse.ArgumentParser, *, stack_help: str) -> None:
    """--stack, --table or --report (one required), with --region and --endpoint-url for the first two."""
    target = parser.add_argument_group("target (one of --stack, --table and --report)")
    which = target.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", metavar="NAME", help=stack_help)
    which.add_argument("--table", metavar="NAME", help="an incidents table, by name")
    which.add_argument("--report", metavar="FILE", help="a sandbox report (python -m sandbox replay|run --report)")
    target.add_argument("--region", help="the AWS Region (default: your AWS configuration's)")
    target.add_argument("--endpoint-url", metavar="URL", help="another endpoint for AWS (a moto server, say)")


def login_name() -> str | None:
    """Who runs the command: $USER, else $LOGNAME, else the name of the OS account it runs as; None if none is
    known (a container may set neither variable and run as a user ID that has no account)."""
    for variable in ("USER", "LOGNAME"):
        if name := os.environ.get(variable):
            return name
    try:
        return getpass.getuser() or None
    except (KeyError, OSError, ImportError):  # no account for the user ID (KeyError before 3.13), or no pwd module
        return None


def operator_name() -> str:
    """Who runs the command, as requests and notices name them."""
    return login_name() or "unknown user"


def table_name(args: argparse.Namespace) -> str:
    if args.table is not None:
        return str(args.table)
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    try:
        return stack_resource(aws_client("cloudformation", **where), args.stack, INCIDENTS_TABLE)
    except ClientError as error:
        raise TargetError(f"cannot find the {INCIDENTS_TABLE} of stack {args.stack!r}: {error}") from None


def stack_parameter(args: argparse.Namespace, name: str) -> str | None:
    stack = described_stack(args)
    return next((p["ParameterValue"] for p in (stack or {}).get("Parameters", []) if p["ParameterKey"] == name), None)


def stack_output(args: argparse.Namespace, name: str) -> str | None:
    stack = described_stack(args)
    return next((o["OutputValue"] for o in (stack or {}).get("Outputs", []) if o["OutputKey"] == name), None)


def described_stack(args: argparse.Namespace) -> dict[str, Any] | None:
    """The --stack's description; None without --stack, or when it cannot be read."""
    if not args.stack:
        return None
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    try:
        cloudformation = aws_client("cloudformation", **where)
        [stack] = cloudformation.describe_stacks(StackName=responder_stack(cloudformation, args.stack))["Stacks"]
    except (ClientError, ValueError):
        return None
    return dict(stack)


def stack_description(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str], str]:
    """The stack's parameters, outputs and id (through a quick start's nested stack)."""
    cloudformation = aws_client("cloudformation", region=args.region, endpoint_url=args.endpoint_url)
    try:
        [stack] = cloudformation.describe_stacks(StackName=responder_stack(cloudformation, args.stack))["Stacks"]
    except ClientError as error:
        raise TargetError(f"cannot read stack {args.stack!r}: {error}") from None
    parameters = {p["ParameterKey"]: str(p.get("ParameterValue", "")) for p in stack.get("Parameters", [])}
    outputs = {o["OutputKey"]: str(o.get("OutputValue", "")) for o in stack.get("Outputs", [])}
    return parameters, outputs, str(stack["StackId"])
