"""`python -m local`: the functions in real Lambda containers (`sam local`), against the local stack.

The Makefile's targets run it: `make local-invoke` (`invoke`), `make local-up` and `make local-down` (`up`, `down`),
`make local-image` (`image`). See local/__init__.py for what each piece does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from local.engine import DOCKER_HOST, leftovers, machine_lock, start_engine, stop_engine
from local.image import LambdaImage, ensure_image, host_architecture
from local.invoke import SAM_LOCAL_INVOKE, SAM_LOCAL_START_LAMBDA, Outcome, free_port, invoke_all
from local.process import LocalError, start
from local.stack import FILES_DIR, LocalStack, Planned, functions_of
from sandbox.errors import SandboxError
from sandbox.invoke import load_built_template
from sandbox.serve_standins import describe
from sandbox.template import parse_parameter_overrides

_SERVE_PID = FILES_DIR / "stack.pid"
_SERVE_LOG = FILES_DIR / "stack.log"
_READY = FILES_DIR / "ready"
_UP_SECONDS = 3600
_DOWN_SECONDS = 120


class Interrupted(Exception):
    """SIGTERM or SIGHUP: stop as for Ctrl-C, tearing everything down."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    invoke = commands.add_parser(
        "invoke",
        help="invoke functions in Lambda containers against the local stack, each with its sample; any failure fails",
    )
    _stack_options(invoke)
    invoke.add_argument(
        "--every-function",
        action="store_true",
        help="each function the template creates must have a sample among FUNCTION=EVENT_FILE (make local-invoke)",
    )
    invoke.add_argument(
        "--plain",
        nargs="*",
        default=[],
        metavar="FUNCTION=EVENT_FILE",
        help="first invoke these with a plain `sam local invoke` (the others go through `sam local start-lambda`)",
    )
    invoke.add_argument("--report", type=Path, metavar="REPORT.json", help="write each invocation's outcome here")
    invoke.set_defaults(run=_run_invoke)

    up = commands.add_parser("up", help="start the local stack in the background, for sam local commands; then `down`")
    _stack_options(up)
    up.set_defaults(run=_run_up)
    serve = commands.add_parser("serve", help="the local stack in the foreground, until Ctrl-C (what `up` starts)")
    _stack_options(serve)
    serve.set_defaults(run=_run_serve)
    down = commands.add_parser("down", help="stop what `up` started, and anything a killed run left")
    down.set_defaults(run=_run_down)

    image = commands.add_parser("image", help="make the Lambda base image ready (pulled, cached or built)")
    image.add_argument("--runtime", default="python3.13", help="default: %(default)s")
    image.add_argument("--architecture", default=None, help="default: this machine's")
    _image_options(image)
    image.set_defaults(run=_run_image)
    return parser


def _stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "invocations", nargs="*", metavar="FUNCTION=EVENT_FILE", help="e.g. SweepFunction=events/schedule/sweep.json"
    )
    parser.add_argument("--world", type=Path, metavar="WORLD.yaml", help="the samples' world (events/world.yaml)")
    parser.add_argument("--build-dir", type=Path, default=Path(".aws-sam/build-host"), help="default: %(default)s")
    parser.add_argument(
        "--parameter-overrides", nargs="+", default=[], metavar="KEY=VALUE", help="the build's template parameters"
    )
    parser.add_argument("--sam", type=Path, default=Path(".venv-sam/bin/sam"), help="default: %(default)s")
    _image_options(parser)


def _image_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image",
        choices=("auto", "official", "local"),
        default=os.environ.get("LOCAL_LAMBDA_IMAGE", "auto"),
        help="AWS's image, the local equivalent, or AWS's where it can be pulled (auto, the default)",
    )
    parser.add_argument(
        "--uv", type=Path, default=Path(".venv-uv/bin/uv"), help="installs the image's packages (default: %(default)s)"
    )


# --- invoke ----------------------------------------------------------------------------------------------------------


