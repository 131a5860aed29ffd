"""The CloudWatch dashboard in template.yaml: its body as CloudFormation would substitute it, and every metric it
charts checked against what the code emits (our EMF counts) or what AWS publishes (queues, functions, the
workflow, Container Insights), so a renamed metric or a changed dimension breaks a test, not the dashboard."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.metrics import MetricUnit

from fault_responder.core.observability import count, measure
from sandbox.template import Template, load_template
from tests.sandbox.conftest import resolver_for

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
EMITTING_CODE = [ROOT / "layers" / "common" / "fault_responder", ROOT / "functions"]
RESUME = {"TrainingCapacityProviders": "p5-training"}
SEARCH_QUERY_LIMIT = 1024
"""CloudWatch's limit on a SEARCH expression's query (its search expression syntax page)."""

# What AWS publishes, per its documentation: namespace -> (the dimensions charted, the metric names).
AWS_PUBLISHED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "AWS/SQS": (
        frozenset({"QueueName"}),
        frozenset({"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"}),
    ),
    "AWS/Lambda": (frozenset({"FunctionName"}), frozenset({"Duration", "Errors", "Throttles"})),
    "AWS/States": (
        frozenset({"StateMachineArn"}),
        frozenset(
            {"ExecutionsStarted", "ExecutionsSucceeded", "ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}
        ),
    ),
    # Container Insights with enhanced observability, cluster level (Managed Instances with NVIDIA GPUs).
    "ECS/ContainerInsights": (
        frozenset({"ClusterName"}),
        frozenset({"TaskGPUTemperature", "TaskGPURestartAppXidCount"}),
    ),
}

_SEARCH = re.compile(r"^SEARCH\('\{(?P<schema>[^}]*)\}(?P<terms>.*)', '(?P<stat>\w+)', (?P<period>\d+)\)$")
_METRIC_NAME = re.compile(r'MetricName="(?P<name>[^"]+)"')


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE)


def dashboard(template: Template, overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The dashboard's body as deployed with these parameters."""
    body = resolver_for(template, overrides).properties("Dashboard")["DashboardBody"]
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def charted(body: Mapping[str, Any]) -> Iterator[tuple[str, str, frozenset[str], dict[str, str], str]]:
    """(namespace, metric name, dimension names, dimension values, SEARCH query or "") of every charted metric."""
    for widget in body["widgets"]:
        for metric in widget["properties"].get("metrics", []):
            first = metric[0]
            if isinstance(first, dict):
                found = _SEARCH.match(first["expression"])
                assert found, f"not a SEARCH expression this test reads: {first['expression']}"
                namespace, *dimensions = (part.strip() for part in found["schema"].split(","))
                names = _METRIC_NAME.findall(found["terms"])
                assert len(names) == 1, f"one MetricName per SEARCH: {first['expression']}"
                query = "{" + found["schema"] + "}" + found["terms"]
                yield namespace, names[0], frozenset(dimensions), {}, query
            else:
                namespace, name, *rest = [part for part in metric if isinstance(part, str)]
                values = dict(zip(rest[::2], rest[1::2], strict=True))
                yield namespace, name, frozenset(values), values, ""


def emitted_counts() -> set[tuple[str, str]]:
    """(metric, dimension) of every `count(...)` and `measure(...)` in the functions and the layer, read from the
    source."""
    found: set[tuple[str, str]] = set()
    for root in EMITTING_CODE:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call) or len(node.args) not in (3, 4, 5):
                    continue
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                name, dimension = node.args[0], node.args[1]
                expected = {3} if called == "count" else {4, 5} if called == "measure" else set()  # (5: with a unit)
                if len(node.args) not in expected or not (
                    isinstance(dimension, ast.Constant) and isinstance(dimension.value, str)
                ):
                    continue
                names = [name.body, name.orelse] if isinstance(name, ast.IfExp) else [name]
                for each in names:
                    assert isinstance(each, ast.Constant), f"{path}: a metric name that is not a literal"
                    found.add((str(each.value), dimension.value))
    return found


