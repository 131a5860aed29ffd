"""`python -m fault_responder.cli silence add|list|expire`: in process against moto (by table and by stack), and
once as a real subprocess against a moto server on loopback; exit statuses and messages for every kind of mistake."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from fault_responder.adapters.deployed_stack import QUICKSTART_NESTED_STACK, responder_stack, stack_resource
from fault_responder.cli.main import main
from tests.conftest import ROOT
from tests.integration.tables import create_incidents_table

TABLE = "gpu-fault-responder-IncidentsTable-TEST"
STACK = "gpu-fault-responder-dev"
TARGET = ["--table", TABLE, "--region", "us-east-1"]
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("USER", "alice")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, TABLE)
        yield client


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def add(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    status, out, err = cli(
        capsys, "silence", "add", "--match", "cluster=gpu-training", "--duration", "2h", "--comment", "rollout",
        *extra, *TARGET,
    )  # fmt: skip
    assert (status, err) == (0, "")
    return out.strip()


def listed(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    status, out, _ = cli(capsys, "silence", "list", "--json", *extra, *TARGET)
    assert status == 0
    result: list[dict[str, Any]] = json.loads(out)
    return result


# --- add, list, expire ----------------------------------------------------------------------------------


def test_add_prints_the_new_silences_id_and_list_shows_it(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(UTC)
    silence_id = add(capsys, "--match", 'severity=~"critical|error"')

    [shown] = listed(capsys)

    assert len(silence_id) == 16 and shown["id"] == silence_id
    assert shown["matchers"] == ["cluster=gpu-training", 'severity=~"critical|error"']
    assert (shown["state"], shown["created_by"], shown["comment"]) == ("active", "alice", "rollout")
    ends = datetime.fromisoformat(shown["ends_at"])
    assert before + timedelta(hours=2) <= ends <= datetime.now(UTC) + timedelta(hours=2)


def test_list_prints_a_table_with_every_column(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    silence_id = add(capsys, "--author", "bob")

    status, out, _ = cli(capsys, "silence", "list", *TARGET)

    header, row = out.splitlines()
    assert status == 0
    assert header.split() == ["ID", "STATE", "MATCHERS", "STARTS", "ENDS", "AUTHOR", "COMMENT"]
    assert row.startswith(f"{silence_id}  active  cluster=gpu-training")
    assert row.split()[-2:] == ["bob", "rollout"]
    assert header.index("STATE") == row.index("active")


def test_a_silence_can_start_later_and_end_at_a_given_time(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    starts = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    ends = starts + timedelta(hours=4)

    add(capsys, "--starts", starts.isoformat(), "--author", "carol")
    status, _, _ = cli(
        capsys, "silence", "add", "--match", "xid=79", "--starts", starts.isoformat(), "--ends",
        ends.strftime("%Y-%m-%dT%H:%M:%S+00:00"), "--comment", "window", *TARGET,
    )  # fmt: skip

    shown = {silence["comment"]: silence for silence in listed(capsys)}
    assert status == 0
    assert shown["window"]["state"] == "pending"
    assert datetime.fromisoformat(shown["window"]["ends_at"]) == ends
    assert datetime.fromisoformat(shown["rollout"]["ends_at"]) == starts + timedelta(hours=2)


def test_expire_ends_a_silence_and_list_all_still_shows_it(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    silence_id = add(capsys)

    status, out, _ = cli(capsys, "silence", "expire", silence_id, *TARGET)

    assert status == 0 and out.startswith(f"expired {silence_id} at ")
    assert listed(capsys) == []
    [shown] = listed(capsys, "--all")
    assert (shown["id"], shown["state"]) == (silence_id, "expired")
    assert cli(capsys, "silence", "list", *TARGET)[1].startswith("No pending or active silences")


def test_expiring_an_unknown_or_expired_silence_exits_1_saying_why(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    silence_id = add(capsys)
    assert cli(capsys, "silence", "expire", silence_id, *TARGET)[0] == 0

    again = cli(capsys, "silence", "expire", silence_id, *TARGET)
    unknown = cli(capsys, "silence", "expire", "0123456789abcdef", *TARGET)

    assert again[0] == 1 and f"silence {silence_id} already expired at" in again[2]
    assert unknown[0] == 1 and "no silence with id 0123456789abcdef" in unknown[2]


_INCIDENTS_TABLE_RESOURCE = {
    "Type": "AWS::DynamoDB::Table",
    "Properties": {
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    },
}


def test_the_stack_is_found_by_its_incidents_table(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a CloudFormation stack whose IncidentsTable moto names for it
    template = {"Resources": {"IncidentsTable": _INCIDENTS_TABLE_RESOURCE}}
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName=STACK, TemplateBody=json.dumps(template)
    )
    stack = ["--stack", STACK, "--region", "us-east-1"]

    # When a silence is added through the stack
    status, out, _ = cli(
        capsys, "silence", "add", "--match", "xid=79", "--duration", "1h", "--comment", "by stack", *stack
    )

    # Then it is in the stack's table, and listed through the stack
    [table] = [name for name in aws.list_tables()["TableNames"] if name != TABLE]
    assert status == 0 and table.startswith(STACK)
    items = aws.scan(TableName=table)["Items"]
    assert [item["sk"]["S"] for item in items] == [out.strip()]
    assert json.loads(cli(capsys, "silence", "list", "--json", *stack)[1])[0]["comment"] == "by stack"


def test_a_quick_start_stack_is_followed_into_its_nested_stack(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a stack deployed from quickstart.yaml: template.yaml's resources and parameters are in its nested stack
    responder = {
        "Parameters": {"RoutingFile": {"Type": "String", "Default": "default.yaml"}},
        "Resources": {"IncidentsTable": _INCIDENTS_TABLE_RESOURCE},
    }
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="quickstart-templates")
    s3.put_object(Bucket="quickstart-templates", Key="responder.json", Body=json.dumps(responder))
    quickstart = {
        "Resources": {
            QUICKSTART_NESTED_STACK: {
                "Type": "AWS::CloudFormation::Stack",
                "Properties": {
                    "TemplateURL": "https://quickstart-templates.s3.amazonaws.com/responder.json",
                    "Parameters": {"RoutingFile": "quiet.yaml"},
                },
            }
        }
    }
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    cloudformation.create_stack(StackName="gpu-fault-responder-quickstart", TemplateBody=json.dumps(quickstart))
    stack = ["--stack", "gpu-fault-responder-quickstart", "--region", "us-east-1"]

    # When a silence is added and listed through the quick start's stack name
    status, out, err = cli(
        capsys, "silence", "add", "--match", "xid=79", "--duration", "1h", "--comment", "quick start", *stack
    )

    # Then it is in the nested stack's table, the nested stack's parameters are the stack's, and a stack without a
    # nested responder (or no stack at all) is named as it is
    nested = responder_stack(cloudformation, "gpu-fault-responder-quickstart")
    assert nested != "gpu-fault-responder-quickstart"
    [table] = [name for name in aws.list_tables()["TableNames"] if name != TABLE]
    assert (status, err) == (0, "") and table == stack_resource(cloudformation, nested, "IncidentsTable")
    assert [item["sk"]["S"] for item in aws.scan(TableName=table)["Items"]] == [out.strip()]
    assert json.loads(cli(capsys, "silence", "list", "--json", *stack)[1])[0]["comment"] == "quick start"
    [parameters] = [s["Parameters"] for s in cloudformation.describe_stacks(StackName=nested)["Stacks"]]
    assert parameters == [{"ParameterKey": "RoutingFile", "ParameterValue": "quiet.yaml"}]
    assert responder_stack(cloudformation, "nope") == "nope"


def test_an_unknown_stack_or_table_exits_1_naming_it(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    no_stack = cli(capsys, "silence", "list", "--stack", "nope", "--region", "us-east-1")
    no_table = cli(capsys, "silence", "list", "--table", "nope", "--region", "us-east-1")

    assert no_stack[0] == 1 and "cannot find the IncidentsTable of stack 'nope'" in no_stack[2]
    assert no_table[0] == 1 and "AWS: " in no_table[2] and "ResourceNotFoundException" in no_table[2]


# --- Mistakes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--match", "team=ml", "--duration", "1h", "--comment", "c"], "unknown label 'team'"),
        (["--match", "cluster", "--duration", "1h", "--comment", "c"], "is not a matcher"),
        (["--match", 'xid=""', "--duration", "1h", "--comment", "c"], "must not match the empty label"),
        (["--match", "xid=79", "--duration", "2x", "--comment", "c"], "'2x' is not a duration"),
        (["--match", "xid=79", "--duration", "0h", "--comment", "c"], "longer than nothing"),
        (["--match", "xid=79", "--ends", "2026-11-07T02:00", "--comment", "c"], "has no UTC offset"),
        (["--match", "xid=79", "--ends", "tomorrow", "--comment", "c"], "not an ISO 8601 time"),
        (["--match", "xid=79", "--ends", "2020-01-01T00:00:00Z", "--comment", "c"], "not in the future"),
        (["--match", "xid=79", "--duration", "1h", "--ends", "2099-01-01T00:00:00Z", "--comment", "c"], "not allowed"),
        (["--match", "xid=79", "--comment", "c"], "one of the arguments --duration --ends is required"),
        (["--match", "xid=79", "--duration", "1h"], "--comment"),
        (["--duration", "1h", "--comment", "c"], "--match"),
        (["--match", "xid=79", "--duration", "1h", "--comment", " "], "comment is required"),
        (["--match", "xid=79", "--duration", "1h", "--comment", "x" * 501], "longer than 500"),
    ],
)
def test_a_bad_silence_exits_2_with_the_reason_and_adds_nothing(
    aws: Any, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    status, out, err = cli(capsys, "silence", "add", *argv, *TARGET)

    assert (status, out) == (2, "")
    assert says in err
    assert aws.scan(TableName=TABLE)["Items"] == []


def test_without_a_target_or_with_two_it_exits_2(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "silence", "list")[0] == 2
    both = cli(capsys, "silence", "list", "--table", TABLE, "--stack", STACK)
    assert both[0] == 2 and "not allowed with argument" in both[2]


def test_a_malformed_id_exits_2(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(capsys, "silence", "expire", "../etc", *TARGET)

    assert status == 2 and "is not a silence id" in err


def _no_account() -> str:
    raise OSError("No username set in the environment")  # what getpass.getuser() raises from 3.13 on


def _no_passwd_entry() -> str:
    raise KeyError("getpwuid(): uid not found: 1234")  # what it raised before 3.13


@pytest.mark.parametrize(
    ("user", "logname", "getuser", "author"),
    [
        ("alice", "bob", lambda: "carol", "alice"),
        (None, "bob", lambda: "carol", "bob"),
        ("", "bob", lambda: "carol", "bob"),
        (None, None, lambda: "carol", "carol"),
    ],
    ids=["user", "logname-without-user", "logname-with-empty-user", "os-account-without-either"],
)
def test_the_author_defaults_to_user_then_logname_then_the_os_account(
    aws: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    user: str | None,
    logname: str | None,
    getuser: Callable[[], str],
    author: str,
) -> None:
    for name, value in (("USER", user), ("LOGNAME", logname)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr("getpass.getuser", getuser)

    add(capsys)

    assert [shown["created_by"] for shown in listed(capsys)] == [author]


@pytest.mark.parametrize("getuser", [_no_account, _no_passwd_entry, lambda: ""], ids=["oserror", "keyerror", "empty"])
def test_without_user_logname_or_an_os_account_the_author_is_required(
    aws: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, getuser: Callable[[], str]
) -> None:
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    monkeypatch.setattr("getpass.getuser", getuser)

    status, _, err = cli(capsys, "silence", "add", "--match", "xid=79", "--duration", "1h", "--comment", "c", *TARGET)

    assert status == 2 and "give --author NAME" in err
    assert listed(capsys) == []


def test_without_a_region_it_exits_2_saying_how_to_give_one(
    aws: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)

    status, _, err = cli(capsys, "silence", "list", "--table", TABLE)

    assert status == 2 and "give --region" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "silence", "add", "--help")

    assert status == 0 and "--match MATCHER" in out


# --- As a program, against a moto server ----------------------------------------------------------------


@pytest.fixture
def moto_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_the_program_adds_lists_and_expires_against_a_moto_server(moto_server: str) -> None:
    # Given an incidents table in a moto server on loopback
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        **FAKE_CREDENTIALS,
        "PYTHONPATH": str(ROOT / "layers" / "common"),
        "USER": "dana",
    }
    dynamodb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_server, **_lowercase_credentials())
    create_incidents_table(dynamodb, TABLE)
    target = ["--table", TABLE, "--region", "us-east-1", "--endpoint-url", moto_server]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fault_responder.cli", *argv, *target],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    # When the program adds a silence, lists it, expires it, and expires it again
    added = run("silence", "add", "--match", "cluster=gpu-training", "--duration", "30m", "--comment", "drill")
    silence_id = added.stdout.strip()
    shown = run("silence", "list", "--json")
    expired = run("silence", "expire", silence_id)
    again = run("silence", "expire", silence_id)

    # Then each exits as documented, and the table holds the expired silence
    assert added.returncode == 0, added.stderr
    assert shown.returncode == 0 and json.loads(shown.stdout)[0]["created_by"] == "dana"
    assert expired.returncode == 0 and expired.stdout.startswith(f"expired {silence_id}")
    assert again.returncode == 1 and "already expired" in again.stderr
    [item] = dynamodb.scan(TableName=TABLE)["Items"]
    assert item["sk"]["S"] == silence_id and item["ends_at"] != item["starts_at"]


def _lowercase_credentials() -> dict[str, str]:
    return {name.lower(): value for name, value in FAKE_CREDENTIALS.items()}
