"""Finding the newest complete checkpoint (fault_responder.resume.checkpoints) over an in-memory store.

The store counts requests the way S3 would bill them (one listing request per 1,000 entries, one per read), so
the cost claims of the contract are tested here without S3.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from fault_responder.resume.checkpoints import (
    CheckpointManifest,
    MarkerKind,
    SkipReason,
    StoredObject,
    find_newest_complete,
    parse_checkpoint_uri,
    parse_step,
)

BUCKET = "training-checkpoints"
PREFIX = "runs/job-42/"
URI = f"s3://{BUCKET}/{PREFIX}"
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
PAGE = 1000


class InMemoryStore:
    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, datetime]] = {}
        self.requests: Counter[str] = Counter()

    def put(self, key: str, body: bytes = b"weights", at: datetime = T0) -> None:
        self.objects[key] = (body, at)

    def delete(self, key: str) -> None:
        del self.objects[key]

    def list_folders(self, bucket: str, prefix: str) -> Iterator[str]:
        rests = [key[len(prefix) :] for key in self.objects if key.startswith(prefix)]
        folders = sorted({rest.split("/")[0] for rest in rests if "/" in rest})
        self.requests["ListObjectsV2"] += max(1, math.ceil(len(folders) / PAGE))
        return iter(folders)

    def list_files(self, bucket: str, prefix: str) -> Mapping[str, StoredObject]:
        found = {
            key[len(prefix) :]: StoredObject(size=len(body), last_modified=at)
            for key, (body, at) in self.objects.items()
            if key.startswith(prefix)
        }
        self.requests["ListObjectsV2"] += max(1, math.ceil(len(found) / PAGE))
        return found

    def read(self, bucket: str, key: str, limit: int) -> bytes | None:
        self.requests["GetObject"] += 1
        stored = self.objects.get(key)
        return None if stored is None else stored[0][:limit]

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())


def manifest_for(step: int, files: Mapping[str, bytes], **extra: object) -> bytes:
    entries = [{"path": path, "size": len(body)} for path, body in files.items()]
    return json.dumps({"format": "fault-responder-checkpoint/1", "step": step, "files": entries, **extra}).encode()


def save_complete(
    store: InMemoryStore, folder: str, step: int, files: Mapping[str, bytes] | None = None, at: datetime = T0
) -> None:
    files = files if files is not None else {"model/shard-00.pt": b"weights", "optim/shard-00.pt": b"moments"}
    for path, body in files.items():
        store.put(f"{PREFIX}{folder}/{path}", body, at)
    store.put(f"{PREFIX}{folder}/_COMPLETE", manifest_for(step, files), at)


def save_files_only(store: InMemoryStore, folder: str) -> None:
    store.put(f"{PREFIX}{folder}/model/shard-00.pt")
    store.put(f"{PREFIX}{folder}/optim/shard-00.pt")


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


# Step numbers in folder names


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step-000120", 120),
        ("checkpoint-120", 120),
        ("iter_0000120", 120),
        ("global_step120", 120),
        ("global_step_120", 120),
        ("ckpt-7", 7),
        ("Checkpoint-0", 0),
    ],
)
def test_the_step_is_read_from_every_supported_naming_style(name: str, step: int) -> None:
    # Given a folder name in one of the styles trainers use / When parsed / Then the step is its number
    assert parse_step(name) == step


@pytest.mark.parametrize(
    "name", ["release", "latest", "tmp", "checkpoint-120.tmp", "step-", "epoch_3", "run-120", "120", "step-١٢٠"]
)
def test_a_name_without_a_step_number_has_no_step(name: str) -> None:
    # Given a folder name that is not a step folder / When parsed / Then there is no step
    assert parse_step(name) is None


# Choosing the checkpoint


def test_the_newest_complete_checkpoint_is_chosen(store: InMemoryStore) -> None:
    # Given three complete checkpoints
    for step in (100, 110, 120):
        save_complete(store, f"step-{step:06d}", step)

    # When searched
    search = find_newest_complete(URI, store)

    # Then the newest is chosen, committed by its manifest, and nothing is skipped
    assert search.checkpoint is not None
    assert search.checkpoint.uri == f"{URI}step-000120/"
    assert search.checkpoint.step == 120
    assert search.checkpoint.marker is MarkerKind.MANIFEST
    assert search.skipped == ()


def test_steps_are_compared_as_numbers_not_as_names(store: InMemoryStore) -> None:
    # Given unpadded names, where "checkpoint-99" sorts after "checkpoint-100" as text
    save_complete(store, "checkpoint-99", 99)
    save_complete(store, "checkpoint-100", 100)

    # When searched
    search = find_newest_complete(URI, store)

    # Then step 100 wins
    assert search.checkpoint is not None
    assert search.checkpoint.step == 100


def test_a_newer_folder_without_a_marker_is_skipped_and_named(store: InMemoryStore) -> None:
    # Given a complete step 110 and a step 120 whose files were written but whose manifest was not
    save_complete(store, "step-000110", 110)
    save_files_only(store, "step-000120")

    # When searched
    search = find_newest_complete(URI, store)

    # Then 110 is chosen and 120 is named with the reason
    assert search.checkpoint is not None
    assert search.checkpoint.step == 110
    assert [(s.uri, s.step, s.reason) for s in search.skipped] == [(f"{URI}step-000120/", 120, SkipReason.NO_MARKER)]
    assert "among 2 objects" in search.skipped[0].detail


def test_the_checkpoint_reports_its_size_and_when_its_manifest_was_written(store: InMemoryStore) -> None:
    # Given two files of 7 and 9 bytes written at T0, and their manifest written at T0 + 5 min
    files = {"a.pt": b"1234567", "b.pt": b"123456789"}
    for path, body in files.items():
        store.put(f"{PREFIX}step-000120/{path}", body, T0)
    store.put(f"{PREFIX}step-000120/_COMPLETE", manifest_for(120, files), T0 + timedelta(minutes=5))

    # When searched
    search = find_newest_complete(URI, store)

    # Then the evidence for "written T ago" and the size come from the manifest
    assert search.checkpoint is not None
    assert search.checkpoint.written_at == T0 + timedelta(minutes=5)
    assert (search.checkpoint.file_count, search.checkpoint.total_bytes) == (2, 16)


@pytest.mark.parametrize(
    ("created_at", "saved_at"),
    [
        # S3 keeps whole seconds: the manifest's own time, to the millisecond, within that second
        ("2025-06-01T12:05:00.734+00:00", datetime(2025, 6, 1, 12, 5, 0, 734000, tzinfo=UTC)),
        # or within a second of it either way (a clock a little off, a slow upload)
        ("2025-06-01T12:04:59.100+00:00", datetime(2025, 6, 1, 12, 4, 59, 100000, tzinfo=UTC)),
        ("2025-06-01T12:05:01.900+00:00", datetime(2025, 6, 1, 12, 5, 1, 900000, tzinfo=UTC)),
        ("2025-06-01T14:05:00.500+02:00", datetime(2025, 6, 1, 12, 5, 0, 500000, tzinfo=UTC)),
        # Further off, a job's clock that disagrees with S3's: not used
        ("2025-06-01T12:04:58.900+00:00", None),
        ("2025-06-01T12:05:02.000+00:00", None),
        ("2025-06-01T13:05:00.500+00:00", None),
        # Without an offset, or absent: not used
        ("2025-06-01T12:05:00.500", None),
        (None, None),
    ],
)
def test_a_manifests_own_time_is_the_saves_time_where_it_agrees_with_s3s(
    store: InMemoryStore, created_at: str | None, saved_at: datetime | None
) -> None:
    # Given a manifest S3 stored at 12:05:00 (to the second), saying it was created at `created_at`
    files = {"a.pt": b"1234567"}
    store.put(f"{PREFIX}step-000120/a.pt", b"1234567", T0)
    written = T0 + timedelta(minutes=5)
    stamped = {"created_at": created_at} if created_at is not None else {}
    store.put(f"{PREFIX}step-000120/_COMPLETE", manifest_for(120, files, **stamped), written)

    # When searched
    checkpoint = find_newest_complete(URI, store).checkpoint

    # Then its save's time is the manifest's where S3's second agrees, else S3's
    assert checkpoint is not None and checkpoint.written_at == written
    assert checkpoint.saved_at == saved_at
    assert checkpoint.saved == (saved_at or written)


def test_a_manifest_whose_sizes_do_not_match_the_objects_disqualifies_the_folder(store: InMemoryStore) -> None:
    # Given step 120's manifest says shard-00 is 7 bytes, but the object holds 3 (truncated upload)
    save_complete(store, "step-000110", 110)
    save_complete(store, "step-000120", 120)
    store.put(f"{PREFIX}step-000120/model/shard-00.pt", b"wei")

    # When searched
    search = find_newest_complete(URI, store)

    # Then 120 is skipped, naming the file and both sizes, and 110 is chosen
    assert search.checkpoint is not None
    assert search.checkpoint.step == 110
    assert search.skipped[0].reason is SkipReason.MANIFEST_SIZE_MISMATCH
    assert "model/shard-00.pt is 3 bytes, _COMPLETE says 7" in search.skipped[0].detail


def test_a_manifest_listing_a_missing_file_disqualifies_the_folder(store: InMemoryStore) -> None:
    # Given step 120's manifest lists optim/shard-00.pt, which is gone
    save_complete(store, "step-000110", 110)
    save_complete(store, "step-000120", 120)
    store.delete(f"{PREFIX}step-000120/optim/shard-00.pt")

    # When searched
    search = find_newest_complete(URI, store)

    # Then 120 is skipped with the missing path
    assert search.checkpoint is not None
    assert search.checkpoint.step == 110
    assert search.skipped[0].reason is SkipReason.MANIFEST_MISSING_FILE
    assert search.skipped[0].detail == "1 of 2 listed files are missing: optim/shard-00.pt"


@pytest.mark.parametrize(
    "manifest",
    [
        b"",
        b"{not json",
        b'{"format": "fault-responder-checkpoint/2", "step": 120, "files": [{"path": "a", "size": 1}]}',
        b'{"format": "fault-responder-checkpoint/1", "step": "120", "files": [{"path": "a", "size": 1}]}',
        b'{"format": "fault-responder-checkpoint/1", "step": 120, "files": []}',
        b'{"format": "fault-responder-checkpoint/1", "step": 120, "files": [{"path": "../a", "size": 1}]}',
        b'{"format": "fault-responder-checkpoint/1", "step": 120, "files": [{"path": "a", "size": -1}]}',
        b'{"format": "fault-responder-checkpoint/1", "step": 120, "files": [{"path": "a", "size": 1},'
        b' {"path": "a", "size": 1}]}',
    ],
    ids=["empty", "not-json", "unknown-format", "step-as-text", "no-files", "path-escapes", "negative-size", "dup"],
)
def test_an_unusable_manifest_disqualifies_the_folder(store: InMemoryStore, manifest: bytes) -> None:
    # Given step 120's manifest is malformed
    save_complete(store, "step-000110", 110)
    store.put(f"{PREFIX}step-000120/a")
    store.put(f"{PREFIX}step-000120/_COMPLETE", manifest)

    # When searched
    search = find_newest_complete(URI, store)

    # Then 120 is skipped as unreadable and 110 is chosen
    assert search.checkpoint is not None
    assert search.checkpoint.step == 110
    assert search.skipped[0].reason is SkipReason.MANIFEST_UNREADABLE


def test_a_manifest_for_another_step_disqualifies_the_folder(store: InMemoryStore) -> None:
    # Given a manifest saying step 110 inside the step-000120 folder (a copied folder)
    save_complete(store, "step-000110", 110)
    save_complete(store, "step-000120", 110)

    # When searched
    search = find_newest_complete(URI, store)

    # Then 120 is skipped for the mismatch
    assert search.skipped[0].reason is SkipReason.MANIFEST_STEP_MISMATCH


def test_a_manifest_with_unknown_fields_is_accepted() -> None:
    # Given a manifest carrying fields this version does not know
    raw = manifest_for(120, {"a.pt": b"x"}, run_id="r-17", world_size=64)

    # When parsed / Then it is valid and keeps them
    manifest = CheckpointManifest.model_validate_json(raw)
    assert manifest.model_extra == {"run_id": "r-17", "world_size": 64}


def test_a_failing_manifest_outweighs_other_markers(store: InMemoryStore) -> None:
    # Given step 120 has a COMPLETED file but its manifest lists a missing file
    save_complete(store, "step-000110", 110)
    save_complete(store, "step-000120", 120)
    store.put(f"{PREFIX}step-000120/COMPLETED", b"")
    store.delete(f"{PREFIX}step-000120/model/shard-00.pt")

    # When searched / Then the manifest's verdict stands
    assert find_newest_complete(URI, store).skipped[0].reason is SkipReason.MANIFEST_MISSING_FILE


# Other commit markers


def test_a_dcp_metadata_file_commits_a_folder(store: InMemoryStore) -> None:
    # Given a torch.distributed.checkpoint save: shards plus .metadata written by finish()
    store.put(f"{PREFIX}step-000120/__0_0.distcp")
    store.put(f"{PREFIX}step-000120/.metadata", b"\x80\x04pickled-metadata", T0 + timedelta(seconds=30))

    # When searched
    search = find_newest_complete(URI, store)

    # Then it counts, and was written when .metadata was
    assert search.checkpoint is not None
    assert search.checkpoint.marker is MarkerKind.DCP_METADATA
    assert search.checkpoint.written_at == T0 + timedelta(seconds=30)


def test_an_empty_dcp_metadata_file_does_not_commit_a_folder(store: InMemoryStore) -> None:
    # Given a .metadata of zero bytes (a truncated write; DCP's pickle is never empty)
    store.put(f"{PREFIX}step-000120/__0_0.distcp")
    store.put(f"{PREFIX}step-000120/.metadata", b"")

    # When searched / Then the folder does not count
    assert find_newest_complete(URI, store).skipped[0].reason is SkipReason.NO_MARKER


def test_a_completed_file_commits_a_folder(store: InMemoryStore) -> None:
    # Given a folder with a COMPLETED marker
    store.put(f"{PREFIX}step_120/model.safetensors")
    store.put(f"{PREFIX}step_120/COMPLETED", b"")

    # When searched
    search = find_newest_complete(URI, store)

    # Then it counts
    assert search.checkpoint is not None
    assert (search.checkpoint.step, search.checkpoint.marker) == (120, MarkerKind.COMPLETED_FILE)


# The Megatron tracker


def megatron_save(store: InMemoryStore, iteration: int, at: datetime = T0) -> None:
    store.put(f"{PREFIX}iter_{iteration:07d}/mp_rank_00/model_optim_rng.pt", b"state", at)


def test_the_megatron_tracker_commits_the_iteration_it_names(store: InMemoryStore) -> None:
    # Given Megatron saves of 100 and 200, and the tracker written after 200's save
    megatron_save(store, 100)
    megatron_save(store, 200, T0 + timedelta(hours=1))
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", b"200\n")

    # When searched
    search = find_newest_complete(URI, store)

    # Then 200 is chosen on the tracker's word
    assert search.checkpoint is not None
    assert (search.checkpoint.step, search.checkpoint.marker) == (200, MarkerKind.MEGATRON_TRACKER)
    assert search.checkpoint.written_at == T0 + timedelta(hours=1)
    assert search.tracker_step == 200


def test_a_megatron_folder_newer_than_the_tracker_is_skipped(store: InMemoryStore) -> None:
    # Given the tracker names 200 and a save of 300 was interrupted (tracker not yet moved)
    megatron_save(store, 200)
    megatron_save(store, 300)
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", b"200")

    # When searched
    search = find_newest_complete(URI, store)

    # Then 300 is skipped because the tracker points elsewhere, and 200 is chosen
    assert search.checkpoint is not None
    assert search.checkpoint.step == 200
    assert search.skipped[0].reason is SkipReason.TRACKER_POINTS_ELSEWHERE
    assert "names step 200" in search.skipped[0].detail


def test_a_newer_folder_with_its_own_marker_wins_over_the_tracker(store: InMemoryStore) -> None:
    # Given the tracker names 200, and 300 was saved with DCP (.metadata) but the tracker write was lost
    megatron_save(store, 200)
    store.put(f"{PREFIX}iter_0000300/__0_0.distcp")
    store.put(f"{PREFIX}iter_0000300/.metadata", b"\x80\x04")
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", b"200")

    # When searched / Then 300 counts: its own commit marker exists
    search = find_newest_complete(URI, store)
    assert search.checkpoint is not None
    assert (search.checkpoint.step, search.checkpoint.marker) == (300, MarkerKind.DCP_METADATA)


def test_the_tracker_does_not_vouch_for_older_unmarked_folders(store: InMemoryStore) -> None:
    # Given the tracker names 300, whose folder was removed, and an older unmarked save of 200
    megatron_save(store, 200)
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", b"300")

    # When searched
    search = find_newest_complete(URI, store)

    # Then nothing counts, and the dangling tracker is noted
    assert search.checkpoint is None
    assert search.skipped[0].reason is SkipReason.TRACKER_POINTS_ELSEWHERE
    assert search.notes == ("latest_checkpointed_iteration.txt names step 300, but no folder has that step",)


@pytest.mark.parametrize("content", [b"release", b"two hundred", b"-5", b"9" * 80])
def test_a_tracker_without_an_iteration_number_is_ignored_and_noted(store: InMemoryStore, content: bytes) -> None:
    # Given a tracker that names no usable iteration
    megatron_save(store, 200)
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", content)

    # When searched
    search = find_newest_complete(URI, store)

    # Then it commits nothing, and the search says so
    assert search.checkpoint is None
    assert search.tracker_step is None
    assert len(search.notes) == 1


def test_a_failing_manifest_outweighs_the_tracker(store: InMemoryStore) -> None:
    # Given the tracker names 200, whose manifest lists a missing file
    save_complete(store, "iter_0000100", 100)
    save_complete(store, "iter_0000200", 200)
    store.delete(f"{PREFIX}iter_0000200/model/shard-00.pt")
    store.put(f"{PREFIX}latest_checkpointed_iteration.txt", b"200")

    # When searched / Then 200 is skipped and 100 chosen
    search = find_newest_complete(URI, store)
    assert search.checkpoint is not None
    assert search.checkpoint.step == 100


# Nothing to resume from


def test_no_complete_checkpoint_names_every_folder_it_rejected(store: InMemoryStore) -> None:
    # Given two interrupted saves and nothing complete
    save_files_only(store, "step-000110")
    save_files_only(store, "step-000120")

    # When searched
    search = find_newest_complete(URI, store)

    # Then there is no checkpoint, and both are named newest first
    assert search.checkpoint is None
    assert [s.step for s in search.skipped] == [120, 110]
    assert (search.candidates_examined, search.unexamined) == (2, 0)


def test_an_empty_prefix_has_no_checkpoint(store: InMemoryStore) -> None:
    # Given nothing under the prefix / When searched / Then nothing is found and nothing was seen
    search = find_newest_complete(URI, store)
    assert search.checkpoint is None
    assert (search.folders_seen, search.candidates_examined) == (0, 0)


def test_folders_without_a_step_are_ignored_and_counted(store: InMemoryStore) -> None:
    # Given a complete step folder next to folders that carry no step
    save_complete(store, "step-000120", 120)
    store.put(f"{PREFIX}release/model.pt")
    store.put(f"{PREFIX}tensorboard/events.out")

    # When searched
    search = find_newest_complete(URI, store)

    # Then they are counted as seen and ignored, and not inspected
    assert (search.folders_seen, search.folders_ignored, search.candidates_examined) == (3, 2, 1)


def test_the_search_gives_up_after_max_candidates_incomplete_folders(store: InMemoryStore) -> None:
    # Given a complete step 10 under five interrupted saves
    save_complete(store, "step-000010", 10)
    for step in range(20, 70, 10):
        save_files_only(store, f"step-{step:06d}")

    # When searched with room for three candidates
    search = find_newest_complete(URI, store, max_candidates=3)

    # Then it stops after three, says how many older folders it did not inspect, and finds nothing
    assert search.checkpoint is None
    assert [s.step for s in search.skipped] == [60, 50, 40]
    assert search.unexamined == 3
    assert search.notes[-1] == "gave up after 3 incomplete folders; 3 older step folders not inspected"


# URIs


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "runs/job-42/",
        "s3:/training-checkpoints/runs/",
        "https://training-checkpoints.s3.amazonaws.com/runs/",
        "s3://",
        "s3:///runs/",
        "s3://ab/runs/",
        "s3://Training_Checkpoints/runs/",
        "s3://-bucket/runs/",
        "s3://bucket..name/runs/",
        "s3://192.168.1.10/runs/",
        "s3://training-checkpoints/runs//job/",
        "s3://training-checkpoints/runs/../other/",
        "s3://training-checkpoints/runs/ job/",
        "s3://training-checkpoints/runs/\njob/",
        "s3://training-checkpoints/" + "a" * 1100 + "/",
    ],
)
def test_a_malformed_uri_is_rejected_with_a_clear_error(uri: str) -> None:
    # Given a malformed checkpoint URI / When parsed / Then ValueError names the problem
    with pytest.raises(ValueError, match="checkpoint URI"):
        parse_checkpoint_uri(uri)


def test_a_uri_without_a_trailing_slash_names_the_same_folder(store: InMemoryStore) -> None:
    # Given a tag value without the trailing slash
    save_complete(store, "step-000120", 120)

    # When searched / Then the folder under runs/job-42/ is found, not keys starting with "runs/job-42"
    search = find_newest_complete(f"s3://{BUCKET}/runs/job-42", store)
    assert search.uri == URI
    assert search.checkpoint is not None
    assert search.checkpoint.uri == f"{URI}step-000120/"


def test_the_bucket_root_is_a_valid_prefix() -> None:
    # Given the bucket root / When parsed / Then the prefix is empty
    assert parse_checkpoint_uri(f"s3://{BUCKET}/").prefix == ""


# Cost: requests grow with checkpoints, not files


def populate(store: InMemoryStore, checkpoints: int, files_each: int) -> None:
    files = {f"model/shard-{index:03d}.pt": b"w" for index in range(files_each)}
    for step in range(1, checkpoints + 1):
        save_complete(store, f"step-{step:06d}", step, files)


def test_more_files_per_checkpoint_cost_no_more_requests() -> None:
    # Given 2,500 checkpoints of 2 files, and 2,500 checkpoints of 60 files
    small, large = InMemoryStore(), InMemoryStore()
    populate(small, 2500, 2)
    populate(large, 2500, 60)

    # When both are searched
    find_newest_complete(URI, small)
    find_newest_complete(URI, large)

    # Then both cost the same: 3 folder pages + tracker read + 1 folder listing + manifest read
    assert small.request_count == large.request_count == 6


def test_more_checkpoints_cost_one_listing_request_per_thousand() -> None:
    # Given 999 and 4,001 checkpoints
    few, many = InMemoryStore(), InMemoryStore()
    populate(few, 999, 2)
    populate(many, 4001, 2)

    # When both are searched
    find_newest_complete(URI, few)
    find_newest_complete(URI, many)

    # Then the difference is the extra pages of folder names: 1 versus 5
    assert many.request_count - few.request_count == 4


@pytest.mark.parametrize(
    ("answers", "read"),
    [
        ("cn-20261202T150405Z-3f9a1c2e", "cn-20261202T150405Z-3f9a1c2e"),
        ("has a space", None),
        ("x" * 129, None),
        (42, None),
        (None, None),
    ],
)
def test_a_manifest_says_which_checkpoint_now_request_it_answers_and_a_malformed_one_answers_none(
    store: InMemoryStore, answers: object, read: str | None
) -> None:
    # Given a complete checkpoint whose manifest carries `answers` (valid, malformed, or JSON null)
    files = {"model.bin": b"weights"}
    store.put(f"{PREFIX}step-000120/model.bin", files["model.bin"])
    store.put(f"{PREFIX}step-000120/_COMPLETE", manifest_for(120, files, answers=answers))

    # When searched
    search = find_newest_complete(URI, store)

    # Then it is complete either way (its files make it so); only a valid id is read as the request it answers
    assert search.checkpoint is not None
    assert (search.checkpoint.step, search.checkpoint.answers) == (120, read)
