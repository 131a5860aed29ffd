"""`make local-invoke`, `make local-up` and `make local-down` for real: the run's own Docker daemon and bridge, the
Lambda image, functions invoked in Lambda containers against moto and the stand-ins. (CI's `make local-invoke` invokes
every function of the template with its sample; these check what that cannot: a failed function is named, the
containers reach nothing but the local stack, and a Ctrl-C mid-invoke leaves nothing behind.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from local.engine import docker_environment
from local.image import official_name
from tests.conftest import ROOT
from tests.local.conftest import local_run, make

FILES = ROOT / ".aws-sam" / "local"
INVOCATIONS = (
    "INVOCATIONS=AlertRouterFunction=events/resume/training-fault-xid79.json "
    "ClaimFaultFunction=events/lambda/check-guards.json"
)


def test_each_function_answers_from_a_lambda_container_the_router_reaches_the_stand_ins_and_a_failure_is_named(
    built: None, tmp_path: Path
) -> None:
    # Given two functions with samples, the second given another function's input (a task of the workflow takes any
    # JSON object, so only the function itself can tell)
    report = tmp_path / "report.json"

    # When make local-invoke runs them (after the README's plain sam local invoke of the router)
    with local_run():
        completed = make("local-invoke", INVOCATIONS, f"REPORT={report}")
    output = completed.stdout + completed.stderr

    # Then it exits non-zero, naming the function that failed, and why
    assert completed.returncode != 0, output[-3000:]
    assert "FAILED: ClaimFaultFunction" in output, output[-3000:]
    outcomes = json.loads(report.read_text())
    plain, router, claim = outcomes["invocations"]
    assert outcomes["failed"] == ["ClaimFaultFunction"]
    assert str(claim["failure"]).startswith("ClaimFaultFunction raised"), claim
    # And each invocation was answered by a Lambda container of its own
    assert (plain["how"], router["how"], claim["how"]) == ("sam local invoke", "start-lambda", "start-lambda")
    assert all(outcome["container"] for outcome in (plain, router, claim))
    assert len({plain["container"], router["container"], claim["container"]}) == 3
    # And the router's XID 46 page reached the Slack and the PagerDuty stand-ins from its container
    assert plain["failure"] is None and plain["result"] == {"batchItemFailures": []}
    assert [line.split()[0] for line in plain["requests"]] == ["slack", "pagerduty"], plain["requests"]
    assert "XID 46" in plain["requests"][0] and "opened my-cluster/a1b2c3d4EXAMPLE" in plain["requests"][1]
    assert router["failure"] is None


def test_a_ctrl_c_mid_invoke_leaves_no_container_network_or_daemon_of_the_run_behind(
    built: None, tmp_path: Path
) -> None:
    log = tmp_path / "make.log"
    with local_run(), log.open("w") as output:
        # Given make local-invoke running as a terminal's foreground job
        process = subprocess.Popen(
            ["make", "--no-print-directory", "local-invoke", INVOCATIONS],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # When a function is being invoked in its Lambda container
            container = _first_container(process, timeout=900)
            assert container, log.read_text()[-3000:]
            # And Ctrl-C is pressed: SIGINT to make and everything it started in the terminal's process group
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=180)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    text = log.read_text()

    # Then the run stopped mid-way, saying it was interrupted
    assert process.returncode != 0, text[-3000:]
    assert "interrupted" in text, text[-3000:]
    assert "functions answered correctly" not in text
    # And (local_run checks it) no daemon, container, bridge, firewall rule or mount of the run is left; nor any sam
    sam = [pid for pid in _processes() if ".aws-sam/local/samconfig.toml" in _cmdline(pid)]
    assert not sam, [_cmdline(pid) for pid in sam]


def test_the_containers_reach_moto_and_the_stand_ins_and_no_other_address(built: None) -> None:
    with local_run():
        # Given the local stack up, as README.md starts it
        up = make("local-up")
        try:
            assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
            variables = json.loads((FILES / "env.json").read_text())["AlertRouterFunction"]
            options = tomllib.loads((FILES / "samconfig.toml").read_text())["default"]["local_invoke"]["parameters"]
            image = (options.get("invoke_image") or [official_name("3.13", "x86_64")])[0]
            moto, standins = urlsplit(variables["AWS_ENDPOINT_URL"]), urlsplit(variables["SLACK_API_URL"])
            gateway = str(moto.hostname)
            # And processes of this machine the containers must not reach: on the bridge's address, and on every one
            with _Listening(gateway) as on_bridge, _Listening("0.0.0.0") as everywhere:
                peer = _docker("run", "--detach", "--entrypoint", "python3", image, "-m", "http.server", "8080")
                try:
                    peer_address = _docker("inspect", "--format", "{{.NetworkSettings.IPAddress}}", peer)
                    targets = {
                        "moto": (gateway, moto.port),
                        "stand-ins": (gateway, standins.port),
                        "this machine, another port of the bridge's address": (gateway, on_bridge),
                        "this machine, its own address": (_own_address(), everywhere),
                        "this machine's default gateway": (_default_gateway(), 53),
                        "an address on the internet": ("1.1.1.1", 443),
                        "another container of the bridge": (peer_address, 8080),
                    }
                    # When a container tries to connect to each
                    reached = _probe(image, targets)
                finally:
                    _docker("rm", "--force", peer)
        finally:
            down = make("local-down")
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]

    # Then it reaches moto and the stand-ins, and nothing else
    assert reached == {
        "moto": "connected",
        "stand-ins": "connected",
        "this machine, another port of the bridge's address": "refused",
        "this machine, its own address": "refused",
        "this machine's default gateway": "unreachable",
        "an address on the internet": "unreachable",
        "another container of the bridge": "unreachable",
    }


_PROBE = """
import json, socket, sys
reached = {}
for name, (host, port) in json.loads(sys.argv[1]).items():
    with socket.socket() as probe:
        probe.settimeout(3)
        try:
            probe.connect((host, port))
            reached[name] = "connected"
        except ConnectionRefusedError:
            reached[name] = "refused"
        except OSError:
            reached[name] = "unreachable"
