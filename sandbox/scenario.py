"""The scenario file format (docs/scenarios.md): a world to seed, events to replay, faults, actions, and
the expectations the run is checked against.

Every model forbids unknown keys, so a misspelt key is an error naming it rather than a setting
silently ignored. Paths in a scenario are relative to the scenario file, then to the repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sandbox.errors import SandboxError
from sandbox.standins import SERVICES, service_faults

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT_SECONDS = 120.0

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
Name = Annotated[str, Field(pattern=_NAME, max_length=64)]
"""What scenarios call things (instances, tasks, ...): letters, digits, `.`, `_` and `-`."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- The world -------------------------------------------------------------------------------------


class HealthCheck(_Model):
    """One health check as DescribeContainerInstances reports it (no event is sent for it)."""

    type: str = "ACCELERATED_COMPUTE"
    status: Literal["OK", "IMPAIRED", "INSUFFICIENT_DATA", "INITIALIZING"]
    reason: str | None = None
    """Its statusReason, e.g. XID_79."""
    since: str = Field(default="now", pattern=r"^now(?:[+-]\d+(?:\.\d+)?[smhd])?$")
    """When it reached `status` (lastStatusChange): `now`, `now-3m`, ... at seeding."""


SPARE_ATTRIBUTE = "fault-responder.spare"
"""The ECS attribute `spare: true` and `launch_spares: true` stand for (value `true`): the stack's default
SpareAttribute, which marks a warm spare."""
DEFAULT_INSTANCE_TYPE = "p5.48xlarge"
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_./\\-]{1,128}$")
_ATTRIBUTE_VALUE = re.compile(r"^[A-Za-z0-9_.@/\\: -]{1,128}$")


def _ecs_attributes(attributes: dict[str, str]) -> dict[str, str]:
    """`attributes`, checked against ECS's rules for custom attributes. Raises ValueError naming the first wrong."""
    for name, value in attributes.items():
        if not _ATTRIBUTE_NAME.match(name):
            raise ValueError(
                f"attribute name {name!r}: 1 to 128 letters, digits, hyphens, underscores, periods or slashes"
            )
        if not _ATTRIBUTE_VALUE.match(value) or value != value.strip():
            raise ValueError(
                f"attribute {name}: value {value!r}: 1 to 128 letters, digits, hyphens, underscores, periods, @, "
                "slashes, colons or spaces, not starting or ending with a space"
            )
    return attributes


def _with_spare(attributes: dict[str, str], spare: bool, flag: str) -> dict[str, str]:
    """`attributes` with the spare attribute when `spare`; a different value given for it is an error."""
    if not spare:
        return dict(attributes)
    if attributes.get(SPARE_ATTRIBUTE, "true") != "true":
        raise ValueError(f"{flag}: true means {SPARE_ATTRIBUTE}=true, and the attributes give it another value")
    return {**attributes, SPARE_ATTRIBUTE: "true"}


class Instance(_Model):
    name: Name
    instance_type: str = DEFAULT_INSTANCE_TYPE
    status: Literal["ACTIVE", "DRAINING"] = "ACTIVE"
    gpus: int = Field(default=8, ge=0)
    """Reported; moto registers every instance with 4 vCPU and 7482 MiB, and places by those only."""
    health: list[HealthCheck] = []
    """Its health checks as ECS describes them (default: CONTAINER_RUNTIME OK); no event announces them."""
    gone: bool = False
    """Deregistered once seeded, with no event: ECS no longer lists it (its INACTIVE event was lost)."""
    attributes: dict[str, str] = {}
    """Custom ECS attributes, name -> value, put on the instance once it registers (PutAttributes)."""
    spare: bool = False
    """Short for the attribute fault-responder.spare = true: a warm spare."""

    @field_validator("attributes")
    @classmethod
    def _attributes_as_ecs_takes_them(cls, attributes: dict[str, str]) -> dict[str, str]:
        return _ecs_attributes(attributes)

    @model_validator(mode="after")
    def _spare_agrees(self) -> Instance:
        _with_spare(self.attributes, self.spare, "spare")
        return self

    @property
    def ecs_attributes(self) -> dict[str, str]:
        """The custom attributes it registers with: `attributes`, and the spare attribute when `spare`."""
        return _with_spare(self.attributes, self.spare, "spare")


_AUTO_SCALING_SETTINGS = (
    "managed_scaling",
    "launch_delay_seconds",
    "max_size",
    "launch_attributes",
    "launch_spares",
    "launch_instance_type",
    "launch_gpus",
)


