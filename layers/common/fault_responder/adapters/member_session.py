"""boto3 clients for an account and Region (docs/organization.md, "Acting where it happened").

The stack's own account and Region ("home") are the function's own credentials. Anywhere else, the clients act with
the role forwarder.yaml creates in that account (`arn:<partition>:iam::<account>:role/<MemberRoleName>`), assumed with
the stack's external id (its MemberRoleExternalId output, which the role's trust requires) and a session name that
names the function (whose name names the stack), so that CloudTrail in the member account says who acted. The stack's
own account in another Region goes through the role too: the function's own permissions are for its Region.

An account's credentials are assumed once and kept until shortly before they expire (REFRESH_SECONDS), one
AssumeRole at a time per account whatever the threads asking; its clients are kept with them. Failures are typed
(fault_responder.core.places): an AssumeRole refused is RoleNotAssumable, a call refused, throttled or failing with
the assumed role is classified by `classify`, so that callers report each per account and Region. A refusal is not
kept: the next call asks again (a role deployed since is found at once).

Credentials are never logged; the log names the role's ARN and the account.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.core.places import (
    MemberAccessDenied,
    MemberAccessError,
    MemberCallFailed,
    MemberThrottled,
    Place,
    RoleNotAssumable,
)

log = logging.getLogger(__name__)

DURATION_SECONDS = 3600
"""The credentials asked for: an hour, the most a role chain allows (the function's own credentials are a role's)."""
REFRESH_SECONDS = 300
"""Credentials are assumed again this long before they expire: a call made with them never outlives them."""
MAX_CLIENTS = 1024
"""Clients kept (per service, account and Region), the least recently used dropped first."""
MAX_SESSION_NAME = 64
_SESSION_NAME_CHARACTERS = re.compile(r"[^\w+=,.@-]")
_DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException", "AuthFailure"}
)
_THROTTLED = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
    }
)


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def session_name(name: str) -> str:
    """A RoleSessionName from a function's name: the characters AWS takes, at most 64 (at least 2)."""
    cleaned = _SESSION_NAME_CHARACTERS.sub("-", name)[:MAX_SESSION_NAME]
    return cleaned if len(cleaned) >= 2 else f"gpu-fault-responder{cleaned}"[:MAX_SESSION_NAME]


def error_code(error: BaseException) -> str:
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def classify(error: BaseException, place: Place) -> MemberAccessError:
    """What a failure of a call made in `place` is, as the callers report it."""
    if isinstance(error, MemberAccessError):
        return error
    code = error_code(error)
    detail = f"{type(error).__name__}: {error}"
    if code in _THROTTLED:
        return MemberThrottled(place, detail)
    if code in _DENIED:
        return MemberAccessDenied(place, detail)
    return MemberCallFailed(place, detail)


@dataclass(frozen=True)
class _Credentials:
    values: Mapping[str, str]
    expires: float
    """Epoch seconds."""


