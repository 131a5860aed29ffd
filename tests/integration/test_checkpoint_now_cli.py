"""`fault-responder checkpoint-now` against S3 (moto): the request it writes, the checkpoint that answers it, what
it leaves behind; in process with a clock that moves when the command sleeps (the job saves "during" a sleep),
and two real commands at once against a moto server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.s3_checkpoints import S3CheckpointStore
from fault_responder.cli import checkpoint_now
from fault_responder.cli.main import build_parser, main
from fault_responder.resume.checkpoint_now import REQUEST_FORMAT, REQUEST_NAME
from fault_responder.resume.checkpoints import find_newest_complete
from tests.integration.parallel import moto_client

REGION = "us-east-1"
BUCKET = "training-checkpoints"
PREFIX = "runs/demo/"
URI = f"s3://{BUCKET}/{PREFIX}"
ROOT = Path(__file__).resolve().parents[2]
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


def save(s3: Any, step: int, *, answers: str | None = None, marker: str = "_COMPLETE") -> None:
    """A complete checkpoint as the training helper (a manifest, `answers` when given) or DCP (.metadata) writes it."""
    folder = f"{PREFIX}step-{step:06d}/"
    s3.put_object(Bucket=BUCKET, Key=f"{folder}model.bin", Body=b"w" * step)
    if marker == ".metadata":
        s3.put_object(Bucket=BUCKET, Key=f"{folder}.metadata", Body=b"dcp")
        return
    manifest: dict[str, Any] = {
        "format": "fault-responder-checkpoint/1",
        "step": step,
        "files": [{"path": "model.bin", "size": step}],
    }
    if answers is not None:
        manifest["answers"] = answers
    s3.put_object(Bucket=BUCKET, Key=f"{folder}_COMPLETE", Body=json.dumps(manifest).encode())


def request_object(s3: Any) -> dict[str, Any] | None:
    try:
        return json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + REQUEST_NAME)["Body"].read())  # type: ignore[no-any-return]
    except s3.exceptions.NoSuchKey:
        return None


class Job:
    """The command's clock and sleep; while it sleeps, the job does what `on_sleep` says (the n-th sleep)."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = datetime.now(UTC)
        self.sleeps = 0
        self.on_sleep = on_sleep

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += timedelta(seconds=seconds)
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


def run(job: Job, *argv: str) -> tuple[int, str]:
    lines: list[str] = []
    args = build_parser().parse_args(["checkpoint-now", URI, "--region", REGION, *argv])
    status = checkpoint_now.run(args, now=lambda: job.now, sleep=job.sleep, write=lines.append)
    return status, "\n".join(lines)


def answer_on(s3: Any, sleep_number: int, step: int) -> Callable[[int], None]:
    """A job that reads the request and saves for it at the command's `sleep_number`th sleep."""

    def on_sleep(number: int) -> None:
        if number == sleep_number:
            found = request_object(s3)
            assert found is not None
            save(s3, step, answers=found["id"])

    return on_sleep


def test_a_job_that_saves_for_the_request_answers_it_and_the_request_is_withdrawn(s3: Any) -> None:
    # Given a job whose newest checkpoint is step 120, which saves step 125 for the request on the 2nd poll
    save(s3, 120)
    job = Job(answer_on(s3, 2, 125))

    # When checkpoint-now runs
    status, out = run(job, "--wait", "60", "--poll-seconds", "5", "--reason", "drain for maintenance")

    # Then it answered after 10 s with step 125, five steps past the checkpoint before, and left nothing behind
    assert status == 0
    assert f"answered: step 125 at {URI}step-000125/ after 10 s, 5 steps past step 120" in out
    assert request_object(s3) is None


