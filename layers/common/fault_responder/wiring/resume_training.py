"""Wiring for the ResumeTraining task functions: environment -> settings -> steps with their adapters.

Built once per execution environment and cached, like fault_responder.wiring.alert_router for the AlertRouter. Only the
ClaimFault function carries the workflow's parameters in its environment (RESUME_*); the other functions
get them from the `config` the Claim state returns, so one parameter change reaches a whole execution at
once and an execution in flight keeps the values it started with.

With the organization's bus (MEMBER_ROLE_NAME set), a fault of another account or Region is acted on there: its
steps get ECS, EC2, S3 and Auto Scaling clients of that account and Region, through forwarder.yaml's role
(fault_responder.adapters.member_session), and keep the stack's own table, secrets and notifier. A role that cannot
be assumed fails the step (the state machine pages it, naming the account).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

import boto3
import botocore
from botocore.client import BaseClient
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fault_responder.adapters.ecs import EcsAdapter
from fault_responder.adapters.endpoints import PAGERDUTY_EVENTS_URL, SLACK_API_URL
from fault_responder.adapters.interaction_store import DynamoDBInteractionStore
from fault_responder.adapters.resume_store import DynamoDBResumeStore
from fault_responder.adapters.s3_checkpoints import S3CheckpointRequests, S3CheckpointStore
from fault_responder.core.observability import count
from fault_responder.core.places import Place
from fault_responder.resume.config import Mode, NoCheckpointPolicy, ResumeConfig
from fault_responder.resume.steps import ResumeSteps
from fault_responder.wiring.envtypes import Names, ReceiverSecrets, declared

if TYPE_CHECKING:
    from fault_responder.adapters.autoscaling import AutoScalingAdapter
    from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
    from fault_responder.adapters.member_session import MemberSessions
    from fault_responder.resume.notify import ResumeNotifier


SECRET_CACHE_SECONDS = 300
# Throttling on a busy cluster is retried by botocore, with backoff, before a step fails.
AWS_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 8})


class ResumeSettings(BaseModel):
    """The task functions' environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    incidents_table: str = Field(alias="INCIDENTS_TABLE", min_length=1)
    slack_secret_name: str = Field(alias="SLACK_SECRET_NAME", min_length=1)
    pagerduty_secret_name: str = Field(alias="PAGERDUTY_SECRET_NAME", min_length=1)
    receiver_secrets: ReceiverSecrets = Field(alias="RECEIVER_SECRETS", default_factory=dict)
    """Every other receiver kind's secret name (Teams, the webhook), by kind; a kind left out is unused."""
    routing_file: str = Field(alias="ROUTING_FILE", default="default.yaml")
    incident_retention_days: int = Field(alias="INCIDENT_RETENTION_DAYS", default=30, ge=1)
    drain_attribution_window_minutes: int = Field(alias="DRAIN_ATTRIBUTION_WINDOW_MINUTES", default=60, ge=1)
    slack_api_url: str = Field(alias="SLACK_API_URL", default=SLACK_API_URL)
    pagerduty_events_url: str = Field(alias="PAGERDUTY_EVENTS_URL", default=PAGERDUTY_EVENTS_URL)
    pagerduty_change_events_url: str = Field(alias="PAGERDUTY_CHANGE_EVENTS_URL", default="")
    """Empty: derived from PAGERDUTY_EVENTS_URL (…/v2/enqueue -> …/v2/change/enqueue)."""
    http_max_attempts: int = Field(alias="HTTP_MAX_ATTEMPTS", default=4, ge=1, le=10)
    incident_wait_retries: int = Field(alias="INCIDENT_WAIT_RETRIES", default=6, ge=0, le=6)
    dashboard_url: str = Field(alias="DASHBOARD_URL", default="", pattern=r"^(https://\S+)?$")
    """The stack's CloudWatch dashboard, linked from the Slack roots the notices post or update; empty: no link."""
    # NotifyFunction's, with the organization's bus: the notices name the account and Region as the router's pages
    # (with STACK_ACCOUNT and AWS_REGION, below).
    organization_mode: bool = Field(alias="ORGANIZATION_MODE", default=False)
    account_names: str = Field(alias="ACCOUNT_NAMES", default="")

    mode: Mode = Field(alias="RESUME_MODE", default=Mode.AUTO)
    capacity_providers: Names = Field(alias="TRAINING_CAPACITY_PROVIDERS", default=())
    check_types: Names = Field(alias="RESUME_CHECK_TYPES", default=("ACCELERATED_COMPUTE",))
    max_attempts: int = Field(alias="MAX_RESUME_ATTEMPTS", default=3)
    mass_fault_threshold_percent: int = Field(alias="MASS_FAULT_THRESHOLD_PERCENT", default=20)
    mass_fault_window_minutes: int = Field(alias="MASS_FAULT_WINDOW_MINUTES", default=30)
    no_checkpoint_policy: NoCheckpointPolicy = Field(alias="NO_CHECKPOINT_POLICY", default=NoCheckpointPolicy.PAGE)
    poll_seconds: int = Field(alias="RESUME_POLL_SECONDS", default=15)
    stop_timeout_seconds: int = Field(alias="RESUME_STOP_TIMEOUT_SECONDS", default=600)
    start_timeout_seconds: int = Field(alias="RESUME_START_TIMEOUT_SECONDS", default=900)
    approval_timeout_seconds: int = Field(alias="APPROVAL_TIMEOUT_SECONDS", default=3600)
    relaunch_backoff_seconds: int = Field(alias="RELAUNCH_BACKOFF_SECONDS", default=60)
    job_concurrency: int = Field(alias="RESUME_JOB_CONCURRENCY", default=4)
    checkpoint_now_seconds: int = Field(alias="CHECKPOINT_NOW_SECONDS", default=300)
    checkpoint_now_faults: Names = Field(
        alias="CHECKPOINT_NOW_FAULTS", default=("xid_restart_app", "planned_drain", "planned_move")
    )
    spare_attribute: str = Field(alias="SPARE_ATTRIBUTE", default="fault-responder.spare")
    refill_spares: bool = Field(alias="REFILL_SPARES", default=True)

    stack_account: str = Field(alias="STACK_ACCOUNT", default="")
    region: str = Field(alias="AWS_REGION", default="")
    """The Region the function runs in (Lambda sets it)."""
    member_role_name: str = Field(alias="MEMBER_ROLE_NAME", default="", pattern=r"^[A-Za-z0-9+=,.@_-]{0,64}$")
    """With the organization's bus: forwarder.yaml's role, through which a fault of another account is acted on."""
    member_role_external_id: str = Field(alias="MEMBER_ROLE_EXTERNAL_ID", default="", max_length=1224)
    function_name: str = Field(alias="AWS_LAMBDA_FUNCTION_NAME", default="gpu-fault-responder")

    @property
    def change_events_url(self) -> str:
        if self.pagerduty_change_events_url:
            return self.pagerduty_change_events_url
        return f"{self.pagerduty_events_url.removesuffix('/v2/enqueue')}/v2/change/enqueue"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ResumeSettings:
        try:
            return cls.model_validate(declared(cls, env))
        except ValidationError as error:
            fields = sorted({str(e["loc"][0]) for e in error.errors()})
            raise RuntimeError(f"ResumeTraining environment is incomplete or invalid: {fields}") from None

    def config(self) -> ResumeConfig:
        """The workflow's parameters, checked against their bounds (ResumeConfig's)."""
        fields = set(ResumeConfig.model_fields)
        return ResumeConfig.model_validate({name: getattr(self, name) for name in fields})