def globals_variables(template: Template) -> dict[str, Any]:
    variables: dict[str, Any] = template.body["Globals"]["Function"]["Environment"]["Variables"]
    return variables


# --- The dashboard exists and its body is what CloudWatch takes ---------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        RESUME,
        {"ClusterArns": "arn:aws:ecs:us-east-1:123456789012:cluster/gpu-a", **RESUME},
    ],
    ids=["defaults", "with auto-resume", "one cluster"],
)
def test_the_dashboard_body_is_json_with_widgets_on_the_grid(template: Template, overrides: dict[str, str]) -> None:
    # Given the template with these parameters, When the dashboard's body is substituted as CloudFormation does
    body = dashboard(template, overrides)

    # Then it is a JSON object of widgets that fit the 24-column grid and name the stack's Region
    assert template.resource_type("Dashboard") == "AWS::CloudWatch::Dashboard"
    assert body["widgets"]
    for widget in body["widgets"]:
        assert widget["x"] >= 0 and widget["x"] + widget["width"] <= 24
        if widget["type"] == "metric":
            assert widget["properties"]["region"] == "us-east-1"
            assert widget["properties"]["metrics"]


def test_the_dashboard_is_named_for_the_stack_and_region(template: Template) -> None:
    assert resolver_for(template).properties("Dashboard")["DashboardName"] == "test-stack-us-east-1"


# --- Every charted metric is one that is emitted ------------------------------------------------------------


def test_the_counts_the_dashboard_charts_are_the_ones_the_code_emits(template: Template) -> None:
    # Given the metric namespace and service the template gives the functions, and the counts in the code
    variables = globals_variables(template)
    ours = variables["POWERTOOLS_METRICS_NAMESPACE"]
    # Powertools adds the `service` dimension to each count (checked below), so a count has two dimensions.
    emitted = {(name, frozenset({dimension, "service"})) for name, dimension in emitted_counts()}

    # When the dashboard's metrics in that namespace are read
    ours_charted = {
        (name, dimensions)
        for namespace, name, dimensions, _, _ in charted(dashboard(template, RESUME))
        if namespace == ours
    }

    # Then each is a metric the code emits, with the dimensions it emits
    assert ours_charted, "the dashboard charts none of the responder's own metrics"
    assert ours_charted - emitted == set()