def test_the_request_is_the_contract_s_object_while_it_waits(s3: Any) -> None:
    seen: list[dict[str, Any] | None] = []
    job = Job(lambda number: seen.append(request_object(s3)) if number == 1 else None)

    run(job, "--wait", "10", "--poll-seconds", "5", "--hold", "30", "--reason", "drain for maintenance")

    request = seen[0]
    assert request is not None
    assert request["format"] == REQUEST_FORMAT
    assert request["reason"] == "drain for maintenance"
    assert request["requested_by"].startswith("fault-responder checkpoint-now (")
    requested_at = datetime.fromisoformat(request["requested_at"])
    assert datetime.fromisoformat(request["deadline"]) - requested_at == timedelta(seconds=10)
    assert datetime.fromisoformat(request["hold_until"]) - requested_at == timedelta(seconds=30)


def test_a_job_that_never_saves_times_out_naming_the_checkpoint_a_move_falls_back_to(s3: Any) -> None:
    # Given a job that ignores requests, with step 120 complete and step 130 half written
    save(s3, 120)
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}step-000130/model.bin", Body=b"partial")

    status, out = run(Job(), "--wait", "12", "--poll-seconds", "5")

    # Then exit 3, step 120 named, and the request withdrawn so the job does not save for it later
    assert status == checkpoint_now.NOT_ANSWERED == 3
    assert f"not answered within 12 s: the newest complete checkpoint is step 120 at {URI}step-000120/" in out
    assert "request withdrawn" in out
    assert request_object(s3) is None


def test_with_a_hold_the_answered_request_stays_for_the_job_to_hold_on(s3: Any) -> None:
    job = Job(answer_on(s3, 1, 121))

    status, out = run(job, "--wait", "60", "--hold", "600", "--poll-seconds", "5", "--json")

    document = json.loads(out)
    (outcome,) = document["requests"]
    assert status == 0
    assert (document["answered"], document["not_asked"]) == (True, {})
    assert (outcome["job"], outcome["uri"]) == (None, URI)
    assert outcome["checkpoint"]["step"] == 121
    assert outcome["checkpoint"]["answers"] == outcome["request"]["id"]
    assert outcome["request"]["withdrawn"] is False
    assert outcome["before"] is None
    stored = request_object(s3)
    assert stored is not None
    assert stored["id"] == outcome["request"]["id"]


def test_a_pending_request_of_someone_else_is_joined_not_replaced_and_left_to_its_author(s3: Any) -> None:
    # Given a request already pending, made by the workflow a minute from its deadline
    now = datetime.now(UTC)
    theirs = {
        "format": REQUEST_FORMAT,
        "id": "cn-workflow-1",
        "requested_at": now.isoformat(),
        "deadline": (now + timedelta(minutes=1)).isoformat(),
        "requested_by": "the resume workflow",
    }
    s3.put_object(Bucket=BUCKET, Key=PREFIX + REQUEST_NAME, Body=json.dumps(theirs).encode())
    job = Job(answer_on(s3, 1, 130))

    # When an operator asks too
    status, out = run(job, "--wait", "30", "--poll-seconds", "5")

    # Then one save answered both; the request is still the workflow's
    assert status == 0
    assert "joined the pending request cn-workflow-1 (the resume workflow)" in out
    assert "answered: step 130" in out
    assert request_object(s3) == theirs


def test_an_expired_request_is_replaced(s3: Any) -> None:
    # Given a request whose deadline passed an hour ago
    old = datetime.now(UTC) - timedelta(hours=2)
    stale = {
        "format": REQUEST_FORMAT,
        "id": "cn-old",
        "requested_at": old.isoformat(),
        "deadline": (old + timedelta(hours=1)).isoformat(),
    }
    s3.put_object(Bucket=BUCKET, Key=PREFIX + REQUEST_NAME, Body=json.dumps(stale).encode())
    seen: list[dict[str, Any] | None] = []
    job = Job(lambda number: seen.append(request_object(s3)) if number == 1 else None)

    status, _ = run(job, "--wait", "5", "--poll-seconds", "5")

    assert status == 3
    assert seen[0] is not None
    assert seen[0]["id"] not in {"cn-old"}
    assert seen[0]["id"].startswith("cn-")


