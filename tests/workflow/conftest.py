"""The ResumeTraining workflow executed for real: statemachines/resume_training.asl.json, with the
DefinitionSubstitutions template.yaml gives it, run by moto's ASL interpreter
(docs/sandbox.md#step-functions-without-docker), its Lambda tasks dispatched in-process to
functions/resume_training/app.py, against a seeded moto world (ECS with the gaps emulated by
sandbox/ecs_emulation.py, S3 checkpoints written by the training helper, DynamoDB tables as template.yaml
defines them) and the Slack/PagerDuty stand-ins over real HTTP.

The incident and its Slack thread come from the real AlertRouter processing the same event first, as in
AWS, where HealthChangeRule feeds the alert pipeline while ResumeTrainingRule starts the workflow.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.awslambda_simple.models import LambdaSimpleBackend

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.adapters.resume_store import DynamoDBResumeStore
from fault_responder.core.domain import Incident
from fault_responder.incidents import lifecycle
from fault_responder.resume.budget import Ledger
from fault_responder.resume.jobs import CHECKPOINT_URI_TAG, JOB_ID_TAG, job_key
from fault_responder.routing.router import Router, load_routing
from sandbox.ecs_emulation import EcsEmulation
from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, StandIns
from sandbox.template import Resolver, StackIdentity, Template, load_template, resolve_parameters
from tests.conftest import load_app
from tests.workflow.function_died import FunctionDied

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "statemachines" / "resume_training.asl.json"
TRAINING = ROOT / "training"
REGION = "us-east-1"
ACCOUNT = "123456789012"
CLUSTER = "gpu-training"
CLUSTER_ARN = f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"
PROVIDER = "p5-training"
BUCKET = "training-checkpoints"
ALERT_CHANNEL = "gpu-alerts"
EXECUTION_TIMEOUT = 60.0

# Short waits for the tests, by stack parameter, exactly as the sandbox shortens them.
FAST_PARAMETERS = {
    "TrainingCapacityProviders": PROVIDER,
    "CheckpointBuckets": BUCKET,
    "ResumePollSeconds": "1",
    "ResumeStopTimeoutSeconds": "20",
    "ResumeStartTimeoutSeconds": "20",
    "ApprovalTimeoutSeconds": "30",
    "RelaunchBackoffSeconds": "1",
}

sys.path.insert(0, str(TRAINING))
import fault_responder_checkpoint as checkpoint_helper  # noqa: E402 - the training image's helper, not a package


@functools.cache
def _load_app() -> ModuleType:
    return load_app("resume_training")


class _Attributes:
    """What Ref / GetAtt give while the template is resolved for the test (functions named by logical id)."""

    def ref(self, logical_id: str) -> str:
        return logical_id

    def get_att(self, logical_id: str, attribute: str) -> str:
        return function_arn(logical_id) if attribute == "Arn" else f"{logical_id}.{attribute}"


def function_arn(logical_id: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"


@dataclass(frozen=True)
class Deployment:
    """The workflow as template.yaml deploys it, for the given parameters."""

    definition: str
    handlers: Mapping[str, Callable[[dict[str, Any], Any], Any]]
    environment: Mapping[str, str]
    incidents_table: Mapping[str, Any]


@functools.cache
def _template() -> Template:
    return load_template(ROOT / "template.yaml")


def deployment(overrides: Mapping[str, str]) -> Deployment:
    template = _template()
    resolver = Resolver(template, StackIdentity("test"), resolve_parameters(template, overrides), _Attributes())
    machine = resolver.properties("ResumeTrainingStateMachine")
    definition = DEFINITION.read_text(encoding="utf-8")
    for name, value in machine["DefinitionSubstitutions"].items():
        definition = definition.replace("${" + name + "}", value)
    assert "${" not in definition, "every substitution of the definition must come from the template"
    app = _load_app()
    functions = _resume_functions(template)
    handlers = {name: getattr(app, resolver.properties(name)["Handler"].split(".", 1)[1]) for name in functions}
    environment: dict[str, str] = {}
    for name in functions:
        variables = resolver.properties(name).get("Environment", {}).get("Variables", {})
        environment.update({key: str(value) for key, value in variables.items()})
    table = resolver.properties("IncidentsTable")
    return Deployment(definition, handlers, environment, table)


def _resume_functions(template: Template) -> list[str]:
    return [
        logical_id
        for logical_id, resource in template.resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
        and resource["Properties"].get("CodeUri") == "functions/resume_training/"
    ]


class _Context:
    def __init__(self, function_name: str) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function_arn(function_name)
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "test"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@dataclass
class Invocations:
    """Every Lambda invocation the state machine made, by function logical id."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def of(self, function: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.calls if name == function]


