"""The sample events under events/ stay realistic, parseable and self-consistent.

Given/When/Then tests over every fixture: envelopes parse with the app's models, malformed ones do not, SQS
wrappers carry an envelope byte-for-byte with the right MD5, event ids are unique (the app dedupes by id), the
AWS samples are unchanged, every file is documented in events/README.md and is valid input of the function it
names, and env.json only overrides what the template declares, pointing Slack and PagerDuty at the stand-ins.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from aws_lambda_powertools.utilities.parser.models import SqsModel
from pydantic import ValidationError

from fault_responder.actions.interactive import (
    Unauthorized,
    parse_click,
    verify_pagerduty_request,
    verify_slack_request,
)
from fault_responder.events.cloudwatch import AlarmContributorStateChangeEvent, AlarmStateChangeEvent
from fault_responder.events.ecs import HealthChangeEvent, InstanceStateEvent, TaskStateEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents.incident_actions import is_action, parse_action
from sandbox import serve_standins
from sandbox.standins import PAGERDUTY_WEBHOOK_SECRET, SLACK_SIGNING_SECRET, StandIns
from tests.conftest import load_app

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "events"

ACCOUNT = "123456789012"
REGION = "us-west-2"

# Files that are byte-identical copies of an AWS sample and so share its id on purpose.
VERBATIM_COPIES = {
    "state/active-resource-update.json": "aws-docs/instance-state-change-active.json",
    "task/running.json": "aws-docs/task-state-change-ec2-running.json",
}
DUPLICATES = {"duplicates/xid46-duplicate.json": "aws-docs/health-change-accelerated-compute-xid46.json"}

MODEL_BY_FOLDER: dict[str, type | tuple[type, ...]] = {
    "health": HealthChangeEvent,
    "state": InstanceStateEvent,
    "task": TaskStateEvent,
    "duplicates": HealthChangeEvent,
    "alarm": (AlarmStateChangeEvent, AlarmContributorStateChangeEvent),
}
MODEL_BY_DETAIL_TYPE: dict[str, type] = {
    "ECS Container Instance Health Change": HealthChangeEvent,
    "ECS Container Instance State Change": InstanceStateEvent,
    "ECS Task State Change": TaskStateEvent,
    "CloudWatch Alarm State Change": AlarmStateChangeEvent,
    "CloudWatch Alarm Contributor State Change": AlarmContributorStateChangeEvent,
}


def _rel(path: Path) -> str:
    return path.relative_to(EVENTS).as_posix()


def _all_files() -> list[Path]:
    return sorted(p for p in EVENTS.rglob("*") if p.is_file())


def _json_files() -> list[Path]:
    return [p for p in _all_files() if p.suffix == ".json"]


def _envelope_files() -> list[Path]:
    return [
        p
        for p in _json_files()
        if _rel(p).split("/")[0] not in {"malformed", "sqs", "lambda", "noise", "actions", "schedule", "function-url"}
    ]


def _burst_files() -> list[Path]:
    """events/noise/: each file a list of envelopes, replayed in order (a storm, a flapping check)."""
    return [p for p in _json_files() if _rel(p).startswith("noise/")]


def _own_envelope_files() -> list[Path]:
    """Envelopes written for this repo (not AWS samples or their verbatim copies)."""
    skip = set(VERBATIM_COPIES) | set(DUPLICATES)
    return [p for p in _envelope_files() if not _rel(p).startswith("aws-docs/") and _rel(p) not in skip]


def _own_ecs_envelope_files() -> list[Path]:
    return [p for p in _own_envelope_files() if _load(p)["source"] == "aws.ecs"]


def _alarm_files() -> list[Path]:
    return [p for p in _json_files() if _rel(p).startswith("alarm/")]


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _ids(paths: list[Path]) -> list[str]:
    return [_rel(p) for p in paths]


# --- envelopes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _envelope_files(), ids=_ids(_envelope_files()))
def test_every_envelope_parses_into_the_model_its_detail_type_names(path: Path) -> None:
    # Given an envelope fixture
    raw = _load(path)

    # When the app parses it
    event = parse_ecs_event(raw)

    # Then it becomes the model for its detail-type (and its folder), keeping the event id
    assert isinstance(event, MODEL_BY_DETAIL_TYPE[raw["detail-type"]])
    folder = _rel(path).split("/")[0]
    if folder in MODEL_BY_FOLDER:
        assert isinstance(event, MODEL_BY_FOLDER[folder])
    assert event.id == raw["id"]


SCENARIO_BURSTS = sorted((REPO / "scenarios" / "events").glob("*.json"))
"""Bursts only a scenario replays (docs/scenarios.md): held to the same rules as events/noise/."""


@pytest.mark.parametrize(
    "path",
    _burst_files() + SCENARIO_BURSTS,
    ids=_ids(_burst_files()) + [p.relative_to(REPO).as_posix() for p in SCENARIO_BURSTS],
)
def test_every_burst_is_envelopes_of_one_fleet_in_time_order(path: Path) -> None:
    # Given a burst of envelopes
    burst = _load(path)
    assert isinstance(burst, list) and len(burst) > 1

    # Then each parses as the model its detail-type names, is of this fleet's account and Region with a v4 id,
    # and they are in the order of their times
    for raw in burst:
        assert isinstance(parse_ecs_event(raw), MODEL_BY_DETAIL_TYPE[raw["detail-type"]])
        assert (raw["account"], raw["region"]) == (ACCOUNT, REGION)
        assert uuid.UUID(raw["id"]).version == 4
        assert raw["resources"] == [raw["detail"]["containerInstanceArn"]]
    assert [raw["time"] for raw in burst] == sorted(raw["time"] for raw in burst)
    assert len({raw["id"] for raw in burst}) == len(burst)


@pytest.mark.parametrize("path", _alarm_files(), ids=_ids(_alarm_files()))
def test_alarm_envelopes_are_the_stacks_alarms_in_the_fleets_account(path: Path) -> None:
    # Given an alarm state change written for this repo
    raw = _load(path)
    detail = raw["detail"]

    # When its envelope fields are inspected
    # Then it is the fleet's account and Region, names its alarm in resources[], and the alarm is the sandbox
    # stack's (AlarmStateChangeRule matches "<stack name>.")
    assert raw["source"] == "aws.cloudwatch"
    assert raw["account"] == ACCOUNT
    assert raw["region"] == REGION
    assert uuid.UUID(raw["id"]).version == 4
    assert raw["resources"] == [f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{detail['alarmName']}"]
    assert detail["alarmName"].startswith("gpu-fault-responder.")
    states = {detail["state"]["value"]}
    if raw["detail-type"] == "CloudWatch Alarm Contributor State Change":
        # ... and a contributor's names its time series by the cluster, as the GPU alarms group them (it has no
        # previous state)
        assert "previousState" not in detail
        assert set(detail["alarmContributor"]["attributes"]) == {"ClusterName"}
    else:
        states.add(detail["previousState"]["value"])
    assert states <= {"ALARM", "OK", "INSUFFICIENT_DATA"}


@pytest.mark.parametrize("path", _own_ecs_envelope_files(), ids=_ids(_own_ecs_envelope_files()))
def test_own_envelopes_are_consistent_with_the_fleet(path: Path) -> None:
    # Given an envelope written for this repo
    raw = _load(path)
    detail = raw["detail"]

    # When its envelope fields are inspected
    # Then it is one account and Region, has a v4 UUID id, and names its subject in resources[]
    assert raw["version"] == "0"
    assert raw["source"] == "aws.ecs"
    assert raw["account"] == ACCOUNT
    assert raw["region"] == REGION
    assert uuid.UUID(raw["id"]).version == 4
    assert f":{ACCOUNT}:" in detail["clusterArn"]
    subject = detail["taskArn"] if raw["detail-type"] == "ECS Task State Change" else detail["containerInstanceArn"]
    assert raw["resources"] == [subject]
    assert detail["clusterArn"].split("/")[-1] == subject.split("/")[-2]


@pytest.mark.parametrize(
    "path",
    [p for p in _own_envelope_files() if _load(p)["detail-type"] == "ECS Container Instance State Change"],
    ids=_rel,
)
def test_state_changes_carry_every_container_instance_field(path: Path) -> None:
    # Given a container-instance State Change written for this repo
    detail = _load(path)["detail"]

    # When its detail is inspected
    required = {
        "version",
        "status",
        "statusReason",
        "agentConnected",
        "runningTasksCount",
        "pendingTasksCount",
        "registeredResources",
        "remainingResources",
        "attributes",
        "versionInfo",
        "updatedAt",
        "capacityProviderName",
        "ec2InstanceId",
        "clusterArn",
        "containerInstanceArn",
    }

    # Then every field a real one has is there, and GPU instances register and report their GPUs
    assert required <= detail.keys()
    attributes = {a["name"]: a.get("value") for a in detail["attributes"]}
    assert {"ecs.instance-type", "ecs.availability-zone"} <= attributes.keys()
    registered = {r["name"]: r for r in detail["registeredResources"]}
    remaining = {r["name"]: r for r in detail["remainingResources"]}
    if attributes["ecs.instance-type"].startswith(("p", "g")):
        assert registered["GPU"]["type"] == "STRINGSET"
        assert registered["GPU"]["stringSetValue"]
        assert set(remaining["GPU"]["stringSetValue"]) <= set(registered["GPU"]["stringSetValue"])


@pytest.mark.parametrize(
    "path",
    [p for p in _own_envelope_files() if _load(p)["detail-type"] == "ECS Task State Change"],
    ids=_rel,
)
def test_stopped_tasks_carry_the_fields_the_router_reads(path: Path) -> None:
    # Given a STOPPED task written for this repo
    detail = _load(path)["detail"]

    # When its detail is inspected
    # Then it names its instance, capacity provider, group and definition, and its containers' GPUs
    assert detail["lastStatus"] == "STOPPED"
    for field in ("stoppedAt", "version", "group", "taskDefinitionArn", "capacityProviderName"):
        assert detail[field]
    assert detail["containerInstanceArn"].startswith("arn:aws:ecs:")
    assert all(c["gpuIds"] for c in detail["containers"])
    assert _time(detail["stoppingAt"]) <= _time(detail["stoppedAt"]) <= _time(_load(path)["time"])


# --- sequences -----------------------------------------------------------------------------------


def test_incident_xid79_tells_one_auto_repair_story_in_order() -> None:
    # Given the numbered incident files
    files = sorted((EVENTS / "incident-xid79").glob("*.json"))
    events = [_load(p) for p in files]

    # When they are read in file order
    times = [_time(e["time"]) for e in events]
    instance_arns = {e["detail"]["containerInstanceArn"] for e in events}
    states = [e["detail"] for e in events if e["detail-type"] == "ECS Container Instance State Change"]

    # Then they are one instance in gpu-inference, in time order, with auto-repair's timing (docs/ecs-events.md)
    assert [p.name[:2] for p in files] == ["01", "02", "03", "04", "05"]
    assert times == sorted(times)
    assert len(instance_arns) == 1
    assert all(e["detail"]["clusterArn"].endswith(":cluster/gpu-inference") for e in events)
    assert all(e["detail"]["capacityProviderName"] == "gpu-p5-managed" for e in events)
    impaired = events[0]["detail"]["healthChecks"][0]
    assert (impaired["type"], impaired["status"], impaired["statusReason"]) == (
        "ACCELERATED_COMPUTE",
        "IMPAIRED",
        "XID_79",
    )
    impaired_at = _time(impaired["lastStatusChange"])
    assert [s["status"] for s in states] == ["DRAINING", "DEREGISTERING", "INACTIVE"]
    assert [s["version"] for s in states] == sorted({s["version"] for s in states})
    drain_delay = (_time(states[0]["updatedAt"]) - impaired_at).total_seconds()
    gone_delay = (_time(states[-1]["updatedAt"]) - impaired_at).total_seconds()
    assert 30 <= drain_delay <= 180
    assert 6 * 60 <= gone_delay <= 10 * 60
    assert events[2]["detail"]["stoppedReason"].startswith("Task stopped during instance draining")


def test_follow_ups_of_the_xid46_sample_come_later_on_the_same_instance() -> None:
    # Given the AWS XID_46 sample and the events written to follow it
    sample = _load(EVENTS / "aws-docs/health-change-accelerated-compute-xid46.json")
    ok = _load(EVENTS / "health/accelerated-compute-xid46-ok.json")
    drain = _load(EVENTS / "state/draining-after-xid46.json")
    task = _load(EVENTS / "task/stopped-instance-draining.json")
    manual = _load(EVENTS / "state/draining-manual.json")
    impaired_at = _time(sample["detail"]["healthChecks"][0]["lastStatusChange"])

    # When their instance and times are compared
    arn = sample["detail"]["containerInstanceArn"]

    # Then the OK, the drain and the task stop are on that instance, after the fault
    ok_check = ok["detail"]["healthChecks"][0]
    assert ok["detail"]["containerInstanceArn"] == arn
    assert (ok_check["type"], ok_check["status"], ok_check["statusReason"]) == ("ACCELERATED_COMPUTE", "OK", None)
    assert _time(ok_check["lastStatusChange"]) > impaired_at
    assert drain["detail"]["containerInstanceArn"] == arn
    assert drain["detail"]["status"] == "DRAINING"
    assert 0 < (_time(drain["detail"]["updatedAt"]) - impaired_at).total_seconds() <= 10 * 60
    assert task["detail"]["containerInstanceArn"] == arn
    assert _time(task["detail"]["stoppedAt"]) > _time(drain["detail"]["updatedAt"])
    # And the manual drain is another instance of the same cluster, with no reason
    assert manual["detail"]["containerInstanceArn"] != arn
    assert manual["detail"]["clusterArn"] == sample["detail"]["clusterArn"]
    assert manual["detail"]["statusReason"] is None


# --- malformed -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((EVENTS / "malformed").glob("*.json")), ids=_rel)
def test_malformed_events_are_rejected_by_the_parser(path: Path) -> None:
    # Given a malformed fixture (valid JSON)
    raw = _load(path)

    # When the app parses it
    # Then it fails with a validation or value error, which the router dead-letters
    with pytest.raises((ValidationError, ValueError)):
        parse_ecs_event(raw)


# --- sqs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((EVENTS / "sqs").glob("*.json")), ids=_rel)
def test_sqs_events_wrap_envelope_files_byte_for_byte(path: Path) -> None:
    # Given an SQS Lambda event for `sam local invoke` and the compact JSON of every envelope file
    raw = _load(path)
    envelopes = {_compact(_load(p)): _rel(p) for p in _envelope_files()}

    # When it is validated as an SQS event
    SqsModel.model_validate(raw)

    # Then every body is an envelope file's JSON, its MD5 is right, and it parses
    assert raw["Records"]
    for record in raw["Records"]:
        assert record["body"] in envelopes, f"{path.name}: body is not the JSON of any file under events/"
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode("utf-8")).hexdigest()
        assert record["eventSource"] == "aws:sqs"
        assert record["awsRegion"] == record["eventSourceARN"].split(":")[3]
        assert record["receiptHandle"]
        parse_ecs_event(json.loads(record["body"]))
    message_ids = [r["messageId"] for r in raw["Records"]]
    assert len(message_ids) == len(set(message_ids))


def test_sqs_events_wrap_the_envelopes_their_names_promise() -> None:
    # Given the two SQS events
    xid46 = _load(EVENTS / "sqs/alert-router-xid46.json")
    incident = _load(EVENTS / "sqs/alert-router-incident-xid79.json")

    # When their bodies are compared with the envelope files
    sample = _compact(_load(EVENTS / "aws-docs/health-change-accelerated-compute-xid46.json"))
    story = [_compact(_load(p)) for p in sorted((EVENTS / "incident-xid79").glob("*.json"))]

    # Then one wraps the XID_46 sample and the other the incident, in order
    assert [r["body"] for r in xid46["Records"]] == [sample]
    assert [r["body"] for r in incident["Records"]] == story


def test_the_claim_fault_input_wraps_the_training_fault_envelope() -> None:
    # Given the first workflow task's input and the trigger it stands for
    payload = _load(EVENTS / "lambda/claim-fault.json")
    trigger = _load(EVENTS / "resume/training-fault-xid79.json")

    # Then it is the state machine's input as the ASL passes it: the event itself, and the execution id
    assert payload["event"] == trigger
    assert payload["execution"].startswith("arn:aws:states:")


# --- ids and copies ------------------------------------------------------------------------------


def test_event_ids_are_unique_except_deliberate_copies() -> None:
    # Given every envelope under events/, malformed ones included
    paths = [p for p in _json_files() if not _rel(p).startswith(("sqs/", "lambda/"))]
    by_id: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        raw = _load(path)
        if isinstance(raw, dict) and "id" in raw:
            by_id[raw["id"]].append(_rel(path))

    # When ids are grouped
    shared = {event_id: rels for event_id, rels in by_id.items() if len(rels) > 1}

    # Then only a duplicate or a verbatim copy shares an id, and only with its original
    allowed = {**VERBATIM_COPIES, **DUPLICATES}
    for rels in shared.values():
        copies = [r for r in rels if r in allowed]
        originals = [r for r in rels if r not in allowed]
        assert len(originals) == 1, f"files share an id: {rels}"
        assert all(allowed[c] == originals[0] for c in copies), f"files share an id: {rels}"


@pytest.mark.parametrize("copy, original", sorted({**VERBATIM_COPIES, **DUPLICATES}.items()))
def test_duplicates_and_verbatim_copies_equal_their_original(copy: str, original: str) -> None:
    # Given a file that is meant to be a copy
    # When it is compared byte for byte with its original
    # Then they are identical (a duplicate delivery has the same bytes and id)
    assert (EVENTS / copy).read_bytes() == (EVENTS / original).read_bytes()


def test_every_file_in_duplicates_is_declared() -> None:
    # Given the duplicates folder
    # When its files are listed
    # Then each one is declared with its original
    assert {_rel(p) for p in (EVENTS / "duplicates").glob("*")} == set(DUPLICATES)


# SHA-256 of each verbatim AWS documentation sample, as copied from the AWS developer guides.
AWS_DOCS_SHA256 = {
    "health-change-accelerated-compute-xid46.json": "10073a7d175cd9317462109061d0cfa5b6c6367c99ebf1c431647935c4878f57",
    "health-change-agent-connectivity-impaired.json": (
        "f04e566c0d1de235e51f4b011b942ea430ddd6650ef919b7a1e722e85fae0462"
    ),
    "health-change-container-runtime-ok.json": "b72f3b28095aad679b551b9d98fa40f0b045be813707a600530e1338262dcacd",
    "health-change-daemon-impaired.json": "7e5d76c22094fdbe3efb0eeb681b251caefadeb0e7da8abd4d49586f39be197c",
    "instance-state-change-active.json": "12ecc486cfe9b13a3b561b34b9e80136b45c10c4053d7f1421bdf91f962c7dba",
    "task-state-change-ec2-running.json": "e9889115b56f99f82be7c2b3547cc5617fcb31ff33706cde24d11889e588e406",
    "alarm-contributor-state-change.json": "6e3a3a27f96eaf2a38ab851d3b6b9ae2981d8995d9812492e6998306b38d71b6",
}


def test_aws_docs_samples_are_unchanged() -> None:
    # Given the verbatim AWS samples under events/aws-docs/
    # When their bytes are hashed
    local = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (EVENTS / "aws-docs").glob("*.json")}

    # Then they are exactly the samples as copied: an edit belongs in another folder
    assert local == AWS_DOCS_SHA256


def test_aws_docs_folder_holds_the_seven_samples() -> None:
    # Given events/aws-docs/
    # When it is listed
    names = sorted(p.name for p in (EVENTS / "aws-docs").glob("*.json"))

    # Then it holds the seven AWS samples
    assert names == [
        "alarm-contributor-state-change.json",
        "health-change-accelerated-compute-xid46.json",
        "health-change-agent-connectivity-impaired.json",
        "health-change-container-runtime-ok.json",
        "health-change-daemon-impaired.json",
        "instance-state-change-active.json",
        "task-state-change-ec2-running.json",
    ]


# --- documentation and env.json ------------------------------------------------------------------


def test_every_file_is_listed_in_the_events_readme() -> None:
    # Given events/README.md
    readme = (EVENTS / "README.md").read_text(encoding="utf-8")

    # When every file under events/ is looked up in it
    missing = [_rel(p) for p in _all_files() if p.name != "README.md" and f"`{_rel(p)}`" not in readme]

    # Then none is missing
    assert not missing, f"not in events/README.md: {missing}"


class _CfnLoader(yaml.SafeLoader):
    """Reads template.yaml, keeping CloudFormation short-form tags as plain values."""


def _cfn_tag(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _cfn_tag)


def _template() -> dict[str, Any]:
    return dict(yaml.load((REPO / "template.yaml").read_text(encoding="utf-8"), Loader=_CfnLoader))


def _declared(template: dict[str, Any], function: str | None) -> set[str]:
    """The variables the template declares for a function (Globals included); None: for every function."""
    declared = set(template["Globals"]["Function"]["Environment"]["Variables"])
    if function is not None:
        properties = template["Resources"][function]["Properties"]
        declared |= set((properties.get("Environment") or {}).get("Variables") or {})
    return declared


def test_env_json_sets_only_variables_the_template_declares() -> None:
    # Given template.yaml and env.json (sam local invoke --env-vars overrides declared variables only)
    template = _template()
    env = json.loads((REPO / "env.json").read_text(encoding="utf-8"))

    # When each of its sections is compared with the template ("Parameters" applies to every function)
    functions = {name for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}
    undeclared = {
        section: sorted(set(values) - _declared(template, None if section == "Parameters" else section))
        for section, values in env.items()
        if section == "Parameters" or section in functions
    }

    # Then it names only functions of the template, sets only variables they declare, and every value is text
    assert set(env) - {"Parameters"} <= functions
    assert all(not names for names in undeclared.values()), undeclared
    assert all(isinstance(v, str) and v for values in env.values() for v in values.values())


def test_env_json_points_slack_and_pagerduty_at_the_stand_ins() -> None:
    # Given env.json, the port `make standins` serves on, and the paths the stand-ins answer
    endpoints = json.loads((REPO / "env.json").read_text(encoding="utf-8"))["Parameters"]
    make_port = re.search(r"^STANDINS_PORT \?= (\d+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert make_port is not None
    with StandIns() as stand_ins:
        slack_path, pagerduty_path = urlsplit(stand_ins.slack_api_url).path, urlsplit(stand_ins.pagerduty_url).path

    # Then every function's Slack and PagerDuty requests go to the stand-ins, as a container reaches them
    base = f"http://{serve_standins.CONTAINER_HOST}:{serve_standins.DEFAULT_PORT}"
    assert int(make_port.group(1)) == serve_standins.DEFAULT_PORT
    assert endpoints["SLACK_API_URL"] == base + slack_path
    assert endpoints["PAGERDUTY_EVENTS_URL"] == base + pagerduty_path


def test_env_json_names_a_real_dead_letter_queue_url() -> None:
    env = json.loads((REPO / "env.json").read_text(encoding="utf-8"))
    assert re.fullmatch(
        r"https://sqs\.[a-z0-9-]+\.amazonaws\.com/\d{12}/.+", env["AlertRouterFunction"]["ALERT_DLQ_URL"]
    )


# --- which function takes which file (events/README.md) ----------------------------------------------

_INPUT_ROW = re.compile(r"^\| (?P<files>`[^|]+) \| `(?P<function>\w+)` \| (?P<as>[^|]+) \|$")


def documented_inputs() -> list[tuple[list[str], str, bool]]:
    """events/README.md's "Which function takes which file": (folders or files, function, rejected?)."""
    readme = (EVENTS / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Which function takes which file", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = _INPUT_ROW.match(line.strip())
        if match:
            rows.append((re.findall(r"`([^`]+)`", match["files"]), match["function"], "rejects" in match["as"]))
    return rows


def _resume_app() -> ModuleType:
    return load_app("resume_training")


def _first_state_payload(execution_input: Any) -> dict[str, Any]:
    """What the ResumeTraining state machine's first state passes its function, per the definition."""
    definition = json.loads((REPO / "statemachines/resume_training.asl.json").read_text(encoding="utf-8"))
    payload = definition["States"][definition["StartAt"]]["Parameters"]["Payload"]
    assert payload == {"event.$": "$", "execution.$": "$$.Execution.Id"}
    return {"event": execution_input, "execution": "arn:aws:states:us-west-2:123456789012:execution:rt:e1"}


_TASK_INPUTS = {
    "CheckGuardsFunction": "FaultInput",
    "QuarantineInstanceFunction": "QuarantineInput",
    "FindJobsFunction": "FaultInput",
    "PlanJobFunction": "JobInput",
    "RequestCheckpointFunction": "RelaunchInput",
    "CheckCheckpointFunction": "PlannedJobInput",
    "StopJobFunction": "PlannedJobInput",
    "CheckTasksFunction": "CheckTasksInput",
    "RelaunchJobFunction": "RelaunchInput",
    "PlanRetryFunction": "RetryInput",
    "NotifyFunction": "NotifyInput",
}
"""The input model (in functions/resume_training/app.py) of each task function of the workflow."""


def _check_input(function: str, rejected: bool, document: Any) -> None:
    """Validate a document as the named function (or state machine) receives it."""
    if function == "AlertRouterFunction" and isinstance(document, dict) and "Records" in document:
        SqsModel.model_validate(document)
        for record in document["Records"]:
            parse_ecs_event(json.loads(record["body"]))
    elif function == "AlertRouterFunction" and rejected:
        with pytest.raises((ValidationError, ValueError)):
            parse_ecs_event(document)
    elif function == "AlertRouterFunction" and isinstance(document, list):
        for envelope in document:  # a burst (events/noise/): each envelope is the function's input in turn
            parse_ecs_event(envelope)
    elif function == "AlertRouterFunction" and is_action(document):
        parse_action(document)  # a person's action (events/actions/), which its endpoint puts on the alert queue
    elif function == "AlertRouterFunction":
        parse_ecs_event(document)
    elif function == "ResumeTrainingStateMachine":
        _check_input("ClaimFaultFunction", rejected, _first_state_payload(document))
    elif function == "ClaimFaultFunction":
        claim = _resume_app().ClaimInput.model_validate(document)
        assert isinstance(parse_ecs_event(claim.event), HealthChangeEvent)
    elif function in _TASK_INPUTS:
        _resume_app().__dict__[_TASK_INPUTS[function]].model_validate(document)
    elif function in ("SweepFunction", "ReconcileFunction"):
        assert (document["source"], document["detail-type"], document["detail"]) == (
            "aws.events",
            "Scheduled Event",
            {},
        )
        assert re.fullmatch(r"arn:aws:events:[a-z0-9-]+:\d{12}:rule/.+", document["resources"][0])
    elif function in ("SlackActionsFunction", "PagerDutyWebhookFunction"):
        assert (document["version"], document["requestContext"]["http"]["method"]) == ("2.0", "POST")
        assert isinstance(document["body"], str) and isinstance(document["isBase64Encoded"], bool)
    else:
        raise AssertionError(f"events/README.md names {function}, which this test cannot check")


@pytest.mark.parametrize("path", _json_files(), ids=_ids(_json_files()))
def test_every_file_is_valid_input_of_the_function_the_readme_names(path: Path) -> None:
    # Given a file and the rows of events/README.md's table that cover it (by folder or by name)
    name = _rel(path)
    rows = [(function, rejected) for files, function, rejected in documented_inputs() if _covers(files, name)]

    # When it is validated as each of those functions receives it
    # Then it is accepted (or, for the files documented as rejected, refused by the parser)
    assert rows, f"events/README.md does not say which function takes {name}"
    for function, rejected in rows:
        _check_input(function, rejected, _load(path))


def _covers(files: list[str], name: str) -> bool:
    return any(name == entry or (entry.endswith("/") and name.startswith(entry)) for entry in files)


def test_the_training_fault_envelope_alone_is_not_the_claim_functions_input() -> None:
    # Given the workflow's trigger (an EventBridge envelope)
    trigger = _load(EVENTS / "resume/training-fault-xid79.json")

    # When it is passed to ClaimFaultFunction as it is, Then its input model refuses it
    with pytest.raises(ValidationError):
        _resume_app().ClaimInput.model_validate(trigger)


# --- the signed function URL samples -------------------------------------------------------------


def _url_request(name: str) -> tuple[dict[str, str], bytes]:
    request = _load(EVENTS / "function-url" / name)
    body = request["body"].encode()
    return request["headers"], base64.b64decode(body) if request["isBase64Encoded"] else body


def test_the_slack_sample_is_signed_with_the_sandbox_secret_at_its_own_timestamp() -> None:
    # Given the Slack sample, and the endpoint's own check
    headers, body = _url_request("slack-acknowledge.json")
    signed_at = datetime.fromtimestamp(int(headers["x-slack-request-timestamp"]), UTC)

    # When it is checked at its timestamp, Then it verifies; a day later it is refused as stale
    assert verify_slack_request(SLACK_SIGNING_SECRET, headers, body, signed_at) == headers["x-slack-signature"]
    with pytest.raises(Unauthorized, match="stale timestamp"):
        verify_slack_request(SLACK_SIGNING_SECRET, headers, body, signed_at + timedelta(days=1))
    # And it is an Acknowledge press on the XID 46 sample's incident, which `invoke` signs again
    assert parse_click(body).action.value == "incident_acknowledge"
    assert _load(EVENTS / "function-url/slack-acknowledge.json")["_sandbox"] == {"resign": "slack"}


def test_the_pagerduty_sample_is_signed_with_the_sandbox_webhook_secret() -> None:
    # Given the PagerDuty sample, When the endpoint's check reads it, Then it verifies
    headers, body = _url_request("pagerduty-incident-acknowledged.json")
    assert verify_pagerduty_request([PAGERDUTY_WEBHOOK_SECRET], headers, body) == headers["x-pagerduty-signature"]
    assert json.loads(body)["event"]["event_type"] == "incident.acknowledged"
