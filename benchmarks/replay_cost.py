"""What the sandbox costs: CPU seconds and peak memory of `python -m sandbox replay` over N events.

    .venv/bin/python benchmarks/replay_cost.py [--events 1000] [--spacing-minutes 10] [--out reports/replay_cost.json]

Method (see benchmarks/README.md):
- The events are the whole XID 79 incident of events/incident-xid79/ (IMPAIRED, DRAINING, the task stopped,
  DEREGISTERING, INACTIVE), repeated for N / 5 hosts: each copy names its own container instance and EC2 instance and
  has its own event ids, and each host's incident starts `--spacing-minutes` after the previous one, so that every
  incident is paged, threaded and resolved on its own (the costliest path per event; a storm is benchmarks/storm.py).
- One event per file, in time order: `python -m sandbox replay` puts each on the bus and drains the queues into the
  functions before the next, as the sandbox always does.
- Measured: the replay process's CPU time (user + system, the process and everything it started: the router, moto,
  the stand-ins, the emulation) and its peak resident set size, from getrusage(RUSAGE_CHILDREN) around it.

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess  # nosec B404  # runs this repository's sandbox with fixed arguments, no shell
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INCIDENT = sorted((ROOT / "events" / "incident-xid79").glob("*.json"))
CONTAINER_INSTANCE_ID = "f957585523c3d58c95844b6b2d8ce234"
EC2_INSTANCE_ID = "i-07d3f9a1c5e2b8460"


def host_events(originals: list[dict[str, Any]], host: int, start: datetime) -> list[dict[str, Any]]:
    """The incident's events (`originals`, in order) for host number `host`, moved to start at `start`."""
    first = _time(originals[0]["time"])
    events = []
    for original in originals:
        text = json.dumps(original)
        text = text.replace(CONTAINER_INSTANCE_ID, f"{host:032x}").replace(EC2_INSTANCE_ID, f"i-{host:017x}")
        event = json.loads(text)
        event["id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"replay-cost/{host}/{original['id']}"))
        event["time"] = _iso(start + (_time(original["time"]) - first))
        events.append(event)
    return events


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000, help="events to replay (a multiple of 5; default 1000)")
    parser.add_argument("--spacing-minutes", type=int, default=10, help="between two hosts' incidents (default 10)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    hosts = max(1, args.events // len(INCIDENT))
    originals = [json.loads(path.read_text(encoding="utf-8")) for path in INCIDENT]
    start = _time(originals[0]["time"])
    with tempfile.TemporaryDirectory(prefix="replay-cost-") as folder:
        files = []
        for host in range(hosts):
            moved = start + timedelta(minutes=args.spacing_minutes * host)
            for number, event in enumerate(host_events(originals, host, moved)):
                path = Path(folder) / f"{host:05d}-{number}.json"
                path.write_text(json.dumps(event), encoding="utf-8")
                files.append(str(path))
        report = Path(folder) / "report.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        completed = subprocess.run(  # noqa: S603  # nosec B603  # this interpreter, the sandbox module, files written above
            [sys.executable, "-m", "sandbox", "replay", *files, "--report", str(report), "--quiet"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if completed.returncode != 0:
            print(completed.stdout[-2000:], completed.stderr[-2000:], sep="\n", file=sys.stderr)
            return completed.returncode
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    figures = {
        "events": len(files),
        "hosts": hosts,
        "cpu_seconds": round(cpu, 1),
        "cpu_ms_per_event": round(1000 * cpu / len(files), 1),
        "peak_rss_mb": round(after.ru_maxrss / 1024, 1),
        "wall_seconds": round(wall, 1),
        "python": platform.python_version(),
    }
    print(" ".join(f"{name:>16}" for name in figures))
    print(" ".join(f"{value!s:>16}" for value in figures.values()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
