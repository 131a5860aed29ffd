"""Which account and Region a fault is in, and what that account is called (docs/organization.md, "Identity").

A single-account stack serves the one account and Region it is deployed in: every fault is its own, and nothing it
says or keys names an account. With the organization's bus, one stack serves many accounts and Regions, and:

- **Keys stay as they were for the stack's own account and Region (its *home*).** What a key is built from that two
  accounts can share (a cluster's name, a capacity provider's, an alarm's name) gains the account and Region only
  when they are not the home's (`scope`), so a single-account stack's records, alerts and open fleet incidents keep
  their keys when the mode is turned on, and two accounts never share one.
- **Pages say where.** An incident, a notice and a fleet incident carry where they are (`Where`: the account's id and
  name, the Region), which every page that names the cluster names beside it.
- **An account's name** comes from the stack's AccountNames parameter (`id=name,...`), else from AWS Organizations
  (DescribeAccount, which answers only in the management account or a delegated administrator: an adapter, cached
  per container); an account neither names is shown by its id alone.

Pure: the name lookup is handed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fault_responder.core.domain import InstanceRef, Where

ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
MAX_NAME = 50
"""AWS Organizations' longest account name; a longer one given in AccountNames is refused."""
_NAME = re.compile(r"^[\x20-\x7e]+$")
"""Printable ASCII, as AWS Organizations allows in an account's name."""

Lookup = Callable[[str], str | None]
"""An account id -> its name, or None when it cannot be told (an adapter: AWS Organizations)."""


class AccountNamesError(ValueError):
    """AccountNames that cannot be read; the message says which entry and why."""


def parse_account_names(text: str) -> dict[str, str]:
    """`111111111111=prod-ml,222222222222=sandbox`: account id -> name. Empty: none. A name is printable ASCII, at most
    MAX_NAME characters, without `,` or `=` (the delimiters); spaces around an entry are ignored."""
    names: dict[str, str] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        account, equals, name = (part.strip() for part in entry.partition("="))
        shown = entry if len(entry) <= 80 else f"{entry[:80]}..."
        if not equals or not ACCOUNT_ID.fullmatch(account):
            raise AccountNamesError(f"{shown!r} is not id=name with a 12-digit account id")
        if not name or len(name) > MAX_NAME or not _NAME.fullmatch(name) or "=" in name:
            raise AccountNamesError(f"{shown!r}: a name is 1 to {MAX_NAME} printable characters, without = or ,")
        if names.get(account, name) != name:
            raise AccountNamesError(f"account {account} is named twice ({names[account]!r} and {name!r})")
        names[account] = name
    return names


@dataclass(frozen=True)
class Accounts:
    """The stack's home and the accounts' names, as keys and pages use them."""

    home: tuple[str, str] | None = None
    """(account, Region) of the stack in organization mode; None: a single-account stack, where every fault is home."""
    names: Mapping[str, str] = field(default_factory=dict)
    """AccountNames: account id -> name."""
    lookup: Lookup | None = None
    """The name of an account AccountNames does not name (AWS Organizations), in organization mode only."""

    @property
    def organization(self) -> bool:
        return self.home is not None

    def is_home(self, account: str, region: str) -> bool:
        return self.home is None or (account, region) == self.home

    def scope(self, account: str, region: str) -> tuple[tuple[str, str], ...]:
        """What a key built from names two accounts can share gains: nothing at home, else the account and Region."""
        if self.is_home(account, region):
            return ()
        return (("account", account), ("region", region))

    def name(self, account: str) -> str:
        """The account's name; empty when nobody can tell it (pages show the id alone then)."""
        known = self.names.get(account)
        if known is not None:
            return known
        if self.lookup is None or self.home is None or not ACCOUNT_ID.fullmatch(account):
            return ""
        found = self.lookup(account)
        return _shown_name(found) if found else ""

    def where(self, instance: InstanceRef) -> Where | None:
        """Where a fault is, as its pages name it: in organization mode only (a single-account stack's pages say
        nothing of accounts)."""
        if self.home is None:
            return None
        return Where(instance.account, instance.region, self.name(instance.account))


SINGLE_ACCOUNT = Accounts()
"""A single-account stack: every fault is home, and pages name no account."""


def accounts_of(
    organization: bool, home_account: str, home_region: str, names: str, lookup: Callable[[], Lookup | None]
) -> Accounts:
    """A function's Accounts from its environment (ORGANIZATION_MODE, STACK_ACCOUNT, AWS_REGION, ACCOUNT_NAMES):
    SINGLE_ACCOUNT without the organization's bus; else its home, AccountNames, and `lookup()` (AWS Organizations) for
    the names AccountNames leaves out. RuntimeError when the environment cannot be read."""
    if not organization:
        return SINGLE_ACCOUNT
    if not ACCOUNT_ID.fullmatch(home_account) or not home_region:
        raise RuntimeError(
            f"the organization's home needs STACK_ACCOUNT and AWS_REGION: {home_account!r}, {home_region!r}"
        )
    try:
        named = parse_account_names(names)
    except AccountNamesError as error:
        raise RuntimeError(f"ACCOUNT_NAMES (AccountNames) is invalid: {error}") from None
    return Accounts(home=(home_account, home_region), names=named, lookup=lookup())


def _shown_name(name: str) -> str:
    """A name as Organizations told it, kept to what AccountNames allows (pages show it, routes match it)."""
    printable = "".join(character for character in name if " " <= character <= "~").strip()
    return printable[:MAX_NAME]