class CapacityProvider(_Model):
    name: Name
    type: Literal["EC2_AUTOSCALING", "MANAGED_INSTANCES"] = "EC2_AUTOSCALING"
    auto_repair: Literal["ENABLED", "DISABLED"] | None = None
    """ECS auto-repair (`managedInstancesProvider.autoRepairConfiguration.actionsStatus`): MANAGED_INSTANCES only."""
    instances: list[Instance] = []
    managed_scaling: bool = False
    """ECS managed scaling: a RunTask that finds no room waits in PROVISIONING and the group grows by one."""
    launch_delay_seconds: float = Field(default=300.0, ge=0, le=3600)
    """How long after the group's desired capacity rises a launched instance registers with ECS."""
    max_size: int | None = Field(default=None, ge=0)
    """The Auto Scaling group's MaxSize (default: its instances at seeding + 10)."""
    launch_attributes: dict[str, str] = {}
    """Custom ECS attributes a launched instance registers with (a launch template's ECS_INSTANCE_ATTRIBUTES)."""
    launch_spares: bool = False
    """Short for launch_attributes fault-responder.spare = true: launched instances are warm spares."""
    launch_instance_type: str | None = None
    """The launch template's instance type (default: the first instance's, else p5.48xlarge)."""
    launch_gpus: int = Field(default=8, ge=0)
    """Reported for a launched instance, as `gpus` is for a seeded one."""

    @field_validator("launch_attributes")
    @classmethod
    def _launch_attributes_as_ecs_takes_them(cls, attributes: dict[str, str]) -> dict[str, str]:
        return _ecs_attributes(attributes)

    @model_validator(mode="after")
    def _settings_fit_the_type(self) -> CapacityProvider:
        if self.auto_repair is not None and self.type != "MANAGED_INSTANCES":
            raise ValueError("auto_repair is a setting of MANAGED_INSTANCES capacity providers")
        given = [name for name in _AUTO_SCALING_SETTINGS if name in self.model_fields_set]
        if given and self.type == "MANAGED_INSTANCES":
            raise ValueError(
                f"{', '.join(given)}: settings of an EC2_AUTOSCALING provider's Auto Scaling group; a "
                "MANAGED_INSTANCES provider has none"
            )
        if self.max_size is not None and self.max_size < self.starting_size:
            raise ValueError(f"max_size {self.max_size} is below the {self.starting_size} instances it starts with")
        _with_spare(self.launch_attributes, self.launch_spares, "launch_spares")
        return self

    @property
    def starting_size(self) -> int:
        """The Auto Scaling group's desired (and minimum) capacity at seeding: its instances that are not gone."""
        return sum(not instance.gone for instance in self.instances)

    @property
    def group_max_size(self) -> int:
        """The Auto Scaling group's MaxSize."""
        return self.max_size if self.max_size is not None else self.starting_size + 10

    @property
    def launched_instance_type(self) -> str:
        """The instance type the Auto Scaling group launches."""
        if self.launch_instance_type is not None:
            return self.launch_instance_type
        return self.instances[0].instance_type if self.instances else DEFAULT_INSTANCE_TYPE

    @property
    def launched_attributes(self) -> dict[str, str]:
        """The custom attributes a launched instance registers with."""
        return _with_spare(self.launch_attributes, self.launch_spares, "launch_spares")


class Container(_Model):
    name: Name
    image: str | None = None
    cpu: int = Field(default=0, ge=0)
    memory: int = Field(default=512, gt=0)
    environment: dict[str, str] = {}
    gpus: int = Field(default=0, ge=0)
    essential: bool = True


class TaskDefinition(_Model):
    family: Name
    containers: list[Container] = Field(min_length=1)


class JobTags(_Model):
    """The fault-responder:* tags of a training job, as named fields."""

    id: str
    checkpoint_uri: str | None = None
    max_attempts: int | None = None
    mode: str | None = None


class Task(_Model):
    name: Name
    task_definition: str
    """A family of this cluster's task_definitions (its latest revision), or `family:revision`."""
    instance: str
    """The instance (by name) the task runs on."""
    capacity_provider: str | None = None
    """Default: the instance's capacity provider."""
    job: JobTags | None = None
    tags: dict[str, str] = {}
    environment: dict[str, dict[str, str]] = {}
    """Container name -> variables, added to `overrides.containerOverrides`."""
    overrides: dict[str, Any] = {}
    """ECS task overrides, as RunTask takes them."""
    started_by: str | None = None
    group: str | None = None
    last_status: Literal["RUNNING", "STOPPED"] = "RUNNING"


class Cluster(_Model):
    name: Name
    tags: dict[str, str] = {}
    """The cluster's tags (fault-responder:drill-target: true makes it a DCGM drill target, docs/drills.md)."""
    capacity_providers: list[CapacityProvider] = []
    task_definitions: list[TaskDefinition] = []
    tasks: list[Task] = []


class Checkpoints(_Model):
    """Checkpoint folders written with the training helper (training/fault_responder_checkpoint.py)."""

    uri: str
    steps: list[int] = []
    """Complete checkpoints: files, then the `_COMPLETE` manifest."""
    incomplete: list[int] = []
    """Interrupted saves: the files without the manifest."""
    files_per_step: int = Field(default=2, ge=1, le=1000)
    file_size: int = Field(default=64, ge=1, le=1_000_000)
    answers: dict[int, str] = {}
    """Complete steps whose manifest answers a checkpoint-now request: step -> the request's id."""

    @model_validator(mode="after")
    def _answers_complete_steps(self) -> Checkpoints:
        unknown = sorted(set(self.answers) - set(self.steps))
        if unknown:
            raise ValueError(f"answers names steps that are not complete checkpoints (steps): {unknown}")
        return self

    @field_validator("uri")
    @classmethod
    def _s3_prefix(cls, uri: str) -> str:
        if not re.match(r"^s3://[^/]+/", uri):
            raise ValueError("must be an s3://bucket/prefix/ URI")
        return uri if uri.endswith("/") else f"{uri}/"


class S3Object(_Model):
    """A raw object, for what the helper would never write (another framework's markers, a broken manifest)."""

    uri: str
    body: str | None = None
    json_body: Any = Field(default=None, alias="json")
    size: int | None = Field(default=None, ge=0)
    """A body of this many bytes, when neither body nor json is given."""

    @field_validator("uri")
    @classmethod
    def _s3_key(cls, uri: str) -> str:
        if not re.match(r"^s3://[^/]+/.+", uri):
            raise ValueError("must be an s3://bucket/key URI")
        return uri


