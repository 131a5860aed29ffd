"""Accounts' names from AWS Organizations (DescribeAccount), for the pages of an organization's stack.

DescribeAccount answers only in the organization's management account or a delegated administrator. Anywhere else it
is denied: the first denial turns the lookups off for the container's life (logged once), and the names come from
the stack's AccountNames alone (docs/organization.md). A name found is kept for the container's life (names rarely
change; a new container reads them again); an account Organizations does not know is asked about again after
RETRY_AFTER, as is one whose lookup failed otherwise (throttled, timed out): a storm of one account's faults asks
at most once in that time. Every failure leaves the account shown by its id alone. At most MAX_ACCOUNTS accounts are
remembered: past that, lookups stop (logged once), and the others are shown by their ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.core import elapsed

log = logging.getLogger(__name__)

RETRY_AFTER = 300.0
"""Seconds before an account whose name could not be read is asked about again."""
MAX_ACCOUNTS = 2000
CLIENT_CONFIG = Config(connect_timeout=2, read_timeout=3, retries={"mode": "standard", "max_attempts": 2})
"""A lookup happens while an event is handled: it must never hold it up for long."""
DENIED = frozenset({"AccessDeniedException", "AccessDenied", "AWSOrganizationsNotInUseException"})
"""Not a management account or a delegated administrator, no organization, or a role not allowed to ask (any HTTP 403
too): no lookup will ever answer."""


class OrganizationsAccountNames:
    """A lookup for fault_responder.core.accounts.Accounts: account id -> its name, or None."""

    def __init__(self, client: Callable[[], Any], clock: Callable[[], float] = elapsed.monotonic) -> None:
        """`client`: makes the Organizations client when the first name is looked up (most stacks never need one)."""
        self._make_client = client
        self._client: Any = None
        self._clock = clock
        self._names: dict[str, str] = {}
        self._failed: dict[str, float] = {}
        self._off = False
        self._lock = threading.Lock()

    def __call__(self, account: str) -> str | None:
        with self._lock:
            # One lookup at a time: the threads of a batch that all meet a new account ask once.
            if account in self._names:
                return self._names[account]
            if self._off or self._clock() < self._failed.get(account, float("-inf")):
                return None
            if len(self._names) + len(self._failed) >= MAX_ACCOUNTS:
                self._off = True
                log.warning("account names: %d accounts looked up; no more lookups (ids shown)", MAX_ACCOUNTS)
                return None
            return self._lookup(account)

    def _lookup(self, account: str) -> str | None:
        try:
            if self._client is None:
                self._client = self._make_client()
            answer = self._client.describe_account(AccountId=account)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in DENIED or status == 403 or code == "403":
                self._off = True
                log.warning(
                    "account names: AWS Organizations' DescribeAccount is refused here (%s): only the management "
                    "account or a delegated administrator may call it; the names come from AccountNames alone",
                    code,
                )
                return None
            self._failure(account, code or "ClientError")
            return None
        except (BotoCoreError, OSError) as error:
            self._failure(account, type(error).__name__)
            return None
        name = answer.get("Account", {}).get("Name")
        if not isinstance(name, str) or not name.strip():
            self._failure(account, "no name in the answer")
            return None
        self._names[account] = name
        self._failed.pop(account, None)
        return name

    def _failure(self, account: str, why: str) -> None:
        self._failed[account] = self._clock() + RETRY_AFTER
        log.warning("account names: %s's name could not be read (%s); shown by its id", account, why)


def organizations_lookup() -> OrganizationsAccountNames:
    """The lookup a function's wiring hands its Accounts: a client made on the first name looked up."""
    return OrganizationsAccountNames(lambda: boto3.client("organizations", config=CLIENT_CONFIG))
