"""Shared builders: events come from events/ (the same files users replay), varied per test."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from moto.core.botocore_stubber import BotocoreStubber

from sandbox import moto_dynamodb

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"


def load_event(relative: str) -> dict[str, Any]:
    return json.loads((EVENTS / relative).read_text(encoding="utf-8"))


def vary(
    event: dict[str, Any], *, event_id: str | None = None, time: str | None = None, **detail: Any
) -> dict[str, Any]:
    """A copy of an event with a new id/time and some detail fields replaced."""
    varied = copy.deepcopy(event)
    if event_id is not None:
        varied["id"] = event_id
    if time is not None:
        varied["time"] = time
    varied["detail"].update(detail)
    return varied


def incidents_table() -> dict[str, Any]:
    """CreateTable's arguments, but the name, for the incidents table as template.yaml defines it."""
    from sandbox.template import load_template  # noqa: PLC0415  # the sandbox only where a test needs it

    properties = load_template(ROOT / "template.yaml").resources["IncidentsTable"]["Properties"]
    keys = ("AttributeDefinitions", "KeySchema", "BillingMode", "GlobalSecondaryIndexes")
    return {key: copy.deepcopy(properties[key]) for key in keys if key in properties}


def health_check(event: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of a Health Change event whose single health check has some fields replaced."""
    varied = copy.deepcopy(event)
    varied["detail"]["healthChecks"][0].update(fields)
    return varied


@pytest.fixture
def xid46() -> dict[str, Any]:
    return load_event("aws-docs/health-change-accelerated-compute-xid46.json")


@pytest.fixture(autouse=True, scope="session")
def _moto_in_process_serves_one_request_at_a_time() -> Any:
    """moto's in-process backends are not thread-safe (a conditional write is a check, then a write), and the
    router writes from several threads at once (a batch's records, a record's receivers). DynamoDB applies
    each request atomically; so does this, with a lock around moto's in-process request handling. Reentrant:
    a Step Functions task runs a handler, whose calls go through here again, inside its own request."""
    lock = threading.RLock()
    original = BotocoreStubber.__call__

    def serialised(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, event_name, request, **kwargs)

    BotocoreStubber.__call__ = serialised  # type: ignore[method-assign]
    yield
    BotocoreStubber.__call__ = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True, scope="session")
def _moto_dynamodb_answers_as_the_sandbox_does() -> Any:
    """The sandbox's faster DynamoDB answers (sandbox/moto_dynamodb.py; the same responses) in process too."""
    moto_dynamodb.install()
    yield
    moto_dynamodb.uninstall()


@contextlib.contextmanager
def checkout_lock(*, shared: bool = False) -> Iterator[None]:
    """Held while a test builds into the checkout or runs its make targets (`make build-host`, `make demo`, the
    documented commands, which check the checkout is left as they found it), so that the suite's parallel workers
    (`make pytest`: pytest-xdist) never do two of those at once. `shared`: for a test that only needs the checkout
    left alone while it runs (a documented command that writes nothing but git-ignored output): any number of
    those at once, never beside one that holds the lock alone."""
    path = ROOT / ".aws-sam" / "tests-checkout.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def local_runs_idle(timeout: float = 1800) -> None:
    """Returns once no local run (`make local-invoke`, `make local-up`: local/engine.py, one at a time on a machine)
    holds this machine's lock. A test about to start one waits here, rather than inside make while it holds the
    checkout (checkout_lock), which would hold back every test that needs the checkout meanwhile."""
    from local.engine import LOCK_PATH  # noqa: PLC0415  # only where a test starts a local run

    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with LOCK_PATH.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            return


def load_app(function_dir: str) -> ModuleType:
    """functions/<function_dir>/app.py, imported as Lambda imports a handler module."""
    name = f"{function_dir}_app"
    spec = importlib.util.spec_from_file_location(name, ROOT / "functions" / function_dir / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as Lambda imports it: pydantic resolves the annotations through it
    spec.loader.exec_module(module)
    return module