class MemberSessions:
    """Clients for the stack's own account and Region, and, through the member role, for any other."""

    def __init__(
        self,
        *,
        home: Place,
        role_name: str,
        external_id: str,
        function_name: str,
        config: Config | None = None,
        sts: BaseClient | None = None,
        clock: Callable[[], float] = time.time,
        make_session: Callable[..., Any] = boto3.session.Session,
        endpoint_url: str | None = None,
    ) -> None:
        self.home = home
        self.role_name = role_name
        self.external_id = external_id
        self.session_name = session_name(function_name)
        self._config = config
        self._sts = sts
        self._clock = clock
        self._make_session = make_session
        self._endpoint = {"endpoint_url": endpoint_url} if endpoint_url else {}
        """Another endpoint for every client (a command-line user's --endpoint-url)."""
        self._credentials: dict[str, _Credentials] = {}
        self._clients: OrderedDict[tuple[str, Place, str], BaseClient] = OrderedDict()
        self._lock = threading.RLock()
        self._account_locks: dict[str, threading.Lock] = {}
        self.assumed = 0
        """AssumeRole calls made (each account once while its credentials last)."""

    def role_arn(self, account: str) -> str:
        return f"arn:{partition_of(self.home.region)}:iam::{account}:role/{self.role_name}"

    def client(self, service: str, place: Place) -> BaseClient:
        """A client acting in `place`. Raises RoleNotAssumable (or MemberThrottled, MemberCallFailed) when the
        member role could not be assumed there."""
        if place == self.home:
            return self._kept((service, place, "home"), lambda: self._home_client(service, place.region))
        credentials = self._credentials_for(place)
        key = (service, place, credentials.values["AccessKeyId"])
        return self._kept(key, lambda: self._member_client(service, place.region, credentials))

    def forget(self, account: str) -> None:
        """Drop the account's credentials and clients (after they were refused, say): the next call assumes again."""
        with self._lock:
            self._credentials.pop(account, None)
            for key in [key for key in self._clients if key[1].account == account]:
                del self._clients[key]

    # --- Credentials ---------------------------------------------------------------------------------------------

    def _credentials_for(self, place: Place) -> _Credentials:
        with self._lock:
            lock = self._account_locks.setdefault(place.account, threading.Lock())
        with lock:  # one AssumeRole per account at a time; the others wait and take its credentials
            with self._lock:
                kept = self._credentials.get(place.account)
            if kept is not None and kept.expires - REFRESH_SECONDS > self._clock():
                return kept
            fresh = self._assume(place)
            with self._lock:
                self._credentials[place.account] = fresh
            return fresh

    def _assume(self, place: Place) -> _Credentials:
        role_arn = self.role_arn(place.account)
        try:
            sts: Any = self._sts_client()
            answer = sts.assume_role(
                RoleArn=role_arn,
                RoleSessionName=self.session_name,
                ExternalId=self.external_id,
                DurationSeconds=DURATION_SECONDS,
            )
        except (ClientError, BotoCoreError) as error:
            code = error_code(error)
            failure: MemberAccessError
            if code in _DENIED:
                failure = RoleNotAssumable(
                    place,
                    f"AssumeRole of {role_arn} was refused ({code}): the role is missing, or its trust does not admit "
                    "this stack's role or external id",
                )
            else:
                failure = classify(error, place)
            log.warning(
                "the member role could not be assumed",
                extra={"account": place.account, "region": place.region, "role_arn": role_arn, "kind": failure.kind},
            )
            raise failure from None
        self.assumed += 1
        issued = answer["Credentials"]
        expiration = issued.get("Expiration")
        expires = expiration.timestamp() if hasattr(expiration, "timestamp") else self._clock() + DURATION_SECONDS
        values = {key: str(issued[key]) for key in ("AccessKeyId", "SecretAccessKey", "SessionToken")}
        return _Credentials(values, expires)

    def _sts_client(self) -> BaseClient:
        if self._sts is None:
            with self._lock:
                if self._sts is None:
                    self._sts = self._home_client("sts", self.home.region)
        return self._sts

    # --- Clients -------------------------------------------------------------------------------------------------

    def _home_client(self, service: str, region: str) -> BaseClient:
        with self._lock:  # boto3's default session is not safe for creating clients from several threads
            made: BaseClient = self._make_session().client(
                service, region_name=region, config=self._config, **self._endpoint
            )
        return made

    def _member_client(self, service: str, region: str, credentials: _Credentials) -> BaseClient:
        session = self._make_session(
            aws_access_key_id=credentials.values["AccessKeyId"],
            aws_secret_access_key=credentials.values["SecretAccessKey"],
            aws_session_token=credentials.values["SessionToken"],
            region_name=region,
        )
        made: BaseClient = session.client(service, region_name=region, config=self._config, **self._endpoint)
        return made

    def _kept(self, key: tuple[str, Place, str], make: Callable[[], BaseClient]) -> BaseClient:
        with self._lock:
            found = self._clients.get(key)
            if found is not None:
                self._clients.move_to_end(key)
                return found
        made = make()
        with self._lock:
            self._clients[key] = made
            # Clients made with credentials since replaced are dropped with their account's fresh ones.
            for stale in [k for k in self._clients if k[:2] == key[:2] and k[2] not in (key[2], "home")]:
                del self._clients[stale]
            while len(self._clients) > MAX_CLIENTS:
                self._clients.popitem(last=False)
        return made