def _dispatcher(handlers: Mapping[str, Callable[..., Any]], record: Invocations) -> Callable[..., bytes]:
    """moto's Lambda backend, answering with our handlers in this process (Lambda's error shape on failure)."""

    def invoke(self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        name = function_name.rsplit(":", maxsplit=1)[-1]
        payload = json.loads(body or "{}")
        record.calls.append((name, payload))
        context = _Context(name)
        try:
            return json.dumps(handlers[name](payload, context)).encode()
        except FunctionDied:
            # Lambda's answer for a function that timed out: an unhandled error naming no errorType, which Step
            # Functions reports as Lambda.Unknown (moto's interpreter names it Exception).
            response_headers["x-amz-function-error"] = "Unhandled"
            message = f"{context.aws_request_id} Task timed out after 300.00 seconds"
            return json.dumps({"errorMessage": message}).encode()
        except Exception as error:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}).encode()

    return invoke


@dataclass
class Host:
    container_instance_arn: str
    ec2_instance_id: str


class World:
    """The seeded account: ECS cluster and provider, instances, tasks, checkpoints, and the workflow."""

    def __init__(self, deploy: Deployment, standins: StandIns, emulation: EcsEmulation, invocations: Invocations):
        self.deploy = deploy
        self.standins = standins
        self.emulation = emulation
        self.invocations = invocations
        self.ecs = boto3.client("ecs", region_name=REGION)
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.s3 = boto3.client("s3", region_name=REGION)
        self.sfn = boto3.client("stepfunctions", region_name=REGION)
        self.dynamodb = boto3.client("dynamodb", region_name=REGION)
        self.hosts: list[Host] = []
        self.machine_arn = ""

    # --- Seeding ---------------------------------------------------------------------------------

    def build(self, *, instances: int = 3, provider_type: str = "EC2_AUTOSCALING", auto_repair: str | None = None):
        self.ecs.create_cluster(clusterName=CLUSTER)
        self.emulation.seed_capacity_provider(CLUSTER, PROVIDER, provider_type=provider_type, auto_repair=auto_repair)
        for _ in range(instances):
            self.add_host()
        self.ecs.register_task_definition(
            family="trainer",
            containerDefinitions=[
                {
                    "name": "trainer",
                    "image": "trainer:1",
                    "memory": 512,
                    "environment": [{"name": "LR", "value": "3e-4"}],
                },
                {"name": "metrics", "image": "metrics:1", "memory": 128},
            ],
        )
        self.ecs.register_task_definition(
            family="notebook", containerDefinitions=[{"name": "lab", "image": "lab:1", "memory": 128}]
        )
        self.s3.create_bucket(Bucket=BUCKET)
        self.machine_arn = self.sfn.create_state_machine(
            name="ResumeTraining",
            definition=self.deploy.definition,
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/ResumeTraining",
            type="STANDARD",
        )["stateMachineArn"]
        return self

    def add_host(self) -> Host:
        ec2_id = self.ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
        document = json.dumps({"instanceId": ec2_id, "region": REGION, "instanceType": "p5.48xlarge"})
        arn = self.ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document)[
            "containerInstance"
        ]["containerInstanceArn"]
        self.emulation.assign_instance(CLUSTER, arn, PROVIDER)
        host = Host(arn, ec2_id)
        self.hosts.append(host)
        return host

    def run_job_task(
        self,
        host: Host,
        job_id: str | None,
        *,
        checkpoint_uri: str | None = None,
        family: str = "trainer",
        tags: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> str:
        """A RUNNING task on `host`, started the way the training platform would."""
        all_tags = dict(tags or {})
        if job_id is not None:
            all_tags[JOB_ID_TAG] = job_id
        if checkpoint_uri is not None:
            all_tags[CHECKPOINT_URI_TAG] = checkpoint_uri
        overrides = {
            "containerOverrides": [
                {"name": "trainer", "environment": [{"name": k, "value": v} for k, v in (environment or {}).items()]}
            ]
        }
        self.emulation.place_next_on(host.ec2_instance_id)
        answer = self.ecs.run_task(
            cluster=CLUSTER,
            taskDefinition=family,
            capacityProviderStrategy=[{"capacityProvider": PROVIDER, "weight": 1}],
            overrides=overrides if environment else {},
            tags=[{"key": k, "value": v} for k, v in all_tags.items()],
        )
        arn = answer["tasks"][0]["taskArn"]
        self.ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])  # PENDING -> RUNNING in the emulated lifecycle
        self.emulation.run_task_requests.clear()  # only the workflow's RunTasks are counted
        return str(arn)

    def checkpoint(self, prefix: str, step: int, *, complete: bool = True) -> str:
        uri = f"s3://{BUCKET}/{prefix}/"
        files = {"model.pt": b"w" * 64, "optimizer.pt": b"o" * 32}
        if complete:
            return str(checkpoint_helper.save_checkpoint(uri, step, files, client=self.s3))
        folder = checkpoint_helper.prepare_checkpoint_folder(uri, step, client=self.s3)
        checkpoint_helper.write_checkpoint_files(folder, files, client=self.s3)  # no _COMPLETE: interrupted
        return str(folder)

    def fault_event(
        self,
        host: Host,
        *,
        event_id: str = "evt-xid79",
        check_type: str = "ACCELERATED_COMPUTE",
        reason: str = "XID_79",
    ) -> dict:
        return {
            "version": "0",
            "id": event_id,
            "detail-type": "ECS Container Instance Health Change",
            "source": "aws.ecs",
            "account": ACCOUNT,
            "time": "2026-11-29T10:00:05Z",
            "region": REGION,
            "resources": [host.container_instance_arn],
            "detail": {
                "clusterArn": CLUSTER_ARN,
                "containerInstanceArn": host.container_instance_arn,
                "capacityProviderName": PROVIDER,
                "ec2InstanceId": host.ec2_instance_id,
                "overallStatus": "IMPAIRED",
                "healthChecks": [
                    {
                        "type": check_type,
                        "status": "IMPAIRED",
                        "lastStatusChange": "2026-11-29T10:00:00Z",
                        "lastUpdated": "2026-11-29T10:00:04Z",
                        "statusReason": reason,
                    }
                ],
            },
        }

    def alert_pipeline(self, event: Mapping[str, Any]) -> None:
        """What HealthChangeRule -> AlertQueue -> AlertRouter does with the same event."""
        _wiring("wiring.alert_router").alert_router().process_record(json.dumps(event), f"msg-{event['id']}")

    def ledger(self, job_id: str) -> Ledger:
        return self.store().load_ledger(job_key(CLUSTER_ARN, job_id))

    def store(self) -> DynamoDBResumeStore:
        return DynamoDBResumeStore(self.deploy.environment["INCIDENTS_TABLE"], self.dynamodb)

    def incidents(self) -> DynamoDBInstanceStore:
        return DynamoDBInstanceStore(self.deploy.environment["INCIDENTS_TABLE"], timedelta(days=30), self.dynamodb)

    def derived_incidents(self, container_instance_arn: str) -> list[Incident]:
        """The instance's incidents as the alert pipeline derives them (default routing)."""
        record = self.incidents().load(container_instance_arn)
        if record is None:
            return []
        return lifecycle.derive(record, lifecycle.Settings(), Router(load_routing("default.yaml")).route).incidents

    # --- Running ---------------------------------------------------------------------------------

    def start(self, event: Mapping[str, Any], name: str = "resume-1") -> str:
        return str(
            self.sfn.start_execution(stateMachineArn=self.machine_arn, name=name, input=json.dumps(event))[
                "executionArn"
            ]
        )

    def wait(self, execution_arn: str, timeout: float = EXECUTION_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = self.sfn.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                return dict(described)
            time.sleep(0.05)
        raise AssertionError(f"{execution_arn} still RUNNING after {timeout}s")

    def run(self, event: Mapping[str, Any], name: str = "resume-1") -> dict[str, Any]:
        return self.wait(self.start(event, name))

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for page in self.sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
            events.extend(page["events"])
        return events

    def outcomes(self, execution: Mapping[str, Any]) -> dict[str, str]:
        """Each job's outcome, from the execution's output (what the Map's iterations returned)."""
        results = json.loads(execution["output"]).get("results", [])
        return {result["job_id"]: result["outcome"] for result in results}

    def states_entered(self, execution_arn: str) -> list[str]:
        return [
            event["stateEnteredEventDetails"]["name"]
            for event in self.history(execution_arn)
            if "stateEnteredEventDetails" in event
        ]

    # --- Inspecting ------------------------------------------------------------------------------

    def task(self, task_arn: str) -> dict[str, Any]:
        return dict(self.ecs.describe_tasks(cluster=CLUSTER, tasks=[task_arn], include=["TAGS"])["tasks"][0])

    def tasks_of(self, job_id: str, status: str = "RUNNING") -> list[dict[str, Any]]:
        arns = self.ecs.list_tasks(cluster=CLUSTER, desiredStatus=status)["taskArns"]
        if not arns:
            return []
        tasks = self.ecs.describe_tasks(cluster=CLUSTER, tasks=arns, include=["TAGS"])["tasks"]
        return [t for t in tasks if {"key": JOB_ID_TAG, "value": job_id} in t.get("tags", [])]

    def instance_status(self, host: Host) -> str:
        described = self.ecs.describe_container_instances(
            cluster=CLUSTER, containerInstances=[host.container_instance_arn]
        )
        return str(described["containerInstances"][0]["status"])

    def ec2_of(self, task: Mapping[str, Any]) -> str:
        described = self.ecs.describe_container_instances(
            cluster=CLUSTER, containerInstances=[task["containerInstanceArn"]]
        )
        return str(described["containerInstances"][0]["ec2InstanceId"])

    def thread(self) -> list[dict[str, Any]]:
        """The replies in the incident's Slack thread (the alert pipeline's root message first)."""
        messages = self.standins.slack_channels().get(ALERT_CHANNEL, [])
        roots = [m for m in messages if m["thread_ts"] is None]
        assert roots, "the alert pipeline posted no incident root"
        return [m for m in messages if m["thread_ts"] == roots[0]["ts"]]

    def thread_texts(self) -> list[str]:
        return [m["text"] for m in self.thread()]

    def pages(self) -> list[dict[str, Any]]:
        return self.standins.pagerduty_alerts()

    def changes(self) -> list[dict[str, Any]]:
        return self.standins.pagerduty_changes()

    def relaunches(self) -> list[dict[str, Any]]:
        return list(self.emulation.run_task_requests)


def environment_of(task: Mapping[str, Any], container: str) -> dict[str, str]:
    for override in task.get("overrides", {}).get("containerOverrides", []):
        if override.get("name") == container:
            return {item["name"]: item["value"] for item in override.get("environment", [])}
    return {}


def tags_of(task: Mapping[str, Any]) -> dict[str, str]:
    return {tag["key"]: tag["value"] for tag in task.get("tags", [])}


@pytest.fixture
def make_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., World]]:
    """A world factory: make_world(ResumeMode="dry-run", ...) deploys with those parameters on top of FAST."""
    started: list[Any] = []

    def make(**parameters: str) -> World:
        deploy = deployment({**FAST_PARAMETERS, **parameters})
        standins = StandIns(pagerduty_routing_keys={SANDBOX_ROUTING_KEY}).start()
        started.append(standins.stop)
        _environment(monkeypatch, deploy, standins)
        mock = mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}})
        mock.start()
        started.append(mock.stop)
        # Old tasks are seen STOPPING before STOPPED, new ones PENDING before RUNNING, as on ECS.
        emulation = EcsEmulation(account_id=ACCOUNT, region=REGION, start_after_describes=1, stop_after_describes=1)
        emulation.install()
        started.append(emulation.uninstall)
        invocations = Invocations()
        monkeypatch.setattr(LambdaSimpleBackend, "invoke", _dispatcher(deploy.handlers, invocations))
        _account(deploy, standins)
        _reset_wiring()
        return World(deploy, standins, emulation, invocations)

    yield make
    for stop in reversed(started):
        stop()
    _reset_wiring()


