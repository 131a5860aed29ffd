"""Wiring: environment -> settings -> the alert router with its adapters. Built once per container."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.adapters.endpoints import PAGERDUTY_EVENTS_URL, SLACK_API_URL
from fault_responder.adapters.http import Budget, RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.adapters.organizations import organizations_lookup
from fault_responder.adapters.places_store import DynamoDBPlacesStore
from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import StorePorts
from fault_responder.core.accounts import Accounts, accounts_of
from fault_responder.core.observability import count, logger, measure
from fault_responder.core.places import Place
from fault_responder.events.ecs import UnsupportedEventError
from fault_responder.events.enrollment import ACTIONS_SOURCE, Enrollment, Refusal
from fault_responder.events.envelope import RejectedEvent, read_envelope
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import BadAction
from fault_responder.noise.policy import Policy, QuietWhenHandled, SilenceCache, Silencer, WindowMutes
from fault_responder.notification.delivery import Courier
from fault_responder.notification.receivers.kind import Capability
from fault_responder.notification.receivers.registry import with_capability
from fault_responder.routing.router import Router, RoutingConfig, load_routing
from fault_responder.wiring.envtypes import Names, ReceiverSecrets, declared

if TYPE_CHECKING:
    from fault_responder.adapters.member_session import MemberSessions

SECRET_CACHE_SECONDS = 300
QUIET_MODES = frozenset({"auto", "approve"})
"""Resume modes in which the workflow acts on a fault itself, so its incident need not page while it does."""
BUDGET_MARGIN_SECONDS = 3.0
"""Kept back from the invocation's time for recording outcomes and answering SQS."""
MAX_REASON = 1000
LAMBDA_MAX_SECONDS = 900.0
"""The longest a Lambda invocation runs: the time budget when none was given (a direct call, a test)."""
ALARM_SHARE = 0.5
"""The part of a reconciliation run the alarms may take at most (they go first: a hot GPU is told before the
instances are described); the instances have the rest."""
ALARM_LOOKBACK_RUNS = 3
MIN_ALARM_LOOKBACK = timedelta(minutes=15)
MEMBER_CLIENT_CONFIG = Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "max_attempts": 4})
"""The reconciliation's clients in organization mode: an account or Region that does not answer holds one call for
seconds, not the run (botocore retries throttling four times, with backoff, before the place counts as throttled)."""


