"""Where the responder acts: an account and a Region (docs/organization.md, "Acting where it happened").

In organization mode the reconciliation sweep and the resume workflow act in the account and Region a fault happened
in: the stack's own ("home") with the function's own credentials, any other through the role forwarder.yaml creates
there (fault_responder.adapters.member_session). What can go wrong there is one of a few kinds, each reported per
account and Region (a metric's dimension, a log's field), so that one account's broken role or throttling is named
and never taken for another's:

- `role_not_assumable`: AssumeRole was refused. The role is missing (deleted, never deployed), or its trust or the
  external id it requires is not the stack's; AWS does not say which (it does not tell a caller whether a role
  exists), so neither does the responder.
- `access_denied`: the role was assumed and the call was refused (a permission the role lacks there).
- `throttled`: the account's quota for the call was spent, after the SDK's own retries.
- `failed`: anything else (an endpoint that would not answer, a Region not enabled in the account, ...).

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

_ACCOUNT = re.compile(r"^[0-9]{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]$")
MAX_DETAIL = 500
"""Characters of an error's own words kept on a MemberAccessError (the log line names the rest)."""


@dataclass(frozen=True, slots=True, order=True)
class Place:
    """An account and a Region."""

    account: str
    region: str

    @classmethod
    def of(cls, account: str, region: str) -> Place:
        """ValueError unless both are well formed (12 digits; a Region code)."""
        if not _ACCOUNT.fullmatch(account) or not _REGION.fullmatch(region):
            raise ValueError(f"not an account and a Region: {account[:20]!r} {region[:30]!r}")
        return cls(account, region)

    @classmethod
    def of_arn(cls, arn: str) -> Place | None:
        """Where a Regional ARN's resource is (arn:PARTITION:SERVICE:REGION:ACCOUNT:...); None for anything else."""
        parts = arn.split(":", 5)
        if len(parts) < 6 or parts[0] != "arn" or not _ACCOUNT.fullmatch(parts[4]) or not _REGION.fullmatch(parts[3]):
            return None
        return cls(parts[4], parts[3])

    def __str__(self) -> str:
        return f"{self.account}/{self.region}"


class MemberAccessError(Exception):
    """Acting in an account and Region failed; `kind` says how (one of the module's kinds)."""

    kind: ClassVar[str] = "failed"

    def __init__(self, place: Place, detail: str) -> None:
        self.place = place
        self.detail = detail[:MAX_DETAIL]
        super().__init__(f"{self.kind} in account {place.account} {place.region}: {self.detail}")


class RoleNotAssumable(MemberAccessError):
    """AssumeRole refused: the role missing, or its trust or external id not the stack's (AWS does not say which)."""

    kind = "role_not_assumable"


class MemberAccessDenied(MemberAccessError):
    """The role was assumed; the call was refused there."""

    kind = "access_denied"


class MemberThrottled(MemberAccessError):
    """The account's quota was spent, after the SDK's retries."""

    kind = "throttled"


class MemberCallFailed(MemberAccessError):
    """Anything else that failed there."""

    kind = "failed"


KINDS = (RoleNotAssumable.kind, MemberAccessDenied.kind, MemberThrottled.kind, MemberCallFailed.kind)
