"""Run a template function's handler the way Lambda would.

Two ways, one contract (`Invocation`):
- `InProcessFunction` (replay): the handler is imported into this process with the function's code
  and layers on sys.path and its environment set, so its boto3 calls reach moto and its HTTP calls
  reach the stand-ins. It stays loaded between invocations, like a warm execution environment.
- `run_built_function` (invoke): the `sam build` output runs in a clean interpreter of the function's
  runtime (`python -S`, PYTHONPATH = built function + layers + a boto3 like Lambda's), so a dependency
  missing from requirements.txt fails here as it would on Lambda.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import io
import json
import logging
import os
import re
import shutil
import subprocess  # nosec B404  # runs pip and the built function: fixed argument lists, no shell
import sys
import tempfile
import time
import uuid
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from sandbox import lambda_bootstrap
from sandbox.errors import SandboxError
from sandbox.stack import FunctionSpec


@dataclass(frozen=True)
class Invocation:
    """One handler call: its result or Lambda-shaped error, its log lines and the failures it logged."""

    function: str
    request_id: str
    result: Any
    error: Mapping[str, Any] | None
    logs: list[str]
    errors: list[dict[str, Any]]
    duration_ms: float
    ended_at: float = 0.0
    """Epoch seconds when the handler returned (to tell what happened within the invocation)."""


# --- Environment -----------------------------------------------------------------------------------


class _ConsistentEnviron(os._Environ[str]):
    """os.environ, whose reads of the whole environment (items, values, copy, repr, |) take one snapshot.

    The sandbox runs many functions in one process: each invocation sets its function's variables in os.environ and
    removes them afterwards (`patched_environ`), while other threads go on reading it. botocore reads the proxy
    settings by iterating `os.environ.items()` whenever it creates a client, which moto's Step Functions interpreter
    does in an execution's thread for every Lambda task. os._Environ iterates a snapshot of the names but then looks
    each one up: a name another thread removes in between raises KeyError (which moto's interpreter turns into a
    States.Runtime failure of the task), and `repr` can fail with "dictionary changed size during iteration". A
    Lambda execution environment has an environment of its own; here the shared one must at least read consistently.
    """

    def _snapshot(self) -> dict[str, str]:
        data: dict[str, str] = self._data.copy()  # type: ignore[attr-defined]  # (one step under the GIL)
        return {self.decodekey(name): self.decodevalue(value) for name, value in data.items()}

    def copy(self) -> dict[str, str]:
        return self._snapshot()

    def items(self) -> ItemsView[str, str]:
        return self._snapshot().items()

    def values(self) -> ValuesView[str]:
        return self._snapshot().values()

    def __repr__(self) -> str:
        return f"environ({self._snapshot()!r})"

    def __or__(self, other: Mapping[Any, Any]) -> dict[Any, Any]:
        return {**self._snapshot(), **other}

    def __ror__(self, other: Mapping[Any, Any]) -> dict[Any, Any]:
        return {**other, **self._snapshot()}


def _consistent_environ() -> None:
    """Make os.environ's whole-environment reads consistent while other threads change it (`_ConsistentEnviron`):
    for the rest of the process, which sees the same variables as before."""
    if type(os.environ) is os._Environ:
        os.environ.__class__ = _ConsistentEnviron


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) variables in os.environ; restore the whole environment afterwards.

    Other threads may read os.environ meanwhile (moto's interpreter, the stand-ins): see `_ConsistentEnviron`.
    """
    _consistent_environ()
    saved = os.environ.copy()
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        # Key by key, never clearing: moto's and the stand-ins' threads read the environment too.
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def lambda_environment(spec: FunctionSpec, region: str, sandbox_values: Mapping[str, str]) -> dict[str, str]:
    """The function's variables, then what Lambda reserves, then the sandbox's endpoints (which win)."""
    reserved = {
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_size_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": f"sandbox/[$LATEST]{uuid.uuid4().hex}",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
        "LAMBDA_TASK_ROOT": str(spec.code_dir),
        "_HANDLER": spec.handler,
        "TZ": ":UTC",
        # What `sam local invoke` sets; Powertools Tracer then stays off instead of looking for X-Ray.
        "AWS_SAM_LOCAL": "true",
    }
    return {**spec.environment, **reserved, **sandbox_values}


