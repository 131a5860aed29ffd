"""The reconciliation sweep in template.yaml: its schedule from ReconcileRateMinutes, the clusters it is told to
watch, and its parameter where the console shows it."""

from __future__ import annotations

import pytest

from tests.unit.test_template_iam import ACCOUNT, stack

WATCHED = [f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/gpu-a", f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/gpu-b"]


@pytest.mark.parametrize(
    ("minutes", "expression"), [(None, "rate(5 minutes)"), ("1", "rate(1 minute)"), ("15", "rate(15 minutes)")]
)
def test_the_reconciliation_runs_at_the_rate_the_parameter_gives(minutes: str | None, expression: str) -> None:
    resolver = stack(**({"ReconcileRateMinutes": minutes} if minutes else {}))

    (event,) = resolver.properties("ReconcileFunction")["Events"].values()

    assert event["Type"] == "Schedule"
    assert event["Properties"]["Schedule"] == expression


def test_the_reconciliation_is_told_the_watched_clusters_and_runs_the_router_code() -> None:
    properties = stack(ClusterArns=",".join(WATCHED)).properties("ReconcileFunction")

    assert properties["Environment"]["Variables"]["CLUSTER_ARNS"] == ",".join(WATCHED)
    assert properties["Handler"] == "app.reconcile_handler"
    assert properties["CodeUri"] == "functions/alert_router/"
    assert properties["Role"] == "arn:ReconcileRole.Arn"


def test_the_rate_is_shown_with_the_clusters_to_watch() -> None:
    interface = stack().template.body["Metadata"]["AWS::CloudFormation::Interface"]
    (group,) = [g for g in interface["ParameterGroups"] if "ClusterArns" in g["Parameters"]]

    assert group["Parameters"] == ["ClusterArns", "ReconcileRateMinutes"]
    assert "ReconcileRateMinutes" in interface["ParameterLabels"]
