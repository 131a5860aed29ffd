"""`python -m sandbox`: run the stack locally, with nothing leaving this machine."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox import invoke as invoke_command
from sandbox import serve_standins
from sandbox.errors import SandboxError
from sandbox.event_fit import check_fit
from sandbox.fuzz import run_fuzz
from sandbox.replay import load_event_file, read_json_file, replay
from sandbox.report import Timeline, write_report
from sandbox.session import DEFAULT_REGION, DEFAULT_STACK_NAME, Sandbox
from sandbox.standins import StandIns
from sandbox.template import Template, load_template, parse_parameter_overrides

_DESCRIPTION = """\
Run GPU Fault Responder locally, without AWS or Docker: moto (on loopback) is the AWS account, with
the stack's queues, tables and rules created from the template; local stand-ins answer for Slack and
PagerDuty and record every request. Nothing leaves this machine.
"""

_EPILOG = """\
environment:
  SANDBOX_FAULTS   make the stand-ins fail requests, per service, in order, e.g.
                   '{"slack": [429, 500], "pagerduty": [{"pass": 1}, {"fail": 500, "times": 8}]}'
                   ("ok_false" is Slack's HTTP 200 ok:false; docs/scenarios.md, faults)

exit status: 0 when the run completed (even if deliveries failed: the report says so),
             1 when `invoke`'s function raised or its function URL answered 4xx or 5xx
               (`smoke`: any of them), or an expectation of `run`'s scenario failed,
             2 for bad input (missing file, invalid JSON or scenario, unknown parameter, an
               event that does not fit `invoke`'s function, a template the sandbox cannot emulate)
"""


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parameter-overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="template parameters, as for sam deploy (e.g. ClusterArns=arn:aws:ecs:...:cluster/gpu)",
    )
    parser.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="names resources (default: %(default)s)")
    parser.add_argument("--region", default=DEFAULT_REGION, help="the sandbox account's Region (default: %(default)s)")
    parser.add_argument("--report", type=Path, metavar="REPORT.json", help="write the JSON report here")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    _add_verbose(parser)


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="list each function and each resource the sandbox does not emulate"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay_parser = commands.add_parser(
        "replay",
        help="replay EventBridge events through the rules, the alert queue and the handler (in process)",
        description=(
            "Put each event on the default bus (rules evaluated with EventBridge's exact semantics), deliver "
            "to the matched rules' targets, then let each SQS event source mapping drain its queue into its "
            "function, in process, with partial batch failures, retries and the dead-letter queue."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay_parser.add_argument(
        "event_files",
        nargs="+",
        type=Path,
        metavar="EVENT_FILE",
        help="an EventBridge envelope, or a JSON list of them",
    )
    replay_parser.add_argument("--template", type=Path, default=Path("template.yaml"), help="default: %(default)s")
    replay_parser.add_argument("--show-logs", action="store_true", help="print the handler's log lines too")
    _add_common_options(replay_parser)
    replay_parser.set_defaults(run=_run_replay)

    invoke_parser = commands.add_parser(
        "invoke",
        help="invoke one function from the sam build output in a clean interpreter (sam local invoke without Docker)",
        description=(
            "Run FUNCTION from the built template in a subprocess of its runtime's interpreter (python -S, with only "
            "the built function, its layers and boto3 importable), against the sandbox. An EventBridge event for an "
            "SQS-triggered function is wrapped in an SQS record; an SQS event is passed verbatim."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    invoke_parser.add_argument("function", metavar="FUNCTION_LOGICAL_ID", help="e.g. AlertRouterFunction")
    invoke_parser.add_argument("event_file", type=Path, metavar="EVENT_FILE", help="the event, as JSON")
    invoke_parser.add_argument(
        "--build-dir",
        type=Path,
        default=invoke_command.DEFAULT_BUILD_DIR,
        help="sam build output for this host's architecture (default: %(default)s)",
    )
    invoke_parser.add_argument(
        "--python", type=Path, help="the runtime's interpreter (default: found from the function's Runtime)"
    )
    invoke_parser.add_argument(
        "--boto3-dir",
        type=Path,
        default=invoke_command.DEFAULT_BOTO3_DIR,
        help="where the pinned boto3 standing in for Lambda's is installed, once per Python version "
        "(default: %(default)s)",
    )
    _add_common_options(invoke_parser)
    invoke_parser.set_defaults(run=_run_invoke)

    smoke_parser = commands.add_parser(
        "smoke",
        help="invoke several built functions, each with its sample event, in one sandbox; any failure fails it",
        description=(
            "As `invoke`, for each FUNCTION=EVENT_FILE in turn, in one sandbox (one moto account and stand-ins for "
            "all): prints a line per invocation, and exits 1 if any event does not fit its function, a function "
            "raises, or a function URL answers 4xx or 5xx. With --world, the world the samples name is seeded first "
            "(in its Region) and the samples' ids of what moto names itself are replaced by the seeded ones "
            "(sandbox/smoke.py)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    smoke_parser.add_argument(
        "invocations", nargs="+", metavar="FUNCTION=EVENT_FILE", help="e.g. SweepFunction=events/schedule/sweep.json"
    )
    smoke_parser.add_argument(
        "--build-dir", type=Path, default=invoke_command.DEFAULT_BUILD_DIR, help="default: %(default)s"
    )
    smoke_parser.add_argument("--python", type=Path, help="the runtime's interpreter (default: from the Runtime)")
    smoke_parser.add_argument(
        "--boto3-dir", type=Path, default=invoke_command.DEFAULT_BOTO3_DIR, help="default: %(default)s"
    )
    smoke_parser.add_argument(
        "--parameter-overrides", nargs="+", default=[], metavar="KEY=VALUE", help="template parameters"
    )
    smoke_parser.add_argument(
        "--world",
        type=Path,
        metavar="WORLD.yaml",
        help="seed the world the samples name first, and invoke them about it (e.g. events/world.yaml)",
    )
    smoke_parser.set_defaults(run=_run_smoke, stack_name=DEFAULT_STACK_NAME, region=DEFAULT_REGION)

    run_parser = commands.add_parser(
        "run",
        help="run a scenario: seed a world, replay its events through the rules, the alert pipeline and the "
        "state machines, and check its expectations",
        description=(
            "Seed the scenario's world (ECS clusters, capacity providers, instances, tasks; S3 checkpoints; the "
            "resume ledger), deploy the stack with its parameters, replay its events (alert pipeline in process; "
            "state machines executed by moto's interpreter with every Lambda task run by our handlers in process), "
            "perform its actions, wait for every execution, and check its expectations (docs/scenarios.md)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run_parser.add_argument(
        "scenarios",
        type=Path,
        nargs="+",
        metavar="SCENARIO.yaml",
        help="a scenario file (see scenarios/); several run one after the other, each on its own, in one process",
    )
    run_parser.add_argument(
        "--report", type=Path, metavar="REPORT.json", help="write the JSON report here (one scenario only)"
    )
    run_parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    _add_verbose(run_parser)
    run_parser.set_defaults(run=_run_scenario)

    fuzz_parser = commands.add_parser(
        "fuzz",
        help="mutated envelopes through the real AlertRouter: processed, rejected with a reason, or crashed",
        description=(
            "Mutate the sample events in events/ (keys dropped, values of other types, huge or unencodable "
            "text, naive timestamps, deep nesting, repeated arrays, bodies that are not JSON) and send them to "
            "the AlertRouterFunction in process, in SQS batches, against moto and healthy stand-ins. Prints "
            "how many were processed, rejected (dead-lettered at once, with a reason) and crashed (would be "
            "retried), crashes by signature, and whether every dead letter has a reason."
        ),
        epilog="exit status: 0 when nothing crashed and every dead letter has a reason, 1 otherwise",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fuzz_parser.add_argument("--count", type=int, default=1000, help="envelopes to send (default: %(default)s)")
    fuzz_parser.add_argument("--seed", type=int, default=1, help="the mutations' random seed (default: %(default)s)")
    fuzz_parser.add_argument("--template", type=Path, default=Path("template.yaml"), help="default: %(default)s")
    fuzz_parser.set_defaults(
        run=_run_fuzz, parameter_overrides=[], stack_name=DEFAULT_STACK_NAME, region=DEFAULT_REGION
    )

    standins_parser = commands.add_parser(
        "standins",
        help="serve the Slack and PagerDuty stand-ins on a fixed port, for sam local invoke with env.json",
        description=(
            "Serve the Slack Web API, Slack webhook and PagerDuty Events API stand-ins on HOST:PORT and print each "
            "request as it arrives, until Ctrl-C. env.json points functions run by `sam local invoke` at "
            f"http://{serve_standins.CONTAINER_HOST}:{serve_standins.DEFAULT_PORT}; see events/README.md."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    standins_parser.add_argument(
        "--host",
        default=serve_standins.DEFAULT_HOST,
        help="the address to listen on; on Linux, one the containers reach, e.g. 172.17.0.1 (default: %(default)s)",
    )
    standins_parser.add_argument("--port", type=int, default=serve_standins.DEFAULT_PORT, help="default: %(default)s")
    standins_parser.set_defaults(run=_run_standins)
    return parser


def _sandbox(args: argparse.Namespace, template: Template) -> Sandbox:
    return Sandbox(
        template,
        stack_name=args.stack_name,
        region=args.region,
        parameter_overrides=parse_parameter_overrides(args.parameter_overrides),
        faults=StandIns.faults_from_env(os.environ),
    )


def _run_replay(args: argparse.Namespace) -> int:
    files = [load_event_file(path) for path in args.event_files]
    timeline = Timeline(None if args.quiet else sys.stdout, show_logs=args.show_logs, verbose=args.verbose)
    with _sandbox(args, load_template(args.template)) as sandbox:
        report = replay(sandbox, files, timeline)
    _write(report, args.report, timeline)
    return 0


def _run_invoke(args: argparse.Namespace) -> int:
    document = read_json_file(args.event_file)
    template = invoke_command.load_built_template(args.build_dir)
    invoke_command.require_function(template, args.function)
    check_fit(template, args.function, document, args.event_file)
    timeline = Timeline(None if args.quiet else sys.stdout, verbose=args.verbose)
    with _sandbox(args, template) as sandbox:
        report, failure = invoke_command.invoke(
            sandbox,
            args.function,
            args.event_file,
            document,
            python=args.python,
            boto3_dir=args.boto3_dir,
            timeline=timeline,
        )
    _write(report, args.report, timeline)
    if failure is not None:
        print(f"python -m sandbox invoke: {failure}", file=sys.stderr)
    return 1 if failure else 0


def _run_smoke(args: argparse.Namespace) -> int:
    from sandbox.smoke import load_sample_world, seeded  # noqa: PLC0415  # (see _run_scenario)

    template = invoke_command.load_built_template(args.build_dir)
    world = load_sample_world(args.world) if args.world is not None else None
    if world is not None:
        args.region = world.region
    planned: list[tuple[str, Path, Any]] = []
    for item in args.invocations:
        function, separator, name = str(item).partition("=")
        if not separator or not function or not name:
            raise SandboxError(f"{item!r} is not FUNCTION=EVENT_FILE")
        invoke_command.require_function(template, function)
        document = read_json_file(Path(name))
        check_fit(template, function, document, Path(name))
        planned.append((function, Path(name), document))
    started = time.monotonic()
    failed = 0
    with _sandbox(args, template) as sandbox, seeded(sandbox, world) as onto_world:
        for function, path, document in planned:
            report, failure = invoke_command.invoke(
                sandbox,
                function,
                path,
                onto_world(document),
                python=args.python,
                boto3_dir=args.boto3_dir,
                timeline=Timeline(None),
            )
            milliseconds = report["invocations"][0]["duration_ms"]
            if failure is None:
                print(f"ok    {function:<28} {path}  ({milliseconds:.0f} ms)", flush=True)
            else:
                failed += 1
                print(f"FAIL  {function:<28} {path}: {failure}", flush=True)
    seconds = time.monotonic() - started
    print(f"{len(planned) - failed} of {len(planned)} invocations ok ({seconds:.0f} s)")
    return 1 if failed else 0


def _run_scenario(args: argparse.Namespace) -> int:
    # Scenarios and the smoke test seed a world, which needs moto's ECS and so its EC2 (0.4 CPU-seconds to import after
    # the sandbox's own modules): imported by the commands that seed one, so that replay, invoke, fuzz and standins
    # start without them (docs/sandbox.md).
    from sandbox.run import run_scenario  # noqa: PLC0415
    from sandbox.scenario import load_scenario  # noqa: PLC0415

    if args.report is not None and len(args.scenarios) > 1:
        raise SandboxError("--report writes the report of one scenario: name one")
    loaded = [load_scenario(path) for path in args.scenarios]  # every file checked before any runs
    failed = 0
    for path, scenario in zip(args.scenarios, loaded, strict=True):
        timeline = Timeline(None if args.quiet else sys.stdout, verbose=args.verbose)
        result = run_scenario(scenario, timeline)
        _write(result.report, args.report, timeline)
        if not result.passed:
            failed += 1
            if args.quiet:  # (otherwise the timeline has just said it)
                print(f"{path}: {_failures(result.report)}", file=sys.stderr)
    if failed and len(loaded) > 1:
        print(f"{failed} of {len(loaded)} scenarios failed", file=sys.stderr)
    return 1 if failed else 0


def _failures(report: dict[str, Any]) -> str:
    """The expectations of a scenario's report that did not hold, each with what was found."""
    missed = [
        f"{outcome['name']} ({'; '.join(outcome['problems'])})"
        for outcome in report.get("expectations", [])
        if not outcome.get("passed")
    ]
    return "expectations not held: " + ", ".join(missed) if missed else "the run did not complete"


def _run_fuzz(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise SandboxError("--count must be at least 1")
    started = time.monotonic()

    def progress(done: int) -> None:
        if done % 500 == 0 or done == args.count:
            print(f"  {done}/{args.count} sent ({time.monotonic() - started:.0f} s)", flush=True)

    with _sandbox(args, load_template(args.template)) as sandbox:
        tally = run_fuzz(sandbox, args.count, args.seed, progress)
    print("\n".join(tally.lines()))
    print(f"({time.monotonic() - started:.0f} s, seed {args.seed})")
    return 0 if not tally.crashed and not tally.without_reason else 1


def _run_standins(args: argparse.Namespace) -> int:
    return serve_standins.serve_until_interrupted(args.host, args.port, sys.stdout)


def _write(report: dict[str, object], path: Path | None, timeline: Timeline) -> None:
    if path is not None:
        write_report(report, path)
        timeline.report_written(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except SandboxError as exc:
        print(f"python -m sandbox {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
