"""The worst day, replayed: N GPU hosts of one capacity provider fail and recover, through the real rules, queue,
router and sweep in the sandbox (moto on loopback, the Slack and PagerDuty stand-ins over HTTP), for several N.

For each N: every host reports XID 79 within three minutes, each event delivered twice (in a shuffled order, in
bursts of BURST envelopes, the alert queue drained into AlertRouterFunction after each burst as Lambda would), with
SWEEPS runs of the sweep spread over it (its schedule is every minute; the storm lasts three); then every host
leaves the cluster (INACTIVE, each twice, shuffled, with as many sweeps between); then two last runs of the sweep.
It prints, per N: PagerDuty alerts opened, Slack roots, hosts named in Slack (roots and threads), alerts left open,
messages dead-lettered, the router's CPU time per event, and the process's peak memory. It exits non-zero if, at any
N, more than 5 alerts or 10 roots were opened, a host went unnamed, an alert was left open or a message
dead-lettered.

Router CPU time is the CPU time of the threads that run the router's code (each record's thread, its delivery and
look-ahead threads, the sweep's): `time.thread_time()` around each, summed. moto and the stand-ins run in threads
of their own and are not counted; neither is the emulation of EventBridge and SQS. See benchmarks/README.md.

With --organization, each N is run twice in the same run: the storm above (one account and Region, the default bus),
then the same N hosts spread over ACCOUNTS x REGIONS (4 accounts, 2 Regions), the same cluster and provider names in
each, through a stack with the organization's bus (each account's events put on it as its forwarder sends them, the
stack's own through its default bus). It prints both, the spread storm's CPU time per event as a multiple of the
single one's, and the fleet alerts per account, Region and provider; it also exits non-zero if any of those had more
than one fleet alert, or more than 5 alerts or 10 roots in all.

    .venv/bin/python benchmarks/storm.py [--hosts 100 500 2000] [--organization] [--seed 1] [--out reports/storm.json]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import re
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from sandbox.eventbridge import EventBus  # noqa: E402
from sandbox.lambda_runtime import InProcessFunction  # noqa: E402
from sandbox.session import Sandbox  # noqa: E402
from sandbox.sqs_mapping import SqsEventSourceMapping  # noqa: E402
from sandbox.template import load_template  # noqa: E402

HEALTH = ROOT / "events" / "aws-docs" / "health-change-accelerated-compute-xid46.json"
INACTIVE = ROOT / "events" / "state" / "inactive.json"
CLUSTER = "arn:aws:ecs:us-west-2:123456789012:cluster/gpu-storm"
"""The single storm's cluster (the spread storm has one of the same name in each account and Region)."""
PROVIDER = "gpu-storm-p5"
BURST = 100
SWEEPS = 3
"""Runs of the sweep during each phase (its schedule is every minute; the storm lasts three)."""
STORM = timedelta(minutes=3)
MAX_ALERTS = 5
MAX_ROOTS = 10
"""What a storm of any size may cost on-call, storm and recovery together; the exit status says whether it held."""
HOST = re.compile(r"i-0st[0-9a-f]{14}")
SINGLE = ("123456789012", "us-west-2")
"""Where the single-account storm happens (the events of the AWS documentation)."""
ACCOUNTS = ("123456789012", "111111111111", "222222222222", "333333333333")
"""The spread storm's accounts: the sandbox's own (the stack's) and three members."""
REGIONS = ("us-east-1", "us-west-2")
"""The spread storm's Regions: the stack's own, and another."""
ORGANIZATION = {
    "OrganizationId": "o-a1b2c3d4e5",
    "AccountNames": "111111111111=prod-ml,222222222222=research,333333333333=sandbox-ml",
}


