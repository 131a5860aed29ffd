"""What the `fault-responder` commands share: where a command reads from (a deployed stack's records or a
sandbox report), and who runs it."""

from __future__ import annotations

import argparse
import getpass
import os


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