@cache
def settings() -> ResumeSettings:
    return ResumeSettings.from_env(os.environ)


@cache
def _incident_store() -> DynamoDBInstanceStore:
    # Imported here: only the steps that read or write instances' records (quarantine, relaunch, notify) build it.
    from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore  # noqa: PLC0415

    current = settings()
    retention = timedelta(days=current.incident_retention_days)
    return DynamoDBInstanceStore(current.incidents_table, retention, boto3.client("dynamodb", config=AWS_CLIENT_CONFIG))


@cache
def _notifier() -> ResumeNotifier:
    # Imported here: only the steps that page need the HTTP clients, the routing file and the renderers,
    # and every other task function's cold start would pay for them.
    from fault_responder.adapters.http import RetryPolicy  # noqa: PLC0415
    from fault_responder.adapters.notifiers import SecretChannels  # noqa: PLC0415
    from fault_responder.adapters.organizations import organizations_lookup  # noqa: PLC0415
    from fault_responder.adapters.pagerduty import PagerDutyChangeEvents  # noqa: PLC0415
    from fault_responder.adapters.silence_store import DynamoDBSilenceStore  # noqa: PLC0415
    from fault_responder.core.accounts import accounts_of  # noqa: PLC0415
    from fault_responder.incidents import lifecycle  # noqa: PLC0415
    from fault_responder.noise.policy import Policy, SilenceCache  # noqa: PLC0415
    from fault_responder.notification.receivers.kind import Capability  # noqa: PLC0415
    from fault_responder.notification.receivers.registry import with_capability  # noqa: PLC0415
    from fault_responder.resume.notify import ResumeNotifier  # noqa: PLC0415
    from fault_responder.routing.router import Router, load_routing  # noqa: PLC0415

    current = settings()
    routing = load_routing(current.routing_file)
    router = Router(routing)
    silences = DynamoDBSilenceStore(current.incidents_table, boto3.client("dynamodb", config=AWS_CLIENT_CONFIG))
    # The notices are held back as the incident is (a silence, a window, a fleet incident, an inhibition rule);
    # read before each notice (no refresh interval): a workflow step is no hot path.
    cache = SilenceCache(lambda: silences.active(datetime.now(UTC)), refresh_seconds=0)
    pagerduty = with_capability(routing.receivers, Capability.PAGE)
    held_back = Policy(
        silencer=cache.silencer,
        window_mutes=router.muted_receivers,
        inhibit_rules=tuple(routing.inhibit_rules),
        pagerduty_receivers=pagerduty,
    )
    policy = RetryPolicy(max_attempts=current.http_max_attempts)
    incidents = _incident_store()  # its records and its groups: one table
    channels = SecretChannels(
        fetch_secret=_fetch_json_secret,
        slack_secret_name=current.slack_secret_name,
        pagerduty_secret_name=current.pagerduty_secret_name,
        receiver_secrets=current.receiver_secrets,
        slack_api_url=current.slack_api_url,
        pagerduty_url=current.pagerduty_events_url,
        policy=policy,
    )
    return ResumeNotifier(
        router,
        channels,
        PagerDutyChangeEvents(current.change_events_url, policy=policy),
        incidents,
        incidents,
        settings=lifecycle.Settings(
            drain_window=timedelta(minutes=current.drain_attribution_window_minutes),
            hold_down=routing.flapping.hold_down,
            accounts=accounts_of(
                current.organization_mode,
                current.stack_account,
                current.region,
                current.account_names,
                organizations_lookup,
            ),
        ),
        on_delivery=lambda channel, ok: count("NotificationsSent" if ok else "NotificationsFailed", "Channel", channel),
        policy=held_back,
        dashboard_url=current.dashboard_url,
    )


