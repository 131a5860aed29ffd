"""`fault-responder accounts`: each enrolled account and Region of an organization's stack, its last event, its member
role and forwarder checked now, its open incidents (fault_responder.operations.accounts; docs/organization.md).

With --stack, what the stack acts in comes from its parameters and outputs (EnrolledAccounts, EnrolledRegions,
AccountNames, MemberRoleName; MemberRoleExternalId, OrganizationEventBusArn). With --table, the options say it; what
they leave out is not checked, and the output says so. Exit status 1 when any account and Region is broken.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.config import Config

from fault_responder.adapters.deployed_stack import aws_client
from fault_responder.adapters.forwarder_rules import forwarder_check
from fault_responder.adapters.member_session import MemberSessions, classify
from fault_responder.adapters.places_store import DynamoDBPlacesStore
from fault_responder.cli.targets import login_name
from fault_responder.core.places import MemberAccessError, Place, RoleNotAssumable
from fault_responder.operations import accounts as view_module
from fault_responder.operations.accounts import (
    ForwarderCheck,
    ForwarderState,
    PlaceCheck,
    RoleCheck,
    RoleState,
)
from fault_responder.operations.organization import MAX_PLACES, acting_places

if TYPE_CHECKING:
    from fault_responder.core.accounts import Accounts
    from fault_responder.core.domain import Incident

DEFAULT_MEMBER_ROLE = "gpu-fault-responder-member"
BROKEN = 1
CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=5, retries={"mode": "standard", "max_attempts": 3})
"""A check's clients: an account or Region that does not answer costs seconds, within its time box."""
_ACCOUNT = re.compile(r"^[0-9]{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]$")


@dataclass(frozen=True)
class Organization:
    """What the stack acts in, and with what: from its parameters and outputs, or the options."""

    home: Place
    enrolled_accounts: tuple[str, ...] = ()
    enrolled_regions: tuple[str, ...] = ()
    role_name: str = DEFAULT_MEMBER_ROLE
    external_id: str | None = None
    bus_arn: str | None = None
    stack: str | None = None