# --- Capturing what the handler writes and logs -----------------------------------------------------


class _FunctionOutput(io.TextIOBase):
    """Stands in for stdout/stderr while handler code runs, collecting the lines it writes.

    One object for the whole process: a logging handler created at import (Powertools binds
    sys.stdout then) keeps writing to it, and every invocation takes the lines written during it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._partial = ""
        self.lines: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *complete, self._partial = (self._partial + text).split("\n")
        self.lines.extend(complete)
        return len(text)

    def take(self) -> list[str]:
        lines = self.lines + ([self._partial] if self._partial else [])
        self.lines, self._partial = [], ""
        return lines


FUNCTION_OUTPUT = _FunctionOutput()


def _error_fields(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """A failure the handler logged: `event_id` and `reason` extra keys on an ERROR record."""
    if "event_id" not in fields and "reason" not in fields:
        return None
    return {"event_id": fields.get("event_id"), "reason": fields.get("reason")}


class _ErrorRecords(logging.Handler):
    """Collects ERROR records carrying `event_id`/`reason`, whether passed as extras or appended keys."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(level=logging.ERROR)
        self._logger = logger
        self.errors: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = _error_fields(self._structured(record))
        if found is not None:
            self.errors.append(found)

    def _structured(self, record: logging.LogRecord) -> Mapping[str, Any]:
        # Powertools' formatter also renders keys added with append_keys(), which a record lacks.
        for handler in self._logger.handlers:
            if handler is not self and handler.formatter is not None:
                try:
                    rendered = json.loads(handler.formatter.format(record))
                except (TypeError, ValueError):
                    continue
                if isinstance(rendered, dict):
                    return {**record.__dict__, **rendered}
        return record.__dict__


# --- In process ------------------------------------------------------------------------------------

# The layer package's hook that drops cached clients and settings, so each sandbox run builds them
# again against its own moto server and stand-ins.
_RESET_HOOK_MODULE = "fault_responder.wiring.alert_router"


class InProcessFunction:
    """A function's handler loaded into this process; use as a context manager, then `invoke`."""

    def __init__(self, spec: FunctionSpec, environment: Mapping[str, str]) -> None:
        if not spec.runtime.startswith("python"):
            raise SandboxError(f"{spec.logical_id}: runtime {spec.runtime!r} cannot run in process")
        self.spec = spec
        self.environment = dict(environment)
        self.init_logs: list[str] = []
        self._paths = [str(spec.code_dir), *map(str, spec.layer_dirs)]
        self._handler: lambda_bootstrap.Handler | None = None
        self._logger = logging.getLogger(self.environment.get("POWERTOOLS_SERVICE_NAME"))
        self._errors = _ErrorRecords(self._logger)

    def __enter__(self) -> InProcessFunction:
        # Lambda's import path: the function's code first, then its layers.
        sys.path[:0] = self._paths
        try:
            with self._running():
                _reset_cached_clients()
                self._handler = _load_handler_isolated(self.spec)
        except lambda_bootstrap.HandlerLoadError as exc:
            self._remove_paths()
            raise SandboxError(f"{self.spec.logical_id}: {exc.error['errorType']}: {exc}") from exc
        except BaseException:
            self._remove_paths()
            raise
        finally:
            self.init_logs = FUNCTION_OUTPUT.take()
        self._logger.addHandler(self._errors)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._logger.removeHandler(self._errors)
        self._remove_paths()

    def _remove_paths(self) -> None:
        for path in self._paths:
            if path in sys.path:
                sys.path.remove(path)

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with (
            patched_environ(self.environment),
            contextlib.redirect_stdout(FUNCTION_OUTPUT),
            contextlib.redirect_stderr(FUNCTION_OUTPUT),
        ):
            yield

    def invoke(self, event: Any) -> Invocation:
        if self._handler is None:
            raise RuntimeError("enter the InProcessFunction before invoking it")
        request_id = str(uuid.uuid4())
        logged_before = len(self._errors.errors)
        started = time.monotonic()
        with self._running():
            context = lambda_bootstrap.context_from_environment(request_id, self.spec.arn, self.spec.timeout_seconds)
            # Lambda hands the handler a freshly decoded copy of the event, never the caller's object.
            outcome = lambda_bootstrap.invoke(self._handler, json.loads(json.dumps(event)), context)
        duration = time.monotonic() - started
        if duration > self.spec.timeout_seconds:
            # Lambda would have stopped the handler: its result never reaches the caller.
            outcome = {"error": _timeout_error(self.spec.timeout_seconds)}
        return Invocation(
            function=self.spec.logical_id,
            request_id=request_id,
            result=outcome.get("result"),
            error=outcome.get("error"),
            logs=FUNCTION_OUTPUT.take(),
            errors=self._errors.errors[logged_before:],
            duration_ms=round(duration * 1000, 1),
            ended_at=time.time(),
        )