def _checkpoint_store() -> S3CheckpointStore:
    return S3CheckpointStore(boto3.client("s3", config=AWS_CLIENT_CONFIG))


@cache
def _checkpoint_requests() -> S3CheckpointRequests:
    return S3CheckpointRequests(boto3.client("s3", config=AWS_CLIENT_CONFIG))


def ecs_client() -> BaseClient:
    """An ECS client whose botocore knows ECS auto-repair.

    The layer does not bundle boto3: the Lambda runtime's is used, in whatever version the runtime carries. A
    botocore older than 1.42.94 has no AutoRepairConfiguration shape and drops it from DescribeCapacityProviders
    answers, so the auto-repair guard would take an ENABLED provider for one without auto-repair.
    """
    return _checked(boto3.client("ecs", config=AWS_CLIENT_CONFIG))


def _checked(client: BaseClient) -> BaseClient:
    if "AutoRepairConfiguration" not in client.meta.service_model.shape_names:
        raise RuntimeError(
            f"botocore {botocore.__version__} does not know ECS auto-repair (AutoRepairConfiguration): the "
            "auto-resume guard needs botocore 1.42.94 or later"
        )
    return client


def place_of(raw_event: Mapping[str, Any]) -> Place | None:
    """Where an event happened (its account and Region); None when they are not well formed (the claim refuses it)."""
    try:
        return Place.of(str(raw_event.get("account")), str(raw_event.get("region")))
    except ValueError:
        return None


MAX_PLACES_KEPT = 64
"""Accounts and Regions whose steps an execution environment keeps built."""


def resume_steps(place: Place | None = None) -> ResumeSteps:
    """The steps, acting where `place` is: the stack's own account and Region (or None, or without the organization's
    bus) with the function's own clients; any other through the member role there."""
    sessions = _sessions()
    if sessions is not None and place is not None and place != sessions.home:
        return _steps_in(place)
    return _own_steps()


