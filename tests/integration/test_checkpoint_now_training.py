"""Checkpoint now, the training side: training/fault_responder_checkpoint.py reads `<prefix>_CHECKPOINT_NOW`, answers
it with a checkpoint whose manifest names the request, holds when asked, and saves on SIGTERM; the example trainer
uses it. moto's S3 in process, and two real trainer processes against a moto server on loopback."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import boto3
import pytest

from fault_responder.resume.checkpoints import MarkerKind
from tests.integration.parallel import moto_client
from tests.integration.training_runs import final_state, newest_complete

TRAINING = Path(__file__).resolve().parents[2] / "training"
REGION = "us-east-1"
BUCKET = "training-checkpoints"
FORMAT = "fault-responder-checkpoint-request/1"
RUN = f"s3://{BUCKET}/runs/demo/"
UNINTERRUPTED = f"s3://{BUCKET}/runs/uninterrupted/"
SECONDS = 20.0
"""How long a real process may take to reach a point the test waits for (a slow machine's worst case)."""


@pytest.fixture
def s3(checkpoint_bucket: Any) -> Any:
    return checkpoint_bucket


def key_of(uri: str) -> str:
    return uri.removeprefix(f"s3://{BUCKET}/")


def request_document(request_id: str, *, deadline_in: float = 300.0, hold_for: float | None = None) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "format": FORMAT,
        "id": request_id,
        "requested_at": now.isoformat(timespec="milliseconds"),
        "deadline": (now + timedelta(seconds=deadline_in)).isoformat(timespec="milliseconds"),
        "hold_until": None if hold_for is None else (now + timedelta(seconds=hold_for)).isoformat(),
        "reason": "operator: drain for maintenance",
        "requested_by": "fault-responder checkpoint-now",
    }


def put_request(s3: Any, body: dict[str, Any] | bytes, prefix: str = RUN) -> int:
    """Write the job's request object; returns its size."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    s3.put_object(Bucket=BUCKET, Key=key_of(prefix) + "_CHECKPOINT_NOW", Body=data)
    return len(data)


def manifest(s3: Any, folder: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(s3.get_object(Bucket=BUCKET, Key=key_of(folder) + "_COMPLETE")["Body"].read())
    return document


def committed_answers(s3: Any, prefix: str) -> dict[int, str | None]:
    """Every committed step under the prefix, with the request its manifest answers."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=key_of(prefix))
    folders = sorted(obj["Key"].rsplit("/", 1)[0] for obj in listed["Contents"] if obj["Key"].endswith("/_COMPLETE"))
    return {int(folder[-6:]): manifest(s3, f"s3://{BUCKET}/{folder}/").get("answers") for folder in folders}


def train(trainer: ModuleType, uri: str, output: Path, *extra: str, steps: int = 40) -> int:
    argv = [
        *("--steps", str(steps), "--checkpoint-every", "10", "--checkpoint-uri", uri, "--output", str(output)),
        *extra,
    ]
    return int(trainer.main(argv))