class LedgerAttempt(_Model):
    step: int | None
    """The checkpoint step the attempt resumed from (null: from scratch)."""
    outcome: Literal["launching", "running", "failed"] = "failed"
    checkpoint_uri: str | None = None
    reason: str | None = None
    hours_ago: float = Field(default=1.0, ge=0)


class LedgerEntry(_Model):
    """Earlier resume attempts of a job, written through the workflow's own ledger store."""

    job_id: str
    cluster: str
    attempts: list[LedgerAttempt] = []
    failed_hosts: list[str] = []
    """Instance names (or EC2 instance ids) that failed earlier attempts."""


class Trainer(_Model):
    """An emulated training job (sandbox/trainer_emulation.py): while its tasks run it trains, writes a checkpoint
    every `checkpoint_every` steps with the training helper, and answers checkpoint-now requests."""

    job: str = Field(min_length=1)
    """The fault-responder:job-id of the job's tasks."""
    cluster: Name | None = None
    """Default: the cluster whose seeded tasks carry the job id."""
    step_seconds: float = Field(default=0.2, gt=0, le=3600)
    """Wall seconds per training step."""
    checkpoint_every: int = Field(default=25, ge=1)
    """A complete checkpoint every N steps."""
    check_requests_every: int = Field(default=1, ge=1)
    """Look for `<prefix>_CHECKPOINT_NOW` every N steps."""
    answers_requests: bool = True
    """False: never looks for a request (a job that lets checkpoint-now time out)."""
    start_step: int | None = Field(default=None, ge=0)
    """The step the seeded tasks are at when the run starts (default: the step of the newest seeded complete
    checkpoint under the job's URI, else 0)."""
    files_per_checkpoint: int = Field(default=2, ge=1, le=1000)
    """Files (small ones) written per checkpoint before its manifest."""


@dataclass(frozen=True)
class TrainedJob:
    """A trainer with what the world says of its job."""

    trainer: Trainer
    cluster: str
    checkpoint_uri: str
    """The tasks' fault-responder:checkpoint-uri, ending with `/`."""
    start_step: int


ContributorError = Literal["AccessDeniedException", "ResourceNotFoundException", "ValidationError"]
"""What DescribeAlarmContributors can be made to answer instead of the contributors (cloudwatch_emulation.py)."""
_SINCE = r"^now(?:[+-]\d+(?:\.\d+)?[smhd])?$"


class AlarmContributor(_Model):
    """One series of a multi time series alarm in ALARM, as DescribeAlarmContributors lists it (no event is sent)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,16}$")
    """CloudWatch's id for the series: 1 to 16 letters, digits, `.`, `_`, `:` or `-`."""
    cluster: str | None = Field(default=None, min_length=1, max_length=255)
    """Short for the attribute ClusterName."""
    attributes: dict[str, str] = {}
    value: float | None = None
    """The datapoint that crossed the threshold: its reason is the one CloudWatch writes with it."""
    reason: str | None = Field(default=None, min_length=1, max_length=1023)
    """Its StateReason, when not the one `value` makes."""
    since: str = Field(default="now", pattern=_SINCE)
    """When it entered ALARM (StateTransitionedTimestamp): `now`, `now-3m`, ... when the world or the step is set."""

    @property
    def all_attributes(self) -> dict[str, str]:
        return {**self.attributes, **({"ClusterName": self.cluster} if self.cluster else {})}

    def state_reason(self, threshold: float, at: datetime) -> str:
        """Its reason as CloudWatch words it (the datapoint's minute before `at`), unless the scenario gives one."""
        if self.reason is not None:
            return self.reason
        if self.value is None:
            return f"Threshold Crossed: 1 datapoint was greater than the threshold ({threshold:.1f})."
        minute = (at - timedelta(minutes=1)).strftime("%d/%m/%y %H:%M:00")
        return (
            f"Threshold Crossed: 1 datapoint was greater than the threshold ({threshold:.1f}). The most recent "
            f"datapoint which crossed the threshold: [{self.value:.1f} ({minute})]."
        )


