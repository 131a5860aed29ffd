"""What `make local-invoke` gives `sam local`, checked without Docker: the functions it invokes (the template's), the
variables each container gets (only those the template declares, pointing at the local stack), the config file the
README's commands read, and the template's endpoint parameter, which deploys nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from local.image import LambdaImage
from local.invoke import SAM_LOCAL_INVOKE, SAM_LOCAL_START_LAMBDA
from local.stack import ENDPOINT_PARAMETER, LocalStack, functions_of
from sandbox.template import StackIdentity, load_template, resolve_parameters
from tests.conftest import ROOT
from tests.sandbox.conftest import FakeAttributes

TEMPLATE = load_template(ROOT / "template.yaml")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
TRAINING = {"TrainingCapacityProviders": "gpu-training"}


def smoke_invocations() -> list[str]:
    """The Makefile's SMOKE_INVOCATIONS, which make local-invoke passes as the samples."""
    block = re.search(r"^SMOKE_INVOCATIONS := \\\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert block is not None
    return block.group(1).replace("\\", " ").split()


class LoopbackNetwork:
    """Stands in for the engine's bridge: this machine's loopback, and the ports the firewall would be opened to."""

    gateway = "127.0.0.1"
    subnet = "127.0.0.0/8"

    def __init__(self) -> None:
        self.allowed: list[int] = []

    def allow(self, port: int) -> None:
        self.allowed.append(port)


def _declared(function: str) -> set[str]:
    """The variables the template declares for a function, its Globals' included."""
    declared = set(TEMPLATE.body["Globals"]["Function"]["Environment"]["Variables"])
    return declared | set(TEMPLATE.resources[function]["Properties"].get("Environment", {}).get("Variables", {}))


def test_the_functions_are_the_templates_and_each_has_a_sample() -> None:
    # Given the functions the template creates with the samples' parameters, and the samples make local-invoke passes
    functions = functions_of(TEMPLATE, TRAINING)
    named = [item.partition("=")[0] for item in smoke_invocations()]

    # Then they are the same, each once; and without training auto-resume, its functions are not created
    every = [name for name, resource in TEMPLATE.resources.items() if resource["Type"] == "AWS::Serverless::Function"]
    assert sorted(named) == sorted(functions) == sorted(every)
    assert len(named) == len(set(named))
    alerting = functions_of(TEMPLATE, {})
    assert "AlertRouterFunction" in alerting
    assert "ClaimFaultFunction" not in alerting
    assert set(alerting) < set(functions)


def test_a_function_without_a_sample_is_named_before_anything_starts(tmp_path: Path) -> None:
    # Given the samples without ReconcileFunction's, and a build directory holding the template
    build = tmp_path / "build"
    build.mkdir()
    (build / "template.yaml").write_text((ROOT / "template.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    samples = [item for item in smoke_invocations() if not item.startswith("ReconcileFunction=")]

    # When make local-invoke's command is run with them (a Docker daemon would be the next thing it starts)
    completed = subprocess.run(
        [sys.executable, "-m", "local", "invoke", "--every-function", *samples, "--build-dir", str(build),
         "--parameter-overrides", "TrainingCapacityProviders=gpu-training"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    # Then it refuses at once, naming the function
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "no sample for ReconcileFunction" in completed.stderr
    assert "Docker daemon" not in completed.stdout


def test_the_endpoint_parameter_deploys_no_variable_and_points_every_function_at_a_local_aws() -> None:
    # Given the template resolved as a deploy resolves it, and with the parameter a local run sets
    def environments(overrides: dict[str, str]) -> dict[str, dict[str, Any]]:
        from sandbox.template import Resolver  # noqa: PLC0415

        resolver = Resolver(TEMPLATE, StackIdentity("test"), resolve_parameters(TEMPLATE, overrides), FakeAttributes())
        return {
            function: resolver.properties(function).get("Environment", {}).get("Variables", {})
            for function in functions_of(TEMPLATE, overrides)
        }

    deployed = environments(TRAINING)
    local = environments({**TRAINING, ENDPOINT_PARAMETER: "http://10.213.0.1:4566"})

    # Then a deploy has no AWS_ENDPOINT_URL anywhere, and the local stack's endpoint reaches every function
    assert all("AWS_ENDPOINT_URL" not in variables for variables in deployed.values())
    assert {variables["AWS_ENDPOINT_URL"] for variables in local.values()} == {"http://10.213.0.1:4566"}
    assert len(local) == 17


@pytest.mark.parametrize("value", ["https://example.com", "http://10.0.0.1", "http://a b:1", "10.0.0.1:4566"])
def test_the_endpoint_parameter_takes_only_a_local_http_endpoint(value: str) -> None:
    from sandbox.template import TemplateError  # noqa: PLC0415

    with pytest.raises(TemplateError, match="AllowedPattern"):
        resolve_parameters(TEMPLATE, {ENDPOINT_PARAMETER: value})


@pytest.mark.sandbox
def test_each_container_gets_the_variables_its_function_declares_pointing_at_the_local_stack(tmp_path: Path) -> None:
    # Given the local stack on loopback, with the samples' world seeded
    network = LoopbackNetwork()
    stack = LocalStack(ROOT, ROOT / "events" / "world.yaml", TRAINING, network, files=tmp_path / "local")
    samples = [item.partition("=") for item in smoke_invocations()]
    with stack:
        plain = stack.plan("AlertRouterFunction", Path("events/sqs/alert-router-xid46.json"))
        planned = [stack.plan(function, Path(sample)) for function, _, sample in samples]
        stack.write_files(LambdaImage("gpu-fault-responder/lambda-python:test", False, ""), [plain, *planned], 3001)
        moto, standins = stack.sandbox.moto_endpoint, stack.sandbox.standins.base_url
        table = stack.sandbox.stack.functions["AlertRouterFunction"].environment["INCIDENTS_TABLE"]
        claim = json.loads((tmp_path / "local" / "events" / "ClaimFaultFunction.json").read_text())
        seeded_instances = stack.sandbox.aws.client("ecs").list_container_instances(cluster="training")
    environment = json.loads((tmp_path / "local" / "env.json").read_text())
    config = tomllib.loads((tmp_path / "local" / "samconfig.toml").read_text())

    # Then the firewall is opened to moto's and the stand-ins' ports only
    assert sorted(network.allowed) == sorted(int(urlsplit(url).port or 0) for url in (moto, standins))
    # And each function's section sets only what it declares (SAM ignores the rest), pointing at the local stack
    assert set(environment) == set(functions_of(TEMPLATE, TRAINING))
    for function, variables in environment.items():
        assert set(variables) <= _declared(function), function
        assert variables["AWS_ENDPOINT_URL"] == moto
        assert variables["SLACK_API_URL"].startswith(standins)
        assert variables["PAGERDUTY_EVENTS_URL"].startswith(standins)
        assert variables["INCIDENTS_TABLE"] == table
        assert variables["DASHBOARD_URL"] == ""
    # And both commands read the same stack: the build, its parameters and moto, the variables, the image
    for command in ("local_invoke", "local_start_lambda"):
        options = config["default"][command]["parameters"]
        assert options["template_file"] == str(ROOT / "template.yaml")
        assert f"{ENDPOINT_PARAMETER}={moto}" in options["parameter_overrides"].split()
        assert "TrainingCapacityProviders=gpu-training" in options["parameter_overrides"].split()
        assert options["env_vars"] == str((tmp_path / "local" / "env.json").resolve())
        assert options["invoke_image"] == ["gpu-fault-responder/lambda-python:test"]
        assert options["skip_pull_image"] is True
        assert options["region"] == "us-west-2"
    assert config["default"]["local_start_lambda"]["parameters"]["port"] == 3001
    assert config["default"]["local_start_lambda"]["parameters"]["warm_containers"] == "LAZY"
    # And a sample the function takes as it is is invoked from its own file, as README.md shows it; another as the
    # function receives it, about the seeded world (the instance moto named when it was seeded)
    assert plain.event_file == Path("events/sqs/alert-router-xid46.json")
    assert planned[0].event_file == tmp_path / "local" / "events" / "AlertRouterFunction.json"
    assert json.loads(planned[0].event_file.read_text())["Records"][0]["eventSource"] == "aws:sqs"
    assert claim["event"]["detail"]["containerInstanceArn"] in seeded_instances["containerInstanceArns"]
    assert "7c2e9a4b1d3f4e6a8b0c2d4e6f8a0b1c" not in json.dumps(claim)


def test_the_commands_are_those_readme_shows() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())

    assert SAM_LOCAL_INVOKE.format(function="AlertRouterFunction", event="events/sqs/alert-router-xid46.json") in readme
    assert SAM_LOCAL_START_LAMBDA in readme
    assert "AlertRouterFunction=events/sqs/alert-router-xid46.json" in MAKEFILE