def test_a_marker_without_an_id_answers_only_when_written_in_a_later_second(s3: Any) -> None:
    # Given a DCP checkpoint finished in the same second as the request: it cannot hold what came after it
    def dcp_save(number: int) -> None:
        if number == 1:
            stored = s3.get_object(Bucket=BUCKET, Key=PREFIX + REQUEST_NAME)["LastModified"]
            while datetime.now(UTC) < stored + timedelta(seconds=1):  # S3 keeps times to the second
                time.sleep(0.05)
            save(s3, 140, marker=".metadata")

    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}step-000139/.metadata", Body=b"dcp")

    status, out = run(Job(dcp_save), "--wait", "30", "--poll-seconds", "5")

    # Then step 139 (written before) did not answer, and step 140 (a second later) did
    assert status == 0
    assert "answered: step 140" in out
    assert "1 steps past step 139" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["checkpoint-now", "not-a-uri"], "must start with s3://"),
        (["checkpoint-now"], "give a CHECKPOINT_URI, or --cluster with --instance or --job"),
        (["checkpoint-now", "--cluster", "gpu"], "give a CHECKPOINT_URI, or --cluster with --instance or --job"),
        (["checkpoint-now", URI, "--cluster", "gpu", "--job", "j"], "not both"),
        (["checkpoint-now", URI, "--wait", "60", "--hold", "30"], "hold must be at least the wait"),
        (["checkpoint-now", URI, "--reason", "x" * 300], "reason must be one line"),
    ],
)
def test_bad_usage_exits_2_saying_what_is_wrong(
    s3: Any, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, "--region", REGION]) == 2
    assert message in capsys.readouterr().err
    assert request_object(s3) is None