class Alarm(_Model):
    """One of the stack's CloudWatch alarms as CloudWatch describes it (sandbox/cloudwatch_emulation.py): seeded in
    the world, or set by an `alarm` step. No event is sent: a scenario replays its events as steps, or loses them."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,100}$")
    """What follows the stack's name and its dot: `gpu-temperature` is `<stack name>.gpu-temperature`."""
    state: Literal["OK", "ALARM", "INSUFFICIENT_DATA"] = "OK"
    reason: str | None = Field(default=None, min_length=1, max_length=1023)
    """Its StateReason (default: as CloudWatch words it, with `series` and its contributors)."""
    series: int | None = Field(default=None, ge=1, le=10_000)
    """How many time series it evaluates (a GROUP BY alarm's reason counts "N out of <series>")."""
    threshold: float = 90.0
    since: str = Field(default="now", pattern=_SINCE)
    """When it entered its state: `now`, `now-3m`, ... when the world or the step is set."""
    contributors: list[AlarmContributor] = []
    """Its series in ALARM (those of the alarm before that are not listed are OK from `since`)."""
    contributors_error: ContributorError | None = None
    """DescribeAlarmContributors answers this error instead of the contributors (an account or a role without it)."""
    account: str | None = Field(default=None, pattern=r"^[0-9]{12}$")
    """An `alarm` step's: the world account whose alarm it sets (with `region`; default: the stack's own)."""
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$")

    @model_validator(mode="after")
    def _account_with_region(self) -> Alarm:
        if (self.account is None) != (self.region is None):
            raise ValueError(f"alarm {self.name}: give account and region together, or neither (the stack's own)")
        return self

    @property
    def place(self) -> tuple[str, str] | None:
        """The world account and Region an `alarm` step's alarm is in; None: the stack's own."""
        return (self.account, self.region) if self.account is not None and self.region is not None else None

    @model_validator(mode="after")
    def _contributors_when_firing(self) -> Alarm:
        ids = [contributor.id for contributor in self.contributors]
        if len(set(ids)) != len(ids):
            raise ValueError(f"alarm {self.name}: two contributors have one id")
        if self.contributors and self.state != "ALARM":
            raise ValueError(f"alarm {self.name}: contributors are the series in ALARM; a {self.state} alarm has none")
        if self.series is not None and len(self.contributors) > self.series:
            raise ValueError(f"alarm {self.name}: more contributors in ALARM than the {self.series} series it has")
        return self

    @property
    def state_reason(self) -> str:
        """Its reason as CloudWatch words it, unless the scenario gives one."""
        if self.reason is not None:
            return self.reason
        if self.state == "OK":
            return "Threshold Crossed: no datapoint was greater than the threshold."
        if self.state == "INSUFFICIENT_DATA":
            return "Insufficient Data: 1 datapoint was unknown."
        if self.contributors or self.series is not None:
            hot = len(self.contributors)
            return f"Threshold Crossed: {hot} out of {self.series or hot} time series evaluated to ALARM"
        return f"Threshold Crossed: 1 datapoint was greater than the threshold ({self.threshold:g})."


ACCOUNT_ID = r"^[0-9]{12}$"
REGION = r"^[a-z]{2}(-[a-z]+)+-[0-9]$"
MEMBER_ALARMS = ("gpu-temperature", "gpu-restart-app-xids")
"""The alarms forwarder.yaml creates in a member account and Region (under the stack's name and its dot)."""
HOME_ACCOUNT = "123456789012"
"""The stack's account in the sandbox (moto's default account)."""
HOME_REGION = "us-east-1"


class MemberRegion(_Model):
    """One Region of a member account: what runs there, and whether forwarder.yaml's rules forward its events."""

    region: str = Field(pattern=REGION)
    forwarder: bool = True
    """forwarder.yaml deployed here (its rules forward this Region's events to the stack's bus)."""
    clusters: list[Cluster] = []
    buckets: list[str] = []
    checkpoints: list[Checkpoints] = []
    objects: list[S3Object] = []
    alarms: list[Alarm] = []
    """forwarder.yaml's GPU alarms here (MEMBER_ALARMS), as CloudWatch describes them; no event is sent."""

    @model_validator(mode="after")
    def _forwarders_alarms(self) -> MemberRegion:
        names = [alarm.name for alarm in self.alarms]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.region}: alarms: two alarms have one name")
        others = sorted(set(names) - set(MEMBER_ALARMS))
        if others:
            raise ValueError(
                f"{self.region}: alarms {', '.join(others)}: a member account's alarms are forwarder.yaml's "
                f"({', '.join(MEMBER_ALARMS)})"
            )
        if any(alarm.place is not None for alarm in self.alarms):
            raise ValueError(f"{self.region}: alarms: an alarm of world.accounts is where it is listed (no account)")
        if not self.forwarder and self.alarms:
            raise ValueError(f"{self.region}: alarms: forwarder.yaml creates its GPU alarms where it forwards")
        return self


class MemberAccount(_Model):
    """Another account of the world (docs/scenarios.md#accounts), seeded with its own credentials."""

    id: str = Field(pattern=ACCOUNT_ID)
    name: str | None = Field(default=None, min_length=1, max_length=50)
    """Its name in the organization (shown in the report)."""
    organization: bool = True
    """In the organization the stack's bus admits (its OrganizationId); false: an account outside it."""
    role: Literal["present", "deleted", "wrong_external_id", "none"] = "present"
    """forwarder.yaml's ResponderRole: created (present), created then deleted, created trusting another external id,
    or never created (none)."""
    forwarder_parameters: dict[str, str] = {}
    """forwarder.yaml parameters beyond those the sandbox sets from the stack (CheckpointBuckets, ...)."""
    regions: list[MemberRegion] = Field(min_length=1)

    @model_validator(mode="after")
    def _regions_once(self) -> MemberAccount:
        regions = [region.region for region in self.regions]
        if len(set(regions)) != len(regions):
            raise ValueError(f"account {self.id}: a Region is listed twice")
        if self.id == HOME_ACCOUNT and HOME_REGION in regions:
            raise ValueError(
                f"account {self.id} is the stack's: its {HOME_REGION} is the world's own clusters, not an account's"
            )
        return self