def add_command(
    commands: Any,
    target: argparse.ArgumentParser,
    seconds: Callable[[str], float],
    run: Callable[[argparse.Namespace], int],
) -> None:
    parser = commands.add_parser(
        "accounts",
        parents=[target],
        help="an organization's accounts and Regions: last event, role and forwarder checked now, open incidents",
        description=(
            "Each account and Region an organization's stack acts in: the last event it sent, whether the member role "
            "can be assumed there now, whether its forwarder is in place (its rules that send to the stack's bus, "
            "read through that role), and its open incidents. Exit status 1 when any is broken (docs/organization.md)."
        ),
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument(
        "--timeout", type=seconds, default=view_module.DEFAULT_BOX_SECONDS, metavar="S",
        help=f"each account and Region's time box (default {view_module.DEFAULT_BOX_SECONDS:g})",
    )  # fmt: skip
    parser.add_argument(
        "--concurrency", type=_concurrency, default=view_module.DEFAULT_CONCURRENCY, metavar="N",
        help=f"accounts and Regions checked at once, 1 to 32 (default {view_module.DEFAULT_CONCURRENCY})",
    )  # fmt: skip
    given = parser.add_argument_group("with --table (--stack reads these from the stack's parameters and outputs)")
    given.add_argument(
        "--enrolled-accounts", type=_accounts, metavar="ID,...", help="as EnrolledAccounts (default: seen)"
    )
    given.add_argument(
        "--enrolled-regions", type=_regions, metavar="REGION,...", help="as EnrolledRegions (default: seen)"
    )
    given.add_argument("--account-names", metavar="ID=NAME,...", help="as AccountNames")
    given.add_argument("--member-role", help=f"as MemberRoleName (default {DEFAULT_MEMBER_ROLE})")
    given.add_argument("--external-id", help="as the MemberRoleExternalId output (without it, no role is assumed)")
    given.add_argument(
        "--event-bus-arn",
        metavar="ARN",
        help="as the OrganizationEventBusArn output (without it, no forwarder is read)",
    )
    # The open incidents are derived with the stack's routing file (its RoutingFile parameter, else default.yaml).
    parser.set_defaults(run=run, routing_file=None)


def run(
    args: argparse.Namespace,
    organization: Organization,
    accounts: Accounts,
    table: str,
    open_incidents: Callable[[], Iterable[Incident]],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    write: Callable[[str], None] = lambda text: print(text, end=""),
) -> int:
    where = {"region": args.region, "endpoint_url": args.endpoint_url}
    home = organization.home
    seen = dict(DynamoDBPlacesStore(table, aws_client("dynamodb", **where)).seen(MAX_PLACES))
    places, left_out = acting_places(home, organization.enrolled_accounts, organization.enrolled_regions, seen)
    sessions = MemberSessions(
        home=home,
        role_name=organization.role_name,
        external_id=organization.external_id or "",
        function_name=f"fault-responder-accounts-{login_name() or 'someone'}",
        config=CLIENT_CONFIG,
        endpoint_url=args.endpoint_url,
    )
    checks = view_module.survey(
        places,
        lambda place: check_place(place, sessions, organization),
        failed,
        concurrency=args.concurrency,
        box_seconds=args.timeout,
    )
    rows = view_module.statuses(
        places,
        home=home,
        names=accounts.name,
        seen=seen,
        checks=checks,
        open_counts=open_counts(open_incidents(), accounts),
    )
    shown = view_module.view(rows, at=now(), stack=organization.stack, left_out=left_out)
    write(json.dumps(shown, indent=2) + "\n" if args.json else view_module.render(shown))
    return BROKEN if shown["broken"] else 0


def check_place(place: Place, sessions: MemberSessions, organization: Organization) -> PlaceCheck:
    """The member role and the forwarder of one account and Region, checked now."""
    if place == organization.home:
        role = RoleCheck(RoleState.OWN, "the stack's own account and Region: its functions act with their own roles")
        refused = "your credentials may not list the rules that send to the stack's bus (events:ListRuleNamesByTarget)"
    elif not organization.external_id:
        return PlaceCheck(
            RoleCheck(
                RoleState.NOT_CHECKED, "no external id to assume the member role with: give --stack, or --external-id"
            ),
            ForwarderCheck(ForwarderState.NOT_CHECKED, "read through the member role, which was not assumed"),
        )
    else:
        role = RoleCheck(RoleState.ASSUMED, sessions.role_arn(place.account))
        refused = "the member role may not list the rules (forwarder.yaml's AllowForwarderChecks is false)"
    try:
        events = sessions.client("events", place)
    except MemberAccessError as error:
        assumable = not isinstance(error, RoleNotAssumable)
        state = RoleState.FAILED if assumable else RoleState.NOT_ASSUMABLE
        return PlaceCheck(
            RoleCheck(state, f"{error.kind}: {error.detail}" if assumable else error.detail),
            ForwarderCheck(ForwarderState.NOT_CHECKED, "read through the member role, which could not be assumed"),
        )
    if not organization.bus_arn:
        return PlaceCheck(role, ForwarderCheck(ForwarderState.NOT_CHECKED, "no bus: give --stack, or --event-bus-arn"))
    try:
        forwarder = forwarder_check(events, organization.bus_arn, place, refused=refused)
    except MemberAccessError as error:
        forwarder = ForwarderCheck(ForwarderState.FAILED, f"{error.kind}: {error.detail}")
    return PlaceCheck(role, forwarder)


def failed(place: Place, error: Exception) -> PlaceCheck:
    """A check that raised what it does not expect: the place's failure, classified."""
    failure = classify(error, place)
    return PlaceCheck(
        RoleCheck(RoleState.FAILED, f"{failure.kind}: {failure.detail}"),
        ForwarderCheck(ForwarderState.NOT_CHECKED, "its check failed"),
    )


def open_counts(incidents: Iterable[Incident], accounts: Accounts) -> dict[Place, tuple[int, int]]:
    """Open incidents and fleet incidents by the account and Region they are in."""
    counts: dict[Place, tuple[int, int]] = {}
    for incident in incidents:
        if not incident.is_open:
            continue
        where = incident.where or accounts.where(incident.instance)
        account, region = (
            (where.account, where.region) if where else (incident.instance.account, incident.instance.region)
        )
        try:
            place = Place.of(account, region)
        except ValueError:
            continue
        alone, fleets = counts.get(place, (0, 0))
        counts[place] = (alone, fleets + 1) if incident.fleet is not None else (alone + 1, fleets)
    return counts


def _concurrency(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 32:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to 32")
    return int(text)


def _listed(text: str, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    wrong = [value for value in values if not pattern.fullmatch(value)]
    if wrong:
        raise argparse.ArgumentTypeError(f"not {what}: {', '.join(repr(value[:40]) for value in wrong[:5])}")
    return values


def _accounts(text: str) -> tuple[str, ...]:
    return _listed(text, _ACCOUNT, "account ids (12 digits)")


def _regions(text: str) -> tuple[str, ...]:
    return _listed(text, _REGION, "Region codes")


def listed(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A stack parameter's list (`a,b`), as its values."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(item.strip() for item in items if item.strip())
