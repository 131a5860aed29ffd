"""The boto3 CheckpointStore (fault_responder.adapters.s3_checkpoints) against moto's S3, in process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.s3_checkpoints import S3CheckpointStore
from fault_responder.resume.checkpoints import CheckpointStoreError, MarkerKind, SkipReason, find_newest_complete

REGION = "us-east-1"
BUCKET = "training-checkpoints"
PREFIX = "runs/job-42/"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def store(s3: Any) -> S3CheckpointStore:
    # Its own client, so its request count holds only its own requests.
    return S3CheckpointStore(boto3.client("s3", region_name=REGION))


def put(s3: Any, key: str, body: bytes = b"weights") -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def save_complete(s3: Any, folder: str, step: int) -> None:
    files = {"model/shard-00.pt": b"weights", "optim/shard-00.pt": b"moments"}
    for path, body in files.items():
        put(s3, f"{PREFIX}{folder}/{path}", body)
    entries = [{"path": path, "size": len(body)} for path, body in files.items()]
    manifest = {"format": "fault-responder-checkpoint/1", "step": step, "files": entries}
    put(s3, f"{PREFIX}{folder}/_COMPLETE", json.dumps(manifest).encode())


def test_folders_beyond_one_listing_page_are_all_listed(s3: Any, store: S3CheckpointStore) -> None:
    # Given 1,205 step folders (S3 returns at most 1,000 entries per ListObjectsV2 page)
    for step in range(1205):
        put(s3, f"{PREFIX}step-{step:06d}/model.pt")

    # When the folders are listed
    folders = list(store.list_folders(BUCKET, PREFIX))

    # Then every one comes back, in two requests
    assert len(folders) == 1205
    assert folders[0] == "step-000000"
    assert folders[-1] == "step-001204"
    assert store.requests == {"ListObjectsV2": 2}


def test_folders_are_named_relative_to_the_prefix_and_exclude_files(s3: Any, store: S3CheckpointStore) -> None:
    # Given two step folders with nested files and a tracker file at the prefix root
    put(s3, f"{PREFIX}iter_0000100/mp_rank_00/model_optim_rng.pt")
    put(s3, f"{PREFIX}iter_0000200/mp_rank_00/model_optim_rng.pt")
    put(s3, f"{PREFIX}latest_checkpointed_iteration.txt", b"200")

    # When the folders are listed / Then only the folders, by name
    assert list(store.list_folders(BUCKET, PREFIX)) == ["iter_0000100", "iter_0000200"]


def test_files_are_listed_recursively_with_sizes_and_times(s3: Any, store: S3CheckpointStore) -> None:
    # Given a folder with a nested shard and a marker
    put(s3, f"{PREFIX}step-000120/model/shard-00.pt", b"1234567")
    put(s3, f"{PREFIX}step-000120/COMPLETED", b"")

    # When its files are listed
    files = store.list_files(BUCKET, f"{PREFIX}step-000120/")

    # Then keys are relative to the folder, with sizes and modification times
    assert {path: obj.size for path, obj in files.items()} == {"model/shard-00.pt": 7, "COMPLETED": 0}
    assert all(obj.last_modified is not None for obj in files.values())


def test_a_read_returns_at_most_the_limit_in_one_ranged_request(s3: Any, store: S3CheckpointStore) -> None:
    # Given a 1 KiB object
    put(s3, f"{PREFIX}big", b"x" * 1024)

    # When 10 bytes are asked for / Then 10 bytes come back from one GetObject
    assert store.read(BUCKET, f"{PREFIX}big", 10) == b"x" * 10
    assert store.requests == {"GetObject": 1}


def test_reading_a_missing_object_returns_none(store: S3CheckpointStore) -> None:
    # Given no such key / When read / Then None
    assert store.read(BUCKET, f"{PREFIX}latest_checkpointed_iteration.txt", 64) is None


def test_reading_an_empty_object_returns_no_bytes(s3: Any, store: S3CheckpointStore) -> None:
    # Given an empty object (S3 answers InvalidRange to any ranged GET of it)
    put(s3, f"{PREFIX}step-000120/_COMPLETE", b"")

    # When read / Then it exists and holds nothing
    assert store.read(BUCKET, f"{PREFIX}step-000120/_COMPLETE", 64) == b""


def test_a_missing_bucket_is_a_store_error_not_an_empty_result(store: S3CheckpointStore) -> None:
    # Given a checkpoint URI naming a bucket that does not exist / When searched / Then the store error surfaces
    with pytest.raises(CheckpointStoreError, match="NoSuchBucket"):
        find_newest_complete("s3://no-such-checkpoint-bucket/runs/", store)


def test_the_newest_complete_checkpoint_is_found_in_five_requests(s3: Any, store: S3CheckpointStore) -> None:
    # Given complete steps 100 and 110, and a step 120 whose manifest was never written
    save_complete(s3, "step-000100", 100)
    save_complete(s3, "step-000110", 110)
    put(s3, f"{PREFIX}step-000120/model/shard-00.pt")

    # When searched over S3
    search = find_newest_complete(f"s3://{BUCKET}/{PREFIX}", store)

    # Then 110 is chosen, 120 is named, and it took: 1 folder page, the tracker read, 2 folder listings, 1 manifest
    assert search.checkpoint is not None
    assert (search.checkpoint.uri, search.checkpoint.marker) == (
        f"s3://{BUCKET}/{PREFIX}step-000110/",
        MarkerKind.MANIFEST,
    )
    assert [(s.step, s.reason) for s in search.skipped] == [(120, SkipReason.NO_MARKER)]
    assert store.requests == {"ListObjectsV2": 3, "GetObject": 2}
