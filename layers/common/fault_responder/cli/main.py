"""`fault-responder`: silences, status and drills against a deployed stack or any incidents table, route checks, and
checkpoint-now for a training job (docs/silences.md, docs/operations.md, docs/drills.md, docs/routing.md,
docs/checkpoint-contract.md).

    fault-responder silence add --match M [--match M ...] (--duration 2h | --ends ISO8601)
        [--starts ISO8601] --comment TEXT [--author NAME] [--all-accounts] [--dry-run] TARGET
    fault-responder silence list [--all] [--json] TARGET
    fault-responder silence expire ID TARGET
    fault-responder status [--json] (TARGET | --report REPORT.json)
    fault-responder drill [--cluster C] [--instance I] [--xid 79] [--author NAME] [--TIMEOUTS] TARGET
    fault-responder drill --account ACCOUNT [--account-region R] [--external-id ID] ... TARGET
    fault-responder drill --dcgm --cluster C [--capacity-provider P] --yes TARGET
    fault-responder accounts [--json] [--timeout S] [--concurrency N] TARGET
    fault-responder route [--routing-file FILE] [--at ISO8601] EVENT_FILE...
    fault-responder checkpoint-now [--wait S] [--hold S] [--reason TEXT] [--json]
        (s3://bucket/prefix/ | --cluster C (--instance ID | --job JOB_ID))

(`python -m fault_responder.cli` is the same command.)

TARGET is `--stack NAME` (the stack's IncidentsTable, found with CloudFormation) or `--table NAME`, with
`--region` and `--endpoint-url` (a moto server, say). Each command is one function taking the parsed arguments:
a new one adds its parser in its own function (as `_add_silence_commands` does) and sets `run`.

Exit status: 0 done; 1 an unknown silence id, a silence already expired, a drill hop that failed, an account and
Region that is broken (accounts), or an AWS error or (checkpoint-now) no such job; 2 bad usage, a silence that breaks
a rule, or a drill refused (the message says which); 3 (checkpoint-now) a job's checkpoint did not answer within
--wait, or a job could not be asked.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from fault_responder.adapters.deployed_stack import aws_client, responder_stack, stack_resource
from fault_responder.adapters.drill_aws import DrillAwsError, DrillRefusedError
from fault_responder.adapters.silence_store import PK as SILENCE_PK
from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.adapters.silence_store import decode as decode_silence
from fault_responder.cli import accounts as accounts_cli
from fault_responder.cli import checkpoint_now, drill_command, move, recovery
from fault_responder.cli.targets import (
    TargetError,
    UsageError,
    add_records_target,
    login_name,
    stack_description,
    stack_parameter,
    table_name,
)
from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts, accounts_of
from fault_responder.core.places import MemberAccessError
from fault_responder.noise.silences import (
    Silence,
    SilenceAlreadyExpiredError,
    SilenceError,
    UnknownSilenceError,
    by_place,
    check_id,
    iso,
    muted_by,
    new_silence,
    sort_for_display,
    spans_accounts,
)
from fault_responder.operations import status as status_module
from fault_responder.resume.checkpoints import CheckpointStoreError
from fault_responder.routing.matchers import Matcher, MatcherError, parse_matcher

if TYPE_CHECKING:
    from fault_responder.core.domain import Incident
    from fault_responder.routing.router import RoutingConfig

PROG = "fault-responder" if Path(sys.argv[0]).name == "fault-responder" else "python -m fault_responder.cli"
"""The command as it was run: the installed script, or the module (`python -m`, or in process)."""
RESUME_STATE_MACHINE = "ResumeTrainingStateMachine"
_serializer = TypeSerializer()
_DURATION = re.compile(r"^(?:(?P<w>\d+)w)?(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_UNITS = {"w": timedelta(weeks=1), "d": timedelta(days=1), "h": timedelta(hours=1), "m": timedelta(minutes=1)}
_COLUMNS = ("ID", "STATE", "MATCHERS", "STARTS", "ENDS", "AUTHOR", "COMMENT")

Command = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["route"]:  # its own parser: events and a routing file, no target
        from fault_responder.operations import routecheck  # noqa: PLC0415 - only this command needs the router

        return routecheck.main(arguments[1:], prog=f"{PROG} route")
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exit_:  # argparse has printed the usage and the problem (or the help)
        return exit_.code if isinstance(exit_.code, int) else 2
    command: Command = args.run
    try:
        return command(args)
    except (UnknownSilenceError, SilenceAlreadyExpiredError) as error:
        return _fail(str(error), 1)
    except (
        SilenceError,
        MatcherError,
        UsageError,
        DrillRefusedError,
        checkpoint_now.CheckpointNowUsageError,
        move.MoveUsageError,
    ) as error:
        return _fail(str(error), 2)
    except NoRegionError:
        return _fail("no AWS Region: give --region, or set AWS_REGION", 2)
    except (
        ClientError,
        BotoCoreError,
        TargetError,
        DrillAwsError,
        MemberAccessError,
        CheckpointStoreError,
        checkpoint_now.JobNotFoundError,
        move.JobNotRunningError,
    ) as error:
        return _fail(f"AWS: {error}" if isinstance(error, ClientError | BotoCoreError) else str(error), 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Silences, status, drills and route checks for a deployed GPU Fault Responder stack; checkpoint-now for "
            "a training job."
        ),
        epilog=(
            "exit status: 0 done; 1 unknown silence, already expired, or an AWS error; 2 bad usage; 3 no checkpoint "
            "answered checkpoint-now in time"
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_silence_commands(commands, _target_options())
    _add_status_command(commands)
    drill_command.add_command(commands, _target_options(), _seconds)
    accounts_cli.add_command(commands, _target_options(), _seconds, _accounts_command)
    checkpoint_now.add_command(commands, _seconds)
    recovery.add_command(commands, _duration, _moment, _recovery)
    move.add_command(commands, _seconds, _move)
    commands.add_parser(
        "route",
        help="which route and receivers events reach, without sending anything",
        description="fault-responder route [--routing-file F] [--at ISO8601] EVENT.json ...",
        add_help=False,
    )
    return parser


def _target_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    target = parent.add_argument_group("target (one of --stack and --table)")
    which = target.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", metavar="NAME", help="a deployed stack: its IncidentsTable is used")
    which.add_argument("--table", metavar="NAME", help="an incidents table, by name")
    target.add_argument("--region", help="the AWS Region (default: your AWS configuration's)")
    target.add_argument("--endpoint-url", metavar="URL", help="another endpoint for AWS (a moto server, say)")
    return parent


def _add_silence_commands(commands: Any, target: argparse.ArgumentParser) -> None:
    silence = commands.add_parser(
        "silence",
        help="add, list or expire silences",
        description="While a silence is active, incidents and notices its matchers match notify nobody.",
    )
    actions = silence.add_subparsers(dest="action", required=True, metavar="ACTION")

    add = actions.add_parser(
        "add",
        parents=[target],
        help="add a silence; prints its id",
        description="Add a silence and print its id. A start in the past is taken as now.",
    )
    add.add_argument(
        "--match",
        action="append",
        required=True,
        type=_matcher,
        metavar="MATCHER",
        help="name=value, name!=value, name=~regex or name!~regex; repeat it: all must match",
    )
    until = add.add_mutually_exclusive_group(required=True)
    until.add_argument("--duration", type=_duration, help="how long from its start: 90m, 2h, 1d12h, 1w")
    until.add_argument("--ends", type=_moment, metavar="ISO8601", help="when it ends (with Z or an offset)")
    add.add_argument("--starts", type=_moment, metavar="ISO8601", help="when it starts (default: now)")
    add.add_argument("--comment", required=True, help="why (one line)")
    add.add_argument("--author", help="who (default: $USER, else $LOGNAME, else the OS account's name)")
    organization = add.add_argument_group("an organization's stack (docs/silences.md, 'Across an organization')")
    organization.add_argument(
        "--all-accounts",
        action="store_true",
        help="make a silence that names no account, cluster or instance: it mutes every account's incidents",
    )
    organization.add_argument(
        "--organization",
        action="store_true",
        help="with --table: the table is an organization's stack's (with --stack, its parameters say so)",
    )
    add.add_argument(
        "--dry-run", action="store_true", help="show what it would mute now, and where it would be told; add nothing"
    )
    add.add_argument("--routing-file", help="the stack's routing file (default: its RoutingFile parameter)")
    add.set_defaults(run=_silence_add)

    listing = actions.add_parser(
        "list", parents=[target], help="list pending and active silences", description="List silences."
    )
    listing.add_argument("--all", action="store_true", help="expired ones too (kept for a while after they end)")
    listing.add_argument("--json", action="store_true", help="JSON instead of a table")
    listing.set_defaults(run=_silence_list)

    expire = actions.add_parser(
        "expire", parents=[target], help="end a silence now", description="End a pending or active silence now."
    )
    expire.add_argument("id", help="the silence's id")
    expire.set_defaults(run=_silence_expire)


def _add_status_command(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="open incidents and fleet incidents, what is held back and why, silences, recent resumes",
        description=(
            "What is open now, derived as the router derives it (routing file, hold-down, fleets, inhibition, "
            "maintenance windows, silences); the pending and active silences; the training workflow's executions "
            "of the last 24 hours (with --stack)."
        ),
    )
    add_records_target(status, stack_help="a deployed stack")
    status.add_argument(
        "--routing-file",
        help="the stack's routing file (default: the stack's RoutingFile parameter, else default.yaml)",
    )
    status.add_argument("--json", action="store_true", help="JSON instead of tables")
    _add_organization_options(status)
    status.set_defaults(run=_status)


def _add_organization_options(parser: argparse.ArgumentParser) -> None:
    """--organization and --account-names: what --stack reads from the stack's parameters, for --table."""
    organization = parser.add_argument_group(
        "an organization's stack (docs/organization.md): --stack reads these from its parameters"
    )
    organization.add_argument(
        "--organization",
        action="store_true",
        help="with --table: the table is an organization's stack's (its incidents are shown by account and Region)",
    )
    organization.add_argument(
        "--account-names",
        metavar="ID=NAME,...",
        help="with --table: the accounts' names, as the stack's AccountNames (else Organizations', where it answers)",
    )