print(json.dumps(reached))
"""


def _probe(image: str, targets: dict[str, tuple[str, Any]]) -> dict[str, str]:
    output = _docker("run", "--rm", "--entrypoint", "python3", image, "-c", _PROBE, json.dumps(targets), timeout=120)
    return dict(json.loads(output.splitlines()[-1]))


class _Listening:
    """A TCP listener of this process on `host`, a free port; yields the port."""

    def __init__(self, host: str) -> None:
        self.socket = socket.socket()
        self.socket.bind((host, 0))
        self.socket.listen()

    def __enter__(self) -> int:
        return int(self.socket.getsockname()[1])

    def __exit__(self, *exc_info: object) -> None:
        self.socket.close()


def _docker(*arguments: str, timeout: float = 120) -> str:
    completed = subprocess.run(
        ["docker", *arguments],
        env={**os.environ, **docker_environment()},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip()


def _first_container(process: subprocess.Popen[bytes], timeout: float) -> str:
    """The id of the first container the run's daemon runs, once there is one ("" if the run ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        listed = subprocess.run(
            ["docker", "ps", "--quiet"],
            env={**os.environ, **docker_environment()},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if listed.returncode == 0 and listed.stdout.strip():
            return listed.stdout.split()[0]
        time.sleep(0.2)
    return ""


def _route() -> list[str]:
    return subprocess.run(
        ["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True, check=True
    ).stdout.split()


def _own_address() -> str:
    words = _route()
    return words[words.index("src") + 1]


def _default_gateway() -> str:
    words = _route()
    return words[words.index("via") + 1] if "via" in words else "192.0.2.1"


def _processes() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ")
    except OSError:
        return ""
