"""One clock for the product's timers (fault_responder/core/elapsed.py): every decision by time passed across calls
reads it, so that the sandbox, which moves it on with a scenario's delay, moves every such timer. What reads
`time.monotonic` or `time.perf_counter` itself is named here with the reason it must stay on real time."""

from __future__ import annotations

import ast
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fault_responder.actions.function_url import MIN_FORCED_REFRESH_SECONDS, RotatingSecret
from fault_responder.core import elapsed

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "layers" / "common" / "fault_responder", ROOT / "functions"]
CLOCKS = frozenset({"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"})

REAL_TIME = {
    "layers/common/fault_responder/core/elapsed.py:monotonic": "the product's clock itself",
    "layers/common/fault_responder/adapters/http.py:Budget": (
        "an invocation's time budget: made anew for each invocation, it bounds the calls of that one invocation by "
        "the time Lambda really gives it"
    ),
    "layers/common/fault_responder/wiring/alert_router.py:AlertRouter": (
        "the invocation's end, set by start_invocation from Lambda's remaining time at the start of every invocation"
    ),
    "layers/common/fault_responder/cli/drills.py:DrillContext": (
        "a drill measures the latency of each hop in real time, and waits for the recovery with a real sleep"
    ),
    "layers/common/fault_responder/cli/move.py:_wait": "the command's wait for an execution, with a real sleep",
}
"""Reads of the real monotonic clocks (file:enclosing top-level name) -> why each bounds one call in real time."""


def clock_reads(source: str) -> Iterator[tuple[str, int]]:
    """(enclosing top-level name, line) of each read of time.monotonic, time.perf_counter and their _ns forms:
    through `import time` (any alias) or `from time import ...` (any alias)."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if alias.name == "time"}  # fmt: skip
    for top in tree.body:
        name = getattr(top, "name", "<module>")
        for node in ast.walk(top):
            if isinstance(node, ast.ImportFrom) and node.module == "time":
                for alias in node.names:
                    if alias.name in CLOCKS:
                        yield name, node.lineno
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in CLOCKS
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                yield name, node.lineno


def product_reads() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for folder in PRODUCT:
        for path in sorted(folder.rglob("*.py")):
            for name, line in clock_reads(path.read_text()):
                found.setdefault(f"{path.relative_to(ROOT).as_posix()}:{name}", []).append(line)
    return found


def test_no_product_code_reads_a_real_monotonic_clock_but_what_bounds_one_call() -> None:
    unexpected = {where: lines for where, lines in product_reads().items() if where not in REAL_TIME}

    assert not unexpected, (
        f"read fault_responder.core.elapsed.monotonic() instead, so that the sandbox's delays move it (or, for a "
        f"wait that bounds one call in real time, name it in REAL_TIME with the reason): {unexpected}"
    )


def test_every_real_time_reader_named_here_still_reads_it() -> None:
    assert set(REAL_TIME) <= set(product_reads())


@pytest.mark.parametrize(
    "source",
    [
        "import time\ndef f():\n    return time.monotonic()\n",
        "import time as t\nclass C:\n    def f(self):\n        return t.perf_counter_ns()\n",
        "from time import monotonic\n",
        "from time import perf_counter as pc\n",
        "import time\nclock = time.monotonic\n",
    ],
)
def test_every_way_of_reading_the_clocks_is_found(source: str) -> None:
    assert list(clock_reads(source))


def test_the_wall_clock_and_other_modules_are_not_taken_for_it() -> None:
    assert not list(clock_reads("import time\nfrom fault_responder.core import elapsed\nelapsed.monotonic()\n"))
    assert not list(clock_reads("import time\ntime.time()\ntime.sleep(1)\n"))


# --- The clock ------------------------------------------------------------------------------------------


def test_the_products_clock_is_monotonic_and_skips_what_it_is_told_passed() -> None:
    before, real = elapsed.monotonic(), time.monotonic()

    elapsed.skip(3600)

    assert 3600 <= elapsed.monotonic() - before < 3660
    assert time.monotonic() - real < 60


@pytest.mark.parametrize("seconds", [-1.0, float("nan")])
def test_it_never_goes_back(seconds: float) -> None:
    with pytest.raises(ValueError, match="cannot go back"):
        elapsed.skip(seconds)


def test_a_forced_secret_read_is_rate_limited_on_the_products_clock() -> None:
    # (SlackActionsFunction and PagerDutyWebhookFunction read their signing secret again, at most once a minute,
    # when a request's signature does not match: a rotated secret)
    forced: list[bool] = []

    class Secret(RotatingSecret[str]):
        def read(self, value: object) -> str:
            return str(value)

    secret = Secret("slack", lambda name, force: forced.append(force) or "s3cret")
    secret(force=True)
    secret(force=True)
    elapsed.skip(MIN_FORCED_REFRESH_SECONDS)
    secret(force=True)

    assert forced == [True, False, True]
