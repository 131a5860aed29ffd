"""Whether an account and Region forwards to the stack's bus, as its default bus's rules say (`fault-responder
accounts`, docs/organization.md).

The rules of the default bus that target the stack's bus (EventBridge's ListRuleNamesByTarget, page by page), each
described (DescribeRule) for its state. In a member account these are forwarder.yaml's rules, read through its role:
the role may list rule names and describe the rules tagged with the central stack's name only when forwarder.yaml
was deployed with AllowForwarderChecks=true. A refusal to list is "not checked" (the permission is not granted, which
is forwarder.yaml's default), not a broken forwarder; a rule the role may not describe is not forwarder.yaml's and
is left out. In the stack's own account and Region the rule is the stack's LocalEventsForwardRule, read with the
caller's own credentials.

Anything else that fails (throttled, an endpoint that does not answer, a Region not enabled) is raised, classified
for the place (fault_responder.adapters.member_session.classify), for the caller to report.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.adapters.member_session import classify, error_code
from fault_responder.core.places import Place
from fault_responder.operations.accounts import ForwarderCheck, ForwarderState, RuleState

MAX_RULES = 50
"""Rules targeting the bus that are described at most (forwarder.yaml creates four); the others are counted."""
MAX_PAGES = 20
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


def forwarder_check(events: Any, bus_arn: str, place: Place, *, refused: str) -> ForwarderCheck:
    """What `events` (a client of the place's account and Region) says of the rules that send to `bus_arn`;
    `refused`: what a refusal to list them means there (the check was not made, and why)."""
    try:
        names = _rule_names(events, bus_arn)
    except ClientError as error:
        if error_code(error) in _DENIED:
            return ForwarderCheck(ForwarderState.NOT_CHECKED, detail=refused)
        raise classify(error, place) from None
    except BotoCoreError as error:
        raise classify(error, place) from None
    rules: list[RuleState] = []
    hidden = 0
    for name in names[:MAX_RULES]:
        try:
            described = events.describe_rule(Name=name)
        except ClientError as error:
            code = error_code(error)
            if code in _DENIED:
                hidden += 1  # not forwarder.yaml's: the role describes only the rules tagged with the stack's name
                continue
            if code == "ResourceNotFoundException":
                continue  # deleted since it was listed
            raise classify(error, place) from None
        except BotoCoreError as error:
            raise classify(error, place) from None
        rules.append(RuleState(str(described.get("Name") or name), str(described.get("State") or "UNKNOWN")))
    return ForwarderCheck.of(rules, more=max(0, len(names) - MAX_RULES), hidden=hidden)


def _rule_names(events: Any, bus_arn: str) -> list[str]:
    names: list[str] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        page = events.list_rule_names_by_target(TargetArn=bus_arn, **({"NextToken": token} if token else {}))
        names.extend(str(name) for name in page.get("RuleNames", []))
        token = page.get("NextToken")
        if not token:
            break
    return names
