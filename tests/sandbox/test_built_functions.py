"""The `make build-host` output imports as it will on Lambda: from its own bytecode, with the runtime's boto3,
and with the X-Ray SDK only when tracing is on.

Each check imports a built handler module in a fresh interpreter of the function's runtime (`python -S`, as
`python -m sandbox invoke` runs it), with PYTHONDONTWRITEBYTECODE=1: Lambda's code directories are read-only, so
whatever bytecode the build does not ship is compiled on every cold start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.invoke import DEFAULT_BOTO3_DIR, PINNED_REQUIREMENTS, load_built_template
from sandbox.lambda_runtime import ensure_runtime_boto3, find_runtime_interpreter, pinned_boto3
from tests.conftest import checkout_lock
from tests.sandbox.conftest import REPO_ROOT

pytestmark = pytest.mark.build

BUILD_DIR = REPO_ROOT / ".aws-sam" / "build-host"
FUNCTIONS = ("AlertRouterFunction", "ClaimFaultFunction")
# What `sam deploy` gives every file of the zip it uploads (zipfile's default date), and so Lambda's copy.
ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z
# Printed by `python -v` for each module: where its code object came from (a .pyc, or a .py it compiled).
CODE_OBJECT = "# code object from "


@dataclass(frozen=True)
class Runtime:
    interpreter: Path
    boto3_dir: Path


@pytest.fixture(scope="module", autouse=True)
def _checkout() -> Iterator[None]:
    # The build is this module's from its make to its last test (the suite's other workers wait for it).
    with checkout_lock():
        yield


@pytest.fixture(scope="module")
def runtime(_checkout: None) -> Runtime:
    # Given this machine's build, made the way `make test` makes it
    completed = subprocess.run(
        ["make", "build-host"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    method = next(
        str(resource["Metadata"]["BuildMethod"])
        for resource in load_built_template(BUILD_DIR).resources.values()
        if str((resource.get("Metadata") or {}).get("BuildMethod", "")).startswith("python")
    )
    interpreter = find_runtime_interpreter(method)
    boto3_dir = ensure_runtime_boto3(
        REPO_ROOT / DEFAULT_BOTO3_DIR, pinned_boto3(PINNED_REQUIREMENTS), interpreter, method.removeprefix("python")
    )
    return Runtime(interpreter, boto3_dir)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the build with every file dated as the deployment zip dates it."""
    copy = tmp_path_factory.mktemp("deployed") / "build"
    shutil.copytree(BUILD_DIR, copy, symlinks=True)
    for path in [copy, *copy.rglob("*")]:
        os.utime(path, (ZIP_EPOCH, ZIP_EPOCH), follow_symlinks=False)
    yield copy


def import_handler(
    runtime: Runtime, code: Path, layers: list[Path], *, tracing: bool, script: str = "import app", flags: tuple = ()
) -> subprocess.CompletedProcess[str]:
    environment = {
        "PYTHONPATH": os.pathsep.join(str(path) for path in (code, *layers, runtime.boto3_dir)),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LAMBDA_TASK_ROOT": str(code),
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "gpu-fault-responder",
        # What the template sets from its Tracing parameter.
        "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    }
    return subprocess.run(
        [str(runtime.interpreter), "-S", *flags, "-c", script],
        cwd=code,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_runtime_loads_the_shipped_bytecode_and_compiles_nothing(
    function: str, runtime: Runtime, deployed: Path
) -> None:
    # Given the function and its layer as Lambda gets them (files dated 1980 by the zip)
    code, layer = deployed / function, deployed / "CommonLayer" / "python"

    # When its handler module is imported, cold, with bytecode writing off
    completed = import_handler(runtime, code, [layer], tracing=False, flags=("-v",))

    # Then every module of the build came from a .pyc, none was compiled from its source
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = [line.removeprefix(CODE_OBJECT).strip("'") for line in completed.stderr.splitlines()]
    ours = [path for path in loaded if path.startswith(str(deployed))]
    compiled = [path for path in ours if path.endswith(".py")]
    assert not compiled, f"compiled at import: {compiled[:10]}"
    # (and the check above is not vacuous: the handler loaded well over a hundred of the build's modules)
    assert len([path for path in ours if path.endswith(".pyc")]) > 100
    assert any(path.startswith(f"{code}/__pycache__/app.") for path in ours)


def test_without_tracing_nothing_imports_the_xray_sdk_and_botocore_is_the_runtimes(runtime: Runtime) -> None:
    # Given the router as built, its layer without boto3 or botocore
    code, layer = BUILD_DIR / "AlertRouterFunction", BUILD_DIR / "CommonLayer" / "python"
    assert not any((layer / package).exists() for package in ("boto3", "botocore", "aws_xray_sdk"))

    # When it is imported with tracing off (the template's default)
    script = (
        "import sys, app, botocore; "
        "print(any(name.split('.')[0] == 'aws_xray_sdk' for name in sys.modules)); print(botocore.__file__)"
    )
    completed = import_handler(runtime, code, [layer], tracing=False, script=script)

    # Then the X-Ray SDK was never imported, and botocore is the runtime's
    assert completed.returncode == 0, completed.stderr[-3000:]
    xray_imported, botocore_file = completed.stdout.split()
    assert xray_imported == "False"
    assert botocore_file.startswith(str(runtime.boto3_dir))


def test_with_tracing_the_tracing_layer_instruments_the_runtimes_botocore(runtime: Runtime) -> None:
    # Given the router with both layers, as a stack deployed with Tracing=Active has it
    code = BUILD_DIR / "AlertRouterFunction"
    layers = [BUILD_DIR / "CommonLayer" / "python", BUILD_DIR / "TracingLayer" / "python"]
    assert not (layers[1] / "botocore").exists()

    # When it is imported with tracing on
    script = "import app, botocore; print(type(app.tracer.provider).__module__); print(botocore.__file__)"
    completed = import_handler(runtime, code, layers, tracing=True, script=script)

    # Then Powertools traces through the X-Ray SDK, which found the runtime's botocore
    assert completed.returncode == 0, completed.stderr[-3000:]
    provider_module, botocore_file = completed.stdout.split()
    assert provider_module.startswith("aws_xray_sdk.")
    assert botocore_file.startswith(str(runtime.boto3_dir))