class RouterSettings(BaseModel):
    """The AlertRouter's environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    incidents_table: str = Field(alias="INCIDENTS_TABLE", min_length=1)
    alert_dlq_url: str = Field(alias="ALERT_DLQ_URL", min_length=1)
    slack_secret_name: str = Field(alias="SLACK_SECRET_NAME", min_length=1)
    pagerduty_secret_name: str = Field(alias="PAGERDUTY_SECRET_NAME", min_length=1)
    receiver_secrets: ReceiverSecrets = Field(alias="RECEIVER_SECRETS", default_factory=dict)
    """Every other receiver kind's secret name (Teams, the webhook), by kind; a kind left out is unused."""
    routing_file: str = Field(alias="ROUTING_FILE", default="default.yaml")
    incident_retention_days: int = Field(alias="INCIDENT_RETENTION_DAYS", default=30, ge=1)
    drain_attribution_window_minutes: int = Field(alias="DRAIN_ATTRIBUTION_WINDOW_MINUTES", default=60, ge=1)
    max_receive_count: int = Field(alias="ALERT_MAX_RECEIVE_COUNT", default=5, ge=1)
    slack_api_url: str = Field(alias="SLACK_API_URL", default=SLACK_API_URL)
    pagerduty_events_url: str = Field(alias="PAGERDUTY_EVENTS_URL", default=PAGERDUTY_EVENTS_URL)
    http_max_attempts: int = Field(alias="HTTP_MAX_ATTEMPTS", default=4, ge=1, le=10)
    training_capacity_providers: Names = Field(alias="TRAINING_CAPACITY_PROVIDERS", default=())
    resume_check_types: Names = Field(alias="RESUME_CHECK_TYPES", default=("ACCELERATED_COMPUTE",))
    resume_mode: str = Field(alias="RESUME_MODE", default="auto")
    resume_page_deadline_minutes: int = Field(alias="RESUME_PAGE_DEADLINE_MINUTES", default=30, ge=1, le=1440)
    silence_refresh_seconds: int = Field(alias="SILENCE_REFRESH_SECONDS", default=30, ge=0, le=600)
    dashboard_url: str = Field(alias="DASHBOARD_URL", default="", pattern=r"^(https://\S+)?$")
    """The stack's CloudWatch dashboard, linked from every Slack root; empty: no link."""
    cluster_arns: Names = Field(alias="CLUSTER_ARNS", default=())
    """The watched clusters (the reconciliation sweep lists their instances); empty: every cluster."""
    reconcile_max_instances: int = Field(alias="RECONCILE_MAX_INSTANCES", default=5000, ge=1, le=100_000)
    organization_mode: bool = Field(alias="ORGANIZATION_MODE", default=False)
    """The stack reads the organization's bus: events of accounts and Regions not enrolled are refused."""
    enrolled_accounts: Names = Field(alias="ENROLLED_ACCOUNTS", default=())
    """Empty: every account the bus admits."""
    enrolled_regions: Names = Field(alias="ENROLLED_REGIONS", default=())
    """Empty: every Region."""
    stack_account: str = Field(alias="STACK_ACCOUNT", default="")
    account_names: str = Field(alias="ACCOUNT_NAMES", default="")
    """AccountNames (`id=name,...`): the accounts' names an organization's pages show beside their ids."""
    region: str = Field(alias="AWS_REGION", default="")
    """The Region the function runs in (Lambda sets it): the stack's, always enrolled."""
    alarm_name_prefix: str = Field(alias="ALARM_NAME_PREFIX", default="", pattern=r"^([^.]{1,254}\.)?$")
    """The stack's alarms' names begin with it (`<stack name>.`): the reconciliation reads them. Empty: it does not."""
    reconcile_rate_minutes: int = Field(alias="RECONCILE_RATE_MINUTES", default=5, ge=1, le=1440)
    """How often the reconciliation runs: an alarm's history is read ALARM_LOOKBACK_RUNS times as far back."""
    member_role_name: str = Field(alias="MEMBER_ROLE_NAME", default="", pattern=r"^[A-Za-z0-9+=,.@_-]{0,64}$")
    """With the organization's bus: forwarder.yaml's role, which the reconciliation assumes in other accounts."""
    member_role_external_id: str = Field(alias="MEMBER_ROLE_EXTERNAL_ID", default="", max_length=1224)
    """The external id that role's trust requires (the stack's MemberRoleExternalId output)."""
    function_name: str = Field(alias="AWS_LAMBDA_FUNCTION_NAME", default="gpu-fault-responder")
    """The function's name (Lambda sets it): the session name in the member accounts' CloudTrail."""
    reconcile_concurrency: int = Field(alias="RECONCILE_CONCURRENCY", default=8, ge=1, le=32)
    """Accounts and Regions the reconciliation reads at once, with the organization's bus."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RouterSettings:
        try:
            return cls.model_validate(declared(cls, env))
        except ValidationError as error:
            fields = sorted({str(e["loc"][0]) for e in error.errors()})
            raise RuntimeError(f"AlertRouter environment is incomplete or invalid: {fields}") from None

    def enrollment(self) -> Enrollment | None:
        """Which accounts and Regions are acted on, with the organization's bus; None: this account's default bus."""
        if not self.organization_mode:
            return None
        try:
            return Enrollment.of(self.stack_account, self.region, self.enrolled_accounts, self.enrolled_regions)
        except ValueError as error:
            raise RuntimeError(
                f"AlertRouter enrollment (STACK_ACCOUNT, AWS_REGION, ENROLLED_*) is invalid: {error}"
            ) from None

    def accounts(self) -> Accounts:
        """The stack's home and the accounts' names (fault_responder.core.accounts), AWS Organizations naming those
        AccountNames does not."""
        return accounts_of(
            self.organization_mode, self.stack_account, self.region, self.account_names, organizations_lookup
        )


class AlertRouter:
    """One SQS record at a time (several at once, in threads): processed, or dead-lettered with its reason.

    A malformed record is dead-lettered at once. A record that fails for any other reason (a receiver that
    stays down, a bug) is left to SQS's redelivery, and on its last receive is dead-lettered here with the
    reason, so that every message in the DLQ says why it is there.
    """

    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        self.enrollment = settings.enrollment()
        routing = load_routing(settings.routing_file)
        router = Router(routing)
        self.channels = SecretChannels(
            fetch_secret=_fetch_json_secret,
            slack_secret_name=settings.slack_secret_name,
            pagerduty_secret_name=settings.pagerduty_secret_name,
            receiver_secrets=settings.receiver_secrets,
            slack_api_url=settings.slack_api_url,
            pagerduty_url=settings.pagerduty_events_url,
            policy=RetryPolicy(max_attempts=settings.http_max_attempts),
        )
        store = DynamoDBInstanceStore(settings.incidents_table, timedelta(days=settings.incident_retention_days))
        silence_store = DynamoDBSilenceStore(settings.incidents_table)
        self.silence_store = silence_store
        self.silences = SilenceCache(
            lambda: silence_store.active(datetime.now(UTC)), refresh_seconds=settings.silence_refresh_seconds
        )
        self.service = AlertService(
            StorePorts(store, store, store),
            router,
            Courier(self.channels, clock=lambda: datetime.now(UTC), dashboard_url=settings.dashboard_url),
            lifecycle.Settings(
                drain_window=timedelta(minutes=settings.drain_attribution_window_minutes),
                hold_down=routing.flapping.hold_down,
                accounts=settings.accounts(),
            ),
            count=count,
            measure=measure,
            policy=policy_for(routing, settings, self.silences.silencer, router.muted_receivers),
            grouping=routing.grouping,
            on_silence=self.silences.refresh,
        )
        self._sqs = boto3.client("sqs")
        self._ends_at = time.monotonic() + LAMBDA_MAX_SECONDS
        self.places: DynamoDBPlacesStore | None = None
        """With the organization's bus: the accounts and Regions whose events were seen (the reconciliation reads
        them where the enrollment lists none)."""
        if self.enrollment is not None:
            self.places = DynamoDBPlacesStore(settings.incidents_table)
        self._sessions: MemberSessions | None = None

    def start_invocation(self, seconds_left: float) -> None:
        """A new invocation: its time budget, shared by every call its records make."""
        seconds_left = min(seconds_left, LAMBDA_MAX_SECONDS)
        self._ends_at = time.monotonic() + seconds_left
        self.channels.budget = Budget(seconds_left, margin=BUDGET_MARGIN_SECONDS)

    def sweep(self) -> dict[str, int]:
        """One run of the sweep (SweepFunction): every open record brought up to date with the time."""
        seconds_left = max(0.0, self._ends_at - time.monotonic() - BUDGET_MARGIN_SECONDS)
        self.silences.refresh_or_keep()  # what ended since the last run is what the sweep is for
        tally = self.service.sweep(seconds_left=seconds_left)
        if self.service.settings.accounts.organization:
            # With the organization's bus, a silence's start and end are told to the channels it mutes.
            seconds_left = max(0.0, self._ends_at - time.monotonic() - BUDGET_MARGIN_SECONDS)
            tally.update(self._silence_news(seconds_left))
        logger.info("sweep done", extra=tally)
        return tally

    def _silence_news(self, seconds_left: float) -> dict[str, int]:
        """Tell the channels each silence mutes that it started, or ended (fault_responder.alerting.announce)."""
        # Imported here: only the sweep tells of silences.
        from fault_responder.alerting.announce import Announcer  # noqa: PLC0415

        service = self.service
        announcer = Announcer(
            self.silence_store,
            self.channels,
            service.receivers,
            service.open_incidents,
            service.settings.accounts,
            clock=service.clock,
            epoch=service.epoch,
            dashboard_url=self.settings.dashboard_url,
            count=count,
        )
        try:
            return announcer.run(seconds_left=seconds_left)
        except Exception as error:  # the silences cannot be read: the next run tries again; the sweep's work stands
            logger.warning("silences' starts and ends not told this run", extra={"reason": f"{error}"[:MAX_REASON]})
            return {"silences_told": 0, "silences_left": 0}

    def reconcile(self) -> dict[str, int]:
        """One run of the reconciliation sweep (ReconcileFunction): what CloudWatch says of the stack's alarms, then
        what ECS says of the instances, against the incidents table; what an event would have said and none did is
        recorded and delivered as the event's would have been."""
        # Imported here: only ReconcileFunction reconciles, and the router's cold start need not pay for it.
        from fault_responder.adapters.ecs_health import EcsHealthInventory  # noqa: PLC0415
        from fault_responder.operations.reconcile import Reconciler  # noqa: PLC0415

        seconds_left = max(0.0, self._ends_at - time.monotonic() - BUDGET_MARGIN_SECONDS)
        self.silences.refresh_or_keep()
        if self.enrollment is not None:
            tally = self._reconcile_organization(seconds_left)
            logger.info("reconciliation done", extra=tally)
            return tally
        service = self.service
        alarms = self._reconcile_alarms(seconds_left * ALARM_SHARE) if self.settings.alarm_name_prefix else {}
        seconds_left = max(0.0, self._ends_at - time.monotonic() - BUDGET_MARGIN_SECONDS)
        reconciler = Reconciler(
            inventory=EcsHealthInventory(boto3.client("ecs")),
            records=service.store,
            observe=lambda facts, left: service.observe(facts, seconds_left=left),
            redeliver=lambda arn, left: service.reconcile(arn, seconds_left=left),
            clusters=self.settings.cluster_arns,
            count=count,
            epoch=time.time,
            max_instances=self.settings.reconcile_max_instances,
        )
        tally = {**reconciler.run(started=datetime.now(UTC), seconds_left=seconds_left), **alarms}
        logger.info("reconciliation done", extra=tally)
        return tally

    def _reconcile_organization(self, seconds_left: float) -> dict[str, int]:
        """The reconciliation in every enrolled account and Region (fault_responder.operations.organization): each
        place's alarms, then its instances, through its own clients, a few places at a time; a place that fails is
        counted for its account (MemberAccountFailures, dimension Account) and never holds up the others."""
        # Imported here, as in `reconcile`: only ReconcileFunction reconciles.
        from fault_responder.adapters.cloudwatch_alarms import CloudWatchAlarms  # noqa: PLC0415
        from fault_responder.adapters.ecs_health import EcsHealthInventory  # noqa: PLC0415
        from fault_responder.adapters.member_session import classify  # noqa: PLC0415
        from fault_responder.operations.alarm_reconcile import AlarmReconciler  # noqa: PLC0415
        from fault_responder.operations.organization import (  # noqa: PLC0415
            MAX_PLACES,
            OrganizationReconciler,
            PlaceResult,
            acting_places,
        )
        from fault_responder.operations.reconcile import Reconciler  # noqa: PLC0415

        settings, service = self.settings, self.service
        sessions = self._member_sessions()
        home = sessions.home
        listed = settings.enrolled_accounts and settings.enrolled_regions
        seen = [] if listed or self.places is None else [place for place, _ in self.places.seen(MAX_PLACES)]
        places, left_out = acting_places(home, settings.enrolled_accounts, settings.enrolled_regions, seen)
        lookback = max(MIN_ALARM_LOOKBACK, timedelta(minutes=ALARM_LOOKBACK_RUNS * settings.reconcile_rate_minutes))

        def run_place(place: Place, seconds: float, records: Sequence[str]) -> PlaceResult:
            ends = time.monotonic() + seconds
            tally: dict[str, int] = {}
            if settings.alarm_name_prefix:
                alarms = AlarmReconciler(
                    source=CloudWatchAlarms(sessions.client("cloudwatch", place)),
                    records=service.store,
                    observe=lambda facts, left: service.observe(facts, seconds_left=left),
                    prefix=settings.alarm_name_prefix,
                    lookback=lookback,
                    redeliver=lambda arn, left: service.reconcile(arn, seconds_left=left),
                    count=count,
                    epoch=time.time,
                )
                tally |= alarms.run(started=datetime.now(UTC), seconds_left=seconds * ALARM_SHARE, open_records=records)
            watched = [arn for arn in settings.cluster_arns if Place.of_arn(arn) == place]
            if settings.cluster_arns and not watched:
                return PlaceResult(tally)  # ClusterArns names none of this place's clusters: none is watched here
            instances = Reconciler(
                inventory=EcsHealthInventory(sessions.client("ecs", place)),
                records=service.store,
                observe=lambda facts, left: service.observe(facts, seconds_left=left),
                redeliver=lambda arn, left: service.reconcile(arn, seconds_left=left),
                clusters=watched,
                count=count,
                epoch=time.time,
                max_instances=settings.reconcile_max_instances,
            )
            left = max(0.0, ends - time.monotonic())
            tally |= instances.run(started=datetime.now(UTC), seconds_left=left, open_records=records)
            return PlaceResult(tally, tuple(instances.failures))

        reconciler = OrganizationReconciler(
            places=places,
            run_place=run_place,
            classify=classify,
            open_records=service.store.open_records,
            report=lambda place, failure: count("MemberAccountFailures", "Account", place.account),
            epoch=time.time,
            max_concurrency=settings.reconcile_concurrency,
            left_out=left_out,
        )
        return reconciler.run(seconds_left=seconds_left)

    def _member_sessions(self) -> MemberSessions:
        """Clients for each account and Region (the member role's, assumed with the stack's external id), kept for
        the container's life."""
        if self._sessions is None:
            from fault_responder.adapters.member_session import MemberSessions  # noqa: PLC0415

            settings = self.settings
            if not settings.member_role_name or not settings.member_role_external_id:
                raise RuntimeError("the reconciliation needs MEMBER_ROLE_NAME and MEMBER_ROLE_EXTERNAL_ID")
            self._sessions = MemberSessions(
                home=Place.of(settings.stack_account, settings.region),
                role_name=settings.member_role_name,
                external_id=settings.member_role_external_id,
                function_name=settings.function_name,
                config=MEMBER_CLIENT_CONFIG,
            )
        return self._sessions

    def _reconcile_alarms(self, seconds_left: float) -> dict[str, int]:
        """The stack's alarms as CloudWatch describes them, against the incidents table
        (fault_responder.operations.alarm_reconcile): what their events would have told and none did."""
        # Imported here, as the instances' reconciliation is: only ReconcileFunction reconciles.
        from fault_responder.adapters.cloudwatch_alarms import CloudWatchAlarms  # noqa: PLC0415
        from fault_responder.operations.alarm_reconcile import AlarmReconciler  # noqa: PLC0415

        service = self.service
        lookback = max(
            MIN_ALARM_LOOKBACK, timedelta(minutes=ALARM_LOOKBACK_RUNS * self.settings.reconcile_rate_minutes)
        )
        reconciler = AlarmReconciler(
            source=CloudWatchAlarms(boto3.client("cloudwatch")),
            records=service.store,
            observe=lambda facts, left: service.observe(facts, seconds_left=left),
            prefix=self.settings.alarm_name_prefix,
            lookback=lookback,
            redeliver=lambda arn, left: service.reconcile(arn, seconds_left=left),
            count=count,
            epoch=time.time,
        )
        return reconciler.run(started=datetime.now(UTC), seconds_left=seconds_left)

    def _handle(self, event: dict[str, Any]) -> dict[str, Any]:
        seconds_left = max(0.0, self._ends_at - time.monotonic() - BUDGET_MARGIN_SECONDS)
        return self.service.handle(event, seconds_left=seconds_left)

    def process_record(self, body: str, message_id: str, receive_count: int = 1) -> dict[str, Any] | None:
        """Handle one SQS message body. Returns None when the message was dead-lettered; raises to have SQS
        deliver it again."""
        last = receive_count >= self.settings.max_receive_count
        try:
            raw = read_envelope(body)
        except RejectedEvent as rejected:
            self._dead_letter(body, message_id, rejected.event_id, f"malformed: {rejected.reason}", receive_count)
            return None
        event_id = str(raw["id"])[:256]
        refusal = self.enrollment.refusal(raw) if self.enrollment is not None else None
        if refusal is not None:
            return self._refuse(event_id, refusal)
        if self.places is not None:
            self._note_place(raw)
        logger.thread_safe_append_keys(correlation_id=event_id)
        try:
            try:
                # No idempotency record first: facts are idempotent and deliveries leased, so a copy of an event
                # finds its facts known and its pages sent (or being sent by the lease holder) and does nothing.
                result = self._handle(raw)
            except (ValidationError, UnsupportedEventError, BadAction) as error:
                self._dead_letter(body, message_id, event_id, f"malformed: {_describe(error)}", receive_count)
                return None
            except Exception as error:
                reason = f"{type(error).__name__}: {error}"
                if last:
                    self._dead_letter(body, message_id, event_id, f"failed on every receive: {reason}", receive_count)
                    return None
                logger.error(
                    "event processing failed; SQS will retry it", extra={"event_id": event_id, "reason": reason}
                )
                raise
            logger.info("event processed", extra={"event_id": event_id, "result": result})
            return result
        finally:
            logger.thread_safe_remove_keys(["correlation_id"])

    def _note_place(self, raw: Mapping[str, Any]) -> None:
        """The event's account and Region seen now (at most one write a minute per pair; never fails the event)."""
        if self.places is None or raw.get("source") == ACTIONS_SOURCE:
            return
        try:
            place = Place.of(str(raw.get("account")), str(raw.get("region")))
        except ValueError:
            return
        self.places.note(place)

    def _refuse(self, event_id: str, refusal: Refusal) -> dict[str, Any]:
        """An event of an account or Region that is not enrolled: logged with its id and counted, never acted on, and
        not dead-lettered (fault_responder.events.enrollment says why)."""
        logger.warning(
            "event refused: not enrolled",
            extra={
                "event_id": event_id,
                "account": refusal.account,
                "region": refusal.region,
                "reason": refusal.detail,
            },
        )
        count("EventsRefused", "Reason", refusal.reason.value)
        return {"event_id": event_id, "kind": "refused", "ignored": refusal.detail, "receivers": {}}

    def _dead_letter(self, body: str, message_id: str, event_id: str | None, reason: str, receive_count: int) -> None:
        reason = reason[:MAX_REASON]
        logger.error("event dead-lettered", extra={"event_id": event_id or message_id, "reason": reason})
        count("DeadLettered", "Queue", "AlertQueue")
        if reason.startswith("malformed"):
            count("MalformedEvents", "Queue", "AlertQueue")
        attributes = {
            "reason": reason,
            "event_id": event_id or "(none)",
            "source_message_id": message_id,
            "receive_count": str(receive_count),
        }
        self._sqs.send_message(
            QueueUrl=self.settings.alert_dlq_url,
            MessageBody=body,
            MessageAttributes={
                name: {"DataType": "String", "StringValue": value or "(empty)"} for name, value in attributes.items()
            },
        )


