"""The reconciliation sweep end to end: ReconcileFunction's real handler with the environment template.yaml gives
it, against the sandbox's moto (ECS with container-instance health emulated, sandbox/ecs_emulation.py; the stack's
alarms with their contributors and history, sandbox/cloudwatch_emulation.py; the incidents table) and the Slack and
PagerDuty stand-ins over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox.cloudwatch_emulation import CloudWatchEmulation, Contributor
from sandbox.ecs_emulation import EcsEmulation
from sandbox.lambda_runtime import InProcessFunction, Invocation
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT

TEMPLATE = load_template(ROOT / "template.yaml")
HEALTH = "CONTAINER_INSTANCE_HEALTH"


@dataclass
class Fleet:
    sandbox: Sandbox
    emulation: EcsEmulation
    reconcile: Callable[[], Invocation]
    cloudwatch: CloudWatchEmulation

    def alarm(self, what: str) -> str:
        """The stack's alarm `<stack name>.<what>`, created in moto as the template names it; its full name."""
        name = f"{self.sandbox.identity.name}.{what}"
        self.sandbox.aws.client("cloudwatch").put_metric_alarm(
            AlarmName=name,
            Namespace="ECS/ContainerInsights",
            MetricName="TaskGPUTemperature",
            Statistic="Maximum",
            Period=60,
            EvaluationPeriods=1,
            Threshold=90,
            ComparisonOperator="GreaterThanThreshold",
        )
        return name

    def cluster(self, name: str, instances: int) -> tuple[str, list[str]]:
        ecs, ec2 = self.sandbox.aws.client("ecs"), self.sandbox.aws.client("ec2")
        arn = ecs.create_cluster(clusterName=name)["cluster"]["clusterArn"]
        registered = []
        for _ in range(instances):
            ec2_id = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
            document = json.dumps({"instanceId": ec2_id, "region": self.sandbox.identity.region})
            answer = ecs.register_container_instance(cluster=name, instanceIdentityDocument=document)
            registered.append(answer["containerInstance"]["containerInstanceArn"])
        return arn, registered

    def impaired(self, arn: str, since: datetime) -> None:
        check = {
            "type": "ACCELERATED_COMPUTE",
            "status": "IMPAIRED",
            "statusReason": "XID_79",
            "lastUpdated": since,
            "lastStatusChange": since,
        }
        self.emulation.set_health(arn, "IMPAIRED", [check])

    def requests(self, service: str) -> list[dict[str, Any]]:
        return [r for r in self.sandbox.standins.requests if r["service"] == service and not r["fault"]]


@contextmanager
def fleet(**parameters: str) -> Iterator[Fleet]:
    with Sandbox(TEMPLATE, parameter_overrides=parameters) as sandbox:
        identity = sandbox.identity
        with (
            EcsEmulation(account_id=identity.account_id, region=identity.region) as emulation,
            CloudWatchEmulation(account_id=identity.account_id, region=identity.region) as cloudwatch,
        ):
            spec = sandbox.stack.functions["ReconcileFunction"]
            with InProcessFunction(spec, sandbox.function_environment(spec)) as function:

                def invoke() -> Invocation:
                    return function.invoke(_scheduled_event(identity.account_id))

                yield Fleet(sandbox, emulation, invoke, cloudwatch)


def _scheduled_event(account: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [],
        "detail": {},
    }


