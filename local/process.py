"""Running the programs the local runs drive (apt-get, ip, iptables, dockerd, docker, debootstrap, sam): one place,
fixed argument lists, never a shell."""

from __future__ import annotations

import os
import subprocess  # nosec B404  # fixed argument lists of known programs, no shell
from collections.abc import Mapping, Sequence
from pathlib import Path


class LocalError(Exception):
    """A local run cannot go on: the message says why and what to do."""


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120,
    check: bool = True,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` to its end and capture what it printed; with `check`, a failure raises LocalError with its output."""
    try:
        completed = subprocess.run(  # nosec B603  # argv built by this package, no shell
            list(argv),
            env=_environment(env),
            input=stdin.decode() if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise LocalError(f"{argv[0]} is not installed ({exc})") from None
    except subprocess.TimeoutExpired:
        raise LocalError(f"{' '.join(argv)} did not finish in {timeout:.0f} s") from None
    if check and completed.returncode != 0:
        output = (completed.stderr.strip() or completed.stdout.strip())[-2000:]
        raise LocalError(f"{' '.join(argv)} exited {completed.returncode}: {output}")
    return completed


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str | None] | None = None,
    log: Path | None = None,
    own_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `argv` in the background, its output to `log` (or discarded). `own_session`: out of this terminal's process
    group, so that a Ctrl-C reaches only this process, which then stops it in order."""
    with log.open("ab") if log is not None else open(os.devnull, "wb") as output:
        return subprocess.Popen(  # nosec B603  # argv built by this package, no shell
            list(argv),
            env=_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )


def _environment(changes: Mapping[str, str | None] | None) -> dict[str, str] | None:
    """This process's environment with `changes` (None: the variable removed); None when there are none."""
    if changes is None:
        return None
    merged = {**os.environ, **{name: value for name, value in changes.items() if value is not None}}
    return {name: value for name, value in merged.items() if changes.get(name, "") is not None}
