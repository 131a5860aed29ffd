"""Save and load training checkpoints that GPU Fault Responder can resume from (docs/checkpoint-contract.md).

Copy this one file into a training image; it needs only boto3 and the standard library (Python 3.9+), and talks
to whatever S3 endpoint boto3 is configured for (AWS_ENDPOINT_URL_S3, a profile, ...).

Layout: `<uri_prefix>step-000120/<your files>` then `<uri_prefix>step-000120/_COMPLETE`, the manifest that
lists every file with its size and SHA-256. The manifest is written last and create-only, so a folder without
it is an interrupted save that the responder skips.

Single writer::

    save_checkpoint("s3://bucket/runs/job-42/", step, {"model.pt": model_bytes, "optim.pt": optim_bytes})

Many ranks: rank 0 calls prepare_checkpoint_folder(); every rank calls write_checkpoint_files() for its own
files; after a barrier, rank 0 gathers the entries and calls commit_checkpoint().

On start::

    if (uri := resume_from()) is not None:
        files = load_checkpoint(uri)   # verified against the manifest
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import boto3
from botocore.exceptions import ClientError

MANIFEST_NAME = "_COMPLETE"
MANIFEST_FORMAT = "fault-responder-checkpoint/1"
COMMIT_MARKERS = frozenset({MANIFEST_NAME, ".metadata", "COMPLETED"})
RESUME_FROM_ENV = "RESUME_FROM"
RESUME_ATTEMPT_ENV = "RESUME_ATTEMPT"

_CHUNK = 8 * 1024 * 1024
_CREATE_ONLY_CONFLICTS = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


class CheckpointError(Exception):
    """Base class of this helper's errors."""


class CheckpointExistsError(CheckpointError):
    """The step's folder already holds a committed checkpoint; committed checkpoints are never overwritten."""


class CorruptCheckpointError(CheckpointError):
    """The checkpoint does not match its manifest, or has none."""


class FileEntry(TypedDict):
    path: str
    size: int
    sha256: str


def resume_from() -> str | None:
    """The checkpoint folder to resume from (env RESUME_FROM), or None for a fresh start."""
    value = os.environ.get(RESUME_FROM_ENV, "").strip()
    return _folder_uri(value) if value else None