def test_a_fleet_is_listed_page_by_page_described_100_at_a_time_with_health_and_its_missed_fault_paged() -> None:
    with fleet() as world:
        # Given a cluster of 130 instances, one of them IMPAIRED for five minutes with no event sent
        _, instances = world.cluster("gpu-fleet", 130)
        since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
        world.impaired(instances[77], since)

        # When the reconciliation runs
        invocation = world.reconcile()

        # Then every instance was described with its health, at most 100 at a time
        assert invocation.error is None, invocation.error
        sizes = [len(r["containerInstances"]) for r in world.emulation.describe_requests]
        assert sizes == [100, 30]
        assert all(r["include"] == [HEALTH] for r in world.emulation.describe_requests)
        assert invocation.result["described"] == 130 and invocation.result["missed_fault"] == 1
        # And the one IMPAIRED instance was paged once, the page saying how it was found
        [trigger] = [r["body"] for r in world.requests("pagerduty")]
        assert trigger["event_action"] == "trigger"
        assert trigger["payload"]["custom_details"]["found"] == "found by the sweep: the event was missed"
        assert instances[77].rsplit("/", 1)[-1] in trigger["dedup_key"]
        # And the run is counted in a metric (an EMF line in its logs) and said in its log
        assert any('"ReconcileFindings"' in line and '"missed_fault"' in line for line in invocation.logs)
        assert any('"reconciliation done"' in line for line in invocation.logs)


def test_only_the_watched_clusters_are_listed() -> None:
    watched = "arn:aws:ecs:us-east-1:123456789012:cluster/watched"
    with fleet(ClusterArns=watched) as world:
        # Given an IMPAIRED instance in a cluster the stack does not watch, and a healthy one in the watched one
        arn, _ = world.cluster("watched", 1)
        assert arn == watched
        _, others = world.cluster("elsewhere", 1)
        world.impaired(others[0], datetime.now(UTC).replace(microsecond=0))

        invocation = world.reconcile()

        # Then only the watched cluster was described, and nobody was paged
        assert invocation.error is None, invocation.error
        assert {r["cluster"] for r in world.emulation.describe_requests} == {watched}
        assert world.requests("pagerduty") == []
        assert invocation.result["clusters"] == 1


def test_a_gpu_alarms_lost_contributors_are_paged_by_the_handler_with_the_stacks_alarm_prefix() -> None:
    with fleet() as world:
        # Given the stack's temperature alarm in ALARM for two clusters, and another stack's alarm in ALARM, no event
        since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        name = world.alarm("gpu-temperature")
        reason = "Threshold Crossed: 1 datapoint was greater than the threshold (90.0): [{value} (now)]."
        hot = [
            Contributor("8f3a2c1d9e4b7a60", {"ClusterName": "gpu-training"}, reason.format(value=93.0), since),
            Contributor("1c7e5b9d3f2a8046", {"ClusterName": "gpu-inference"}, reason.format(value=91.5), since),
        ]
        world.cloudwatch.set_alarm(name, "ALARM", "Threshold Crossed: 2 out of 7 time series", since, contributors=hot)
        world.sandbox.aws.client("cloudwatch").put_metric_alarm(
            AlarmName="other-stack.gpu-temperature",
            Namespace="n",
            MetricName="m",
            Statistic="Maximum",
            Period=60,
            EvaluationPeriods=1,
            Threshold=1,
            ComparisonOperator="GreaterThanThreshold",
        )
        world.cloudwatch.set_alarm("other-stack.gpu-temperature", "ALARM", "2 out of 2", since)

        # When the reconciliation runs, twice
        first, second = world.reconcile(), world.reconcile()

        # Then each cluster was paged once, found by the sweep; the other stack's alarm was never read
        assert first.error is None and second.error is None, (first.error, second.error)
        assert (first.result["alarms"], first.result["alarm_missed_contributor"]) == (1, 2)
        assert second.result["alarm_missed_contributor"] == 0
        triggers = [r["body"] for r in world.requests("pagerduty") if r["body"]["event_action"] == "trigger"]
        assert sorted(t["payload"]["custom_details"]["cluster"] for t in triggers) == ["gpu-inference", "gpu-training"]
        assert {t["payload"]["custom_details"]["found"] for t in triggers} == {
            "found by the sweep: the contributor event was missed"
        }
        asked = {r["alarm"] for r in world.cloudwatch.requests if r["operation"] == "DescribeAlarmContributors"}
        assert asked == {name}
        assert any('"alarm_missed_contributor"' in line for line in first.logs)
