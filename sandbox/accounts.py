"""Member accounts in the sandbox (docs/sandbox.md#accounts): moto keeps accounts apart by the credentials it handed
out, and checks none of what AWS checks before it hands them out.

moto answers the sandbox's fake credentials as its default account, the stack's. The credentials its STS returns for
AssumeRole act in the account of the role assumed (moto maps their access key to it), so a member account's resources
are created, and read, with credentials of that account: the sandbox's own through the account's
OrganizationAccountAccessRole (which AWS Organizations creates in every account it creates, trusting the
management account; the sandbox creates it in each member account it seeds), and the responder's through
forwarder.yaml's ResponderRole, as in AWS.

moto's AssumeRole hands out credentials for any role ARN, existing or not, whatever the external id. While
`TrustEmulation` is installed, AssumeRole answers as AWS does where moto does not:

- a role that does not exist in its account (deleted, or never created) is refused with AccessDenied, and so is a
  role whose trust policy requires an external id (`sts:ExternalId`, StringEquals) that the call did not present.
  AWS gives one answer for both (it does not tell a caller whether the role exists), and so does the sandbox:
  "User: <caller> is not authorized to perform: sts:AssumeRole on resource: <role>".
- Who calls is not evaluated (the trust policy's principal and its aws:PrincipalArn condition): every function of the
  sandbox calls with the same fake credentials, not with its own role (tests/unit/test_template_organization.py
  checks the trust policy's principal against the stack's roles instead).
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.iam.models import iam_backends
from moto.sts.responses import TokenResponse

from sandbox.aws import AwsClients
from sandbox.errors import SandboxError

ORGANIZATION_ACCESS_ROLE = "OrganizationAccountAccessRole"
"""The role AWS Organizations creates in an account it creates, trusted by the management account."""
SEEDER_SESSION = "sandbox-seeding"


class _AccessDenied(ServiceException):
    code = "AccessDenied"


@dataclass
class TrustEmulation:
    """Use as a context manager (or install()/uninstall()); one installed at a time per process."""

    refused: list[dict[str, str]] = field(default_factory=list)
    """Every AssumeRole refused, in order: role ARN, session name, why (for the report and tests)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def assume_role(self, response: TokenResponse, original: Callable[[TokenResponse], ActionResult]) -> ActionResult:
        role_arn = str(response._get_param("RoleArn") or "")
        external_id = response._get_param("ExternalId")
        why = refusal(role_arn, external_id)
        if why is not None:
            caller = f"arn:aws:sts::{response.current_account}:user/moto"  # who moto says the fake credentials are
            with self._lock:
                self.refused.append(
                    {"role_arn": role_arn, "session": str(response._get_param("RoleSessionName") or ""), "why": why}
                )
            raise _AccessDenied(f"User: {caller} is not authorized to perform: sts:AssumeRole on resource: {role_arn}")
        return original(response)

    def install(self) -> TrustEmulation:
        with _install_lock:
            if _installed.active is not None:
                raise RuntimeError("a TrustEmulation is already installed")
            _installed.active = self
            _originals["assume_role"] = TokenResponse.__dict__["assume_role"]
            TokenResponse.assume_role = _patched_assume_role  # type: ignore[method-assign]
        return self

    def uninstall(self) -> None:
        with _install_lock:
            if _installed.active is not self:
                return
            TokenResponse.assume_role = _originals.pop("assume_role")  # type: ignore[method-assign]
            _installed.active = None

    def __enter__(self) -> TrustEmulation:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()


def refusal(role_arn: str, external_id: str | None) -> str | None:
    """Why AWS would refuse this AssumeRole (the role missing, or the external id its trust requires not given);
    None when it would not (as far as the sandbox evaluates: not who calls)."""
    parts = role_arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or not parts[5].startswith("role/"):
        return f"not a role ARN: {role_arn}"
    account, partition = parts[4], parts[1]
    backend = iam_backends[account][partition] if account in iam_backends else None
    role = next((r for r in backend.get_roles() if r.arn == role_arn), None) if backend is not None else None
    if role is None:
        return f"no role {role_arn} in account {account}"
    wanted = required_external_ids(role.assume_role_policy_document)
    if wanted and external_id not in wanted:
        return "the role's trust policy requires another external id" if external_id else "no external id given"
    return None


