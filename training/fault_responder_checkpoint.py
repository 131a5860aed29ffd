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

Checkpoint now: the responder (or `fault-responder checkpoint-now`) asks a running job for a checkpoint at its next
step boundary by writing `<uri_prefix>_CHECKPOINT_NOW`, a small JSON request. The job answers with a checkpoint
whose manifest carries `"answers": "<request id>"`, then holds at that boundary if the request asks it to (steps
trained after the answer would be lost when the job is moved). Checking costs one conditional GetObject every
`every` steps, with no body transferred while the request object is unchanged::

    requests = CheckpointRequests(uri_prefix, every=10, answered=answered_request(uri) if uri else None)
    with stop_on_sigterm() as stop:                  # main thread; the handler only sets a flag
        while step < total:
            train_one_step()
            request = requests.pending(step)          # None, or a request this job has not answered yet
            if request is not None:
                requests.answer(step, state_files(), request)
                requests.hold(request, stop=stop)     # returns at once when the request asks no hold
            if stop.requested:                        # ECS's StopTask: SIGTERM, SIGKILL after stopTimeout
                if request is None:                   # (at most one save per step: a folder is never re-saved)
                    save_checkpoint(uri_prefix, step, state_files())
                break

An unreadable, foreign, oversized or expired request is ignored (one line on stderr per distinct object), never
raised: a bad request must not stop training. With many ranks, rank 0 checks and broadcasts the request, passes
`answers=request.id` to commit_checkpoint() and calls `requests.record_answer(request.id)`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal, TypedDict

import boto3
from botocore.exceptions import BotoCoreError, ClientError

MANIFEST_NAME = "_COMPLETE"
MANIFEST_FORMAT = "fault-responder-checkpoint/1"
COMMIT_MARKERS = frozenset({MANIFEST_NAME, ".metadata", "COMPLETED"})
RESUME_FROM_ENV = "RESUME_FROM"
RESUME_ATTEMPT_ENV = "RESUME_ATTEMPT"
REQUEST_NAME = "_CHECKPOINT_NOW"
REQUEST_FORMAT = "fault-responder-checkpoint-request/1"
REQUEST_MAX_BYTES = 4096

HoldEnd = Literal["withdrawn", "expired", "stopping"]
"""Why CheckpointRequests.hold() returned."""

_CHUNK = 8 * 1024 * 1024
_CREATE_ONLY_CONFLICTS = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_NOT_MODIFIED = frozenset({"304", "NotModified"})
_NO_SUCH_KEY = frozenset({"NoSuchKey", "404"})
_STOP_LATENCY_SECONDS = 0.2
"""A hold notices a stop within this long, however long its poll interval."""


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
    uri_prefix: str,
    step: int,
    files: Mapping[str, bytes] | str | os.PathLike[str],
    *,
    answers: str | None = None,
    client: Any = None,
) -> str:
    """Write the step's files, then its manifest; returns the folder URI (what RESUME_FROM will name).

    `files` maps relative paths to contents, or is a local directory uploaded recursively. `answers` names the
    checkpoint request this save answers (CheckpointRequests.answer() passes it).
    """
    _check_answers(answers)
    s3 = client or boto3.client("s3")
    folder = prepare_checkpoint_folder(uri_prefix, step, client=s3)
    entries = write_checkpoint_files(folder, files, client=s3)
    commit_checkpoint(folder, step, entries, answers=answers, client=s3)
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


def commit_checkpoint(
    folder_uri: str, step: int, entries: list[FileEntry], *, answers: str | None = None, client: Any = None
) -> None:
    """Write the manifest, create-only: the checkpoint exists from this moment. Call it after every file is
    written (after a barrier, with every rank's entries, in a multi-rank job).

    `answers`: the id of the checkpoint request this checkpoint answers, recorded as the manifest's `answers`.
    """
    _check_answers(answers)
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
        "created_at": _utc_now().isoformat(timespec="milliseconds"),
    }
    if answers is not None:
        manifest["answers"] = answers
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


def answered_request(resume_uri: str, *, client: Any = None) -> str | None:
    """The id of the checkpoint request the checkpoint at `resume_uri` answered (its manifest's `answers`), or
    None. Pass it to CheckpointRequests(answered=...) so a resumed job does not answer that request again."""
    s3 = client or boto3.client("s3")
    bucket, prefix = _split(_folder_uri(resume_uri))
    answers = _read_manifest_document(s3, bucket, prefix).get("answers")
    return answers if isinstance(answers, str) and _REQUEST_ID.fullmatch(answers) else None