def _timeout_error(timeout_seconds: float) -> dict[str, str]:
    return {"errorType": "Sandbox.Timedout", "errorMessage": f"Task timed out after {timeout_seconds:.2f} seconds"}


def _reset_cached_clients() -> None:
    try:
        module = importlib.import_module(_RESET_HOOK_MODULE)
    except ModuleNotFoundError as exc:
        # Only the hook's own absence is fine; a module missing inside it is a real error.
        if exc.name not in (_RESET_HOOK_MODULE.partition(".")[0], _RESET_HOOK_MODULE):
            raise
        return
    reset = getattr(module, "reset", None)
    if callable(reset):
        reset()


def _load_handler_isolated(spec: FunctionSpec) -> lambda_bootstrap.Handler:
    """Load the handler without leaving its modules in sys.modules.

    Every function's handler module is typically `app`: the function's own modules are imported
    fresh and forgotten once the handler is bound, so another function (or a test that imported a
    different `app`) cannot shadow them. Layer modules stay shared, as the layer is.
    """
    top_level = spec.handler.rpartition(".")[0].replace("/", ".").split(".")[0]
    shadowed = {name: sys.modules.pop(name) for name in list(sys.modules) if _in_package(name, top_level)}
    before = set(sys.modules)
    try:
        return lambda_bootstrap.load_handler(spec.handler)
    finally:
        for name in set(sys.modules) - before:
            if _is_under(sys.modules[name], spec.code_dir):
                del sys.modules[name]
        sys.modules.update(shadowed)


def _in_package(module_name: str, package: str) -> bool:
    return module_name == package or module_name.startswith(f"{package}.")


def _is_under(module: ModuleType | None, directory: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(directory.resolve())


# --- In a clean interpreter (the `sam build` output) ------------------------------------------------

# Lambda gives a function up to 10 s to initialise before its timeout starts counting.
_INIT_ALLOWANCE_SECONDS = 10
_PINNED = re.compile(r"^(boto3|botocore)==(\S+)$")


def find_runtime_interpreter(runtime: str) -> Path:
    """The interpreter for a `pythonX.Y` runtime: pyenv's X.Y first, then one on PATH.

    pyenv's shims are skipped: they fail unless that version is activated.
    """
    match = re.fullmatch(r"python(\d+)\.(\d+)", runtime)
    if match is None:
        raise SandboxError(f"runtime {runtime!r} is not a Python runtime the sandbox can run")
    version = f"{match.group(1)}.{match.group(2)}"
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), key=_patch_level, reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path is not None and "shims" not in Path(on_path).parts:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    raise SandboxError(
        f"no python{version} interpreter for runtime {runtime}: install it (e.g. `pyenv install {version}`) "
        "or pass --python PATH"
    )


def _patch_level(interpreter: Path) -> int:
    """The Z of a pyenv `versions/X.Y.Z/bin/pythonX.Y` path (-1 for pre-releases and the like)."""
    patch = interpreter.parents[1].name.split(".")[-1]
    return int(patch) if patch.isdigit() else -1


def pinned_boto3(requirements: Path) -> list[str]:
    """The boto3 and botocore pins (`name==version`) of a requirements file."""
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SandboxError(f"cannot read {requirements}: {exc.strerror}") from exc
    pins = [line.strip() for line in lines if _PINNED.match(line.strip())]
    if not any(pin.startswith("boto3==") for pin in pins):
        raise SandboxError(f"{requirements} pins no boto3 version (boto3==X.Y.Z)")
    return pins


