"""The training side of the contract: training/fault_responder_checkpoint.py and training/example_trainer.py,
against moto's S3 in process, with the newest complete checkpoint chosen by find_newest_complete."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fault_responder.resume.checkpoints import CheckpointSearch, MarkerKind, SkipReason
from tests.integration.training_runs import final_state, newest_complete

TRAINING = Path(__file__).resolve().parents[2] / "training"
REGION = "us-east-1"
BUCKET = "training-checkpoints"
UNINTERRUPTED = f"s3://{BUCKET}/runs/uninterrupted/"
INTERRUPTED = f"s3://{BUCKET}/runs/interrupted/"


@pytest.fixture
def s3(checkpoint_bucket: Any) -> Any:
    return checkpoint_bucket


def train(trainer: ModuleType, uri: str, output: Path, *extra: str) -> int:
    argv = ["--steps", "100", "--checkpoint-every", "10", "--checkpoint-uri", uri, "--output", str(output), *extra]
    return int(trainer.main(argv))


def resume(monkeypatch: pytest.MonkeyPatch, search: CheckpointSearch) -> None:
    assert search.checkpoint is not None
    monkeypatch.setenv("RESUME_FROM", search.checkpoint.uri)
    monkeypatch.setenv("RESUME_ATTEMPT", "1")


def test_a_run_crashed_at_step_37_and_resumed_ends_exactly_like_an_uninterrupted_run(
    s3: Any,
    helper: ModuleType,
    trainer: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an uninterrupted run, and a run that crashed during step 37 (checkpoints every 10 steps)
    assert train(trainer, UNINTERRUPTED, tmp_path / "uninterrupted.json") == 0
    assert train(trainer, INTERRUPTED, tmp_path / "crashed.json", "--fail-at-step", "37") == 1

    # When the newest complete checkpoint is found and the run restarted with RESUME_FROM
    search = newest_complete(INTERRUPTED)
    resume(monkeypatch, search)
    assert train(trainer, INTERRUPTED, tmp_path / "resumed.json") == 0

    # Then it resumed from step 30 and ended bit-identical: parameters, the whole loss history, the last checkpoint
    assert search.checkpoint is not None
    assert (search.checkpoint.step, search.checkpoint.marker) == (30, MarkerKind.MANIFEST)
    assert f"resumed from {INTERRUPTED}step-000030/ at step 30 (attempt 1)" in capsys.readouterr().out
    resumed, uninterrupted = final_state(tmp_path / "resumed.json"), final_state(tmp_path / "uninterrupted.json")
    assert resumed["losses"][30:] == uninterrupted["losses"][30:]
    assert resumed == uninterrupted
    last = "step-000100/"
    assert helper.load_checkpoint(INTERRUPTED + last) == helper.load_checkpoint(UNINTERRUPTED + last)


def test_a_half_written_newest_checkpoint_is_skipped_and_the_resumed_run_still_matches(
    s3: Any, trainer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an uninterrupted run, and a run that crashed while saving step 40: files written, manifest not
    assert train(trainer, UNINTERRUPTED, tmp_path / "uninterrupted.json") == 0
    assert train(trainer, INTERRUPTED, tmp_path / "crashed.json", "--fail-before-commit-at-step", "40") == 1
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/interrupted/step-000040/")
    assert sorted(obj["Key"].rsplit("/", 1)[1] for obj in listed["Contents"]) == [
        "model.json",
        "optimizer.json",
        "trainer.json",
    ]

    # When the newest complete checkpoint is found and the run restarted from it
    search = newest_complete(INTERRUPTED)
    resume(monkeypatch, search)
    assert train(trainer, INTERRUPTED, tmp_path / "resumed.json") == 0

    # Then step 40 was skipped and named, 30 was used, and the run ends exactly like the uninterrupted one
    assert [(s.uri, s.reason) for s in search.skipped] == [(f"{INTERRUPTED}step-000040/", SkipReason.NO_MARKER)]
    assert search.checkpoint is not None
    assert search.checkpoint.step == 30
    assert final_state(tmp_path / "resumed.json") == final_state(tmp_path / "uninterrupted.json")


# The helper


def test_a_committed_checkpoint_is_never_overwritten(s3: Any, helper: ModuleType) -> None:
    # Given a committed step 10
    helper.save_checkpoint(INTERRUPTED, 10, {"model.bin": b"first"})

    # When step 10 is saved again / Then the helper refuses
    with pytest.raises(helper.CheckpointExistsError, match="already committed"):
        helper.save_checkpoint(INTERRUPTED, 10, {"model.bin": b"second"})
    assert helper.load_checkpoint(f"{INTERRUPTED}step-000010/") == {"model.bin": b"first"}


def test_loading_detects_a_file_changed_after_the_commit(s3: Any, helper: ModuleType) -> None:
    # Given a committed checkpoint whose file was later replaced by other bytes of the same size
    folder = helper.save_checkpoint(INTERRUPTED, 10, {"model.bin": b"first"})
    s3.put_object(Bucket=BUCKET, Key="runs/interrupted/step-000010/model.bin", Body=b"FIRST")

    # When loaded / Then the SHA-256 in the manifest catches it
    with pytest.raises(helper.CorruptCheckpointError, match="SHA-256"):
        helper.load_checkpoint(folder)


def test_loading_a_folder_without_a_manifest_fails_clearly(s3: Any, helper: ModuleType) -> None:
    # Given a folder with files but no manifest
    s3.put_object(Bucket=BUCKET, Key="runs/interrupted/step-000010/model.bin", Body=b"partial")

    # When loaded / Then the error says the manifest is missing
    with pytest.raises(helper.CorruptCheckpointError, match="has no _COMPLETE"):
        helper.load_checkpoint(f"{INTERRUPTED}step-000010/")


def test_a_directory_round_trips_through_save_and_download(s3: Any, helper: ModuleType, tmp_path: Path) -> None:
    # Given a local checkpoint directory with a nested file
    source = tmp_path / "out"
    (source / "model").mkdir(parents=True)
    (source / "model" / "shard-00.bin").write_bytes(b"\x00\x01weights")
    (source / "optim.bin").write_bytes(b"moments")

    # When saved and downloaded elsewhere
    folder = helper.save_checkpoint(INTERRUPTED, 20, source)
    restored = helper.download_checkpoint(folder, tmp_path / "restored")

    # Then the same files come back, and discovery accepts the helper's manifest
    assert (restored / "model" / "shard-00.bin").read_bytes() == b"\x00\x01weights"
    assert (restored / "optim.bin").read_bytes() == b"moments"
    search = newest_complete(INTERRUPTED)
    assert search.checkpoint is not None
    assert (search.checkpoint.file_count, search.checkpoint.total_bytes) == (2, 16)


def test_without_resume_variables_the_run_starts_fresh(helper: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no RESUME_FROM / RESUME_ATTEMPT / When read / Then a fresh start, attempt 0
    monkeypatch.delenv("RESUME_FROM", raising=False)
    monkeypatch.delenv("RESUME_ATTEMPT", raising=False)
    assert (helper.resume_from(), helper.resume_attempt()) == (None, 0)


def test_resume_variables_name_the_folder_and_the_attempt(helper: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given RESUME_FROM without its trailing slash, and RESUME_ATTEMPT 2
    monkeypatch.setenv("RESUME_FROM", f"{INTERRUPTED}step-000030")
    monkeypatch.setenv("RESUME_ATTEMPT", "2")

    # When read / Then the folder URI and the attempt number
    assert (helper.resume_from(), helper.resume_attempt()) == (f"{INTERRUPTED}step-000030/", 2)
