"""Shared by the tests that run the local targets for real (a Docker daemon, a bridge, Lambda containers)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import subprocess
import time
from collections.abc import Iterator

import pytest

from local.engine import LOCK_PATH, leftovers
from tests.conftest import ROOT, checkout_lock


def wait_for_other_local_runs(timeout: float = 1800) -> None:
    """Until no local run holds the machine's lock (a run started now would wait for it inside make, holding the
    checkout meanwhile)."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with LOCK_PATH.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise
                time.sleep(1)
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            return


@pytest.fixture(scope="session")
def built() -> None:
    """This machine's build, as `make test` makes it before the suite (nothing to do then)."""
    with checkout_lock():
        completed = subprocess.run(
            ["make", "build-host"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
        )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]


@contextlib.contextmanager
def local_run() -> Iterator[None]:
    """Around a test that runs a local target: the checkout left alone meanwhile (its build is read), and nothing of
    the run left on the machine afterwards."""
    wait_for_other_local_runs()
    with checkout_lock(shared=True):
        yield
    assert leftovers() == [], "the run left these behind"


def make(*arguments: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