class World(_Model):
    clusters: list[Cluster] = []
    buckets: list[str] = []
    checkpoints: list[Checkpoints] = []
    objects: list[S3Object] = []
    ledger: list[LedgerEntry] = []
    trainers: list[Trainer] = []
    alarms: list[Alarm] = []
    """The stack's alarms as CloudWatch describes them (what the reconciliation reads); no event is sent."""
    accounts: list[MemberAccount] = []
    """Other accounts and their Regions (docs/scenarios.md#accounts): the stack runs in the sandbox's own."""

    @model_validator(mode="after")
    def _accounts_once(self) -> World:
        ids = [account.id for account in self.accounts]
        if len(set(ids)) != len(ids):
            raise ValueError("accounts: an account is listed twice")
        return self

    @model_validator(mode="after")
    def _one_alarm_per_name(self) -> World:
        names = [alarm.name for alarm in self.alarms]
        if len(set(names)) != len(names):
            raise ValueError("alarms: two alarms have one name")
        if any(alarm.place is not None for alarm in self.alarms):
            raise ValueError("alarms: the stack's alarms name no account (a member's are under its Region)")
        return self

    @model_validator(mode="after")
    def _launched_names_are_free(self) -> World:
        providers = [provider for cluster in self.clusters for provider in cluster.capacity_providers]
        for provider in providers:
            launched = re.compile(rf"^{re.escape(provider.name)}-launched-\d+$")
            for other in providers:
                for instance in other.instances:
                    if launched.match(instance.name):
                        raise ValueError(
                            f"instance {instance.name}: names of the form {provider.name}-launched-N are those of "
                            f"the instances {provider.name}'s Auto Scaling group launches"
                        )
        return self

    @model_validator(mode="after")
    def _trainers_train_seeded_jobs(self) -> World:
        jobs = [trainer.job for trainer in self.trainers]
        for trainer in self.trainers:
            if jobs.count(trainer.job) > 1:
                raise ValueError(f"trainers: job {trainer.job!r} has more than one trainer")
            self.trained(trainer)
        return self

    def trained(self, trainer: Trainer) -> TrainedJob:
        """The trainer's job as the seeded tasks carrying its id describe it. Raises ValueError saying what is wrong."""
        carrying = {
            cluster.name: [task.job for task in cluster.tasks if task.job is not None and task.job.id == trainer.job]
            for cluster in self.clusters
        }
        carrying = {name: jobs for name, jobs in carrying.items() if jobs}
        if not carrying:
            known = sorted({task.job.id for c in self.clusters for task in c.tasks if task.job is not None})
            raise ValueError(
                f"trainers: no seeded task carries the job id {trainer.job!r} (jobs: {', '.join(known) or 'none'})"
            )
        if trainer.cluster is None and len(carrying) > 1:
            raise ValueError(
                f"trainers: job {trainer.job!r} has tasks in clusters {', '.join(carrying)}: name one with `cluster`"
            )
        cluster = trainer.cluster or next(iter(carrying))
        if cluster not in carrying:
            raise ValueError(f"trainers: job {trainer.job!r} has no seeded task in cluster {cluster!r}")
        uris = {job.checkpoint_uri for job in carrying[cluster]}
        uri = next(iter(uris))
        if len(uris) != 1 or uri is None or not re.match(r"^s3://[^/]+/", uri):
            raise ValueError(
                f"trainers: the tasks of job {trainer.job!r} must carry one s3://bucket/prefix/ checkpoint_uri, "
                f"not {sorted(map(str, uris))}"
            )
        uri = uri if uri.endswith("/") else f"{uri}/"
        seeded = (step for checkpoints in self.checkpoints if checkpoints.uri == uri for step in checkpoints.steps)
        start = trainer.start_step if trainer.start_step is not None else max(seeded, default=0)
        return TrainedJob(trainer, cluster, uri, start)


# --- Events, faults, actions -------------------------------------------------------------------------


CLI_TARGET_OPTIONS = ("--stack", "--table", "--region", "--endpoint-url")
"""Chosen by the runner for a `cli` step: the deployed stack's IncidentsTable, in the sandbox's moto."""


Signed = Literal["rightly", "wrongly", "not"]
"""How a stand-in signs what it sends: with the secret the sandbox put in the stack's secret, with another secret,
or not at all (no signature headers)."""
SlackUser = Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,31}$")]

Moment = Annotated[str, Field(min_length=1, max_length=200)]
"""When a step says something happened: `now-6m`, an ISO 8601 time, ... (see `moment`)."""