def _wiring(name: str) -> ModuleType:
    """fault_responder.wiring.alert_router / wiring.resume_training, imported only once a test has set the environment:
    Powertools reads POWERTOOLS_* when the package's observability module is first imported."""
    return importlib.import_module(f"fault_responder.{name}")


def _reset_wiring() -> None:
    """Forget the cached clients, settings and secrets of both pipelines (each test has its own account)."""
    for name in ("wiring.alert_router", "wiring.resume_training"):
        _wiring(name).reset()


def _environment(monkeypatch: pytest.MonkeyPatch, deploy: Deployment, standins: StandIns) -> None:
    values = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        # The instances need no real AMI catalogue; loading it costs most of a test's EC2 time.
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        **deploy.environment,
        "ALERT_DLQ_URL": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/alert-dlq",
        "SLACK_API_URL": standins.slack_api_url,
        "PAGERDUTY_EVENTS_URL": standins.pagerduty_url,
        "HTTP_MAX_ATTEMPTS": "2",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _account(deploy: Deployment, standins: StandIns) -> None:
    """The tables as template.yaml defines them, the notifier secrets and the alert DLQ."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    table = copy.deepcopy(dict(deploy.incidents_table))
    dynamodb.create_table(
        TableName=deploy.environment["INCIDENTS_TABLE"],
        KeySchema=table["KeySchema"],
        AttributeDefinitions=table["AttributeDefinitions"],
        BillingMode=table["BillingMode"],
        GlobalSecondaryIndexes=table.get("GlobalSecondaryIndexes", []),
    )
    secrets = boto3.client("secretsmanager", region_name=REGION)
    secrets.create_secret(
        Name=deploy.environment["SLACK_SECRET_NAME"], SecretString=json.dumps({"bot_token": DEFAULT_SLACK_TOKEN})
    )
    secrets.create_secret(
        Name=deploy.environment["PAGERDUTY_SECRET_NAME"],
        SecretString=json.dumps({"routing_keys": {"gpu-oncall": SANDBOX_ROUTING_KEY}}),
    )
    boto3.client("sqs", region_name=REGION).create_queue(QueueName="alert-dlq")