def _run_invoke(args: argparse.Namespace, out: TextIO) -> int:
    samples = _samples(args.invocations)
    overrides = parse_parameter_overrides(args.parameter_overrides)
    if not samples:
        raise LocalError("name at least one FUNCTION=EVENT_FILE")
    _check_every_function(args, samples, overrides)
    started = time.monotonic()
    with machine_lock(out), _torn_down(out):
        engine = start_engine(out)
        image = _image(args, overrides, out)
        with LocalStack(args.build_dir, args.world, overrides, engine) as stack:
            plain = [stack.plan(function, sample) for function, sample in _samples(args.plain)]
            warm = [stack.plan(function, sample) for function, sample in samples]
            port = free_port()
            stack.write_files(image, [*plain, *warm], port)
            print(f"local: invoking in Lambda containers of {image.name}", file=out, flush=True)
            outcomes = invoke_all(stack, plain, warm, sam=args.sam, port=port, out=out)
    failed = [outcome.function for outcome in outcomes if outcome.failure is not None]
    functions = list(dict.fromkeys(outcome.function for outcome in outcomes))
    answered = [function for function in functions if function not in failed]
    print(
        f"{len(answered)} of {len(functions)} functions answered correctly, each in a Lambda container "
        f"({len(outcomes)} invocations, {time.monotonic() - started:.0f} s)"
        + (f"; FAILED: {', '.join(dict.fromkeys(failed))}" if failed else ""),
        file=out,
    )
    if args.report is not None:
        _write_report(args.report, image, outcomes)
    return 1 if failed else 0


def _samples(invocations: Sequence[str]) -> list[tuple[str, Path]]:
    samples = []
    for item in invocations:
        function, separator, name = str(item).partition("=")
        if not separator or not function or not name:
            raise LocalError(f"{item!r} is not FUNCTION=EVENT_FILE")
        samples.append((function, Path(name)))
    return samples


def _check_every_function(args: argparse.Namespace, samples: list[tuple[str, Path]], overrides: dict[str, str]) -> None:
    """With --every-function, the template's functions and the samples' must be the same."""
    if not args.every_function:
        return
    functions = functions_of(load_built_template(args.build_dir), overrides)
    named = [function for function, _ in samples]
    without = [function for function in functions if function not in named]
    unknown = sorted(set(named) - set(functions))
    if without or unknown:
        raise LocalError(
            (f"no sample for {', '.join(without)} (add FUNCTION=EVENT_FILE to the Makefile's SMOKE_INVOCATIONS)"
             if without else "")
            + ("; " if without and unknown else "")
            + (f"samples for functions the template does not create: {', '.join(unknown)}" if unknown else "")
        )  # fmt: skip


def _image(args: argparse.Namespace, overrides: dict[str, str], out: TextIO) -> LambdaImage:
    runtime = overrides.get("PythonRuntime", "python3.13")
    architecture = overrides.get("Architecture", host_architecture())
    image = ensure_image(runtime, architecture, args.uv, out, choice=args.image)
    print(f"local: Lambda image {image.name} ({image.note})", file=out, flush=True)
    return image


