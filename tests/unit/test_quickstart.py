"""The first deploy: `sam deploy --guided --config-env quickstart` asks at most 15 questions, none of them about
training auto-resume, while template.yaml (the `default` and `prod` environments) still asks every setting; and what
quickstart.yaml passes on to template.yaml, and forwards from it, is template.yaml's.

The questions are counted from SAM CLI itself: `sam deploy --guided` runs as a user runs it, answering yes (or a
value) to each question, with AWS out of reach. SAM CLI asks everything before its first AWS call (the managed
bucket), which then fails: nothing is deployed, no configuration saved."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandbox.template import (
    Resolver,
    StackIdentity,
    check_rules,
    load_template,
    resolve_parameters,
)
from tests.conftest import ROOT, checkout_lock

SAM = ROOT / ".venv-sam" / "bin" / "sam"
QUICKSTART = load_template(ROOT / "quickstart.yaml")
TEMPLATE = load_template(ROOT / "template.yaml")
NESTED = QUICKSTART.resources["Responder"]["Properties"]
MOST_QUESTIONS = 15
CLUSTER = "arn:aws:ecs:us-east-1:111122223333:cluster"
# A question: a tab, its text (not a `#` comment), maybe a [default], then ": " before the next one or the line's end.
QUESTION = re.compile(r"\t(?!#)([^\t\n]+?)(?: \[[^\]\n]*\])?: (?=\t|\n|$)")


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _installed_sam() -> Path:
    """SAM CLI, installed as the Makefile installs it if it is not yet (`make pytest` alone makes only .venv)."""
    if not (ROOT / ".venv-sam" / ".installed").exists():
        with checkout_lock():
            subprocess.run(["make", "--no-print-directory", ".venv-sam/.installed"], cwd=ROOT, check=True)
    return SAM


def guided_questions(tmp_path: Path, *arguments: str) -> list[str]:
    """The questions `sam deploy --guided ARGUMENTS` asks, in order, run in a copy of the templates and samconfig."""
    for name in ("template.yaml", "quickstart.yaml", "samconfig.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("AWS_")},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_unused_port()}",  # refused: the first AWS call fails at once
        "AWS_MAX_ATTEMPTS": "1",
        "SAM_CLI_TELEMETRY": "0",
    }
    finished = subprocess.run(
        [str(_installed_sam()), "deploy", "--guided", *arguments],
        input="y\n" * 200,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,
        check=False,
    )
    # Every question was asked: SAM CLI went on to look for the managed bucket, which AWS being out of reach refused
    assert "Looking for resources needed for deployment" in finished.stdout, finished.stdout + finished.stderr
    assert finished.returncode != 0 and not (tmp_path / "y").exists()
    return QUESTION.findall(finished.stdout)


@pytest.fixture(scope="module")
def first_deploy(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return guided_questions(
        tmp_path_factory.mktemp("quickstart"), "--config-env", "quickstart", "--template-file", "quickstart.yaml"
    )


def test_a_first_deploy_asks_at_most_15_questions_and_none_about_training(first_deploy: list[str]) -> None:
    parameters = [question.removeprefix("Parameter ") for question in first_deploy if question.startswith("Parameter ")]
    training = set(_training_parameters())

    assert len(first_deploy) <= MOST_QUESTIONS, f"{len(first_deploy)} questions: {first_deploy}"
    assert parameters == list(QUICKSTART.parameters)
    assert not training & set(parameters)
    # (SAM CLI's own questions: stack, Region, change set, IAM, rollback, the two function URLs, samconfig x3)
    assert first_deploy[:2] == ["Stack Name", "AWS Region"]
    assert sum("Function Url has no authentication" in question for question in first_deploy) == 2


def test_template_yaml_asks_every_setting_training_auto_resume_included(tmp_path: Path) -> None:
    questions = guided_questions(tmp_path, "--template-file", "template.yaml")
    parameters = [question.removeprefix("Parameter ") for question in questions if question.startswith("Parameter ")]

    assert parameters == list(TEMPLATE.parameters)
    assert set(_training_parameters()) <= set(parameters)


def _training_parameters() -> list[str]:
    [group] = [
        group["Parameters"]
        for group in TEMPLATE.body["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        if group["Label"]["default"].startswith("Training auto-resume")
    ]
    return list(group)


# --- What quickstart.yaml passes on and forwards ---------------------------------------------------------------


class _NoResources:
    def ref(self, logical_id: str) -> Any:
        return f"<{logical_id}>"

    def get_att(self, logical_id: str, attribute: str) -> Any:
        return f"<{logical_id}.{attribute}>"


def test_each_question_is_template_yamls_parameter_with_the_same_constraints() -> None:
    for name, spec in QUICKSTART.parameters.items():
        theirs = TEMPLATE.parameters[name]
        assert NESTED["Parameters"][name], f"{name} is asked but not passed on"
        for constraint in ("Type", "AllowedPattern", "AllowedValues", "MinValue", "MaxValue"):
            if constraint in theirs:
                assert spec.get(constraint) == theirs[constraint] or (
                    constraint == "AllowedPattern" and _pattern_narrows(spec[constraint], theirs[constraint])
                ), f"{name}: {constraint} {spec.get(constraint)!r} is not template.yaml's {theirs[constraint]!r}"
    assert set(NESTED["Parameters"]) == set(QUICKSTART.parameters)
    assert NESTED["Location"] == "template.yaml"


def _pattern_narrows(ours: str, theirs: str) -> bool:
    """Ours is theirs without its empty alternative (a question that must be answered)."""
    return theirs.startswith("^$|") and theirs.removeprefix("^$|") == ours


@pytest.mark.parametrize(
    "answers",
    [
        {"OwnHealthEmail": "gpu-oncall@example.com"},
        {
            "OwnHealthEmail": "gpu-oncall@example.com",
            "ClusterArns": f"{CLUSTER}/gpu-a,{CLUSTER}/gpu-b",
            "SlackSecretName": "team/slack",
            "PagerDutySecretName": "team/pagerduty",
            "ReservedConcurrency": "Disabled",
        },
    ],
)
def test_what_it_passes_on_deploys_alerting_only_and_passes_template_yamls_rules(answers: dict[str, str]) -> None:
    # Given the quick start's answers, passed on as quickstart.yaml passes them
    ours = resolve_parameters(QUICKSTART, answers)
    passed = Resolver(QUICKSTART, StackIdentity("quickstart"), ours, _NoResources()).properties("Responder")
    nested = resolve_parameters(TEMPLATE, {name: str(value) for name, value in passed["Parameters"].items()})

    # Then template.yaml accepts them (its patterns and Rules), auto-resume is off, and the values arrive unchanged
    check_rules(TEMPLATE, StackIdentity("quickstart-Responder"), nested)
    resolver = Resolver(TEMPLATE, StackIdentity("quickstart-Responder"), nested, _NoResources())
    assert not resolver.condition("ResumeEnabled")
    assert resolver.condition("HasOwnHealthEmail")
    assert resolver.condition("ReserveConcurrency") is (answers.get("ReservedConcurrency", "Enabled") == "Enabled")
    for name in answers:
        assert nested[name] == ours[name], name


def test_it_forwards_outputs_template_yaml_always_has() -> None:
    for name, output in QUICKSTART.body["Outputs"].items():
        value = output["Value"]
        if name == "ResponderStack":
            assert value == {"Ref": "Responder"}
            continue
        assert value == {"Fn::GetAtt": ["Responder", f"Outputs.{name}"]}, name
        assert name in TEMPLATE.body["Outputs"], f"template.yaml has no output {name}"
        assert "Condition" not in TEMPLATE.body["Outputs"][name], f"{name} exists only under a condition"