@dataclass(frozen=True)
class CheckpointRequest:
    """A request for a checkpoint at the next step boundary, read from `<uri_prefix>_CHECKPOINT_NOW`."""

    id: str
    requested_at: datetime
    deadline: datetime
    """The request is not pending from this moment: whoever asked has stopped waiting for an answer."""
    hold_until: datetime | None
    """After answering, do not train on until this moment (or the request is withdrawn, or the process stops)."""
    reason: str = ""
    requested_by: str = ""


class CheckpointRequests:
    """Reads the job's checkpoint request every `every` steps, answers it once, and holds when asked.

    Each check is one GetObject with If-None-Match set to the ETag last seen: an unchanged request object costs a
    304 and no body; the request parsed from the last full read still says whether it is pending, its deadline
    compared with `clock()` every time. `checks` counts the GetObject requests made.
    """

    def __init__(
        self,
        uri_prefix: str,
        *,
        every: int,
        answered: str | None = None,
        client: Any = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """`answered`: the request the checkpoint this run resumed from answered (answered_request()), so a
        relaunched job does not answer it again. `clock` returns the time as an aware datetime."""
        if every < 1:
            raise ValueError("every must be a positive number of steps")
        _check_answers(answered)
        self.uri_prefix = _folder_uri(uri_prefix)
        self.uri = self.uri_prefix + REQUEST_NAME
        self.every = every
        self.checks = 0
        self._s3 = client or boto3.client("s3")
        self._clock = clock or _utc_now
        self._bucket, self._key = _split(self.uri)
        self._answered = {answered} if answered is not None else set()
        self._etag: str | None = None
        self._request: CheckpointRequest | None = None
        """The request in the object last read (None: no object, or one that is not a readable request)."""
        self._reported: set[str] = set()

    def pending(self, step: int) -> CheckpointRequest | None:
        """At a step boundary: the request to answer now, or None. Reads the request object only when `step` is
        a multiple of `every`; None between checks."""
        return self.check() if step % self.every == 0 else None

    def check(self) -> CheckpointRequest | None:
        """Read the request object now (one GetObject) and return the request if it is pending: readable, before
        its deadline, and not answered by this job yet. For a boundary that must not miss a request (a stop)."""
        self._refresh()
        return self._pending()

    def answer(self, step: int, files: Mapping[str, bytes] | str | os.PathLike[str], request: CheckpointRequest) -> str:
        """Save the step's checkpoint with `answers` set to the request's id; returns its folder URI."""
        folder = save_checkpoint(self.uri_prefix, step, files, answers=request.id, client=self._s3)
        self.record_answer(request.id)
        return folder

    def record_answer(self, request_id: str) -> None:
        """Note a request as answered by a checkpoint saved another way (commit_checkpoint(answers=...) by rank 0
        of a multi-rank job), so it is not pending again."""
        _check_answers(request_id)
        self._answered.add(request_id)

    def hold(self, request: CheckpointRequest, *, stop: StopSignal | None = None, poll_seconds: float = 5.0) -> HoldEnd:
        """Wait at the step boundary just answered, as the request asks, and return why the wait ended:

        - "withdrawn": the request object was deleted, or replaced by another request (or by something that is
          not a request): whoever asked no longer needs the job to stand still;
        - "expired": `hold_until` has passed (at once when the request asks no hold);
        - "stopping": `stop` was requested (SIGTERM); save nothing more and exit.

        Re-reads the request object every `poll_seconds` (a 304 while it is unchanged); a failed read keeps
        holding. Notices a stop within a fraction of a second however long the poll interval.
        """
        if poll_seconds <= 0:
            raise ValueError("poll_seconds must be positive")
        next_poll = time.monotonic() + poll_seconds
        while True:
            if stop is not None and stop.requested:
                return "stopping"
            remaining = _seconds_until(request.hold_until, self._clock())
            if remaining <= 0:
                return "expired"
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + poll_seconds
                if self._refresh() and (self._request is None or self._request.id != request.id):
                    return "withdrawn"
            time.sleep(max(0.0, min(next_poll - time.monotonic(), remaining, _STOP_LATENCY_SECONDS)))

    def _pending(self) -> CheckpointRequest | None:
        request = self._request
        if request is None or request.id in self._answered or self._clock() >= request.deadline:
            return None
        return request

    def _refresh(self) -> bool:
        """One conditional GetObject; updates the request last seen. False when S3 could not be read."""
        self.checks += 1
        conditional = {"IfNoneMatch": self._etag} if self._etag else {}
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=self._key, **conditional)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in _NOT_MODIFIED:
                return True
            if code in _NO_SUCH_KEY:
                self._etag, self._request = None, None
                return True
            self._report(f"error:{code}", f"could not read {self.uri} ({code}); training goes on")
            return False
        except BotoCoreError as error:
            self._report(f"error:{type(error).__name__}", f"could not read {self.uri} ({error}); training goes on")
            return False
        body = response["Body"]
        # An oversized object is not read at all; a body without a length is read one byte past the limit.
        oversized = response.get("ContentLength", 0) > REQUEST_MAX_BYTES
        try:
            raw = b"" if oversized else body.read(REQUEST_MAX_BYTES + 1)
        except BotoCoreError as error:
            self._report(f"error:{type(error).__name__}", f"could not read {self.uri} ({error}); training goes on")
            return False
        finally:
            body.close()
        self._etag = response.get("ETag")
        try:
            if oversized or len(raw) > REQUEST_MAX_BYTES:
                raise ValueError(f"it is larger than {REQUEST_MAX_BYTES} bytes")
            self._request = _parse_request(raw)
        except ValueError as problem:
            self._request = None
            self._report(f"etag:{self._etag}", f"ignoring {self.uri}: {problem}")
        return True

    def _report(self, key: str, line: str) -> None:
        # Once per distinct object (or error): a check every few steps must not flood the training log.
        if key not in self._reported:
            self._reported.add(key)
            print(line, file=sys.stderr)