def test_a_missing_bucket_is_an_aws_error_exit_1(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint-now", "s3://no-such-bucket/runs/x/", "--region", REGION]) == 1
    assert "NoSuchBucket" in capsys.readouterr().err


# Two real commands at once


def test_two_operators_asking_at_once_share_one_request_answered_by_one_save(moto_server: str) -> None:
    # Given a bucket on a moto server, and two checkpoint-now commands started at the same moment
    environment = {**os.environ, **FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION}
    s3 = moto_client("s3", moto_server, REGION)
    if BUCKET not in {found["Name"] for found in s3.list_buckets()["Buckets"]}:  # (the server is the worker's)
        s3.create_bucket(Bucket=BUCKET)
    command = [sys.executable, "-m", "fault_responder.cli", "checkpoint-now", URI, "--endpoint-url", moto_server]
    # (with a hold, the request stays after its answer: however late the second command starts, it finds it)
    command += ["--wait", "60", "--hold", "120", "--poll-seconds", "0.2", "--json"]
    commands = [
        subprocess.Popen(command, env=environment, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]

    # When the job sees the request and saves for it (once)
    deadline = time.monotonic() + 30
    while (found := request_object(s3)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found is not None, "no request was written"
    save(s3, 150, answers=found["id"])
    outcomes = [json.loads(process.communicate(timeout=60)[0])["requests"][0] for process in commands]

    # Then both commands waited for that one request: one wrote it, the other joined it; both saw step 150
    assert [process.returncode for process in commands] == [0, 0]
    assert {outcome["request"]["id"] for outcome in outcomes} == {found["id"]}
    assert sorted(outcome["request"]["joined"] for outcome in outcomes) == [False, True]
    assert [outcome["checkpoint"]["step"] for outcome in outcomes] == [150, 150]


def test_a_job_asked_to_save_and_hold_then_stopped_loses_no_step(moto_server: str, tmp_path: Path) -> None:
    # Given the example trainer running against S3 on a moto server: a step every 50 ms, requests checked every
    # 5 steps, a periodic checkpoint only every 1,000 steps (none yet)
    environment = {**os.environ, **FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": moto_server}
    environment.pop("RESUME_FROM", None)
    s3 = moto_client("s3", moto_server, REGION)
    bucket = "held-job"
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/runs/held/"
    trainer = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "training" / "example_trainer.py"),
            *("--steps", "100000", "--checkpoint-every", "1000", "--checkpoint-uri", uri),
            *("--check-requests-every", "5", "--step-seconds", "0.05", "--hold-poll-seconds", "0.2"),
        ],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # When an operator asks it to save now and hold (as before draining its host)
        asked = subprocess.run(
            [
                *(sys.executable, "-m", "fault_responder.cli", "checkpoint-now", uri, "--endpoint-url", moto_server),
                *("--wait", "60", "--hold", "120", "--poll-seconds", "0.2", "--json"),
            ],
            env=environment,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert asked.returncode == 0, asked.stderr
        outcome = json.loads(asked.stdout)["requests"][0]
        saved = outcome["checkpoint"]["step"]
        # And the job is stopped as ECS stops a task: SIGTERM
        time.sleep(0.5)  # (held: had it trained on, the steps after the answer would show in its last save)
        trainer.send_signal(signal.SIGTERM)
        out, err = trainer.communicate(timeout=30)
    finally:
        if trainer.poll() is None:
            trainer.kill()

    # Then it answered with a checkpoint naming the request, held there, and stopped cleanly without training on:
    # the checkpoint a move resumes from is the step it stopped at (no step lost)
    assert trainer.returncode == 0, err
    assert outcome["answered"] is True
    assert outcome["checkpoint"]["answers"] == outcome["request"]["id"]
    assert 0 < saved < 1000
    newest = find_newest_complete(uri, S3CheckpointStore(s3)).checkpoint
    assert newest is not None
    assert newest.step == saved, out


# Jobs found by their tags


def run_job_task(ecs: Any, cluster: str, instance_arn: str, job: str, uri: str) -> None:
    ecs.start_task(
        cluster=cluster,
        taskDefinition="trainer",
        containerInstances=[instance_arn],
        tags=[{"key": "fault-responder:job-id", "value": job}, {"key": "fault-responder:checkpoint-uri", "value": uri}],
    )


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, s3: Any) -> dict[str, Any]:
    """A cluster with two hosts: host A runs jobs "alpha" and "beta" (beta is a gang, also on host B), one
    untagged task, and job "gamma" whose tasks disagree on their checkpoint prefix; host B runs beta's other task."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # (read when EC2 is first called: seconds saved)
    ecs = boto3.client("ecs", region_name=REGION)
    ec2 = boto3.client("ec2", region_name=REGION)
    ecs.create_cluster(clusterName="gpu")
    hosts = []
    for _ in range(2):
        instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]
        document = json.dumps({"instanceId": instance["InstanceId"]})  # what the ECS agent registers with
        hosts.append(
            ecs.register_container_instance(cluster="gpu", instanceIdentityDocument=document)["containerInstance"][
                "containerInstanceArn"
            ]
        )
    ecs.register_task_definition(family="trainer", containerDefinitions=[{"name": "main", "image": "t", "memory": 8}])
    run_job_task(ecs, "gpu", hosts[0], "alpha", f"s3://{BUCKET}/runs/alpha")
    run_job_task(ecs, "gpu", hosts[0], "beta", f"s3://{BUCKET}/runs/beta/")
    run_job_task(ecs, "gpu", hosts[1], "beta", f"s3://{BUCKET}/runs/beta/")
    run_job_task(ecs, "gpu", hosts[0], "gamma", f"s3://{BUCKET}/runs/gamma-1/")
    run_job_task(ecs, "gpu", hosts[0], "gamma", f"s3://{BUCKET}/runs/gamma-2/")
    ecs.start_task(cluster="gpu", taskDefinition="trainer", containerInstances=[hosts[0]])
    return {"ecs": ecs, "hosts": hosts}


def save_under(s3: Any, prefix: str, step: int, answers: str) -> None:
    folder = f"{prefix}step-{step:06d}/"
    s3.put_object(Bucket=BUCKET, Key=f"{folder}model.bin", Body=b"w")
    manifest = {"format": "fault-responder-checkpoint/1", "step": step, "files": [{"path": "model.bin", "size": 1}]}
    s3.put_object(Bucket=BUCKET, Key=f"{folder}_COMPLETE", Body=json.dumps({**manifest, "answers": answers}).encode())


def test_every_job_on_an_instance_is_asked_at_once_and_one_that_cannot_be_asked_is_named(
    s3: Any, cluster: dict[str, Any]
) -> None:
    # Given host A (jobs alpha and beta, and gamma whose tasks disagree), where alpha answers and beta does not
    def alpha_answers(number: int) -> None:
        # (Each job is asked from a thread of its own: the first sleep may be another job's, before alpha's request
        # is written. Alpha answers once it finds its request, as a trainer polling for it would.)
        try:
            request = s3.get_object(Bucket=BUCKET, Key=f"runs/alpha/{REQUEST_NAME}")
        except s3.exceptions.NoSuchKey:
            return
        save_under(s3, "runs/alpha/", 7, json.loads(request["Body"].read())["id"])

    job = Job(alpha_answers)
    host = cluster["hosts"][0].rsplit("/", 1)[-1]

    # When checkpoint-now asks every job on host A
    lines: list[str] = []
    argv = ["checkpoint-now", "--cluster", "gpu", "--instance", host, "--region", REGION, "--wait", "10", "--json"]
    status = checkpoint_now.run(
        build_parser().parse_args(argv), now=lambda: job.now, sleep=job.sleep, write=lines.append
    )
    document = json.loads(lines[0])

    # Then alpha answered, beta timed out (one request each, under each job's own prefix), gamma was not asked
    # (its tasks disagree on the prefix), the untagged task was left alone, and the exit status says not all answered
    assert status == 3
    by_job = {outcome["job"]: outcome for outcome in document["requests"]}
    assert sorted(by_job) == ["alpha", "beta"]
    assert (by_job["alpha"]["answered"], by_job["alpha"]["checkpoint"]["step"]) == (True, 7)
    assert (by_job["alpha"]["uri"], by_job["beta"]["uri"]) == (
        f"s3://{BUCKET}/runs/alpha/",
        f"s3://{BUCKET}/runs/beta/",
    )
    assert by_job["beta"]["answered"] is False
    assert by_job["alpha"]["request"]["id"] != by_job["beta"]["request"]["id"]
    assert list(document["not_asked"]) == ["gamma"]
    assert "disagree" in document["not_asked"]["gamma"]


def test_a_job_is_found_by_its_id_anywhere_in_the_cluster(s3: Any, cluster: dict[str, Any]) -> None:
    def beta_answers(number: int) -> None:
        request = s3.get_object(Bucket=BUCKET, Key=f"runs/beta/{REQUEST_NAME}")
        save_under(s3, "runs/beta/", 12, json.loads(request["Body"].read())["id"])

    job = Job(beta_answers)
    lines: list[str] = []
    argv = ["checkpoint-now", "--cluster", "gpu", "--job", "beta", "--region", REGION, "--wait", "10"]
    status = checkpoint_now.run(
        build_parser().parse_args(argv), now=lambda: job.now, sleep=job.sleep, write=lines.append
    )

    assert status == 0
    assert lines == [f"job beta: answered: step 12 at s3://{BUCKET}/runs/beta/step-000012/ after 5 s"]


def test_an_instance_without_jobs_has_nothing_to_ask_and_an_unknown_job_is_an_error(
    s3: Any, cluster: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ecs = cluster["ecs"]
    for task in ecs.list_tasks(cluster="gpu", containerInstance=cluster["hosts"][1])["taskArns"]:
        ecs.stop_task(cluster="gpu", task=task)

    assert main(["checkpoint-now", "--cluster", "gpu", "--instance", cluster["hosts"][1], "--region", REGION]) == 0
    assert "nothing to ask" in capsys.readouterr().out
    assert main(["checkpoint-now", "--cluster", "gpu", "--job", "nope", "--region", REGION]) == 1
    assert "fault-responder:job-id=nope" in capsys.readouterr().err
    assert request_object(s3) is None