def ensure_runtime_boto3(root: Path, pins: list[str], interpreter: Path, python_version: str) -> Path:
    """The pinned boto3, standing in for the one Lambda's runtime provides, installed once per version.

    Compiled to bytecode by the runtime's own interpreter, as an installed package is: pip would compile it for
    the Python running pip, and every cold import would then compile botocore again.
    """
    target = root / f"python{python_version}"
    marker = target / ".sandbox-pins"
    wanted = " ".join(sorted(pins))
    if marker.is_file() and marker.read_text(encoding="utf-8") == wanted:
        return target
    root.mkdir(parents=True, exist_ok=True)
    # One process installs at a time (`make smoke` beside the test suite, two `make invoke`s): the others wait, then
    # find it installed.
    with (root / f".python{python_version}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text(encoding="utf-8") == wanted:
            return target
        if target.exists():
            shutil.rmtree(target)
        print(f"Installing {', '.join(pins)} for python{python_version} into {target} (once)...", file=sys.stderr)
        install = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--target", str(target), "--python-version", python_version, "--only-binary=:all:", *pins,
        ]  # fmt: skip
        compile_all = [str(interpreter), "-m", "compileall", "-q", str(target)]
        for command in (install, compile_all):
            completed = subprocess.run(command, capture_output=True, text=True, check=False)  # nosec B603  # fixed argv
            if completed.returncode != 0:
                output = (completed.stderr or completed.stdout).strip()
                raise SandboxError(f"installing {', '.join(pins)} failed:\n{output}")
        marker.write_text(wanted, encoding="utf-8")
    return target


def run_built_function(
    spec: FunctionSpec, event: Any, environment: Mapping[str, str], interpreter: Path, boto3_dir: Path
) -> Invocation:
    """Invoke a built function once in `interpreter -S`, with only its own paths importable."""
    request_id = str(uuid.uuid4())
    # Absolute: the child runs in the function's directory, as Lambda runs in /var/task.
    python_path = [str(path.resolve()) for path in (spec.code_dir, *spec.layer_dirs, boto3_dir)]
    child_environment = {
        **environment,
        "PYTHONPATH": os.pathsep.join(python_path),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    with tempfile.TemporaryDirectory(prefix="sandbox-invoke-") as scratch:
        result_path = Path(scratch) / "result.json"
        command = [
            # -u: unbuffered, so print() and logging interleave in the logs as they do on Lambda.
            str(interpreter), "-S", "-u", "-c", Path(lambda_bootstrap.__file__).read_text(encoding="utf-8"),
            str(result_path), request_id, spec.arn, str(spec.timeout_seconds),
        ]  # fmt: skip
        started = time.monotonic()
        try:
            completed = subprocess.run(  # nosec B603  # this interpreter and the bootstrap, no shell
                command,
                input=json.dumps(event),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=child_environment,
                cwd=spec.code_dir,
                timeout=spec.timeout_seconds + _INIT_ALLOWANCE_SECONDS,
                check=False,
            )
            output, outcome = completed.stdout, _read_outcome(result_path, completed.returncode)
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            outcome = {"error": _timeout_error(spec.timeout_seconds)}
        duration = time.monotonic() - started
    logs = output.splitlines()
    return Invocation(
        function=spec.logical_id,
        request_id=request_id,
        result=outcome.get("result"),
        error=outcome.get("error"),
        logs=logs,
        errors=_logged_errors(logs),
        duration_ms=round(duration * 1000, 1),
    )


def _read_outcome(result_path: Path, returncode: int) -> dict[str, Any]:
    if result_path.is_file():
        return dict(json.loads(result_path.read_text(encoding="utf-8")))
    # The interpreter died before the runtime could answer (a crash, os._exit, a bad interpreter).
    error = {"errorType": "Runtime.ExitError", "errorMessage": f"Runtime exited with error: exit status {returncode}"}
    return {"error": error}


def _logged_errors(lines: list[str]) -> list[dict[str, Any]]:
    """Failures the handler logged as structured (JSON) ERROR lines."""
    errors = []
    for line in lines:
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and fields.get("level") == "ERROR":
            found = _error_fields(fields)
            if found is not None:
                errors.append(found)
    return errors