class StopSignal:
    """Set when the process is asked to stop: ECS's StopTask sends SIGTERM, then SIGKILL after the container's
    stop timeout (its `stopTimeout`, else 30 s; Fargate allows at most 120 s). The handler only sets this flag,
    because the training state may be mid-step; the loop checks `requested` at each step boundary, saves a
    checkpoint and exits."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: Any = None
        self._installed = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Ask for a stop (what the handler does; also for code that decides to stop by itself)."""
        self.signum = signum

    def restore(self) -> None:
        """Put back the SIGTERM handler that stop_on_sigterm() replaced (main thread only)."""
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed = False

    def __enter__(self) -> StopSignal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.restore()


def stop_on_sigterm(*, call_previous: bool = True) -> StopSignal:
    """Install a SIGTERM handler that sets the returned StopSignal; `with stop_on_sigterm() as stop:` puts the
    previous handler back on exit.

    Call it from the main thread (Python runs signal handlers there, and signal.signal() refuses other threads),
    before training starts. A previous handler installed from Python is still called after the flag is set,
    unless `call_previous` is False (for a previous handler that would exit at once); the default action
    (terminate) and SIG_IGN are replaced, not called.
    """
    stop = StopSignal()
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.request(signum)
        if call_previous and callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    stop._previous, stop._installed = previous, True
    return stop


def _parse_request(raw: bytes) -> CheckpointRequest:
    try:
        document = json.loads(raw.decode("utf-8"))
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError both
        raise ValueError("it is not UTF-8 JSON") from error
    if not isinstance(document, dict) or document.get("format") != REQUEST_FORMAT:
        raise ValueError(f"it is not a {REQUEST_FORMAT} request")
    request_id = document.get("id")
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise ValueError("its id is not 1-128 characters of A-Z a-z 0-9 . _ : -")
    hold_until = document.get("hold_until")
    return CheckpointRequest(
        id=request_id,
        requested_at=_aware_time(document.get("requested_at"), "requested_at"),
        deadline=_aware_time(document.get("deadline"), "deadline"),
        hold_until=None if hold_until is None else _aware_time(hold_until, "hold_until"),
        reason=_optional_text(document.get("reason"), "reason"),
        requested_by=_optional_text(document.get("requested_by"), "requested_by"),
    )


def _aware_time(value: Any, field: str) -> datetime:
    if isinstance(value, str):
        try:
            # Before Python 3.11, fromisoformat() does not read a trailing Z.
            parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
        except ValueError:
            pass
        else:
            if parsed.utcoffset() is not None:
                return parsed
    raise ValueError(f"its {field} is not an ISO 8601 time with an offset")


def _optional_text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"its {field} is not text")
    return value


def _seconds_until(moment: datetime | None, now: datetime) -> float:
    return 0.0 if moment is None else (moment - now).total_seconds()


def _check_answers(request_id: str | None) -> None:
    if request_id is not None and not (isinstance(request_id, str) and _REQUEST_ID.fullmatch(request_id)):
        raise ValueError(f"a request id is 1-128 characters of A-Z a-z 0-9 . _ : -, got {request_id!r}")


def _utc_now() -> datetime:
    # timezone.utc rather than datetime.UTC: training images may run Python older than 3.11.
    return datetime.now(timezone.utc)  # noqa: UP017


def _read_manifest_document(s3: Any, bucket: str, prefix: str) -> dict[str, Any]:
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
    return manifest


def _read_manifest(s3: Any, bucket: str, prefix: str) -> list[FileEntry]:
    uri = f"s3://{bucket}/{prefix}"
    files = _read_manifest_document(s3, bucket, prefix).get("files")
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
