"""Shared by the tests that run the local targets for real (a Docker daemon, a bridge, Lambda containers)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

import pytest

from local.engine import leftovers
from tests.conftest import ROOT, checkout_lock, local_runs_idle


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
    local_runs_idle()
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