_RELATIVE = re.compile(r"^now(?:([+-])(\d{1,7}(?:\.\d{1,6})?)([smhd]))?$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def moment(text: str, now: datetime) -> datetime:
    """A moment a step names: `now`, `now-6m`, `now+90s`, `now-2h`, `now-1d` (from `now`), or an ISO 8601 time with
    its time zone (`2026-04-11T00:49:09Z`, or a placeholder that becomes one). Raises ValueError saying what to
    write."""
    relative = _RELATIVE.match(text)
    if relative is not None:
        if relative.group(1) is None:
            return now
        seconds = float(relative.group(2)) * _UNIT_SECONDS[relative.group(3)]
        try:
            return now + timedelta(seconds=seconds if relative.group(1) == "+" else -seconds)
        except OverflowError:
            raise ValueError(f"{text!r} is further from now than a date can be") from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(
            f"{text!r} is not a moment: write now, now-6m, now-90s, now-2h, now-1d or an ISO 8601 time with its time "
            "zone (2026-04-11T00:49:09Z)"
        )
    return parsed.astimezone(UTC)


def _a_moment(text: str | None) -> str | None:
    """`text`, checked now; one with a placeholder is checked once the step fills it."""
    if text is not None and "{{" not in text:
        moment(text, datetime.now(UTC))
    return text


class ClickStep(_Model):
    """`click:` a person presses an incident root's button in Slack: the Slack stand-in signs the press and sends it
    to SlackActionsFunction's function URL. Or, with `replay`, an earlier press is sent again exactly (the same body,
    signature and timestamp), as someone who recorded it would."""

    button: Literal["acknowledge", "resolve", "silence_1h", "silence_4h"] | None = None
    """Required, unless this is a replay."""
    user: SlackUser | None = None
    """The Slack user id who presses. Required, unless this is a replay."""
    signed: Signed = "rightly"
    instance: Name | None = None
    """The root of this instance's incident (default: the newest root with the button)."""
    signed_at: Moment | None = None
    """The X-Slack-Request-Timestamp it is signed with (default: now): `now-6m`, an ISO 8601 time, ..."""
    replay: bool | int | None = None
    """`true`: the latest press a click step sent, sent again exactly; a step number: that click step's press."""

    @field_validator("signed_at")
    @classmethod
    def _signed_at_a_moment(cls, value: str | None) -> str | None:
        return _a_moment(value)

    @field_validator("replay", mode="before")
    @classmethod
    def _replay_true_or_a_step(cls, value: Any) -> Any:
        if value is None or value is True or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("replay is true (the latest press sent) or the number of an earlier click step (1, 2, ...)")

    @model_validator(mode="after")
    def _a_press_or_a_replay(self) -> ClickStep:
        if self.replay is None:
            missing = [name for name in ("button", "user") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a click names its {' and '.join(missing)} (or replays an earlier press)")
            return self
        given = sorted(self.model_fields_set - {"replay"})
        if given:
            raise ValueError(
                f"a replay sends an earlier press exactly: it takes no {', '.join(given)} (the press it replays has "
                "them)"
            )
        return self


class PagerDutyStep(_Model):
    """`pagerduty:` someone acts on an alert in PagerDuty (the newest, or the one named): the PagerDuty stand-in
    changes the alert and sends the v3 webhook to PagerDutyWebhookFunction's function URL."""

    webhook: Literal["acknowledged", "unacknowledged", "resolved", "reassigned"]
    by: str = Field(default="Jane Doe", min_length=1, max_length=100)
    """Who did it (the webhook's agent summary)."""
    agent: Literal["user", "service"] = "user"
    """A person (`user_reference`) or a service (`service_reference`: what the responder's own Events API calls
    come back as)."""
    signed: Signed = "rightly"
    assignee: str | None = Field(default=None, min_length=1, max_length=100)
    """For `reassigned`: who it now goes to (required there, refused elsewhere)."""
    incident: int | None = Field(default=None, ge=1, le=1_000_000)
    """The alert it is about, by PagerDuty's incident number (the alerts in the order they opened, from 1)."""
    dedup_key: str | None = Field(default=None, min_length=1, max_length=1000)
    """Or the newest alert with this dedup key (placeholders filled when the step runs)."""
    occurred_at: Moment | None = None
    """When it happened in PagerDuty (the webhook's `occurred_at`; default now): `now-6m`, an ISO 8601 time, ..."""

    @field_validator("occurred_at")
    @classmethod
    def _occurred_at_a_moment(cls, value: str | None) -> str | None:
        return _a_moment(value)

    @model_validator(mode="after")
    def _assignee_for_reassigned_only(self) -> PagerDutyStep:
        if self.webhook == "reassigned" and self.assignee is None:
            raise ValueError("a reassigned webhook names its assignee")
        if self.webhook != "reassigned" and self.assignee is not None:
            raise ValueError("assignee is for reassigned webhooks")
        if self.incident is not None and self.dedup_key is not None:
            raise ValueError("a webhook names its alert by incident number or by dedup_key, not both")
        return self


class EventStep(_Model):
    """One step: an event (from a file or inline, adjusted, delivered once or more), a CLI command, a scheduled
    function, a press of a button in Slack, or a PagerDuty webhook."""

    file: str | None = None
    event: dict[str, Any] | None = None
    cli: list[str] | None = None
    """`python -m fault_responder.cli` arguments, run in process against the sandbox's incidents table."""
    sweep: bool | None = None
    """`sweep: true`: run the stack's SweepFunction once, as its one-minute schedule would."""
    reconcile: bool | None = None
    """`reconcile: true`: run the stack's ReconcileFunction once, as its schedule would."""
    click: ClickStep | None = None
    """A press of an incident root's button in Slack (SlackActionsFunction's function URL)."""
    pagerduty: PagerDutyStep | None = None
    """A PagerDuty v3 webhook about the newest alert (PagerDutyWebhookFunction's function URL)."""
    alarm: Alarm | None = None
    """One of the world's alarms changes state in CloudWatch (its state in full); no event is sent."""
    delete_role: str | None = Field(default=None, pattern=ACCOUNT_ID)
    """This world account's ResponderRole (forwarder.yaml's) is deleted: AssumeRole of it fails from now on."""
    sender: str | None = Field(default=None, pattern=ACCOUNT_ID)
    """The event is put on the stack's bus by this account's PutEvents (its `account` is the sender's, as EventBridge
    sets it), not where it happened; the bus policy decides whether it is admitted."""
    expect_exit: int | None = Field(default=None, ge=0, le=255)
    """A `cli` step's expected exit status (default 0); any other fails the scenario."""
    instance: str | None = None
    """Point the event at this instance: cluster, container instance, EC2 instance, capacity provider."""
    overrides: dict[str, Any] = {}
    """Deep-merged into the event (objects merge, anything else replaces; null removes a key)."""
    repeat: int = Field(default=1, ge=1, le=100)
    """Deliver it this many times, each after the executions the previous one started have finished."""
    concurrently: int = Field(default=1, ge=1, le=20)
    """Deliver this many copies at the same moment (duplicate triggers)."""
    delay_seconds: float = Field(default=0, ge=0, le=600)
    wait: bool = True
    """Wait for the executions it started before the next step (the last step always waits)."""

    @field_validator("cli", mode="before")
    @classmethod
    def _arguments_as_text(cls, value: Any) -> Any:
        # YAML reads `--duration, 1h` as text but `--expect, 2` as a number: every argument is text to a CLI.
        if isinstance(value, list):
            return [item if isinstance(item, str) else str(item) for item in value]
        return value

    @model_validator(mode="after")
    def _one_source(self) -> EventStep:
        sources = (
            self.file,
            self.event,
            self.cli,
            self.sweep,
            self.reconcile,
            self.click,
            self.pagerduty,
            self.alarm,
            self.delete_role,
        )
        if sum(source is not None for source in sources) != 1:
            raise ValueError(
                "give exactly one of file, event, cli, sweep, reconcile, click or pagerduty (or alarm, which "
                "changes an alarm's state, or delete_role)"
            )
        if self.sender is not None and self.file is None and self.event is None:
            raise ValueError("sender is for an event step (file or event)")
        if self.delete_role is not None:
            given = self.instance is not None or bool(self.overrides) or self.concurrently != 1 or self.repeat != 1
            if given or self.expect_exit is not None:
                raise ValueError("a delete_role step takes no instance, overrides, repeat, concurrently or expect_exit")
            return self
        if self.alarm is not None:
            given = self.instance is not None or bool(self.overrides) or self.concurrently != 1 or self.repeat != 1
            if given or self.expect_exit is not None:
                raise ValueError("an alarm step takes no instance, overrides, repeat, concurrently or expect_exit")
            return self
        for name, sent in (("click", self.click), ("pagerduty", self.pagerduty)):
            if sent is None:
                continue
            if self.instance is not None or self.overrides or self.concurrently != 1 or self.expect_exit is not None:
                raise ValueError(f"a {name} step takes no instance, overrides, concurrently or expect_exit")
            return self
        for name, scheduled in (("sweep", self.sweep), ("reconcile", self.reconcile)):
            if scheduled is None:
                continue
            if scheduled is not True:
                raise ValueError(f"a {name} step is `{name}: true`")
            extra = self.instance is not None or bool(self.overrides) or self.concurrently != 1 or self.expect_exit
            if extra:
                raise ValueError(f"a {name} step takes no instance, overrides, concurrently or expect_exit")
            return self
        if self.cli is None:
            if self.expect_exit is not None:
                raise ValueError("expect_exit is for cli steps")
            return self
        if not self.cli:
            raise ValueError("cli needs the command's arguments, e.g. [silence, list]")
        unsupported = [
            name
            for name, given in (
                ("instance", self.instance is not None),
                ("overrides", bool(self.overrides)),
                ("repeat", self.repeat != 1),
                ("concurrently", self.concurrently != 1),
            )
            if given
        ]
        if unsupported:
            raise ValueError(f"a cli step takes no {', '.join(unsupported)}")
        targets = [arg for arg in self.cli if arg.split("=", 1)[0] in CLI_TARGET_OPTIONS]
        if targets:
            raise ValueError(
                f"a cli step names no target ({', '.join(targets)}): the sandbox's incidents table is used"
            )
        return self


class RunTaskFault(_Model):
    fail: int = Field(default=0, ge=0)
    """The next N RunTask calls place nothing and report `reason`."""
    reason: str = "RESOURCE:GPU"
    stop_early: int = Field(default=0, ge=0)
    """The next N tasks RunTask starts stop before they are RUNNING."""
    stop_reason: str = "Essential container in task exited"
    stop_code: str = "EssentialContainerExited"


class Faults(_Model):
    slack: list[Any] | dict[str, Any] = []
    """Slack's schedule, as SANDBOX_FAULTS takes it: `[429, {pass: 2}, {fail: 500, times: 4}]`, ..."""
    pagerduty: list[Any] | dict[str, Any] = []
    """PagerDuty's schedule."""
    run_task: RunTaskFault | None = None

    @field_validator(*SERVICES, mode="before")
    @classmethod
    def _a_schedule(cls, value: Any, info: ValidationInfo) -> Any:
        service_faults(str(info.field_name), value)  # its ValueError says what is wrong and what to write
        return value


class EcsSettings(_Model):
    start_after_describes: int = Field(default=1, ge=0)
    """DescribeTasks calls a new task stays PENDING for."""
    stop_after_describes: int = Field(default=1, ge=0)
    """DescribeTasks calls a stopped task stays STOPPING for."""


class Action(_Model):
    """Press a button of the workflow's approval request in Slack: the Slack stand-in sends the signed press to
    SlackActionsFunction's function URL. `approve` and `reject` are short for `click` with that button."""

    action: Literal["click", "approve", "reject"]
    button: Literal["approve", "reject"] | None = None
    """For `click`: which button (Approve or Reject)."""
    user: str | None = Field(default=None, pattern=r"^[UW][A-Z0-9]{2,31}$")
    """The Slack user id who presses; default the first of the ResumeApprovers parameter."""
    signed: Literal["rightly", "wrongly", "not"] = "rightly"
    """How the stand-in signs the press: with the signing secret, with another secret, or not at all."""
    after_seconds: float = Field(default=0, ge=0, le=3600)
    """How long after the buttons were posted."""

    @model_validator(mode="after")
    def _button_named_once(self) -> Action:
        if self.action == "click" and self.button is None:
            raise ValueError("a click names its button (approve or reject)")
        if self.action != "click" and self.button not in (None, self.action):
            raise ValueError(f"`{self.action}` presses {self.action}: drop `button` or use `click`")
        return self

    @property
    def pressed(self) -> Literal["approve", "reject"]:
        if self.action != "click":
            return self.action
        if self.button is None:
            raise SandboxError("a click names its button")  # the validator says so already
        return self.button


# --- Expectations ----------------------------------------------------------------------------------

Collection = Literal[
    "events",
    "executions",
    "tasks",
    "instances",
    "run_task_requests",
    "slack",
    "pagerduty",
    "teams",
    "workflow_invocations",
    "invocations",
    "incidents",
    "dlq",
    "errors",
    "actions",
    "ephemeral",
    "cli",
    "clicks",
    "webhooks",
    "alerts",
    "training",
    "ledgers",
]
COLLECTIONS: tuple[str, ...] = get_args(Collection)


class Count(_Model):
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)


class Expectation(_Model):
    """`select` items of a report collection, keep those matching `where`, then check `count` and `each`."""

    name: str | None = None
    select: Collection
    where: dict[str, Any] = {}
    count: int | Count | None = None
    """Exactly this many (or a range); default: at least one, unless `each` is given."""
    each: dict[str, Any] = {}
    """Every selected item matches these."""


# --- The scenario ----------------------------------------------------------------------------------


class Scenario(_Model):
    name: str | None = None
    description: str = ""
    template: str = "template.yaml"
    parameters: dict[str, str | int | float | bool | list[str]] = {}
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0, le=3600)
    world: World = World()
    ecs: EcsSettings = EcsSettings()
    events: list[EventStep] = Field(min_length=1)
    faults: Faults = Faults()
    actions: list[Action] = []
    expect: list[Expectation] = []

    @model_validator(mode="after")
    def _alarm_steps_name_seeded_alarms(self) -> Scenario:
        seeded = {(None, alarm.name) for alarm in self.world.alarms} | {
            ((account.id, member.region), alarm.name)
            for account in self.world.accounts
            for member in account.regions
            for alarm in member.alarms
        }
        for number, step in enumerate(self.events, start=1):
            if step.alarm is not None and (step.alarm.place, step.alarm.name) not in seeded:
                known = ", ".join(sorted(f"{place[0]}/{place[1]}/{name}" if place else name for place, name in seeded))
                where = f" of {step.alarm.account} {step.alarm.region}" if step.alarm.place else ""
                raise ValueError(
                    f"events: step {number} sets alarm {step.alarm.name}{where}, not one of world.alarms or of the "
                    f"world accounts' Regions ({known or 'none'})"
                )
        return self

    @model_validator(mode="after")
    def _role_steps_name_world_accounts(self) -> Scenario:
        accounts = {account.id for account in self.world.accounts}
        for number, step in enumerate(self.events, start=1):
            if step.delete_role is not None and step.delete_role not in accounts:
                raise ValueError(f"events: step {number} deletes the role of {step.delete_role}, not a world account")
        return self

    @model_validator(mode="after")
    def _replays_name_earlier_clicks(self) -> Scenario:
        for number, step in enumerate(self.events, start=1):
            replay = step.click.replay if step.click is not None else None
            if replay is None:
                continue
            # A replay of a replay would be the same request again: name the press itself.
            presses = [
                n
                for n, s in enumerate(self.events[: number - 1], start=1)
                if s.click is not None and s.click.replay is None
            ]
            if replay is True and not presses:
                raise ValueError(f"events: step {number} replays the latest press, and no press comes before it")
            if replay is not True and replay not in presses:
                raise ValueError(
                    f"events: step {number} replays step {replay}, which is not an earlier press (a click step with "
                    "a button)"
                )
        return self

    def parameter_overrides(self) -> dict[str, str]:
        """Parameters as `sam deploy --parameter-overrides` takes them (lists comma-joined)."""
        return {key: _parameter_text(value) for key, value in self.parameters.items()}