@cache
def _own_steps() -> ResumeSteps:
    current = settings()
    dynamodb = boto3.client("dynamodb", config=AWS_CLIENT_CONFIG)
    store = DynamoDBResumeStore(current.incidents_table, dynamodb)
    return ResumeSteps(
        ecs=EcsAdapter(ecs_client(), boto3.client("ec2", config=AWS_CLIENT_CONFIG)),
        store=store,
        spare_records=store,
        incidents=_incident_store,
        fleets=_incident_store,
        checkpoints=_checkpoint_store,
        notifier=_notifier,
        config=current.config(),
        incident_wait_retries=current.incident_wait_retries,
        approvals=DynamoDBInteractionStore(current.incidents_table, dynamodb),
        requests=_checkpoint_requests,
        scaling=_scaling,
    )


@lru_cache(maxsize=MAX_PLACES_KEPT)
def _steps_in(place: Place) -> ResumeSteps:
    """The steps for a fault of another account or Region: its ECS, EC2, S3 and Auto Scaling there, assumed when first
    used; the stack's own table, notifier and approvals."""
    from fault_responder.adapters.autoscaling import AutoScalingAdapter  # noqa: PLC0415

    current = settings()
    sessions = _sessions()
    if sessions is None:
        raise RuntimeError("acting in another account needs MEMBER_ROLE_NAME")
    dynamodb = boto3.client("dynamodb", config=AWS_CLIENT_CONFIG)
    # Its keys named by a cluster, a job or a group begin with the account and Region: another account's cluster or
    # job of the same name is another (adapters/resume_store.py), and its groups' keys are the alert side's.
    store = DynamoDBResumeStore(current.incidents_table, dynamodb, scope=f"{place.account}/{place.region}/")
    return ResumeSteps(
        ecs=_LazyEcs(lambda: EcsAdapter(_checked(sessions.client("ecs", place)), sessions.client("ec2", place))),
        store=store,
        spare_records=store,
        incidents=_incident_store,
        fleets=_incident_store,
        checkpoints=lambda: S3CheckpointStore(sessions.client("s3", place)),
        notifier=_notifier,
        config=current.config(),
        incident_wait_retries=current.incident_wait_retries,
        approvals=DynamoDBInteractionStore(current.incidents_table, dynamodb),
        requests=lambda: S3CheckpointRequests(sessions.client("s3", place)),
        scaling=lambda: AutoScalingAdapter(sessions.client("autoscaling", place)),
        scope=(("account", place.account), ("region", place.region)),
    )


class _LazyEcs:
    """The ECS adapter of a member account, made on each call a step makes with the clients the sessions keep (the
    role assumed on the first, again before its credentials expire): a step that calls no ECS assumes nothing."""

    def __init__(self, make: Callable[[], EcsAdapter]) -> None:
        self._make = make

    def __getattr__(self, name: str) -> Any:
        return getattr(self._make(), name)


@cache
def _sessions() -> MemberSessions | None:
    """With the organization's bus: clients for the other accounts and Regions (None: a single-account stack)."""
    current = settings()
    if not current.member_role_name:
        return None
    from fault_responder.adapters.member_session import MemberSessions  # noqa: PLC0415

    if not current.member_role_external_id:
        raise RuntimeError("MEMBER_ROLE_NAME is set without MEMBER_ROLE_EXTERNAL_ID")
    return MemberSessions(
        home=Place.of(current.stack_account, current.region),
        role_name=current.member_role_name,
        external_id=current.member_role_external_id,
        function_name=current.function_name,
        config=AWS_CLIENT_CONFIG,
    )


@cache
def _scaling() -> AutoScalingAdapter:
    """Only a relaunch that took warm spares grows a group: the other steps never build this client."""
    from fault_responder.adapters.autoscaling import AutoScalingAdapter  # noqa: PLC0415

    return AutoScalingAdapter(boto3.client("autoscaling", config=AWS_CLIENT_CONFIG))


def _fetch_json_secret(name: str, force: bool) -> Any:
    # Imported here: Powertools' parameters (every provider's module) are needed once something is to be sent.
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return parameters.get_secret(name, transform="json", max_age=SECRET_CACHE_SECONDS, force_fetch=force)


def reset() -> None:
    """Forget the wiring and cached secrets (tests and the sandbox call this when endpoints change)."""
    for factory in (settings, _incident_store, _notifier, _own_steps, _steps_in, _sessions):
        factory.cache_clear()
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    parameters.clear_caches()  # type: ignore[no-untyped-call]