def where(number: int, spread: bool) -> tuple[str, str]:
    """The account and Region of host `number`: the single storm's, or one of the spread storm's eight."""
    if not spread:
        return SINGLE
    return ACCOUNTS[number % len(ACCOUNTS)], REGIONS[number // len(ACCOUNTS) % len(REGIONS)]


def host(number: int, spread: bool = False) -> tuple[str, str]:
    """The container instance ARN and the EC2 id of host `number`."""
    account, region = where(number, spread)
    return (
        f"arn:aws:ecs:{region}:{account}:container-instance/gpu-storm/{number:032x}",
        f"i-0st{number:014x}",
    )


def impaired(number: int, at: datetime, copy_number: int, spread: bool = False) -> dict[str, Any]:
    event = copy.deepcopy(json.loads(HEALTH.read_text()))
    arn, ec2 = host(number, spread)
    account, region = where(number, spread)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event.update(id=f"xid79-{number}-{copy_number}", time=stamp, resources=[arn], account=account, region=region)
    event["detail"].update(
        clusterArn=_cluster(account, region), containerInstanceArn=arn, ec2InstanceId=ec2, capacityProviderName=PROVIDER
    )
    event["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=stamp, lastUpdated=stamp)
    return event


def inactive(number: int, at: datetime, copy_number: int, spread: bool = False) -> dict[str, Any]:
    event = copy.deepcopy(json.loads(INACTIVE.read_text()))
    arn, ec2 = host(number, spread)
    account, region = where(number, spread)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event.update(id=f"inactive-{number}-{copy_number}", time=stamp, resources=[arn], account=account, region=region)
    event["detail"].update(
        clusterArn=_cluster(account, region),
        containerInstanceArn=arn,
        ec2InstanceId=ec2,
        capacityProviderName=PROVIDER,
        updatedAt=stamp,
    )
    return event


def _cluster(account: str, region: str) -> str:
    """The storm's cluster: CLUSTER, and one of the same name in each account and Region of the spread storm."""
    return CLUSTER if (account, region) == SINGLE else f"arn:aws:ecs:{region}:{account}:cluster/gpu-storm"


class RouterMeter:
    """CPU time of the threads that run the router's code, summed (time.thread_time around each unit of work)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def timed(self, work: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return work(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.thread_time() - started

        return run

    def install(self) -> None:
        """Wrap the warm router: each record's handling, its executors' work, the sweep."""
        bootstrap = sys.modules["fault_responder.wiring.alert_router"]
        router = bootstrap.alert_router()
        router.process_record = self.timed(router.process_record)
        router.sweep = self.timed(router.sweep)
        for executor in (router.service.dispatch._pool, router.service.membership._scouts):
            executor.submit = self._submitting(executor.submit)

    def _submitting(self, submit: Callable[..., Future[Any]]) -> Callable[..., Future[Any]]:
        def wrapped(work: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            return submit(self.timed(work), *args, **kwargs)

        return wrapped


def replay(hosts: int, seed: int, spread: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)  # noqa: S311  # nosec B311  # a shuffle, not cryptography
    start = datetime.now(UTC) - timedelta(minutes=30)
    storm = [impaired(n, start + STORM * n / hosts, c, spread) for n in range(hosts) for c in (0, 1)]
    left = start + timedelta(minutes=15)
    recovery = [inactive(n, left + timedelta(seconds=n % 600), c, spread) for n in range(hosts) for c in (0, 1)]
    rng.shuffle(storm)
    rng.shuffle(recovery)
    meter = RouterMeter()
    # The router's calls over HTTP: in process, moto's work would run in the router's threads and count as its CPU.
    template = load_template(ROOT / "template.yaml")
    overrides = ORGANIZATION if spread else None
    with (
        Sandbox(template, calls_over_http=True, parameter_overrides=overrides) as sandbox,
        _functions(sandbox) as (router, sweep),
    ):
        bus = EventBus.default(sandbox.stack, sandbox.aws)
        mapping = SqsEventSourceMapping(router.spec.sqs_sources[0], router, sandbox.aws, sandbox.identity.region)
        scheduled = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}, "id": "sweep"}
        sweep.invoke(scheduled)  # warm: the router's wiring, its secrets
        meter.install()
        wall = time.monotonic()
        for phase in (storm, recovery):
            sweep_at = {len(phase) * part // SWEEPS for part in range(1, SWEEPS + 1)}
            for offset in range(0, len(phase), BURST):
                for event in phase[offset : offset + BURST]:
                    bus.put_event(event)
                mapping.drain(max_batches=100_000)
                if any(offset < at <= offset + BURST for at in sweep_at):
                    sweep.invoke(scheduled)
        sweep.invoke(scheduled)
        sweep.invoke(scheduled)
        wall = time.monotonic() - wall
        tally = _tally(sandbox, hosts, len(storm) + len(recovery), meter.seconds, wall)
        if spread:
            tally.update(spread=True, **_by_place(sandbox))
        return tally


@contextlib.contextmanager
def _functions(sandbox: Sandbox) -> Iterator[tuple[InProcessFunction, InProcessFunction]]:
    specs = sandbox.stack.functions
    router_spec, sweep_spec = specs["AlertRouterFunction"], specs["SweepFunction"]
    with (
        InProcessFunction(router_spec, sandbox.function_environment(router_spec)) as router,
        InProcessFunction(sweep_spec, sandbox.function_environment(sweep_spec)) as sweep,
    ):
        yield router, sweep


def _tally(sandbox: Sandbox, hosts: int, events: int, cpu: float, wall: float) -> dict[str, Any]:
    alerts = sandbox.standins.pagerduty_alerts()
    messages = [m for channel in sandbox.standins.slack_channels().values() for m in channel]
    roots = [m for m in messages if not m.get("thread_ts")]
    named: set[str] = set()
    for message in messages:
        texts = [message.get("text") or "", json.dumps(message.get("blocks") or [])]
        texts += [json.dumps(edit) for edit in message.get("edits") or []]
        named.update(HOST.findall(" ".join(texts)))
    dlq = sandbox.aws.sqs.get_queue_attributes(
        QueueUrl=sandbox.stack.resources["AlertDLQ"].ref, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return {
        "hosts": hosts,
        "events": events,
        "alerts": len(alerts),
        "roots": len(roots),
        "hosts_named": len(named),
        "alerts_open": sum(1 for alert in alerts if alert.get("status") != "resolved"),
        "dlq": int(dlq["Attributes"]["ApproximateNumberOfMessages"]),
        "router_cpu_s": round(cpu, 2),
        "cpu_ms_per_event": round(1000 * cpu / events, 2),
        "wall_s": round(wall, 1),
        # The process's peak resident memory so far (moto, the stand-ins, the emulation and the router all live in
        # it): sizes run in the order given, so the figure at N covers every run up to N.
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _by_place(sandbox: Sandbox) -> dict[str, Any]:
    """Per account, Region and provider (the spread storm's eight places): PagerDuty alerts, and fleet alerts."""
    places: dict[str, dict[str, int]] = {}
    for alert in sandbox.standins.pagerduty_alerts():
        details = alert.get("custom_details") or {}
        place = f"{details.get('account')}/{details.get('region')}/{alert.get('group')}"
        counts = places.setdefault(place, {"alerts": 0, "fleet_alerts": 0})
        counts["alerts"] += 1
        counts["fleet_alerts"] += int(str(alert["dedup_key"]).startswith("fleet/"))
    return {
        "places": places,
        "most_alerts_a_place": max((c["alerts"] for c in places.values()), default=0),
        "most_fleet_alerts_a_place": max((c["fleet_alerts"] for c in places.values()), default=0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument(
        "--organization",
        action="store_true",
        help="also run each N spread over 4 accounts and 2 Regions (the organization's bus), in the same run",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args()
    results = []
    columns = (
        "hosts",
        "events",
        "alerts",
        "roots",
        "hosts_named",
        "alerts_open",
        "dlq",
        "cpu_ms_per_event",
        "wall_s",
        "peak_rss_mb",
    )
    print(" ".join(f"{name:>16}" for name in ("storm", *columns)))
    spreads: list[dict[str, Any]] = []
    for hosts in args.hosts:
        for spread in (False, True) if args.organization else (False,):
            result = replay(hosts, args.seed, spread)
            (spreads if spread else results).append(result)
            name = "spread" if spread else "single"
            print(" ".join(f"{value:>16}" for value in (name, *(result[column] for column in columns))), flush=True)
    first = results[0]
    for result in results[1:]:
        ratio = result["cpu_ms_per_event"] / first["cpu_ms_per_event"]
        print(f"CPU time per event at {result['hosts']} hosts: {ratio:.2f}x the figure at {first['hosts']}")
    for single, spread in zip(results, spreads, strict=False):
        spread["cpu_ratio_to_single"] = round(spread["cpu_ms_per_event"] / single["cpu_ms_per_event"], 3)
        print(
            f"{spread['hosts']} hosts spread over {len(ACCOUNTS)} accounts and {len(REGIONS)} Regions: CPU time per "
            f"event {spread['cpu_ratio_to_single']:.2f}x the single-account storm's; fleet alerts per account, Region "
            f"and provider: {sorted(c['fleet_alerts'] for c in spread['places'].values())}"
        )
    results += spreads
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    failed = [
        f"{result['hosts']} hosts: {what}"
        for result in results
        for spread in (bool(result.get("spread")),)
        for what, bad in (
            (f"{result['alerts']} alerts (at most {MAX_ALERTS})", not spread and result["alerts"] > MAX_ALERTS),
            (f"{result['roots']} roots (at most {MAX_ROOTS})", not spread and result["roots"] > MAX_ROOTS),
            (
                f"{result.get('most_alerts_a_place')} alerts in an account, Region and provider (at most {MAX_ALERTS})",
                spread and result["most_alerts_a_place"] > MAX_ALERTS,
            ),
            (
                f"{result.get('most_fleet_alerts_a_place')} fleet alerts in one account, Region and provider",
                spread and result["most_fleet_alerts_a_place"] > 1,
            ),
            (
                f"{result['roots']} roots (at most {MAX_ROOTS} for each of {len(ACCOUNTS) * len(REGIONS)} places)",
                spread and result["roots"] > MAX_ROOTS * len(ACCOUNTS) * len(REGIONS),
            ),
            (f"{result['hosts_named']} hosts named", result["hosts_named"] != result["hosts"]),
            (f"{result['alerts_open']} alerts left open", result["alerts_open"] > 0),
            (f"{result['dlq']} dead-lettered", result["dlq"] > 0),
        )
        if bad
    ]
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
