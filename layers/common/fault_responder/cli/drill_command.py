"""`fault-responder drill`: its options, and how a drill starts (docs/drills.md): the clients it acts with (in
another account, the member role's there), what it reads from the stack, and which of the two drills runs
(cli/drills.py, imported only then: no other command needs the drill machinery)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from fault_responder.adapters.deployed_stack import aws_client
from fault_responder.cli.targets import UsageError, login_name, stack_output, stack_parameter, table_name


def add_command(commands: Any, target: argparse.ArgumentParser, seconds: Callable[[str], float]) -> None:
    drill = commands.add_parser(
        "drill",
        parents=[target],
        help="a fire drill: a synthetic GPU fault followed hop by hop, or (--dcgm) a real injected XID",
        description=(
            "Synthetic (default): put an IMPAIRED health event with the source fault-responder.drill on the default "
            "bus, follow it through the incidents table (incident, Slack root, PagerDuty trigger), send its OK and "
            "follow the resolve; print each hop's latency; exit 1 naming the hops that failed. With --dcgm: inject a "
            "real XID on a test cluster tagged as a drill target, follow ECS's repair, print a recovery-time report "
            "(docs/drills.md)."
        ),
    )
    drill.add_argument("--cluster", help="the cluster named in the event (default: the stack's first watched one)")
    drill.add_argument("--instance", help="the container instance id named in the event (default: drill-<time>)")
    drill.add_argument("--capacity-provider", help="the capacity provider named in the event (or, --dcgm, used)")
    drill.add_argument("--xid", type=_xid, default=79, help="the XID reported (default 79, GPU fell off the bus)")
    drill.add_argument("--routing-file", help="the stack's routing file (default: its RoutingFile parameter)")
    drill.add_argument(
        "--author",
        help="who runs it, named on the drill's messages (default: $USER, else $LOGNAME, else the OS account's name)",
    )
    timeouts = drill.add_argument_group("timeouts, in seconds, each counted from the end of the hop before")
    for hop, default in (("incident", 60.0), ("slack", 60.0), ("pagerduty", 60.0), ("resolve", 60.0)):
        timeouts.add_argument(
            f"--{hop}-timeout", type=seconds, default=default, metavar="S", help=f"default {default:g}"
        )
    timeouts.add_argument("--poll-seconds", type=seconds, default=1.0, metavar="S", help="how often the table is read")
    member = drill.add_argument_group(
        "another account of the organization (docs/drills.md): the drill acts there through the member role"
    )
    member.add_argument("--account", type=_account, help="the account the drill's fault happens in (default: yours)")
    member.add_argument("--account-region", type=_region, metavar="REGION", help="its Region (default: --region's)")
    member.add_argument(
        "--member-role",
        help="the role assumed there (default: the stack's MemberRoleName, else gpu-fault-responder-member)",
    )
    member.add_argument("--external-id", help="the external id it requires (default: the stack's MemberRoleExternalId)")
    dcgm = drill.add_argument_group("the DCGM drill (a real fault: the instance it lands on is replaced)")
    dcgm.add_argument("--dcgm", action="store_true", help="inject the XID with dcgmi on an instance of --cluster")
    dcgm.add_argument("--yes", action="store_true", help="required with --dcgm: you accept losing that instance")
    dcgm.add_argument("--injector-image", help="an image with dcgmi matching the hosts' DCGM major version")
    dcgm.add_argument(
        "--recovery-timeout", type=seconds, default=1800.0, metavar="S", help="how long to follow ECS (default 1800)"
    )
    drill.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fault_responder.cli import drills as drill_run  # noqa: PLC0415 - only this command needs the drill machinery

    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    routing_file = args.routing_file or stack_parameter(args, "RoutingFile") or "default.yaml"
    # The stream as the drill starts: what it prints goes there even if another thread swaps sys.stdout meanwhile
    # (the sandbox runs the stack's functions beside it, capturing their output that way).
    clients, home = _drill_clients(args) if args.account else (lambda service: aws_client(service, **where), None)
    context = drill_run.DrillContext(
        out=_writer(sys.stdout),
        clients=clients,
        table=table_name(args),
        routing_file=routing_file,
        watched_clusters=stack_parameter(args, "ClusterArns") or "",
        home=home,
    )
    if args.dcgm:
        if not args.yes:
            raise UsageError(
                "the DCGM drill injects a real XID: ECS marks the instance it lands on IMPAIRED and, with auto repair, "
                "replaces it. Give --yes to go ahead"
            )
        if not args.cluster:
            raise UsageError("the DCGM drill needs --cluster: a test cluster tagged as a drill target")
        return drill_run.dcgm_drill(context, args)
    # No author is no refusal (unlike a silence's): the drill still proves the path; its messages say nobody was named.
    args.author = args.author or login_name()
    return drill_run.synthetic_drill(context, args)


DEFAULT_MEMBER_ROLE = "gpu-fault-responder-member"
MEMBER_SERVICES = frozenset({"events", "ecs", "ec2", "sts"})
"""What a drill does in the account it targets (its event, the injector, who it is); the table stays the stack's."""


def _drill_clients(args: argparse.Namespace) -> tuple[Callable[[str], Any], tuple[str, str]]:
    """Clients for a drill in another account: the member role there (assumed with the stack's external id, the
    session named after who runs it) for what the drill does in that account, the stack's for its table; and the
    stack's own account and Region (the caller's)."""
    from fault_responder.adapters.member_session import MemberSessions  # noqa: PLC0415 - drills of members only
    from fault_responder.core.places import Place  # noqa: PLC0415

    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    external_id = args.external_id or stack_output(args, "MemberRoleExternalId")
    if not external_id:
        raise UsageError("--account needs the external id the member role requires: give --stack, or --external-id")
    role = args.member_role or stack_parameter(args, "MemberRoleName") or DEFAULT_MEMBER_ROLE
    sts = aws_client("sts", **where)
    own = Place.of(str(sts.get_caller_identity()["Account"]), str(sts.meta.region_name))
    sessions = MemberSessions(
        home=own,
        role_name=role,
        external_id=external_id,
        function_name=f"fault-responder-drill-{login_name() or 'someone'}",
        endpoint_url=args.endpoint_url,
    )
    place = Place.of(args.account, args.account_region or own.region)

    def clients(service: str) -> Any:
        return sessions.client(service, place) if service in MEMBER_SERVICES else aws_client(service, **where)

    return clients, (own.account, own.region)


def _writer(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


def _xid(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not an XID (a number such as 79)")
    return int(text)


def _account(text: str) -> str:
    if not re.fullmatch(r"[0-9]{12}", text):
        raise argparse.ArgumentTypeError(f"not an account id (12 digits): {text[:40]!r}")
    return text


def _region(text: str) -> str:
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-[0-9]", text):
        raise argparse.ArgumentTypeError(f"not a Region code: {text[:40]!r}")
    return text