def _write_report(path: Path, image: LambdaImage, outcomes: list[Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "image": {"name": image.name, "official": image.official},
        "invocations": [outcome.__dict__ for outcome in outcomes],
        "failed": [outcome.function for outcome in outcomes if outcome.failure is not None],
    }
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


# --- up, serve, down -------------------------------------------------------------------------------------------------


def _run_up(args: argparse.Namespace, out: TextIO) -> int:
    """Start `serve` in a session of its own, and return once it is ready (or has failed)."""
    if _serving() is not None:
        raise LocalError(f"the local stack is already up (pid {_serving()}): make local-down first")
    FILES_DIR.mkdir(parents=True, exist_ok=True)
    _READY.unlink(missing_ok=True)
    _SERVE_LOG.write_text("")
    argv = [sys.executable, "-m", "local", "serve", *args.invocations, "--build-dir", str(args.build_dir)]
    argv += ["--sam", str(args.sam), "--uv", str(args.uv), "--image", args.image]
    argv += ["--world", str(args.world)] if args.world is not None else []
    argv += ["--parameter-overrides", *args.parameter_overrides] if args.parameter_overrides else []
    process = start(argv, log=_SERVE_LOG, own_session=True)
    _SERVE_PID.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + _UP_SECONDS
    shown = 0
    try:
        while not _READY.exists():
            text = _SERVE_LOG.read_text(errors="replace")
            print(text[shown:], end="", file=out, flush=True)
            shown = len(text)
            if process.poll() is not None:
                raise LocalError(f"the local stack did not start (exit status {process.returncode}): see {_SERVE_LOG}")
            if time.monotonic() > deadline:
                raise LocalError(f"the local stack was not up within {_UP_SECONDS} s: see {_SERVE_LOG}")
            time.sleep(0.5)
    except BaseException:
        # Interrupted or failed while it starts: it stops (and tears down what it started) before this returns.
        if process.poll() is None:
            process.terminate()
            process.wait(_DOWN_SECONDS)
        _SERVE_PID.unlink(missing_ok=True)
        raise
    print(_SERVE_LOG.read_text(errors="replace")[shown:], end="", file=out, flush=True)
    return 0


def _run_serve(args: argparse.Namespace, out: TextIO) -> int:
    samples = _samples(args.invocations)
    overrides = parse_parameter_overrides(args.parameter_overrides)
    with machine_lock(out), _torn_down(out):
        engine = start_engine(out)
        image = _image(args, overrides, out)
        with LocalStack(args.build_dir, args.world, overrides, engine) as stack:
            planned: list[Planned] = [stack.plan(function, sample) for function, sample in samples]
            stack.write_files(image, planned, free_port())
            print(_instructions(stack, planned), file=out, flush=True)
            _READY.write_text(f"{os.getpid()}\n")
            seen = 0
            while True:  # until SIGTERM (make local-down) or Ctrl-C
                time.sleep(0.2)
                received = stack.sandbox.standins.requests_since(seen)
                for request in received:
                    print(f"stand-ins: {describe(request)}", file=out, flush=True)
                seen += len(received)


def _instructions(stack: LocalStack, planned: list[Planned]) -> str:
    example = next((item for item in planned if item.event_file != item.sample), None)
    lines = [
        f"local stack up: AWS (moto) {stack.sandbox.moto_endpoint}, Slack and PagerDuty stand-ins "
        f"{stack.sandbox.standins.base_url}, seen by the containers on bridge {stack.engine.subnet}",
        f"  export DOCKER_HOST={DOCKER_HOST}",
        "  " + SAM_LOCAL_INVOKE.format(function="AlertRouterFunction", event="events/sqs/alert-router-xid46.json"),
        "  " + SAM_LOCAL_START_LAMBDA,
    ]
    if planned:
        lines.append(
            f"  each sample as its function takes it, about the seeded world: {FILES_DIR}/events/<Function>.json"
        )
        if example is not None:
            lines.append("  " + SAM_LOCAL_INVOKE.format(function=example.function, event=example.event_file))
    lines.append(f"  the stand-ins' requests: {_SERVE_LOG}; make local-down stops it all")
    return "\n".join(lines)


def _run_down(args: argparse.Namespace, out: TextIO) -> int:
    pid = _serving()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _DOWN_SECONDS
        while _serving() == pid and time.monotonic() < deadline:
            time.sleep(0.2)
        if _serving() == pid:
            raise LocalError(f"the local stack (pid {pid}) did not stop within {_DOWN_SECONDS} s")
    _SERVE_PID.unlink(missing_ok=True)
    _READY.unlink(missing_ok=True)
    if _SERVE_LOG.exists():
        requests = [line for line in _SERVE_LOG.read_text(errors="replace").splitlines() if line.startswith("stand-")]
        print(f"local stack down; {len(requests)} request(s) reached the stand-ins", file=out)
        for line in requests[-20:]:
            print(f"  {line}", file=out)
    with machine_lock(out):
        removed = stop_engine()  # what a killed run left, if anything
    if removed:
        print(f"local: removed what a stopped run left: {'; '.join(removed)}", file=out)
    left = leftovers()
    if left:
        raise LocalError(f"still there after local-down: {'; '.join(left)}")
    return 0


def _serving() -> int | None:
    """The pid of the running `serve`, if any."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(_SERVE_PID.read_text().strip())
        if "local serve" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "):
            return pid
    return None


# --- image -----------------------------------------------------------------------------------------------------------


def _run_image(args: argparse.Namespace, out: TextIO) -> int:
    started = time.monotonic()
    with machine_lock(out), _torn_down(out):
        start_engine(out)
        image = ensure_image(args.runtime, args.architecture or host_architecture(), args.uv, out, choice=args.image)
    print(f"local: Lambda image {image.name} ({image.note}; {time.monotonic() - started:.0f} s in all)", file=out)
    return 0


# --- Interruptions ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _torn_down(out: TextIO) -> Iterator[None]:
    """Everything of the engine removed when the block ends, however it ends; a Ctrl-C or SIGTERM meanwhile is
    noted and does not stop the teardown."""
    try:
        yield
    finally:

        def noted(signum: int, frame: object) -> None:
            print(f"local: {signal.Signals(signum).name} while stopping: finishing the teardown first", file=out)

        saved = {signum: signal.signal(signum, noted) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            started = time.monotonic()
            removed = stop_engine()
            print(f"local: stopped: {'; '.join(removed) or 'nothing left'} ({time.monotonic() - started:.1f} s)",
                  file=out, flush=True)  # fmt: skip
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)


def _interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C raises KeyboardInterrupt even in a process started with SIGINT ignored (a shell's background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGHUP, _interrupted)
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args, sys.stdout))
    except (LocalError, SandboxError) as exc:
        print(f"python -m local {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"python -m local {args.command}: interrupted ({str(exc) or 'SIGINT'}); everything it started is stopped",
              file=sys.stderr)  # fmt: skip
        return 130


if __name__ == "__main__":
    sys.exit(main())
