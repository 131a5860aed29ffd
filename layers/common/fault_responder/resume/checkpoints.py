"""Find the newest COMPLETE training checkpoint under an S3 prefix (docs/checkpoint-contract.md).

A checkpoint is a folder directly under the job's `fault-responder:checkpoint-uri`, with its step number in
its name. It counts only when its commit marker exists, judged in this order:

1. `_COMPLETE` — our manifest, written last. It is decisive: it must parse, name the folder's step, and every
   file it lists must exist with the listed size. A manifest that fails disqualifies the folder even if other
   markers are present, because it proves files are missing or wrong.
2. `.metadata` — torch.distributed.checkpoint's commit file (non-empty): `FileSystemWriter.finish()` writes it
   after every rank's data, through a temporary name.
3. `COMPLETED` — the plain marker file some trainers (e.g. allenai open-instruct) write last.
4. `latest_checkpointed_iteration.txt` at the prefix root (Megatron-LM). Megatron writes it on rank 0 only
   after the save's barrier (or in the async save's finalize step), so it commits exactly the iteration it
   names — nothing else. Marker-less folders it does not name are skipped: an older one may be a checkpoint
   Megatron is deleting (`save_retain_interval`), a newer one a save that never finished. A newer folder
   with its own marker still wins over the tracker: only the tracker write was lost.

S3 lists keys in ascending UTF-8 order only, and step numbers are not always zero-padded (`checkpoint-99`
sorts after `checkpoint-100`), so discovery reads every folder name with a "/" delimiter (one request per
1,000 checkpoints, whatever their size), sorts by step, and then inspects candidates newest first with one
listing of the folder (plus one read for a `_COMPLETE`). It never lists every object under the prefix.

Domain only: storage is reached through the `CheckpointStore` protocol; the boto3 implementation is
`fault_responder.adapters.s3_checkpoints`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

MANIFEST_NAME = "_COMPLETE"
DCP_METADATA_NAME = ".metadata"
COMPLETED_NAME = "COMPLETED"
TRACKER_NAME = "latest_checkpointed_iteration.txt"
MANIFEST_FORMAT = "fault-responder-checkpoint/1"

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""About 100,000 file entries; a bigger manifest is treated as unreadable rather than loaded into a Lambda."""
MAX_TRACKER_BYTES = 64
DEFAULT_MAX_CANDIDATES = 100
"""Incomplete folders inspected before giving up: bounds the cost when a prefix holds only broken saves."""

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
_IP_ADDRESS_RE = re.compile(r"\d+\.\d+\.\d+\.\d+", re.ASCII)
_MAX_KEY_BYTES = 1024
_STEP_FOLDER_RE = re.compile(
    r"(?:step|checkpoint|ckpt|iter|iteration|global_step)[-_]?(?P<step>\d{1,18})", re.ASCII | re.IGNORECASE
)
_SHOWN_PATHS = 3
SAVE_CLOCK_TOLERANCE = timedelta(seconds=1)
"""How far a manifest's `created_at` may lie from S3's second of its `_COMPLETE` and still be taken for the save's
time (Checkpoint.saved_at): S3 keeps whole seconds, so its time is at most a second off; a job's clock further off
than that is no better."""
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)
"""A checkpoint-now request's id (checkpoint_now.py), as a manifest's `answers` names it."""


class CheckpointStoreError(Exception):
    """The store could not answer (missing bucket, access denied, throttled past retries): not a verdict."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    size: int
    last_modified: datetime | None = None


class CheckpointStore(Protocol):
    """Read-only access to the objects under a checkpoint prefix."""

    def list_folders(self, bucket: str, prefix: str) -> Iterable[str]:
        """Names of the folders directly under `prefix` (a "/"-delimited listing), without prefix or slash."""
        ...

    def list_files(self, bucket: str, prefix: str) -> Mapping[str, StoredObject]:
        """Every object under `prefix` (recursively), keyed by its key relative to `prefix`."""
        ...

    def read(self, bucket: str, key: str, limit: int) -> bytes | None:
        """At most the first `limit` bytes of the object, or None when it does not exist."""
        ...


@dataclass(frozen=True, slots=True)
class S3Location:
    bucket: str
    prefix: str
    """Empty (the bucket root) or ending with "/"."""

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_checkpoint_uri(uri: str) -> S3Location:
    """Parse `s3://bucket/prefix/` strictly; a missing trailing slash is added (the URI names a folder)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ValueError(f"checkpoint URI must start with s3://, got {uri!r}")
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\x7f" for ch in uri):
        raise ValueError(f"checkpoint URI contains whitespace or control characters: {uri!r}")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket or _IP_ADDRESS_RE.fullmatch(bucket):
        raise ValueError(f"checkpoint URI has an invalid S3 bucket name {bucket!r}: {uri!r}")
    prefix = key if key == "" or key.endswith("/") else f"{key}/"
    segments = prefix.split("/")[:-1]
    if any(segment in {"", ".", ".."} for segment in segments):
        raise ValueError(f"checkpoint URI has an empty, '.' or '..' path segment: {uri!r}")
    if len(prefix.encode()) > _MAX_KEY_BYTES:
        raise ValueError(f"checkpoint URI prefix is longer than S3's {_MAX_KEY_BYTES}-byte key limit")
    return S3Location(bucket=bucket, prefix=prefix)


