"""Fixtures the training tests share (test_example_trainer.py, test_checkpoint_now_training.py,
test_checkpoint_now_cli.py): the training helper imported as training images import it, the example trainer, an
in-process S3 bucket for checkpoints, and a moto server on loopback for real processes."""

from __future__ import annotations

import importlib
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.integration.parallel import free_port, serve_moto, wait_for

TRAINING = Path(__file__).resolve().parents[2] / "training"
REGION = "us-east-1"
CHECKPOINT_BUCKET = "training-checkpoints"


@pytest.fixture
def checkpoint_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's S3 in process with the checkpoint bucket; no RESUME_FROM or RESUME_ATTEMPT from outside."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("RESUME_FROM", raising=False)
    monkeypatch.delenv("RESUME_ATTEMPT", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=CHECKPOINT_BUCKET)
        yield client


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The helper is a file training images copy, not a package: import it the way the trainer does.
    monkeypatch.syspath_prepend(str(TRAINING))
    return importlib.import_module("fault_responder_checkpoint")


@pytest.fixture
def trainer(helper: ModuleType) -> ModuleType:
    return importlib.import_module("example_trainer")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """A moto server on loopback (one per test worker), its endpoint; each test uses buckets of its own."""
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=serve_moto, args=(port,), daemon=True)
    server.start()
    try:
        wait_for(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.join(timeout=10)