def policy_for(
    routing: RoutingConfig, settings: RouterSettings, silencer: Silencer | None, window_mutes: WindowMutes | None
) -> Policy:
    """Who hears nothing new, and why: silences, the routing file's maintenance windows and inhibition rules, and
    quiet while the training auto-resume workflow handles a fault it acts on."""
    quiet = None
    if settings.training_capacity_providers and settings.resume_mode in QUIET_MODES:
        quiet = QuietWhenHandled(
            capacity_providers=frozenset(settings.training_capacity_providers),
            check_types=frozenset(settings.resume_check_types),
            deadline=timedelta(minutes=settings.resume_page_deadline_minutes),
            # With the organization's bus the workflow starts for every enrolled account and Region's faults
            # (MemberResumeTrainingRule) and acts there: no account's is left out of the quiet.
        )
    pagerduty = with_capability(routing.receivers, Capability.PAGE)
    return Policy(
        silencer=silencer,
        window_mutes=window_mutes,
        inhibit_rules=tuple(routing.inhibit_rules),
        quiet=quiet,
        pagerduty_receivers=pagerduty,
    )


def _describe(error: Exception) -> str:
    if isinstance(error, ValidationError):
        problems = [f"{'.'.join(str(p) for p in e['loc'])[:100]}: {e['msg'][:200]}" for e in error.errors()[:5]]
        return "invalid event: " + "; ".join(problems)
    return str(error)[:MAX_REASON]


def _fetch_json_secret(name: str, force: bool) -> Any:
    # Imported here: Powertools' parameters (every provider's module) are needed once something is to be sent.
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return parameters.get_secret(name, transform="json", max_age=SECRET_CACHE_SECONDS, force_fetch=force)


@cache
def alert_router() -> AlertRouter:
    return AlertRouter(RouterSettings.from_env(os.environ))


def reset() -> None:
    """Forget the wiring and cached secrets (the sandbox calls this when it points us at new endpoints)."""
    alert_router.cache_clear()
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    parameters.clear_caches()  # type: ignore[no-untyped-call]