def parse_step(folder_name: str) -> int | None:
    """The step in a checkpoint folder's name (`step-000120`, `checkpoint-120`, `iter_0000120`,
    `global_step120`, `global_step_120`, `ckpt-120`), or None when the name carries no step."""
    match = _STEP_FOLDER_RE.fullmatch(folder_name)
    return int(match["step"]) if match else None


def _relative_file_path(path: str) -> str:
    # Paths become S3 keys under the folder and, in the training helper, local file names: no way out of it.
    if "\\" in path or any(segment in {"", ".", ".."} for segment in path.split("/")):
        raise ValueError("must be a relative POSIX path without empty, '.' or '..' segments")
    if path == MANIFEST_NAME:
        raise ValueError("the manifest does not list itself")
    return path


# defer_build: built on first use, by the step that reads checkpoints, not by every task function's import.
class ManifestFile(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    path: Annotated[str, Field(min_length=1, max_length=_MAX_KEY_BYTES), AfterValidator(_relative_file_path)]
    """Relative to the checkpoint folder, "/"-separated."""
    size: Annotated[StrictInt, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """Checked by the training helper when it loads; discovery checks sizes only (it never reads shards)."""


class CheckpointManifest(BaseModel):
    """`_COMPLETE`: written last, after every file it lists. Unknown fields are kept, not rejected."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    format: Literal["fault-responder-checkpoint/1"]
    step: Annotated[StrictInt, Field(ge=0)]
    files: Annotated[tuple[ManifestFile, ...], Field(min_length=1)]
    created_at: datetime | None = None

    @model_validator(mode="after")
    def _paths_are_unique(self) -> CheckpointManifest:
        paths = [entry.path for entry in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("files lists the same path more than once")
        return self


class MarkerKind(StrEnum):
    """What made a checkpoint count as complete."""

    MANIFEST = "manifest"
    DCP_METADATA = "dcp_metadata"
    COMPLETED_FILE = "completed_file"
    MEGATRON_TRACKER = "megatron_tracker"


class SkipReason(StrEnum):
    NO_MARKER = "no_marker"
    TRACKER_POINTS_ELSEWHERE = "tracker_points_elsewhere"
    MANIFEST_UNREADABLE = "manifest_unreadable"
    MANIFEST_STEP_MISMATCH = "manifest_step_mismatch"
    MANIFEST_MISSING_FILE = "manifest_missing_file"
    MANIFEST_SIZE_MISMATCH = "manifest_size_mismatch"


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


class Checkpoint(_Result):
    uri: str
    """The folder, e.g. s3://bucket/prefix/step-000120/: what RESUME_FROM carries."""
    step: int
    marker: MarkerKind
    written_at: datetime | None
    """When the marker was written, by S3 (to the second; the newest object's time for a tracker-committed
    folder)."""
    saved_at: datetime | None = None
    """The save's own time, to the millisecond: the manifest's `created_at`, when it lies within
    SAVE_CLOCK_TOLERANCE of S3's second of the manifest (written_at); None otherwise, and for other markers."""
    file_count: int
    total_bytes: int
    """From the manifest when there is one, else every object in the folder (markers included)."""
    answers: str | None = None
    """The checkpoint-now request this save answers, when its manifest names one (`answers`; checkpoint_now.py)."""

    @property
    def saved(self) -> datetime | None:
        """The best time of the save known: the manifest's own (saved_at), else S3's of its marker (written_at)."""
        return self.saved_at or self.written_at


class SkippedFolder(_Result):
    """A folder newer than the chosen checkpoint that does not count, and why (page evidence)."""

    uri: str
    step: int
    reason: SkipReason
    detail: str
    """One line for people; it may quote object keys, which are untrusted text."""


class CheckpointSearch(_Result):
    uri: str
    """The checkpoint prefix, normalised."""
    checkpoint: Checkpoint | None
    skipped: tuple[SkippedFolder, ...]
    """Newest first; all of them are newer than `checkpoint`."""
    folders_seen: int
    folders_ignored: int
    """Folders whose name carries no step number (`release/`, `tmp/`, ...)."""
    candidates_examined: int
    unexamined: int
    """Older step folders not inspected because `max_candidates` incomplete ones came first."""
    tracker_step: int | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _StepFolder:
    name: str
    step: int


@dataclass(frozen=True, slots=True)
class _Tracker:
    step: int | None
    note: str | None


def find_newest_complete(
    uri: str, store: CheckpointStore, *, max_candidates: int = DEFAULT_MAX_CANDIDATES
) -> CheckpointSearch:
    """The newest complete checkpoint under `uri`, with every newer incomplete folder named and explained.

    Raises ValueError for a malformed URI and CheckpointStoreError when the store cannot be read.
    """
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1")
    location = parse_checkpoint_uri(uri)
    names = list(store.list_folders(location.bucket, location.prefix))
    candidates = _newest_first(names)
    tracker = _read_tracker(store, location, {folder.step for folder in candidates})
    skipped: list[SkippedFolder] = []
    chosen: Checkpoint | None = None
    for folder in candidates[:max_candidates]:
        verdict = _judge(store, location, folder, tracker.step)
        if isinstance(verdict, Checkpoint):
            chosen = verdict
            break
        skipped.append(verdict)
    examined = len(skipped) + (chosen is not None)
    unexamined = 0 if chosen else len(candidates) - examined
    notes = [tracker.note] if tracker.note else []
    if unexamined:
        notes.append(f"gave up after {examined} incomplete folders; {unexamined} older step folders not inspected")
    return CheckpointSearch(
        uri=location.uri,
        checkpoint=chosen,
        skipped=tuple(skipped),
        folders_seen=len(names),
        folders_ignored=len(names) - len(candidates),
        candidates_examined=examined,
        unexamined=unexamined,
        tracker_step=tracker.step,
        notes=tuple(notes),
    )


def _newest_first(names: Iterable[str]) -> list[_StepFolder]:
    folders = [_StepFolder(name, step) for name in names if (step := parse_step(name)) is not None]
    # Ties (step-120 and checkpoint-120) are broken by name so the order, and so the choice, is stable.
    return sorted(folders, key=lambda folder: (folder.step, folder.name), reverse=True)


def _read_tracker(store: CheckpointStore, location: S3Location, steps: set[int]) -> _Tracker:
    raw = store.read(location.bucket, location.prefix + TRACKER_NAME, MAX_TRACKER_BYTES + 1)
    if raw is None:
        return _Tracker(step=None, note=None)
    text = raw.decode("utf-8", errors="replace").strip()
    if text == "release":
        return _Tracker(step=None, note=f"{TRACKER_NAME} names the 'release' checkpoint, which has no step; ignored")
    if len(raw) > MAX_TRACKER_BYTES or not text.isascii() or not text.isdigit():
        return _Tracker(step=None, note=f"{TRACKER_NAME} is not an iteration number; ignored")
    step = int(text)
    if step not in steps:
        return _Tracker(step=step, note=f"{TRACKER_NAME} names step {step}, but no folder has that step")
    return _Tracker(step=step, note=None)


@dataclass(frozen=True, slots=True)
class _Inspection:
    """One candidate folder and its listing, with the two ways the inspection can end."""

    uri: str
    step: int
    files: Mapping[str, StoredObject]

    def skip(self, reason: SkipReason, detail: str) -> SkippedFolder:
        return SkippedFolder(uri=self.uri, step=self.step, reason=reason, detail=detail)

    def complete(self, marker: MarkerKind, written_at: datetime | None) -> Checkpoint:
        return Checkpoint(
            uri=self.uri,
            step=self.step,
            marker=marker,
            written_at=written_at,
            file_count=len(self.files),
            total_bytes=sum(obj.size for obj in self.files.values()),
        )


def _judge(
    store: CheckpointStore, location: S3Location, folder: _StepFolder, tracker_step: int | None
) -> Checkpoint | SkippedFolder:
    folder_prefix = f"{location.prefix}{folder.name}/"
    files = store.list_files(location.bucket, folder_prefix)
    seen = _Inspection(uri=f"s3://{location.bucket}/{folder_prefix}", step=folder.step, files=files)
    if MANIFEST_NAME in files:
        manifest = store.read(location.bucket, folder_prefix + MANIFEST_NAME, MAX_MANIFEST_BYTES + 1)
        return _verify_manifest(seen, manifest)
    if files.get(DCP_METADATA_NAME, StoredObject(0)).size > 0:
        return seen.complete(MarkerKind.DCP_METADATA, files[DCP_METADATA_NAME].last_modified)
    if COMPLETED_NAME in files:
        return seen.complete(MarkerKind.COMPLETED_FILE, files[COMPLETED_NAME].last_modified)
    if not files:
        return seen.skip(SkipReason.NO_MARKER, "the folder is empty now (deleted after it was listed?)")
    if tracker_step == folder.step:
        return seen.complete(MarkerKind.MEGATRON_TRACKER, _newest_time(files.values()))
    found = f"no {MANIFEST_NAME}, non-empty {DCP_METADATA_NAME} or {COMPLETED_NAME} among {len(files)} objects"
    if tracker_step is not None:
        return seen.skip(SkipReason.TRACKER_POINTS_ELSEWHERE, f"{found}, and {TRACKER_NAME} names step {tracker_step}")
    return seen.skip(SkipReason.NO_MARKER, found)


def _verify_manifest(seen: _Inspection, raw: bytes | None) -> Checkpoint | SkippedFolder:
    manifest = _parse_manifest(raw)
    if isinstance(manifest, str):
        return seen.skip(SkipReason.MANIFEST_UNREADABLE, manifest)
    if manifest.step != seen.step:
        return seen.skip(
            SkipReason.MANIFEST_STEP_MISMATCH, f"{MANIFEST_NAME} says step {manifest.step}, the folder name {seen.step}"
        )
    missing = [entry.path for entry in manifest.files if entry.path not in seen.files]
    if missing:
        return seen.skip(
            SkipReason.MANIFEST_MISSING_FILE,
            f"{len(missing)} of {len(manifest.files)} listed files are missing: {_some(missing)}",
        )
    wrong = [
        f"{entry.path} is {seen.files[entry.path].size} bytes, {MANIFEST_NAME} says {entry.size}"
        for entry in manifest.files
        if seen.files[entry.path].size != entry.size
    ]
    if wrong:
        return seen.skip(SkipReason.MANIFEST_SIZE_MISMATCH, f"{len(wrong)} files differ in size: {_some(wrong)}")
    written_at = seen.files[MANIFEST_NAME].last_modified
    return Checkpoint(
        uri=seen.uri,
        step=seen.step,
        marker=MarkerKind.MANIFEST,
        written_at=written_at,
        saved_at=_saved_at(manifest.created_at, written_at),
        file_count=len(manifest.files),
        total_bytes=sum(entry.size for entry in manifest.files),
        answers=_answered_request(manifest),
    )


def _saved_at(created_at: datetime | None, written_at: datetime | None) -> datetime | None:
    """The manifest's `created_at` (written just before it) where it agrees with S3's time of the manifest: within
    SAVE_CLOCK_TOLERANCE of the whole second S3 kept. A time without an offset, or further off (a job's clock that
    disagrees), is not used."""
    if created_at is None or written_at is None or created_at.tzinfo is None or written_at.tzinfo is None:
        return None
    second = written_at.replace(microsecond=0)
    if second - SAVE_CLOCK_TOLERANCE <= created_at < second + timedelta(seconds=1) + SAVE_CLOCK_TOLERANCE:
        return created_at
    return None


def _answered_request(manifest: CheckpointManifest) -> str | None:
    # An optional field of the contract read leniently: a manifest is not disqualified for a malformed one (its
    # files are what make it complete), the save just answers no request.
    value = (manifest.model_extra or {}).get("answers")
    return value if isinstance(value, str) and REQUEST_ID_RE.fullmatch(value) else None


def _parse_manifest(raw: bytes | None) -> CheckpointManifest | str:
    """The manifest, or why it cannot be used (one line of text)."""
    if raw is None:
        return f"{MANIFEST_NAME} disappeared after the folder was listed"
    if len(raw) > MAX_MANIFEST_BYTES:
        return f"{MANIFEST_NAME} is over the {MAX_MANIFEST_BYTES:,}-byte limit"
    try:
        return CheckpointManifest.model_validate_json(raw)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        return f"{MANIFEST_NAME} is not a valid {MANIFEST_FORMAT} manifest ({where}: {first['msg']})"


def _newest_time(objects: Iterable[StoredObject]) -> datetime | None:
    times = [obj.last_modified for obj in objects if obj.last_modified is not None]
    return max(times, default=None)


def _some(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN_PATHS])
    return shown if len(items) <= _SHOWN_PATHS else f"{shown}, ..."