def _parameter_text(value: str | int | float | bool | list[str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class LoadedScenario:
    path: Path
    scenario: Scenario

    @property
    def name(self) -> str:
        return self.scenario.name or self.path.stem

    def find(self, relative: str) -> Path:
        """A path the scenario names: next to the scenario file, else from the repository root."""
        candidate = Path(relative)
        if candidate.is_absolute():
            return candidate
        for base in (self.path.parent, REPO_ROOT):
            if (base / candidate).exists():
                return base / candidate
        raise SandboxError(f"{self.path}: {relative} not found next to the scenario or in the repository")


_Loaded = TypeVar("_Loaded", bound=BaseModel)


def load_scenario(path: Path) -> LoadedScenario:
    return LoadedScenario(path, load_yaml_model(path, Scenario, "scenario"))


def load_yaml_model(path: Path, model: type[_Loaded], kind: str) -> _Loaded:
    """The YAML file `path` as a `model`; what cannot be read or is not one is a SandboxError naming the file, and
    each field that is wrong."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SandboxError(f"cannot read {kind} {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise SandboxError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise SandboxError(f"{path}: a {kind} is a YAML mapping (see docs/scenarios.md)")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or '(top)'}: {error['msg']}" for error in exc.errors())
        raise SandboxError(f"{path} is not a valid {kind}: {problems}") from None
