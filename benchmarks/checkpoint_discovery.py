"""S3 requests and wall time to find the newest complete checkpoint, versus listing every object.

    .venv/bin/python benchmarks/checkpoint_discovery.py [--checkpoints 10000] [--files 64] [--repeats 5]
        [--listing indexed|moto] [--out reports/checkpoint_discovery.json]

Method (also printed with the results; see benchmarks/README.md):
- S3 is moto in process (`mock_aws`): every request is serialised by botocore, answered by moto's S3 responses
  and parsed back, with no sockets, so times exclude network latency.
- The bucket is populated directly through moto's backend model (`S3Backend.put_object`), not the S3 API:
  640,000 PUTs over the API would take many minutes here. Each checkpoint is a folder `step-NNNNNN/` with
  `--files - 1` shards of 8 bytes plus the `_COMPLETE` manifest listing them; the newest
  `--incomplete-newest` folders hold their shards but no manifest (an interrupted save), so discovery has to
  skip and name them.
- moto's ListObjectsV2 scans and sorts every key in the bucket on every request, so under moto each page
  costs O(objects in the bucket); S3 serves a page from its index. `--listing indexed` (the default) swaps the
  backend's listing for one over a sorted index that returns the same pages (compared with moto's own on this
  bucket before anything is timed), so a request costs what its page costs. `--listing moto` keeps moto's.
- discovery = `find_newest_complete` over `S3CheckpointStore`. baseline = ListObjectsV2 over the whole prefix
  without a delimiter, then the highest-step folder holding any commit marker (verifying nothing).
- Requests are counted from botocore's `request-created` event. Each repeat gets a new client, warmed with one
  uncounted request, and is timed with `time.perf_counter`.

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3
import moto
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.s3.models import FakeKey, s3_backends

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "common"))

from fault_responder.adapters.s3_checkpoints import S3CheckpointStore
from fault_responder.resume.checkpoints import (
    COMPLETED_NAME,
    DCP_METADATA_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    find_newest_complete,
    parse_step,
)

REGION = "us-east-1"
BUCKET = "checkpoint-discovery-bench"
PREFIX = "runs/job-42/"
STEP_STRIDE = 10
SHARD_BODY = b"shard-00"
MARKERS = frozenset({MANIFEST_NAME, DCP_METADATA_NAME, COMPLETED_NAME})


@dataclass(frozen=True)
class Measurement:
    method: str
    answer: str | None
    requests: dict[str, int]
    seconds: list[float]

    @property
    def request_total(self) -> int:
        return sum(self.requests.values())

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


class RequestCounter:
    """Counts S3 requests sent through one client, per HTTP attempt (retries included)."""

    def __init__(self, client: Any) -> None:
        self.requests: Counter[str] = Counter()
        client.meta.events.register("request-created.s3", self._count)

    def _count(self, operation_name: str, **_: Any) -> None:
        self.requests[operation_name] += 1


class IndexedListing:
    """ListObjectsV2 over a sorted key index: the pages moto returns, at the cost of the page, as on S3.

    Installed on the backend instance in place of `S3Backend.list_objects_v2` (same signature and result).
    The index is rebuilt whenever the bucket's key count changes; nothing writes while a method is timed.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.original: Callable[..., Any] = backend.list_objects_v2
        self._index: dict[str, tuple[int, list[str]]] = {}

    def install(self) -> None:
        self._backend.list_objects_v2 = self.list_objects_v2

    def list_objects_v2(
        self,
        *,
        bucket: Any,
        prefix: str | None,
        delimiter: str | None,
        continuation_token: str | None,
        start_after: str | None,
        max_keys: int,
    ) -> tuple[list[Any], bool, str | None]:
        names, prefix = self._names(bucket), prefix or ""
        after = self._backend._pagination_tokens.get(continuation_token) if continuation_token else start_after
        position = max(bisect.bisect_left(names, prefix), bisect.bisect_right(names, after) if after else 0)
        page: list[Any] = []
        while position < len(names) and names[position].startswith(prefix) and len(page) < max_keys:
            name = names[position]
            cut = name.find(delimiter, len(prefix)) if delimiter else -1
            if cut == -1:
                page.append(bucket.keys[name])
                position += 1
                continue
            common = name[: cut + len(delimiter or "")]
            if not after or common > after:
                page.append(common)
            # Every key starting with `common` sorts below `common` with its last character incremented.
            position = bisect.bisect_left(names, common[:-1] + chr(ord(common[-1]) + 1))
        truncated = position < len(names) and names[position].startswith(prefix) and bool(page)
        return page, truncated, self._token(page[-1]) if truncated else None

    def _names(self, bucket: Any) -> list[str]:
        count, names = self._index.get(bucket.name, (-1, []))
        if count != len(bucket.keys):
            names = sorted(bucket.keys.keys())
            self._index[bucket.name] = (len(names), names)
        return names

    def _token(self, last: Any) -> str:
        name = last.name if isinstance(last, FakeKey) else last
        token = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
        self._backend._pagination_tokens[token] = name
        return token


def populate(backend: Any, checkpoints: int, files: int, incomplete_newest: int) -> int:
    shards = [f"model/shard-{index:03d}.pt" for index in range(files - 1)]
    entries = [{"path": path, "size": len(SHARD_BODY)} for path in shards]
    written = 0
    for number in range(1, checkpoints + 1):
        folder = f"{PREFIX}step-{number * STEP_STRIDE:06d}/"
        for path in shards:
            backend.put_object(BUCKET, folder + path, SHARD_BODY, disable_notification=True)
        written += len(shards)
        if number <= checkpoints - incomplete_newest:
            manifest = {"format": MANIFEST_FORMAT, "step": number * STEP_STRIDE, "files": entries}
            backend.put_object(BUCKET, folder + MANIFEST_NAME, json.dumps(manifest).encode(), disable_notification=True)
            written += 1
    return written