# --- accounts -----------------------------------------------------------------------------------------


def _accounts_command(args: argparse.Namespace) -> int:
    """`accounts`: what the stack acts in (its parameters and outputs, or the options), its accounts' names, and its
    open incidents, for fault_responder.cli.accounts."""
    from fault_responder.core.places import Place  # noqa: PLC0415

    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    if args.stack:
        parameters, outputs, stack_id = stack_description(args)
        if not (parameters.get("OrganizationId") or parameters.get("EnrolledAccounts")):
            raise UsageError(
                f"stack {args.stack!r} serves one account and Region (OrganizationId and EnrolledAccounts are empty): "
                "status shows what is open there"
            )
        _, _, _, region, account, _ = stack_id.split(":", 5)
        organization = accounts_cli.Organization(
            home=Place.of(account, region),
            enrolled_accounts=accounts_cli.listed(parameters.get("EnrolledAccounts")),
            enrolled_regions=accounts_cli.listed(parameters.get("EnrolledRegions")),
            role_name=args.member_role or parameters.get("MemberRoleName") or accounts_cli.DEFAULT_MEMBER_ROLE,
            external_id=args.external_id or outputs.get("MemberRoleExternalId"),
            bus_arn=args.event_bus_arn or outputs.get("OrganizationEventBusArn"),
            stack=args.stack,
        )
    else:
        sts = aws_client("sts", **where)
        organization = accounts_cli.Organization(
            home=Place.of(
                str(sts.get_caller_identity()["Account"]), str(aws_client("dynamodb", **where).meta.region_name)
            ),
            enrolled_accounts=args.enrolled_accounts or (),
            enrolled_regions=args.enrolled_regions or (),
            role_name=args.member_role or accounts_cli.DEFAULT_MEMBER_ROLE,
            external_id=args.external_id,
            bus_arn=args.event_bus_arn,
        )
    args.organization = True  # with --table, the command is about an organization's stack
    accounts = _accounts(args, lookup_names=True)
    table = table_name(args)

    def incidents() -> list[Incident]:
        now = _now()
        silences = DynamoDBSilenceStore(table, aws_client("dynamodb", **where)).list(now=now)
        return _open_incidents(args, now, silences, accounts)[0]

    return accounts_cli.run(args, organization, accounts, table, incidents)


