"""Which accounts and Regions the router acts for, with the organization's bus (docs/organization.md).

With OrganizationId or EnrolledAccounts set, the stack's alerting rules read a bus that member accounts forward to,
and the events of every account the bus policy admits reach the router. The policy is the first gate: an account
outside the organization (or, with EnrolledAccounts, not listed) cannot put an event there at all. This is the
second: an event whose `account` or `region` (set by EventBridge where the event happened; a sender cannot choose
them) is not enrolled is refused with its reason and never acted on. The stack's own account and Region are always
enrolled: its own alarms, its drills and people's actions come from there.

- `accounts` empty: every account the bus admits (with OrganizationId alone, the organization's: the bus policy
  holds it to them, as AWS evaluates aws:PrincipalOrgID on each PutEvents).
- `regions` empty: every Region (each forwards only where forwarder.yaml is deployed).

A refused event is counted (EventsRefused, by reason) and logged with its id, account and Region, not dead-lettered:
an account that was not enrolled sends its whole stream, a storm included, and every copy in the dead-letter queue
would page through its depth alarm and hold nothing that can be redriven until the account is enrolled (once it is,
its next events, and the reconciliation sweep, bring its faults in).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ACTIONS_SOURCE = "fault-responder.actions"
"""A person's action (fault_responder.incidents.incident_actions): this stack's own endpoints put it on the queue, and
no rule reads its source, so it never comes through a bus."""
_ACCOUNT = re.compile(r"^[0-9]{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]$")
MAX_SHOWN = 40
"""A field that is not an account id or a Region is shown clipped to this many characters."""


class RefusedFor(StrEnum):
    """Why an event is refused: the EventsRefused metric's Reason."""

    ACCOUNT = "account_not_enrolled"
    REGION = "region_not_enrolled"


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: RefusedFor
    account: str
    region: str
    detail: str
    """What the log says: the account or Region, and what is enrolled."""


@dataclass(frozen=True, slots=True)
class Enrollment:
    home_account: str
    home_region: str
    accounts: frozenset[str] = frozenset()
    """The enrolled member accounts; empty: every account the bus admits."""
    regions: frozenset[str] = frozenset()
    """The enrolled Regions; empty: every Region."""

    @classmethod
    def of(cls, home_account: str, home_region: str, accounts: Iterable[str], regions: Iterable[str]) -> Enrollment:
        """ValueError unless the home account and Region, and every listed one, are well formed."""
        listed_accounts, listed_regions = frozenset(accounts), frozenset(regions)
        malformed = [a for a in {home_account, *listed_accounts} if not _ACCOUNT.fullmatch(a)]
        malformed += [r for r in {home_region, *listed_regions} if not _REGION.fullmatch(r)]
        if malformed:
            raise ValueError(f"not an account id or a Region: {', '.join(sorted(malformed))}")
        return cls(home_account, home_region, listed_accounts, listed_regions)

    def refusal(self, raw: Mapping[str, Any]) -> Refusal | None:
        """Why this envelope must not be acted on, or None when its account and Region are enrolled."""
        if raw.get("source") == ACTIONS_SOURCE:
            return None
        account, region = _shown(raw.get("account")), _shown(raw.get("region"))
        if not self._account_enrolled(raw.get("account")):
            listed = f"{len(self.accounts)} listed" if self.accounts else "the organization's"
            return Refusal(
                RefusedFor.ACCOUNT,
                account,
                region,
                f"account {account} is not enrolled (enrolled: this stack's {self.home_account} and {listed})",
            )
        if not self._region_enrolled(raw.get("region")):
            return Refusal(
                RefusedFor.REGION,
                account,
                region,
                f"Region {region} is not enrolled (enrolled: this stack's {self.home_region} and "
                f"{', '.join(sorted(self.regions))})",
            )
        return None

    def _account_enrolled(self, account: Any) -> bool:
        if not isinstance(account, str) or not _ACCOUNT.fullmatch(account):
            return False
        return account == self.home_account or not self.accounts or account in self.accounts

    def _region_enrolled(self, region: Any) -> bool:
        if not isinstance(region, str) or not _REGION.fullmatch(region):
            return False
        return region == self.home_region or not self.regions or region in self.regions


def _shown(value: Any) -> str:
    """An envelope's account or Region as text for the check and the log (anything else, clipped and quoted)."""
    if isinstance(value, str) and (_ACCOUNT.fullmatch(value) or _REGION.fullmatch(value)):
        return value
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text)} characters)"