def check_listing_parity(listing: IndexedListing, bucket: Any, checkpoints: int) -> int:
    """Compares the indexed listing with moto's on the populated bucket; returns the number of cases."""
    middle = f"{PREFIX}step-{checkpoints // 2 * STEP_STRIDE:06d}/"
    cases = [
        (PREFIX, "/", None),
        (PREFIX, "/", middle),
        (PREFIX, None, None),
        (PREFIX, None, middle + "model/shard-010.pt"),
        (middle, None, None),
        ("runs/", "/", None),
    ]
    for prefix, delimiter, start_after in cases:
        arguments = {"prefix": prefix, "delimiter": delimiter, "start_after": start_after}
        ours = listing.list_objects_v2(bucket=bucket, max_keys=1000, continuation_token=None, **arguments)
        theirs = listing.original(bucket=bucket, max_keys=1000, continuation_token=None, **arguments)
        if _names_of(ours) != _names_of(theirs):
            raise AssertionError(f"indexed listing differs from moto's for {prefix=} {delimiter=} {start_after=}")
    return len(cases)


def _names_of(result: tuple[list[Any], bool, str | None]) -> tuple[list[str], bool]:
    page, truncated, _ = result
    return [item.name if isinstance(item, FakeKey) else item for item in page], truncated


def discovery(client: Any) -> tuple[str | None, Counter[str]]:
    store = S3CheckpointStore(client)
    search = find_newest_complete(f"s3://{BUCKET}/{PREFIX}", store)
    return (search.checkpoint.uri if search.checkpoint else None), store.requests


def baseline(client: Any) -> tuple[str | None, Counter[str]]:
    counter = RequestCounter(client)
    marked: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX):
        for obj in page.get("Contents", ()):
            folder, _, name = obj["Key"][len(PREFIX) :].partition("/")
            if name in MARKERS:
                marked.add(folder)
    stepped = [(step, folder) for folder in marked if (step := parse_step(folder)) is not None]
    newest = max(stepped, default=None)
    return (f"s3://{BUCKET}/{PREFIX}{newest[1]}/" if newest else None), counter.requests


def measure(name: str, method: Callable[[Any], tuple[str | None, Counter[str]]], repeats: int) -> Measurement:
    answers, counts, seconds = set(), [], []
    for _ in range(repeats):
        client = boto3.client("s3", region_name=REGION)
        # One uncounted, untimed request first, so botocore's lazy model loading is not measured.
        client.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, MaxKeys=1)
        started = time.perf_counter()
        answer, requests = method(client)
        seconds.append(time.perf_counter() - started)
        answers.add(answer)
        counts.append(dict(requests))
    if len(answers) != 1 or any(count != counts[0] for count in counts):
        raise AssertionError(f"{name} was not deterministic: {answers} {counts}")
    return Measurement(name, answers.pop(), counts[0], seconds)


def render(results: Iterable[Measurement]) -> str:
    rows = [f"{'method':<10} {'requests':>9} {'by operation':<32} {'median s':>9} {'min s':>8} {'max s':>8}"]
    for result in results:
        operations = ", ".join(f"{op} {count}" for op, count in sorted(result.requests.items()))
        rows.append(
            f"{result.method:<10} {result.request_total:>9} {operations:<32} "
            f"{result.median:>9.3f} {min(result.seconds):>8.3f} {max(result.seconds):>8.3f}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=64, help="objects per checkpoint, the manifest included")
    parser.add_argument("--incomplete-newest", type=int, default=1, help="newest folders left without manifest")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--listing", choices=("indexed", "moto"), default="indexed")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.files < 2 or args.checkpoints <= args.incomplete_newest or args.repeats < 1:
        parser.error("need --files >= 2, more checkpoints than --incomplete-newest, and --repeats >= 1")

    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        started = time.perf_counter()
        objects = populate(backend, args.checkpoints, args.files, args.incomplete_newest)
        populate_seconds = time.perf_counter() - started
        print(f"populated {objects:,} objects in {populate_seconds:.1f} s through moto's backend model")
        parity_cases = 0
        if args.listing == "indexed":
            listing = IndexedListing(backend)
            parity_cases = check_listing_parity(listing, backend.get_bucket(BUCKET), args.checkpoints)
            listing.install()
            print(f"indexed listing installed; identical to moto's on {parity_cases} listing cases")
        results = [measure("discovery", discovery, args.repeats), measure("baseline", baseline, args.repeats)]

    found, naive = results
    print(render(results))
    print(
        f"ratio baseline/discovery: requests {naive.request_total / found.request_total:.1f}x, "
        f"median time {naive.median / found.median:.1f}x; discovery chose {found.answer}, baseline {naive.answer}"
    )
    if args.out:
        report = {
            "config": vars(args) | {"out": str(args.out)},
            "objects": objects,
            "populate_seconds": populate_seconds,
            "listing_parity_cases": parity_cases,
            "environment": {"python": platform.python_version(), "moto": moto.__version__, "boto3": boto3.__version__},
            "method": __doc__,
            "results": [
                asdict(result) | {"request_total": result.request_total, "median": result.median} for result in results
            ],
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