# --- status -------------------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    now = _now()
    view = _report_status(Path(args.report), now) if args.report else _deployed_status(args, now)
    print(json.dumps(view, indent=2) if args.json else status_module.render(view), end="")
    if args.json:
        print()
    return 0


def _report_status(path: Path, now: datetime) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read the report {path}: {error}") from None
    if not isinstance(report, dict) or "incidents" not in report:
        raise UsageError(f"{path} is not a sandbox report (no incidents): write one with --report")
    silences = [
        decode_silence({name: _serializer.serialize(_decimal(value)) for name, value in item.items()})
        for item in report.get("table") or []
        if isinstance(item, dict) and item.get("pk") == SILENCE_PK
    ]
    return status_module.from_report(report, silences, now)


def _deployed_status(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    silences = DynamoDBSilenceStore(table_name(args), aws_client("dynamodb", **where)).list(now=now)
    # An organization's incidents are derived with its accounts (a member's keys are scoped, its pages named), and
    # shown by account and Region; a single-account stack's as ever.
    accounts = _accounts(args, lookup_names=True)
    incidents, _ = _open_incidents(args, now, silences, accounts)
    return status_module.status(incidents, silences, _recent_resumes(args, now), now, accounts)


def _open_incidents(
    args: argparse.Namespace, now: datetime, silences: Sequence[Silence], accounts: Accounts
) -> tuple[list[Incident], RoutingConfig]:
    """The open records' incidents and fleet incidents, derived as the router derives them now (its routing file,
    hold-down, fleets, inhibition, maintenance windows, these silences), and the routing file."""
    from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore  # noqa: PLC0415
    from fault_responder.alerting.store import with_open_members  # noqa: PLC0415
    from fault_responder.incidents import lifecycle  # noqa: PLC0415 - only these commands need the incident machinery
    from fault_responder.noise.fleet import derive_fleet, is_group  # noqa: PLC0415
    from fault_responder.noise.policy import Policy, SilenceCache  # noqa: PLC0415
    from fault_responder.notification.receivers.kind import Capability  # noqa: PLC0415
    from fault_responder.notification.receivers.registry import with_capability  # noqa: PLC0415
    from fault_responder.routing.router import Router, load_routing  # noqa: PLC0415

    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    table = table_name(args)
    dynamodb = aws_client("dynamodb", **where)
    routing = load_routing(args.routing_file or stack_parameter(args, "RoutingFile") or "default.yaml")
    router = Router(routing)
    cache = SilenceCache(lambda: silences, refresh_seconds=3600)
    pagerduty = with_capability(routing.receivers, Capability.PAGE)
    policy = Policy(
        silencer=cache.silencer,
        window_mutes=router.muted_receivers,
        inhibit_rules=tuple(routing.inhibit_rules),
        pagerduty_receivers=pagerduty,
    )
    settings = lifecycle.Settings(hold_down=routing.flapping.hold_down, accounts=accounts)
    store = DynamoDBInstanceStore(table, timedelta(days=30), dynamodb)
    incidents: list[Incident] = []
    for arn in store.open_records():
        if is_group(arn):
            group = store.load_group(arn)
            if group is not None:
                with_open_members(store, group)
                fleets = derive_fleet(group, routing.grouping, router.route, now, policy, accounts=accounts)
                incidents.extend(fleets.incidents)
        else:
            record = store.load(arn)
            if record is not None:
                incidents.extend(lifecycle.derive(record, settings, router.route, now, policy).incidents)
    return incidents, routing


def _recent_resumes(args: argparse.Namespace, now: datetime) -> list[dict[str, Any]]:
    """The ResumeTraining workflow's executions of the last 24 hours (a stack deployed with auto-resume)."""
    if not args.stack:
        return []
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    try:
        machine = stack_resource(aws_client("cloudformation", **where), args.stack, RESUME_STATE_MACHINE)
    except ClientError:
        return []  # the stack has no workflow (TrainingCapacityProviders empty)
    listed = aws_client("stepfunctions", **where).list_executions(stateMachineArn=machine, maxResults=50)
    since = now - status_module.RECENT_RESUMES
    return [
        {
            "execution": execution["name"],
            "status": execution["status"],
            "started_at": _iso_or_none(execution.get("startDate")),
            "stopped_at": _iso_or_none(execution.get("stopDate")),
        }
        for execution in listed.get("executions", [])
        if execution.get("startDate") and execution["startDate"] >= since
    ]


def _iso_or_none(moment: Any) -> str | None:
    return moment.astimezone(UTC).isoformat() if isinstance(moment, datetime) else None


def _decimal(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _decimal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decimal(item) for item in value]
    return value


# --- silence ------------------------------------------------------------------------------------------


def _silence_add(args: argparse.Namespace) -> int:
    author = args.author or login_name()
    if not author:
        raise UsageError("give --author NAME (neither $USER nor $LOGNAME is set, and the OS names no account)")
    now = _now()
    ends = args.ends if args.ends is not None else (args.starts or now) + args.duration
    silence = new_silence(
        args.match, starts_at=args.starts, ends_at=ends, created_by=author, comment=args.comment, now=now
    )
    accounts = _accounts(args)
    if accounts.organization and spans_accounts(silence.matchers) and not args.all_accounts:
        raise UsageError(
            "this stack serves an organization, and a silence that names no account, account_name, cluster or "
            "instance would mute every account's and Region's incidents: add one (account=111111111111, "
            "cluster=NAME), or give --all-accounts"
        )
    if accounts.organization or args.dry_run:
        print(_preview(args, silence, accounts, now), file=sys.stderr, end="")
    if args.dry_run:
        return 0
    _store(args).add(silence)
    print(silence.id)
    return 0


PREVIEW_PLACES = 20
PREVIEW_INCIDENTS = 5


def _preview(args: argparse.Namespace, silence: Silence, accounts: Accounts, now: datetime) -> str:
    """What the silence would mute now, across every account and Region: the open incidents it matches, by where they
    are, and the Slack receivers that are told when it starts and ends (docs/silences.md)."""
    from fault_responder.notification.receivers.kind import Capability  # noqa: PLC0415
    from fault_responder.notification.receivers.registry import with_capability  # noqa: PLC0415

    active = _store(args).list(now=now)
    incidents, routing = _open_incidents(args, now, active, accounts)
    muted = muted_by(silence, incidents, accounts)
    places = by_place(muted)
    kind = _plural(len(places), "account and Region") if accounts.organization else _plural(len(places), "cluster")
    lines = [f"would mute now: {_plural(len(muted), 'open incident')} in {kind}"]
    for place, found in list(places.items())[:PREVIEW_PLACES]:
        shown = ", ".join(found[:PREVIEW_INCIDENTS])
        more = f" and {len(found) - PREVIEW_INCIDENTS} more" if len(found) > PREVIEW_INCIDENTS else ""
        lines.append(f"  {place}: {len(found)} ({shown}{more})")
    if len(places) > PREVIEW_PLACES:
        lines.append(f"  and {len(places) - PREVIEW_PLACES} more")
    news = with_capability(routing.receivers, Capability.NEWS)
    slack = sorted({name for item in muted for name in item.receivers if name in news})
    told = ", ".join(slack) if slack else "none (it matches no open incident of a Slack receiver now)"
    lines.append(f"its start and its end are told to: {told}")
    if args.dry_run:
        lines.append("not added (--dry-run)")
    return "\n".join(lines) + "\n"


def _plural(count: int, noun: str) -> str:
    if count == 1:
        return f"{count} {noun}"
    return f"{count} accounts and Regions" if noun == "account and Region" else f"{count} {noun}s"


def _accounts(args: argparse.Namespace, *, lookup_names: bool = False) -> Accounts:
    """Whether the target serves an organization (its stack's OrganizationId or EnrolledAccounts, or --organization
    with --table), with its home and AccountNames (or --account-names): SINGLE_ACCOUNT otherwise. `lookup_names`:
    AWS Organizations names the accounts AccountNames does not (where it answers: the management account or a
    delegated administrator)."""
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    if args.stack:
        cloudformation = aws_client("cloudformation", **where)
        try:
            [stack] = cloudformation.describe_stacks(StackName=responder_stack(cloudformation, args.stack))["Stacks"]
        except ClientError as error:
            raise TargetError(f"cannot read the parameters of stack {args.stack!r}: {error}") from None
        parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
        organization = bool(parameters.get("OrganizationId") or parameters.get("EnrolledAccounts"))
        _, _, _, region, account, _ = str(stack["StackId"]).split(":", 5)
        names = getattr(args, "account_names", None) or parameters.get("AccountNames", "")
    elif getattr(args, "organization", False):
        organization = True
        account = str(aws_client("sts", **where).get_caller_identity()["Account"])
        region = aws_client("dynamodb", **where).meta.region_name
        names = getattr(args, "account_names", None) or ""
    else:
        return SINGLE_ACCOUNT
    try:
        return accounts_of(organization, account, region, names, lambda: _names_lookup(args) if lookup_names else None)
    except RuntimeError as error:
        raise UsageError(str(error)) from None


def _names_lookup(args: argparse.Namespace) -> Callable[[str], str | None]:
    """AWS Organizations' DescribeAccount, asked once per account (a refusal ends the lookups: ids are shown)."""
    from fault_responder.adapters.organizations import CLIENT_CONFIG, OrganizationsAccountNames  # noqa: PLC0415

    return OrganizationsAccountNames(
        lambda: aws_client("organizations", region=args.region, endpoint_url=args.endpoint_url, config=CLIENT_CONFIG)
    )


def _silence_list(args: argparse.Namespace) -> int:
    now = _now()
    silences = sort_for_display(_store(args).list(include_expired=args.all, now=now), now)
    if args.json:
        print(json.dumps([{**silence.to_dict(), "state": silence.state(now).value} for silence in silences], indent=2))
    elif not silences:
        print("No silences." if args.all else "No pending or active silences (--all lists expired ones too).")
    else:
        print(silence_table(silences, now))
    return 0


def _silence_expire(args: argparse.Namespace) -> int:
    silence_id = check_id(args.id.strip().lower())
    expired = _store(args).expire(silence_id, _now())
    print(f"expired {expired.id} at {iso(expired.ends_at)}")
    return 0


def silence_table(silences: Sequence[Silence], now: datetime) -> str:
    rows = [
        (
            silence.id,
            silence.state(now).value,
            ", ".join(str(matcher) for matcher in silence.matchers),
            _short_time(silence.starts_at),
            _short_time(silence.ends_at),
            silence.created_by,
            silence.comment,
        )
        for silence in silences
    ]
    widths = [max(len(row[column]) for row in [_COLUMNS, *rows]) for column in range(len(_COLUMNS) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in [_COLUMNS, *rows]
    )


# --- Shared -------------------------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> DynamoDBSilenceStore:
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    return DynamoDBSilenceStore(table_name(args), aws_client("dynamodb", **where))


# --- move ---------------------------------------------------------------------------------------------


def _move(args: argparse.Namespace) -> int:
    machine = args.state_machine
    if machine is None:
        where = {"region": args.region, "endpoint_url": args.endpoint_url}
        try:
            machine = stack_resource(aws_client("cloudformation", **where), args.stack, RESUME_STATE_MACHINE)
        except ClientError as error:
            raise TargetError(
                f"stack {args.stack!r} has no {RESUME_STATE_MACHINE} (auto-resume is off?): {error}"
            ) from None
    return move.run(args, machine)


# --- recovery -----------------------------------------------------------------------------------------


def _recovery(args: argparse.Namespace) -> int:
    from fault_responder.adapters.resume_store import DynamoDBResumeStore  # noqa: PLC0415 - this command's only
    from fault_responder.resume.recovery import recovery_report  # noqa: PLC0415

    since, until = recovery.period(args, _now())
    if since >= until:
        raise UsageError("the period must end after it begins")
    if args.report:
        ledgers = recovery.report_ledgers(Path(args.report), args.cluster)
    else:
        client = aws_client("dynamodb", region=args.region, endpoint_url=args.endpoint_url)
        ledgers = list(DynamoDBResumeStore(table_name(args), client).ledgers(args.cluster))
    jobs = recovery_report(ledgers, since, until)
    print(recovery.render(jobs, since, until, as_json=args.json), end="")
    return 0


def _now() -> datetime:
    return datetime.now(UTC)


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text!r}: give more than 0 and at most 86400 seconds")
    return value


def _matcher(text: str) -> Matcher:
    try:
        return parse_matcher(text)
    except MatcherError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _duration(text: str) -> timedelta:
    found = _DURATION.match(text.strip())
    if not text.strip() or found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: write 90m, 2h, 1d12h or 1w")
    total = sum(
        (int(found[unit]) * _UNITS.get(unit, timedelta(seconds=1)) for unit in "wdhms" if found[unit]), timedelta()
    )
    if total <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be longer than nothing")
    return total


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (2026-11-07T02:00:00Z)") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset: add Z (UTC) or +HH:MM")
    return moment


def _short_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


if __name__ == "__main__":
    sys.exit(main())