def resume_attempt() -> int:
    """Which resume this is (env RESUME_ATTEMPT): 0 for a fresh start, 1 for the first resume, ..."""
    value = os.environ.get(RESUME_ATTEMPT_ENV, "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ValueError(f"{RESUME_ATTEMPT_ENV} must be a non-negative integer, got {value!r}")
    return int(value)


def checkpoint_folder_uri(uri_prefix: str, step: int) -> str:
    """`<uri_prefix>step-000120/`: one folder per step, the step in its name."""
    if step < 0:
        raise ValueError("step must be non-negative")
    return f"{_folder_uri(uri_prefix)}step-{step:06d}/"


def save_checkpoint(
    uri_prefix: str, step: int, files: Mapping[str, bytes] | str | os.PathLike[str], *, client: Any = None
) -> str:
    """Write the step's files, then its manifest; returns the folder URI (what RESUME_FROM will name).

    `files` maps relative paths to contents, or is a local directory uploaded recursively.
    """
    s3 = client or boto3.client("s3")
    folder = prepare_checkpoint_folder(uri_prefix, step, client=s3)
    entries = write_checkpoint_files(folder, files, client=s3)
    commit_checkpoint(folder, step, entries, client=s3)
    return folder


def prepare_checkpoint_folder(uri_prefix: str, step: int, *, client: Any = None) -> str:
    """The step's folder URI, emptied of any interrupted earlier save of the same step.

    Raises CheckpointExistsError when the folder carries a commit marker.
    """
    s3 = client or boto3.client("s3")
    folder = checkpoint_folder_uri(uri_prefix, step)
    bucket, prefix = _split(folder)
    stale = [obj["Key"] for obj in _list_objects(s3, bucket, prefix)]
    committed = COMMIT_MARKERS.intersection(key[len(prefix) :] for key in stale)
    if committed:
        raise CheckpointExistsError(f"{folder} is already committed ({', '.join(sorted(committed))})")
    # Leftovers of a crashed attempt would otherwise sit next to the new files, unlisted but confusing.
    for start in range(0, len(stale), 1000):
        batch = [{"Key": key} for key in stale[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
    return folder


def write_checkpoint_files(
    folder_uri: str, files: Mapping[str, bytes] | str | os.PathLike[str], *, client: Any = None
) -> list[FileEntry]:
    """Upload files into the folder; returns their manifest entries (for commit_checkpoint)."""
    s3 = client or boto3.client("s3")
    bucket, prefix = _split(_folder_uri(folder_uri))
    if isinstance(files, Mapping):
        return [_put_bytes(s3, bucket, prefix, _relative(path), data) for path, data in sorted(files.items())]
    root = Path(files)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    return [
        _upload_file(s3, bucket, prefix, _relative(path.relative_to(root).as_posix()), path)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    ]


def commit_checkpoint(folder_uri: str, step: int, entries: list[FileEntry], *, client: Any = None) -> None:
    """Write the manifest, create-only: the checkpoint exists from this moment. Call it after every file is
    written (after a barrier, with every rank's entries, in a multi-rank job)."""
    if not entries:
        raise ValueError("a checkpoint needs at least one file")
    paths = [entry["path"] for entry in entries]
    if len(set(paths)) != len(paths):
        raise ValueError("the same path is listed more than once")
    s3 = client or boto3.client("s3")
    bucket, prefix = _split(_folder_uri(folder_uri))
    manifest = {
        "format": MANIFEST_FORMAT,
        "step": step,
        "files": sorted(entries, key=lambda entry: entry["path"]),
        # timezone.utc rather than datetime.UTC: training images may run Python older than 3.11.
        "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),  # noqa: UP017
    }
    body = json.dumps(manifest, indent=1).encode()
    try:
        s3.put_object(
            Bucket=bucket, Key=prefix + MANIFEST_NAME, Body=body, ContentType="application/json", IfNoneMatch="*"
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in _CREATE_ONLY_CONFLICTS:
            raise CheckpointExistsError(f"{folder_uri} was committed by another writer") from error
        raise


def load_checkpoint(resume_uri: str, *, client: Any = None) -> dict[str, bytes]:
    """Every file of a committed checkpoint, by relative path, each checked against the manifest."""
    s3 = client or boto3.client("s3")
    bucket, prefix = _split(_folder_uri(resume_uri))
    loaded: dict[str, bytes] = {}
    for entry in _read_manifest(s3, bucket, prefix):
        data = s3.get_object(Bucket=bucket, Key=prefix + entry["path"])["Body"].read()
        _verify(entry, len(data), hashlib.sha256(data).hexdigest(), resume_uri)
        loaded[entry["path"]] = data
    return loaded


def download_checkpoint(resume_uri: str, directory: str | os.PathLike[str], *, client: Any = None) -> Path:
    """Download a committed checkpoint into `directory` (created if needed), verified like load_checkpoint."""
    s3 = client or boto3.client("s3")
    bucket, prefix = _split(_folder_uri(resume_uri))
    root = Path(directory)
    for entry in _read_manifest(s3, bucket, prefix):
        target = root.joinpath(*entry["path"].split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, prefix + entry["path"], str(target))
        _verify(entry, target.stat().st_size, _sha256_of(target), resume_uri)
    return root


def _read_manifest(s3: Any, bucket: str, prefix: str) -> list[FileEntry]:
    uri = f"s3://{bucket}/{prefix}"
    try:
        raw = s3.get_object(Bucket=bucket, Key=prefix + MANIFEST_NAME)["Body"].read()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
            raise CorruptCheckpointError(
                f"{uri} has no {MANIFEST_NAME}: it is incomplete, or was written by another tool "
                "(load DCP, COMPLETED or Megatron checkpoints with that framework's reader)"
            ) from error
        raise
    try:
        manifest = json.loads(raw)
    except ValueError as error:
        raise CorruptCheckpointError(f"{uri}{MANIFEST_NAME} is not JSON") from error
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise CorruptCheckpointError(f"{uri}{MANIFEST_NAME} is not a {MANIFEST_FORMAT} manifest")
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise CorruptCheckpointError(f"{uri}{MANIFEST_NAME} lists no files")
    return [_entry(item, uri) for item in files]


def _entry(item: Any, uri: str) -> FileEntry:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str) or type(item.get("size")) is not int:
        raise CorruptCheckpointError(f"{uri}{MANIFEST_NAME} has a malformed file entry")
    try:
        path = _relative(item["path"])
    except ValueError as error:
        raise CorruptCheckpointError(f"{uri}{MANIFEST_NAME} lists an unsafe path {item['path']!r}") from error
    # An entry without a digest (written by another tool) is checked by size only.
    return FileEntry(path=path, size=item["size"], sha256=str(item.get("sha256", "")))


def _verify(entry: FileEntry, size: int, sha256: str, uri: str) -> None:
    if size != entry["size"]:
        raise CorruptCheckpointError(f"{uri}{entry['path']} is {size} bytes, {MANIFEST_NAME} says {entry['size']}")
    if entry["sha256"] and sha256 != entry["sha256"]:
        raise CorruptCheckpointError(f"{uri}{entry['path']} has a different SHA-256 than {MANIFEST_NAME} lists")


def _put_bytes(s3: Any, bucket: str, prefix: str, path: str, data: bytes) -> FileEntry:
    s3.put_object(Bucket=bucket, Key=prefix + path, Body=data)
    return FileEntry(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _upload_file(s3: Any, bucket: str, prefix: str, path: str, source: Path) -> FileEntry:
    # upload_file switches to multipart for large shards; the digest is taken from the same local file.
    s3.upload_file(str(source), bucket, prefix + path)
    return FileEntry(path=path, size=source.stat().st_size, sha256=_sha256_of(source))


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _list_objects(s3: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", ())


def _relative(path: str) -> str:
    # Paths become S3 keys here and local file names on download: nothing may point outside the folder.
    if "\\" in path or any(segment in {"", ".", ".."} for segment in path.split("/")):
        raise ValueError(f"checkpoint file paths must be relative POSIX paths, got {path!r}")
    if path == MANIFEST_NAME:
        raise ValueError(f"{MANIFEST_NAME} is reserved for the manifest")
    return path


def _folder_uri(uri: str) -> str:
    if not uri.startswith("s3://") or not uri[len("s3://") :].split("/", 1)[0]:
        raise ValueError(f"expected an s3://bucket/prefix/ URI, got {uri!r}")
    return uri if uri.endswith("/") else f"{uri}/"


def _split(folder_uri: str) -> tuple[str, str]:
    bucket, _, prefix = folder_uri[len("s3://") :].partition("/")
    return bucket, prefix
