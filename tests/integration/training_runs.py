"""What the training tests compare: a run's final state, bit for bit, and the checkpoint the responder would pick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3

from fault_responder.adapters.s3_checkpoints import S3CheckpointStore
from fault_responder.resume.checkpoints import CheckpointSearch, find_newest_complete


def final_state(path: Path) -> dict[str, Any]:
    """The example trainer's --output, with every float as float.hex: equal only when bit-identical."""
    state = json.loads(path.read_text())
    return {
        "step": state["step"],
        "parameters": [value.hex() for value in [*state["weights"], state["bias"]]],
        "losses": [value.hex() for value in state["losses"]],
    }


def newest_complete(uri: str, region: str = "us-east-1") -> CheckpointSearch:
    """The checkpoint discovery the resume workflow runs, over this process's S3 (moto)."""
    return find_newest_complete(uri, S3CheckpointStore(boto3.client("s3", region_name=region)))
