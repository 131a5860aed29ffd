"""Wiring for SlackActionsFunction: environment -> settings -> SlackActions with its adapters. Built once per
container. Kept apart from fault_responder.wiring.alert_router so the AlertRouter's cold start imports none of it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities import parameters
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from fault_responder.actions.function_url import RotatingSecret, fetch_json_secret
from fault_responder.actions.interactive import Permissions
from fault_responder.actions.slack_actions import RESPONSE_URL_PREFIX, SlackActions
from fault_responder.adapters.action_queue import ActionQueue
from fault_responder.adapters.endpoints import SLACK_API_URL
from fault_responder.adapters.interaction_store import DynamoDBInteractionStore
from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.adapters.slack_actions_io import ResponseUrlReplies, SlackUserGroups, StepFunctionsTaskAnswers
from fault_responder.core.observability import count, logger
from fault_responder.wiring.envtypes import Names, declared


class ActionsSettings(BaseModel):
    """SlackActionsFunction's environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    incidents_table: str = Field(alias="INCIDENTS_TABLE", min_length=1)
    slack_secret_name: str = Field(alias="SLACK_SECRET_NAME", min_length=1)
    resume_approvers: Names = Field(alias="RESUME_APPROVERS", default=())
    incident_resolvers: Names = Field(alias="INCIDENT_RESOLVERS", default=())
    response_url_prefix: str = Field(alias="SLACK_RESPONSE_URL_PREFIX", default=RESPONSE_URL_PREFIX, min_length=8)
    """Replies go only to response URLs under this prefix (the sandbox points it at its stand-in)."""
    alert_queue_url: str = Field(alias="ALERT_QUEUE_URL", min_length=1)
    """Where incident buttons' actions go: the AlertRouter records them (fault_responder.incidents.incident_actions)."""
    region: str = Field(alias="AWS_REGION", min_length=1)
    slack_api_url: str = Field(alias="SLACK_API_URL", default=SLACK_API_URL, min_length=8)

    @property
    def account(self) -> str:
        """The account the queue is in (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME): the stack's own."""
        parts = self.alert_queue_url.split("/")
        return parts[3] if len(parts) > 4 else "unknown"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ActionsSettings:
        values = declared(cls, env)
        values.setdefault("AWS_REGION", env.get("AWS_DEFAULT_REGION", ""))
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            fields = sorted({str(e["loc"][0]) for e in error.errors()})
            raise RuntimeError(f"SlackActions environment is incomplete or invalid: {fields}") from None


class _SlackSigningSecret(BaseModel):
    model_config = ConfigDict(extra="ignore")
    signing_secret: SecretStr


class _SlackBotToken(BaseModel):
    model_config = ConfigDict(extra="ignore")
    bot_token: SecretStr


class SigningSecret(RotatingSecret[str]):
    """The `signing_secret` field of the Slack secret (function_url.RotatingSecret: cached, re-read on demand at most
    once a minute)."""

    def read(self, value: Any) -> str:
        try:
            secret = _SlackSigningSecret.model_validate(value)
        except ValidationError:
            raise RuntimeError("the Slack secret has no signing_secret field (docs/slack-actions.md)") from None
        return secret.signing_secret.get_secret_value()


_fetch_json_secret = fetch_json_secret


def _bot_token(name: str) -> Callable[[], str]:
    """The Slack secret's bot_token (for reading user groups), cached like the signing secret."""

    def read() -> str:
        try:
            secret = _SlackBotToken.model_validate(_fetch_json_secret(name, False))
        except ValidationError:
            raise RuntimeError("the Slack secret has no bot_token field (docs/slack-actions.md)") from None
        return secret.bot_token.get_secret_value()

    return read


@cache
def slack_actions() -> SlackActions:
    current = ActionsSettings.from_env(os.environ)
    store = DynamoDBInteractionStore(current.incidents_table)
    permissions = Permissions.parse(current.resume_approvers, current.incident_resolvers)
    groups = (
        SlackUserGroups(_bot_token(current.slack_secret_name), current.slack_api_url) if permissions.groups else None
    )
    return SlackActions(
        signing_secret=SigningSecret(current.slack_secret_name, _fetch_json_secret),
        replay_guard=store,
        approvals=store,
        tasks=StepFunctionsTaskAnswers(),
        replies=ResponseUrlReplies(),
        permissions=permissions,
        actions=ActionQueue(current.alert_queue_url, current.region, current.account),
        silences=DynamoDBSilenceStore(current.incidents_table),
        groups=groups,
        response_url_prefix=current.response_url_prefix,
        clock=lambda: datetime.now(UTC),
        count=count,
        log=lambda message, extra: logger.info(message, extra=extra),
    )


def reset() -> None:
    """Forget the wiring and cached secrets (tests and the sandbox call this)."""
    slack_actions.cache_clear()
    parameters.clear_caches()  # type: ignore[no-untyped-call]
