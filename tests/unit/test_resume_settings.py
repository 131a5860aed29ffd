"""The task functions' environment: validated once, turned into the workflow's config; the botocore they need."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import botocore.loaders
import pytest

from fault_responder.resume.config import Mode, NoCheckpointPolicy
from fault_responder.wiring.resume_training import ResumeSettings, ecs_client

BASE = {"INCIDENTS_TABLE": "incidents", "SLACK_SECRET_NAME": "slack", "PAGERDUTY_SECRET_NAME": "pagerduty"}


def test_the_claim_functions_environment_becomes_the_workflow_config() -> None:
    # Given the variables template.yaml gives the ClaimFault function
    env = {
        **BASE,
        "TRAINING_CAPACITY_PROVIDERS": "p5-training, p4d-training",
        "RESUME_CHECK_TYPES": "ACCELERATED_COMPUTE,DAEMON",
        "RESUME_MODE": "approve",
        "NO_CHECKPOINT_POLICY": "restart-from-scratch",
        "RESUME_POLL_SECONDS": "1",
        "RESUME_JOB_CONCURRENCY": "2",
    }

    # When they are read
    config = ResumeSettings.from_env(env).config()

    # Then lists are split and trimmed and every value lands in the config
    assert config.capacity_providers == ("p5-training", "p4d-training")
    assert config.check_types == ("ACCELERATED_COMPUTE", "DAEMON")
    assert (config.mode, config.no_checkpoint_policy) == (Mode.APPROVE, NoCheckpointPolicy.RESTART_FROM_SCRATCH)
    assert (config.poll_seconds, config.job_concurrency, config.max_attempts) == (1, 2, 3)


def test_the_change_events_url_follows_the_events_url_unless_set() -> None:
    settings = ResumeSettings.from_env({**BASE, "PAGERDUTY_EVENTS_URL": "http://127.0.0.1:9/v2/enqueue"})
    assert settings.change_events_url == "http://127.0.0.1:9/v2/change/enqueue"
    explicit = ResumeSettings.from_env({**BASE, "PAGERDUTY_CHANGE_EVENTS_URL": "https://pd.example/change"})
    assert explicit.change_events_url == "https://pd.example/change"


def test_a_missing_or_invalid_variable_is_named_without_its_value() -> None:
    with pytest.raises(RuntimeError, match=r"\['INCIDENTS_TABLE', 'RESUME_MODE'\]"):
        ResumeSettings.from_env({"SLACK_SECRET_NAME": "s", "PAGERDUTY_SECRET_NAME": "p", "RESUME_MODE": "yolo"})


def test_out_of_bounds_parameters_are_refused_when_the_config_is_built() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        ResumeSettings.from_env({**BASE, "MAX_RESUME_ATTEMPTS": "0"}).config()


def _ecs_model_without_auto_repair(data_path: Path) -> None:
    """An ECS model as botocore had it before 1.42.94 (no AutoRepairConfiguration), where AWS_DATA_PATH finds it."""
    model = botocore.loaders.Loader().load_service_model("ecs", "service-2")
    shapes = model["shapes"]
    for removed in ("AutoRepairConfiguration", "AutoRepairActionsStatus"):
        del shapes[removed]
    for shape in shapes.values():
        members = shape.get("members", {})
        for name in [name for name, member in members.items() if member["shape"] == "AutoRepairConfiguration"]:
            del members[name]
    folder = data_path / "ecs" / model["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model), encoding="utf-8")


def test_the_ecs_client_refuses_a_botocore_that_does_not_know_auto_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a botocore whose ECS model predates auto-repair (what an older Lambda runtime would carry)
    _ecs_model_without_auto_repair(tmp_path)
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)

    # When the resume functions build their ECS client, Then they refuse, naming the botocore needed
    with pytest.raises(RuntimeError, match=r"does not know ECS auto-repair .* needs botocore 1\.42\.94 or later"):
        ecs_client()


def test_the_ecs_client_of_a_current_botocore_knows_auto_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)

    assert "AutoRepairConfiguration" in ecs_client().meta.service_model.shape_names