def required_external_ids(document: str | Mapping[str, Any]) -> set[str]:
    """The external ids a trust policy's Allow statements for sts:AssumeRole require (StringEquals sts:ExternalId);
    empty when one of them requires none."""
    policy = json.loads(document) if isinstance(document, str) else dict(document)
    statements = policy.get("Statement") or []
    wanted: set[str] = set()
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action") or []
        if statement.get("Effect") != "Allow" or "sts:AssumeRole" not in _listed(actions):
            continue
        required = ((statement.get("Condition") or {}).get("StringEquals") or {}).get("sts:ExternalId")
        if required is None:
            return set()
        wanted.update(_listed(required))
    return wanted


def _listed(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


# --- The sandbox's own access to a member account ------------------------------------------------------------


def open_account(home: AwsClients, account: str, region: str) -> AwsClients:
    """Clients acting in `account` (as `region`'s): its OrganizationAccountAccessRole, created now if need be (trusting
    the stack's account, as Organizations' trusts the management account), assumed with the sandbox's credentials."""
    partition = "aws"
    backend = iam_backends[account][partition]
    if not any(role.name == ORGANIZATION_ACCESS_ROLE for role in backend.get_roles()):
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{partition}:iam::{_caller_account(home)}:root"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        backend.create_role(
            ORGANIZATION_ACCESS_ROLE,
            json.dumps(trust),
            "/",
            None,
            "Created with the account (the sandbox's access to it)",
            [],
            None,
        )
    role_arn = f"arn:{partition}:iam::{account}:role/{ORGANIZATION_ACCESS_ROLE}"
    credentials = home.client("sts").assume_role(RoleArn=role_arn, RoleSessionName=SEEDER_SESSION)["Credentials"]
    clients = AwsClients(home.endpoint_url, region, credentials)
    actual = clients.client("sts").get_caller_identity()["Account"]
    if actual != account:
        raise SandboxError(f"credentials assumed for account {account} act in {actual}")
    return clients


def _caller_account(aws: AwsClients) -> str:
    return str(aws.client("sts").get_caller_identity()["Account"])


def delete_role(aws: AwsClients, name: str) -> bool:
    """The role deleted from the account `aws` acts in, its inline policies first (as IAM requires); False if there
    was none."""
    iam = aws.client("iam")
    try:
        policies = iam.list_role_policies(RoleName=name)["PolicyNames"]
    except iam.exceptions.NoSuchEntityException:
        return False
    for policy in policies:
        iam.delete_role_policy(RoleName=name, PolicyName=policy)
    iam.delete_role(RoleName=name)
    return True


def create_role(aws: AwsClients, properties: Mapping[str, Any], name: str) -> str:
    """An AWS::IAM::Role's resolved properties as IAM creates it (its trust policy, path and inline policies); its
    ARN. Used for forwarder.yaml's roles, which AssumeRole checks (the stack's own are named, not created)."""
    iam = aws.client("iam")
    request: dict[str, Any] = {
        "RoleName": name,
        "AssumeRolePolicyDocument": json.dumps(properties["AssumeRolePolicyDocument"]),
        "Path": str(properties.get("Path") or "/"),
    }
    for key in ("Description", "MaxSessionDuration"):
        if key in properties:
            request[key] = int(properties[key]) if key == "MaxSessionDuration" else properties[key]
    arn = str(iam.create_role(**request)["Role"]["Arn"])
    for policy in _policies(properties.get("Policies") or []):
        iam.put_role_policy(
            RoleName=name, PolicyName=str(policy["PolicyName"]), PolicyDocument=json.dumps(policy["PolicyDocument"])
        )
    return arn


def _policies(policies: Iterable[Any]) -> list[Mapping[str, Any]]:
    return [policy for policy in policies if isinstance(policy, Mapping) and "PolicyDocument" in policy]


# --- Installation ----------------------------------------------------------------------------------------------


@dataclass
class _Installed:
    active: TrustEmulation | None = None


_installed = _Installed()
_install_lock = threading.Lock()
_originals: dict[str, Any] = {}


# moto warns when an error code is not one of the operation's modelled errors (AccessDenied is a common error, not in
# STS's model): what a client sees is STS's answer all the same (as HTTP 400, where AWS says 403).
warnings.filterwarnings("ignore", message=r"Exception\(\w+\) with code AccessDenied does not match an error shape")


def _patched_assume_role(self: TokenResponse) -> ActionResult:
    emulation = _installed.active
    original = _originals["assume_role"]
    if emulation is None:
        return original(self)  # type: ignore[no-any-return]
    return emulation.assume_role(self, original)