def test_a_count_carries_its_dimension_and_the_service_in_the_template_namespace(
    template: Template, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the functions' environment as the template sets it
    variables = globals_variables(template)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", variables["POWERTOOLS_SERVICE_NAME"])

    # When a count is emitted
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        count("NotificationsSent", "Channel", "slack")
    emf = json.loads(out.getvalue())

    # Then CloudWatch files it under the namespace and dimensions the dashboard searches
    [directive] = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == variables["POWERTOOLS_METRICS_NAMESPACE"]
    assert directive["Dimensions"] == [["Channel", "service"]]


def test_a_duration_is_filed_in_seconds_with_its_dimension(template: Template, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the functions' environment as the template sets it
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", globals_variables(template)["POWERTOOLS_SERVICE_NAME"])

    # When a resumed job's time to training again is emitted, as the Notify function does
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        measure("FaultToTrainingSeconds", "CapacityProvider", "p5-training", 312.5, MetricUnit.Seconds)
    emf = json.loads(out.getvalue())

    # Then it is a value in seconds, under the dimensions the dashboard searches
    [directive] = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Metrics"] == [{"Name": "FaultToTrainingSeconds", "Unit": "Seconds"}]
    assert directive["Dimensions"] == [["CapacityProvider", "service"]]
    assert (emf["FaultToTrainingSeconds"], emf["CapacityProvider"]) == ([312.5], "p5-training")


def test_the_aws_metrics_it_charts_are_published_under_those_names(template: Template) -> None:
    ours = globals_variables(template)["POWERTOOLS_METRICS_NAMESPACE"]
    for namespace, name, dimensions, _, _ in charted(dashboard(template, RESUME)):
        if namespace == ours:
            continue
        assert namespace in AWS_PUBLISHED, f"{namespace} {name}: a namespace this test does not know"
        published_dimensions, published_names = AWS_PUBLISHED[namespace]
        assert name in published_names, f"{namespace} publishes no {name}"
        assert dimensions == published_dimensions, f"{namespace} {name} is not published by {sorted(dimensions)}"


def test_it_charts_what_the_issue_asks_for(template: Template) -> None:
    names = {(namespace, name) for namespace, name, *_ in charted(dashboard(template, RESUME))}

    assert {
        ("GpuFaultResponder", "IncidentsOpened"),
        ("GpuFaultResponder", "IncidentsResolved"),
        ("GpuFaultResponder", "NotificationsSent"),
        ("GpuFaultResponder", "NotificationsFailed"),
        ("GpuFaultResponder", "DrainAttributions"),
        ("GpuFaultResponder", "ResumeClaims"),
        ("GpuFaultResponder", "ResumeLaunches"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
        ("AWS/Lambda", "Duration"),
        ("AWS/Lambda", "Errors"),
        ("AWS/Lambda", "Throttles"),
        ("AWS/States", "ExecutionsFailed"),
        ("AWS/States", "ExecutionsTimedOut"),
        ("ECS/ContainerInsights", "TaskGPUTemperature"),
        ("ECS/ContainerInsights", "TaskGPURestartAppXidCount"),
    } <= names


def test_it_charts_each_member_account_the_reconciliation_could_not_act_in(template: Template) -> None:
    # Given an organization's stack, and a single-account one
    for overrides in ({"OrganizationId": "o-a1b2c3d4e5"}, {}):
        # When its dashboard's searches are read
        searched = {
            (name, dimensions): query
            for namespace, name, dimensions, _, query in charted(dashboard(template, overrides))
            if namespace == "GpuFaultResponder"
        }

        # Then MemberAccountFailures is charted by account, one line per account (an account that never failed has
        # none: a single-account stack's graph is empty)
        query = searched[("MemberAccountFailures", frozenset({"Account", "service"}))]
        assert query == '{GpuFaultResponder,Account,service} MetricName="MemberAccountFailures"'
    assert ("MemberAccountFailures", "Account") in emitted_counts()


# --- The resources it charts are the stack's -------------------------------------------------------------


def test_every_dead_letter_queue_of_the_stack_is_charted(template: Template) -> None:
    # Given every queue something dead-letters into (a redrive policy, a rule target's DeadLetterConfig)
    resolver = resolver_for(template, RESUME)
    text = json.dumps(
        [resolver.properties(r) for r in template.resources if resolver.is_enabled(r) and r != "Dashboard"]
    )
    dlqs = set(re.findall(r'"deadLetterTargetArn": "<(\w+)\.Arn>"', text)) | set(
        re.findall(r'"DeadLetterConfig": \{"Arn": "<(\w+)\.Arn>"\}', text)
    )

    # When the dashboard's queue depths are read
    depths = {
        values["QueueName"]
        for namespace, name, _, values, _ in charted(dashboard(template, RESUME))
        if (namespace, name) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    }

    # Then each of them is charted, and the alert queue too
    assert dlqs >= {"AlertDLQ", "RuleTargetDLQ", "ResumeTriggerDLQ"}
    assert {f"<{queue}.QueueName>" for queue in dlqs | {"AlertQueue"}} <= depths


def test_the_router_and_the_workflow_are_the_stacks(template: Template) -> None:
    metrics = list(charted(dashboard(template, RESUME)))

    functions = {values["FunctionName"] for namespace, *_, values, _ in metrics if namespace == "AWS/Lambda"}
    machines = {values["StateMachineArn"] for namespace, *_, values, _ in metrics if namespace == "AWS/States"}
    assert functions == {"<AlertRouterFunction>", "<SweepFunction>"}
    assert machines == {"<ResumeTrainingStateMachine>"}


def test_without_auto_resume_its_graphs_name_no_resource_that_does_not_exist(template: Template) -> None:
    # Given the default parameters (no training capacity provider: no workflow, no trigger DLQ)
    metrics = list(charted(dashboard(template)))

    # Then the workflow's graph and the trigger DLQ's line name a placeholder, not a missing resource
    machines = {values["StateMachineArn"] for namespace, *_, values, _ in metrics if namespace == "AWS/States"}
    queues = {values["QueueName"] for namespace, *_, values, _ in metrics if namespace == "AWS/SQS"}
    assert machines == {"none"}
    assert "none" in queues


# --- The GPUs of the watched clusters ------------------------------------------------------------------------


def gpu_queries(body: Mapping[str, Any]) -> list[str]:
    return [query for namespace, *_, query in charted(body) if namespace == "ECS/ContainerInsights"]


def test_watching_every_cluster_searches_every_cluster(template: Template) -> None:
    queries = gpu_queries(dashboard(template))

    assert len(queries) == 2
    assert all(query.endswith('"') and " OR " not in query for query in queries)


def test_watched_clusters_are_searched_by_name_exactly(template: Template) -> None:
    # Given three watched clusters
    arns = [f"arn:aws:ecs:us-east-1:123456789012:cluster/{name}" for name in ("gpu-a", "gpu_b", "train-3")]

    # When the GPU graphs' queries are built
    queries = gpu_queries(dashboard(template, {"ClusterArns": ",".join(arns)}))

    # Then each names every cluster as an exact term, ORed (the ARNs' prefix, which no cluster name can be, too)
    for query in queries:
        terms = re.search(r"\((.*)\)$", query)
        assert terms, query
        exact = set(re.findall(r'"([^"]+)"', terms.group(1)))
        assert exact == {"gpu-a", "gpu_b", "train-3", "arn:aws:ecs:us-east-1:123456789012"}
        assert terms.group(1).count(" OR ") == 5


def test_a_dozen_clusters_fit_in_a_search_query(template: Template) -> None:
    # Given twelve watched clusters with 20-character names in a long Region name (README "Dashboard")
    arns = [f"arn:aws:ecs:ap-southeast-2:123456789012:cluster/gpu-training-fleet{n:02d}" for n in range(12)]
    assert {len(arn.rsplit("/", 1)[1]) for arn in arns} == {20}

    # When the GPU graphs' queries are built
    queries = gpu_queries(dashboard(template, {"ClusterArns": ",".join(arns)}))

    # Then they stay within CloudWatch's limit
    assert max(len(query) for query in queries) <= SEARCH_QUERY_LIMIT


# --- Its link: the stack output and the functions that post Slack roots -------------------------------------


def test_the_dashboard_url_is_an_output_and_reaches_the_functions_that_post_roots(template: Template) -> None:
    # Given the stack with auto-resume (its Notify function updates roots and posts standalone notices)
    resolver = resolver_for(template, RESUME)
    name = resolver.properties("Dashboard")["DashboardName"]

    # When the output and the functions' environments are resolved
    output = resolver.resolve(template.body["Outputs"]["DashboardUrl"]["Value"])
    environments = {
        function: resolver.properties(function)["Environment"]["Variables"]
        for function in ("AlertRouterFunction", "SweepFunction", "NotifyFunction")
    }

    # Then the output opens the dashboard in its Region's console, and every one of them has that link
    assert output == (
        "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/<Dashboard>"
    )
    for function, variables in environments.items():
        assert variables["DASHBOARD_URL"] == output.replace("<Dashboard>", name), function