def resume_from(monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    monkeypatch.setenv("RESUME_FROM", folder)
    monkeypatch.setenv("RESUME_ATTEMPT", "1")


def when(condition: Callable[[], bool], then: Callable[[], None], seconds: float = SECONDS) -> threading.Thread:
    """In the background: once `condition` holds (polled), do `then`. For acting while the main thread holds."""

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        then()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


# The example trainer, in process


def test_a_request_is_answered_at_the_next_checked_boundary_once_and_not_again_after_a_resume(
    s3: Any, trainer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an uninterrupted run, and a pending request before a run that checks every 5 steps and crashes in step 8
    assert train(trainer, UNINTERRUPTED, tmp_path / "uninterrupted.json") == 0
    put_request(s3, request_document("cn-20261202T150405Z-3f9a1c2e"))
    capsys.readouterr()

    # When it runs, crashes, and is resumed from the newest complete checkpoint (the request still in place)
    assert train(trainer, RUN, tmp_path / "crashed.json", "--check-requests-every", "5", "--fail-at-step", "8") == 1
    first = capsys.readouterr().out
    search = newest_complete(RUN)
    assert search.checkpoint is not None
    resume_from(monkeypatch, search.checkpoint.uri)
    assert train(trainer, RUN, tmp_path / "resumed.json", "--check-requests-every", "5") == 0
    second = capsys.readouterr().out

    # Then step 5, the first checked boundary, answered it, and the responder's discovery picks that checkpoint
    assert f"answered cn-20261202T150405Z-3f9a1c2e at step 5: {RUN}step-000005/" in first
    assert "held" not in first  # the request asks no hold
    assert (search.checkpoint.uri, search.checkpoint.step) == (f"{RUN}step-000005/", 5)
    assert search.checkpoint.marker is MarkerKind.MANIFEST
    # and the resumed run did not answer it again, saved as usual, and ended bit-identical
    assert f"resumed from {RUN}step-000005/ at step 5" in second
    assert "answered" not in second
    assert committed_answers(s3, RUN) == {5: "cn-20261202T150405Z-3f9a1c2e", 10: None, 20: None, 30: None, 40: None}
    assert final_state(tmp_path / "resumed.json") == final_state(tmp_path / "uninterrupted.json")


def test_a_request_seen_when_a_periodic_save_is_due_is_answered_by_that_save(
    s3: Any, trainer: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pending request, and a run that checks it every 10 steps and saves every 10 steps
    put_request(s3, request_document("cn-periodic"))

    # When it runs
    assert train(trainer, RUN, tmp_path / "run.json", "--check-requests-every", "10", steps=20) == 0

    # Then step 10's one save answered it: no second save at that boundary, none again at step 20
    out = capsys.readouterr().out
    assert f"answered cn-periodic at step 10: {RUN}step-000010/" in out
    assert f"saved {RUN}step-000010/" not in out
    assert committed_answers(s3, RUN) == {10: "cn-periodic", 20: None}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        pytest.param(request_document("cn-expired", deadline_in=-1.0), None, id="expired"),
        pytest.param(
            {**request_document("cn-future"), "format": "fault-responder-checkpoint-request/2"},
            f"is not a {FORMAT} request",
            id="foreign-format",
        ),
        pytest.param(b"\xff{not json", "not UTF-8 JSON", id="not-json"),
        pytest.param({**request_document("cn-x"), "id": "no spaces allowed"}, "its id", id="bad-id"),
        pytest.param({**request_document("cn-x"), "deadline": "2026-12-02T15:09:05"}, "its deadline", id="no-offset"),
        pytest.param({**request_document("cn-big"), "reason": "x" * 4096}, "larger than 4096 bytes", id="oversized"),
    ],
)
def test_a_request_that_is_not_pending_is_ignored_and_training_goes_on(
    s3: Any,
    trainer: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: dict[str, Any] | bytes,
    complaint: str | None,
) -> None:
    # Given a request object that is expired, of another format, unreadable or too large
    put_request(s3, body)

    # When a run checks it at every step
    assert train(trainer, RUN, tmp_path / "run.json", "--check-requests-every", "1", steps=20) == 0

    # Then nothing answered it, the periodic saves went on, and an unusable object was named once, not 20 times
    out, err = capsys.readouterr()
    assert "answered" not in out
    assert "finished at step 20" in out
    assert committed_answers(s3, RUN) == {10: None, 20: None}
    named = [line for line in err.splitlines() if "_CHECKPOINT_NOW" in line]
    if complaint is None:
        assert named == []
    else:
        assert len(named) == 1
        assert complaint in named[0]


def test_with_the_ignore_flag_a_request_is_seen_but_never_answered(
    s3: Any, trainer: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pending request that asks for a hold
    put_request(s3, request_document("cn-ignored", hold_for=60.0))

    # When a run that checks every 2 steps but ignores requests runs
    started = time.monotonic()
    assert (
        train(trainer, RUN, tmp_path / "run.json", "--check-requests-every", "2", "--ignore-checkpoint-requests") == 0
    )

    # Then it noticed the request once, never answered nor held, and saved as usual
    out = capsys.readouterr().out
    assert out.count("ignored checkpoint request cn-ignored") == 1
    assert "ignored checkpoint request cn-ignored at step 2" in out
    assert "answered" not in out
    assert "held" not in out
    assert time.monotonic() - started < 30.0
    assert committed_answers(s3, RUN) == {10: None, 20: None, 30: None, 40: None}


def test_asked_to_stop_the_trainer_saves_at_the_next_boundary_answering_a_request_there(
    s3: Any, helper: ModuleType, trainer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an uninterrupted run, a request written after the last check, and a stop already requested
    assert train(trainer, UNINTERRUPTED, tmp_path / "uninterrupted.json") == 0
    put_request(s3, request_document("cn-on-stop"))
    stop = helper.StopSignal()
    stop.request()
    args = trainer.parse_args(
        ["--steps", "40", "--checkpoint-every", "10", "--checkpoint-uri", RUN, "--check-requests-every", "1000"]
    )

    # When the trainer reaches its first step boundary, and a run resumes from what it saved
    with pytest.raises(trainer.Stopped) as stopped:
        trainer.train(args, stop)
    resume_from(monkeypatch, stopped.value.folder)
    assert train(trainer, RUN, tmp_path / "resumed.json", "--check-requests-every", "1") == 0

    # Then it saved step 1 answering the request, not training on; the resumed run ends bit-identical
    assert (stopped.value.step, stopped.value.folder) == (1, f"{RUN}step-000001/")
    assert committed_answers(s3, RUN) == {1: "cn-on-stop", 10: None, 20: None, 30: None, 40: None}
    assert final_state(tmp_path / "resumed.json") == final_state(tmp_path / "uninterrupted.json")


# The helper


def test_checks_cost_one_request_each_and_no_body_while_the_request_is_unchanged(
    s3: Any, helper: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the requests of a job checked every 2 steps, on a clock the test moves, and every GetObject recorded
    client = boto3.client("s3", region_name=REGION)
    responses: list[tuple[int, int | None]] = []

    def record(http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
        # The body is a stream the helper reads after this: only the status and the parsed length are looked at.
        responses.append((http_response.status_code, parsed.get("ContentLength")))

    client.meta.events.register("after-call.s3.GetObject", record)
    now = [datetime.now(UTC)]
    requests = helper.CheckpointRequests(RUN, every=2, client=client, clock=lambda: now[0])

    # When steps 1-4 pass with no request; 5-7 with one, answered at step 8; 9-10; then another request for 11-14;
    # then the clock passes its deadline
    before = [requests.pending(step) for step in range(1, 5)]
    first_size = put_request(s3, request_document("cn-first", deadline_in=60.0))
    first = [requests.pending(step) for step in range(5, 8)]
    requests.answer(8, {"model.bin": b"weights"}, first[1])
    answered = [requests.pending(step) for step in range(9, 11)]
    second_size = put_request(s3, request_document("cn-second", deadline_in=60.0))
    second = [requests.pending(step) for step in range(11, 15)]
    now[0] = datetime.now(UTC) + timedelta(seconds=61)  # past the deadline however long the steps above took
    expired = requests.pending(16)

    # Then only even steps read S3, one GetObject each, counted; a request is pending until answered or expired
    assert before == [None, None, None, None]
    assert [None if request is None else request.id for request in first] == [None, "cn-first", None]
    assert answered == [None, None]
    assert [None if request is None else request.id for request in second] == [None, "cn-second", None, "cn-second"]
    assert expired is None
    assert requests.checks == len(responses) == 7  # steps 2, 4, 6, 10, 12, 14, 16
    # 404: no object; 200: a request read; 304: unchanged since, judged from the last read against the clock
    assert [status for status, _ in responses] == [404, 404, 200, 304, 200, 304, 304]
    assert [length for status, length in responses if status != 404] == [first_size, None, second_size, None, None]
    assert capsys.readouterr().err == ""  # a 304 or a missing object is an answer, not a failure to read
    assert manifest(s3, f"{RUN}step-000008/")["answers"] == "cn-first"


def test_an_answered_request_is_read_back_from_the_checkpoint_resumed_from(s3: Any, helper: ModuleType) -> None:
    # Given a checkpoint that answers a request, and one that answers none
    answering = helper.save_checkpoint(RUN, 5, {"model.bin": b"5"}, answers="cn-20261202T150405Z-3f9a1c2e")
    plain = helper.save_checkpoint(RUN, 10, {"model.bin": b"10"})

    # When a relaunched job reads them / Then the id, or None; and its requests do not offer that id again
    assert helper.answered_request(answering) == "cn-20261202T150405Z-3f9a1c2e"
    assert helper.answered_request(plain) is None
    assert "answers" not in manifest(s3, plain)
    put_request(s3, request_document("cn-20261202T150405Z-3f9a1c2e"))
    assert helper.CheckpointRequests(RUN, every=1, answered=helper.answered_request(answering)).pending(6) is None
    assert helper.CheckpointRequests(RUN, every=1).pending(6) is not None


def test_a_request_of_exactly_4096_bytes_is_read(s3: Any, helper: ModuleType) -> None:
    # Given a request padded to the limit
    document = request_document("cn-at-the-limit")
    document["reason"] = ""
    document["reason"] = "x" * (4096 - len(json.dumps(document).encode()))

    # When checked / Then it is pending
    assert put_request(s3, document) == 4096
    request = helper.CheckpointRequests(RUN, every=1).pending(1)
    assert request is not None
    assert request.id == "cn-at-the-limit"


@pytest.mark.parametrize("answers", ["", "has space", "x" * 129, "slash/no"])
def test_a_checkpoint_cannot_answer_a_malformed_request_id(s3: Any, helper: ModuleType, answers: str) -> None:
    # Given an id outside 1-128 characters of [A-Za-z0-9._:-] / When saved / Then refused before anything is written
    with pytest.raises(ValueError, match="request id"):
        helper.save_checkpoint(RUN, 5, {"model.bin": b"5"}, answers=answers)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=key_of(RUN))


def answered_with_hold(
    s3: Any, helper: ModuleType, hold_for: float, clock: Callable[[], datetime] | None = None
) -> tuple[Any, Any]:
    """A job's requests, and the request they just answered at step 5, which asks for a hold."""
    put_request(s3, request_document("cn-hold", hold_for=hold_for))
    requests = helper.CheckpointRequests(RUN, every=1, clock=clock)
    request = requests.pending(5)
    assert request is not None
    requests.answer(5, {"model.bin": b"5"}, request)
    return requests, request


@pytest.mark.parametrize("withdrawal", ["deleted", "replaced"])
def test_a_hold_ends_when_the_request_is_withdrawn(s3: Any, helper: ModuleType, withdrawal: str) -> None:
    # Given an answered request that asks for a 30 s hold
    requests, request = answered_with_hold(s3, helper, hold_for=30.0)
    checks_before = requests.checks

    # When the request object is deleted, or replaced by another request, while the job holds
    def withdraw() -> None:
        if withdrawal == "deleted":
            s3.delete_object(Bucket=BUCKET, Key=key_of(RUN) + "_CHECKPOINT_NOW")
        else:
            put_request(s3, request_document("cn-next"))

    watcher = when(lambda: requests.checks >= checks_before + 2, withdraw)
    started = time.monotonic()
    ended = requests.hold(request, poll_seconds=0.05)
    watcher.join()

    # Then the hold ends at a poll after that: it re-read the object while holding, unchanged at first
    assert ended == "withdrawn"
    assert time.monotonic() - started < 10.0
    assert requests.checks >= checks_before + 2


def test_a_hold_ends_when_its_time_passes(s3: Any, helper: ModuleType) -> None:
    # Given an answered request that asks for a 30 s hold, and a clock that stays before hold_until until the
    # job has re-read the request three times while holding, and then reads past it
    polls: dict[str, int] = {}

    def clock() -> datetime:
        if "until" in polls and requests.checks >= polls["until"]:
            return request.hold_until + timedelta(milliseconds=1)
        return datetime.now(UTC)

    requests, request = answered_with_hold(s3, helper, hold_for=30.0, clock=clock)
    polls["until"] = requests.checks + 3

    # When the job holds
    ended = requests.hold(request, poll_seconds=0.01)

    # Then it held, polling the unchanged object meanwhile, and stopped holding once its clock passed hold_until
    # (without one more read)
    assert ended == "expired"
    assert requests.checks == polls["until"]


def test_a_hold_ends_when_the_process_is_asked_to_stop(s3: Any, helper: ModuleType) -> None:
    # Given an answered request that asks for a 30 s hold, polled every minute; the clock tells when it is read
    readings: list[datetime] = []

    def clock() -> datetime:
        readings.append(datetime.now(UTC))
        return readings[-1]

    requests, request = answered_with_hold(s3, helper, hold_for=30.0, clock=clock)
    stop = helper.StopSignal()
    checks_before, readings_before = requests.checks, len(readings)

    # When a stop is requested while the job holds (it has looked at the clock, slept and looked again)
    watcher = when(lambda: len(readings) >= readings_before + 2, stop.request)
    started = time.monotonic()
    ended = requests.hold(request, stop=stop, poll_seconds=60.0)
    watcher.join()

    # Then the hold ends within a fraction of a second, without waiting for its next poll
    assert ended == "stopping"
    assert time.monotonic() - started < 5.0
    assert requests.checks == checks_before


def test_sigterm_only_sets_the_flag_calls_the_previous_handler_and_is_restored(helper: ModuleType) -> None:
    # Given a SIGTERM handler installed before ours (it also keeps this test process alive if ours were missing)
    heard: list[int] = []

    def previous(signum: int, _: FrameType | None) -> None:
        heard.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        # When SIGTERM arrives while ours is installed, then again after the with block
        with helper.stop_on_sigterm() as stop:
            assert not stop.requested
            signal.raise_signal(signal.SIGTERM)
            assert (stop.requested, heard) == (True, [signal.SIGTERM])
        signal.raise_signal(signal.SIGTERM)

        # Then the flag was set and the previous handler still heard it; afterwards the previous one is back
        assert signal.getsignal(signal.SIGTERM) is previous
        assert heard == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, original)


# Real trainer processes against a moto server


@pytest.fixture
def served(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's AWS clients pointed at the moto server (its checkpoint bucket created); returns the
    environment a trainer process gets."""
    bucket = moto_client("s3", moto_server, REGION)
    if BUCKET not in {found["Name"] for found in bucket.list_buckets()["Buckets"]}:
        bucket.create_bucket(Bucket=BUCKET)
    environment = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    for name in ("RESUME_FROM", "RESUME_ATTEMPT", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, **environment, "PYTHONUNBUFFERED": "1"}


class TrainerProcess:
    """training/example_trainer.py in a process of its own; its stdout read line by line as it comes."""

    def __init__(self, environment: dict[str, str], tmp_path: Path, *argv: str) -> None:
        self.stderr = tmp_path / "trainer.stderr"
        with self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(TRAINING / "example_trainer.py"), *argv],
                env=environment,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for_line(self, pattern: str, seconds: float = SECONDS) -> re.Match[str]:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                break
            self.seen.append(line)
            if found := re.fullmatch(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r}; printed {self.seen}, stderr {self.stderr.read_text()!r}")

    def exit_code(self, seconds: float = SECONDS) -> int:
        return self.process.wait(timeout=seconds)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def processes() -> Iterator[list[TrainerProcess]]:
    started: list[TrainerProcess] = []
    yield started
    for process in started:
        process.kill()


def test_a_running_trainer_answers_a_request_written_mid_run_holds_and_finishes(
    served: dict[str, str],
    trainer: ModuleType,
    processes: list[TrainerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an uninterrupted run, and a trainer process checking for requests at every 50 ms step
    prefix = f"s3://{BUCKET}/runs/process-request/"
    reference = f"s3://{BUCKET}/runs/process-request-reference/"
    assert train(trainer, reference, tmp_path / "uninterrupted.json", steps=60) == 0
    s3 = boto3.client("s3", region_name=REGION)
    job = TrainerProcess(
        served,
        tmp_path,
        *("--steps", "60", "--checkpoint-every", "10", "--checkpoint-uri", prefix),
        *("--check-requests-every", "1", "--step-seconds", "0.05", "--hold-poll-seconds", "0.05"),
        *("--output", str(tmp_path / "job.json")),
    )
    processes.append(job)
    job.wait_for_line(rf"saved {prefix}step-000010/")

    # When a request that asks for a hold is written, and withdrawn once answered
    put_request(s3, request_document("cn-mid-run", hold_for=120.0), prefix)
    answer = job.wait_for_line(rf"answered cn-mid-run at step (\d+): ({prefix}step-\d{{6}}/)")
    s3.delete_object(Bucket=BUCKET, Key=key_of(prefix) + "_CHECKPOINT_NOW")
    step, folder = int(answer[1]), answer[2]
    job.wait_for_line(rf"held at step {step} until withdrawn")
    job.wait_for_line(r"finished at step 60, loss \S+")
    assert job.exit_code() == 0

    # Then the answering checkpoint names the request, and a run resumed from it ends bit-identical (so does the job)
    assert 10 < step < 60
    assert folder == f"{prefix}step-{step:06d}/"
    assert manifest(s3, folder)["answers"] == "cn-mid-run"
    resume_from(monkeypatch, folder)
    assert train(trainer, f"s3://{BUCKET}/runs/process-request-resumed/", tmp_path / "resumed.json", steps=60) == 0
    assert final_state(tmp_path / "resumed.json") == final_state(tmp_path / "uninterrupted.json")
    assert final_state(tmp_path / "job.json") == final_state(tmp_path / "uninterrupted.json")


def test_a_running_trainer_sent_sigterm_saves_at_the_next_boundary_and_exits_0(
    served: dict[str, str],
    trainer: ModuleType,
    processes: list[TrainerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an uninterrupted run, and a trainer process past its first save, 50 ms a step
    prefix = f"s3://{BUCKET}/runs/process-sigterm/"
    reference = f"s3://{BUCKET}/runs/process-sigterm-reference/"
    assert train(trainer, reference, tmp_path / "uninterrupted.json", steps=60) == 0
    job = TrainerProcess(
        served,
        tmp_path,
        *("--steps", "60", "--checkpoint-every", "10", "--checkpoint-uri", prefix, "--step-seconds", "0.05"),
        *("--output", str(tmp_path / "job.json")),
    )
    processes.append(job)
    job.wait_for_line(rf"saved {prefix}step-000010/")

    # When ECS's StopTask sends SIGTERM
    job.process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    stopped = job.wait_for_line(rf"stopped at step (\d+): ({prefix}step-\d{{6}}/)", seconds=5.0)
    assert job.exit_code(seconds=5.0) == 0
    exited = time.monotonic() - sent

    # Then it saved the step it had reached and exited 0 within a few seconds, unfinished
    step, folder = int(stopped[1]), stopped[2]
    assert exited < 5.0
    assert 10 <= step < 60
    assert folder == f"{prefix}step-{step:06d}/"
    assert not (tmp_path / "job.json").exists()
    search = newest_complete(prefix)
    assert search.checkpoint is not None
    assert (search.checkpoint.uri, search.checkpoint.marker) == (folder, MarkerKind.MANIFEST)

    # and a run resumed from that checkpoint ends bit-identical to the uninterrupted one
    resume_from(monkeypatch, folder)
    assert train(trainer, prefix, tmp_path / "resumed.json", steps=60) == 0
    assert final_state(tmp_path / "resumed.json") == final_state(tmp_path / "uninterrupted.json")
