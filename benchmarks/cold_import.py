"""Cold import of the built functions, against a bare `import boto3` in the same interpreter and path.

    make build-host
    .venv/bin/python benchmarks/cold_import.py [--runs 20] [--functions LOGICAL_ID ...] [--tracing] [--importtime]
        [--instructions] [--out reports/cold_import.json]

Method (see benchmarks/README.md):
- Every function of the template is measured (the resume task functions with TrainingCapacityProviders set, as
  they exist only then), unless `--functions` names some.
- What is measured is the `sam build` output for this machine (`.aws-sam/build-host`), imported as Lambda's
  Python runtime imports a handler module: a fresh `python3.X -S` process (the function's runtime, found as
  `python -m sandbox invoke` finds it) whose import path is the function's code, its layer and the boto3
  standing in for the runtime's, in that order; `-S` keeps this machine's site-packages out. The process
  gets the function's environment from the built template (Globals included) plus what Lambda sets
  (LAMBDA_TASK_ROOT, ...), and PYTHONDONTWRITEBYTECODE=1: Lambda's code directories are read-only, so
  whatever bytecode the build does not ship is compiled again on every cold start, and so it is here.
- Each process times its own import with `time.perf_counter` (interpreter start-up excluded) and prints it.
- Cases run interleaved, one process each per round, so that load on the machine hits every case alike:
  for each function, `import <handler module>` and a bare `import boto3` with the same interpreter and path.
- Reported per case: median and p90 (nearest rank) over the runs; per function, the ratio of the medians.
- A third case, *libraries*, does in a function's environment what every function does before any code of ours
  (LIBRARIES: imports boto3, declares one pydantic model, imports Powertools' Logger, Metrics and Tracer): its ratio
  is the least any function can reach, and each function is also reported as its milliseconds over it (what our code
  costs).
- `--tracing` measures the functions as a stack deployed with `Tracing=Active` has them (the TracingLayer on the
  path, POWERTOOLS_TRACE_DISABLED=false).
- `--importtime` adds one `-X importtime` run per function and lists the imports that cost the most,
  each with its cumulative time and the module that first imported it.
- `--instructions` adds one run per case under valgrind (cachegrind, no cache simulation) and reports the
  instructions each import executes (those of `-c pass` in the same environment taken off) and their ratio to
  the bare import's: a count that load on the machine does not change, to check the timed ratios against.

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess  # nosec B404  # runs the runtime interpreter with a fixed program, no shell
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.invoke import DEFAULT_BOTO3_DIR, PINNED_REQUIREMENTS, load_built_template
from sandbox.lambda_runtime import ensure_runtime_boto3, find_runtime_interpreter, pinned_boto3
from sandbox.template import Resolver, StackIdentity, Template, resolve_parameters

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_TYPE = "AWS::Serverless::Function"
# The resume functions exist only when TrainingCapacityProviders is set (as in `make smoke`).
PARAMETERS = {"TrainingCapacityProviders": "gpu-training"}
_TIMED_IMPORT = "import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
LIBRARIES = (
    "import boto3; from pydantic import ConfigDict, create_model; "
    "create_model('Floor', __config__=ConfigDict(defer_build=True), value=(int, ...)); "
    "from aws_lambda_powertools import Logger, Metrics, Tracer"
)
"""What every function does before any code of ours: import boto3, declare a pydantic model (each declares its settings
or input as models when imported, deferring their validators as ours do; the first declaration costs about 95 M
instructions more than importing BaseModel, 0.13x a bare `import boto3`), and import Powertools' logger, metrics and
tracer. Its time over the bare boto3's is the least any function of ours can take (see benchmarks/README.md)."""


class _Placeholders:
    """Resource attributes for resolving the template without a stack: values are only read as text."""

    def ref(self, logical_id: str) -> str:
        return f"bench-{logical_id}"

    def get_att(self, logical_id: str, attribute: str) -> str:
        return f"bench-{logical_id}-{attribute}"


@dataclass(frozen=True)
class Case:
    function: str
    label: str
    module: str
    statement: str
    command: list[str]
    cwd: Path
    environment: dict[str, str]


@dataclass(frozen=True)
class Summary:
    case: str
    runs: int
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float


def build_runtime(template: Template) -> str:
    """The Python the build was made for (sam build records it in each resource's BuildMethod)."""
    for resource in template.resources.values():
        method = (resource.get("Metadata") or {}).get("BuildMethod")
        if isinstance(method, str) and method.startswith("python"):
            return method
    raise SystemExit(f"{template.path} records no Python BuildMethod: is it a sam build output?")


def stack_resolver(template: Template, *, tracing: bool) -> Resolver:
    """The built template resolved for the benchmark's stack: PARAMETERS, the build's runtime, Tracing."""
    overrides = {**PARAMETERS, "PythonRuntime": build_runtime(template)}
    if "Tracing" in template.parameters:  # builds made before the parameter existed traced always
        overrides["Tracing"] = "Active" if tracing else "Disabled"
    elif tracing:
        raise SystemExit(f"{template.path} has no Tracing parameter")
    parameters = resolve_parameters(template, overrides)
    return Resolver(template, StackIdentity("bench"), parameters, _Placeholders())


def stack_functions(template: Template, *, tracing: bool = False) -> list[str]:
    """Every function the stack creates with PARAMETERS, in the template's order."""
    resolver = stack_resolver(template, tracing=tracing)
    return [
        logical_id
        for logical_id in template.resources
        if template.resource_type(logical_id) == FUNCTION_TYPE and resolver.is_enabled(logical_id)
    ]


def function_cases(
    template: Template, build_dir: Path, function: str, interpreter: Path, boto3_dir: Path, *, tracing: bool
) -> tuple[Case, Case, Case]:
    resolver = stack_resolver(template, tracing=tracing)
    properties = resolver.properties(function)
    code_dir = (build_dir / str(properties["CodeUri"])).resolve()
    layers = [
        (build_dir / str(template.resources[str(ref).removeprefix("bench-")]["Properties"]["ContentUri"]) / "python")
        for ref in properties.get("Layers") or []
    ]
    variables = {name: str(value) for name, value in properties["Environment"]["Variables"].items()}
    environment = {
        **variables,
        "PYTHONPATH": os.pathsep.join(str(path.resolve()) for path in (code_dir, *layers, boto3_dir)),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LAMBDA_TASK_ROOT": str(code_dir),
        "AWS_LAMBDA_FUNCTION_NAME": function,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{properties['Runtime']}",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
    }
    module = str(properties["Handler"]).rpartition(".")[0]

    def case(label: str, imported: str, environment: dict[str, str], statement: str = "") -> Case:
        statement = statement or f"import {imported}"
        command = [str(interpreter), "-S", "-c", _TIMED_IMPORT.format(statement=statement)]
        return Case(function, label, imported, statement, command, code_dir, environment)

    # The baseline is the runtime's boto3 alone, as a function with no layer of ours imports it.
    bare = {**environment, "PYTHONPATH": str(boto3_dir.resolve())}
    return (
        case(f"{function}: import {module}", module, environment),
        case("bare import boto3", "boto3", bare),
        case("libraries: boto3, a pydantic model, Powertools", "boto3", environment, LIBRARIES),
    )


def run_once(case: Case, *extra_flags: str) -> subprocess.CompletedProcess[str]:
    command = [case.command[0], *extra_flags, *case.command[1:]]
    # The command is the runtime interpreter and a fixed -c program: no outside input reaches it.
    completed = subprocess.run(  # noqa: S603  # nosec B603  # fixed argv, no shell
        command, cwd=case.cwd, env=case.environment, capture_output=True, text=True, timeout=120, check=False
    )
    if completed.returncode != 0:
        raise SystemExit(f"{case.label} failed:\n{completed.stderr.strip()}")
    return completed


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def summarise(label: str, seconds: list[float]) -> Summary:
    millis = [value * 1000 for value in seconds]
    return Summary(label, len(millis), statistics.median(millis), p90(millis), min(millis), max(millis))


def import_offenders(case: Case, top: int) -> list[dict[str, Any]]:
    """One `-X importtime` run: the costliest imports made by our modules (the handler module and
    fault_responder.*), each with its cumulative time and the module of ours that imported it first."""
    stderr = run_once(case, "-X", "importtime").stderr
    rows: list[dict[str, Any]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        # The name is indented two spaces per level of nesting, after one separating space.
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append({"module": name.strip(), "cumulative_ms": int(cumulative) / 1000, "depth": depth})
    # importtime prints children before their parent; a module's importer is the next shallower line below it.
    for index, row in enumerate(rows):
        parent = next((later["module"] for later in rows[index + 1 :] if later["depth"] < row["depth"]), None)
        row["imported_by"] = parent
    ours = [row for row in rows if _is_ours(row["imported_by"], case.module)]
    return sorted(ours, key=lambda row: row["cumulative_ms"], reverse=True)[:top]


def _is_ours(module: str | None, handler_module: str) -> bool:
    return module is not None and (module == handler_module or module.split(".")[0] == "fault_responder")


_INSTRUCTIONS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(case: Case, program: str) -> int:
    """The instructions `program` executes in the case's interpreter and environment (valgrind's count)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    command = [
        valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        case.command[0], "-S", "-c", program,
    ]  # fmt: skip
    # valgrind and the runtime interpreter with a fixed -c program: no outside input reaches it.
    completed = subprocess.run(  # noqa: S603  # nosec B603  # fixed argv, no shell
        command, cwd=case.cwd, env=case.environment, capture_output=True, text=True, timeout=900, check=False
    )
    found = _INSTRUCTIONS.search(completed.stderr)
    if completed.returncode != 0 or found is None:
        raise SystemExit(f"{case.label} under valgrind failed:\n{completed.stderr.strip()[-2000:]}")
    return int(found.group(1).replace(",", ""))


def import_instructions(case: Case, start_ups: dict[tuple[str, str], int]) -> int:
    """The instructions of the case's import alone: interpreter start-up (`-c pass` with the same import path,
    counted once per path) taken off."""
    path = (str(case.cwd), case.environment["PYTHONPATH"])
    if path not in start_ups:
        start_ups[path] = instructions(case, "pass")
    return instructions(case, case.statement) - start_ups[path]


def count_instructions(functions: list[Case], libraries: Case, bare: Case) -> dict[str, int]:
    """Each case's import counted under valgrind, printed with its ratio to the bare import's."""
    print("\ninstructions of each import (valgrind cachegrind, one run each; start-up taken off)")
    start_ups: dict[tuple[str, str], int] = {}
    counts = {case.label: import_instructions(case, start_ups) for case in [*functions, libraries, bare]}
    for case in [*functions, libraries]:
        ratio = counts[case.label] / counts[bare.label]
        print(f"  {case.label}: {counts[case.label] / 1e6:,.0f} M, {ratio:.2f}x the bare import")
    print(f"  {bare.label}: {counts[bare.label] / 1e6:,.0f} M")
    return counts


def bytecode_files(build_dir: Path, function: str) -> int:
    return sum(1 for _ in (build_dir / function).rglob("*.pyc")) + sum(
        1 for _ in (build_dir / "CommonLayer").rglob("*.pyc")
    )


def figures(
    summaries: list[Summary], functions: list[Case], bare: Case, libraries: Case
) -> tuple[dict[str, float], dict[str, float], float]:
    """Per function: its median over the bare boto3's, and its milliseconds over the libraries'; and the libraries'
    median over the bare boto3's."""
    median = {summary.case: summary.median_ms for summary in summaries}
    ratios = {case.function: median[case.label] / median[bare.label] for case in functions}
    own_ms = {case.function: median[case.label] - median[libraries.label] for case in functions}
    return ratios, own_ms, median[libraries.label] / median[bare.label]


def render(summaries: list[Summary], ratios: dict[str, float], own_ms: dict[str, float], libraries: float) -> str:
    lines = ["| case | runs | median | p90 | min | max |", "|---|---:|---:|---:|---:|---:|"]
    lines += [
        f"| {s.case} | {s.runs} | {s.median_ms:.0f} ms | {s.p90_ms:.0f} ms | {s.min_ms:.0f} ms | {s.max_ms:.0f} ms |"
        for s in summaries
    ]
    lines += [
        f"{function}: median import / median bare boto3 = {ratio:.2f}x ({own_ms[function]:.0f} ms over the libraries)"
        for function, ratio in ratios.items()
    ]
    lines.append(f"libraries (boto3, a pydantic model, Powertools): median / median bare boto3 = {libraries:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", type=Path, default=ROOT / ".aws-sam" / "build-host")
    parser.add_argument(
        "--functions", nargs="+", metavar="LOGICAL_ID", help="measure only these (default: every function)"
    )
    parser.add_argument("--runs", type=int, default=20, help="fresh processes per case (default %(default)s)")
    parser.add_argument("--tracing", action="store_true", help="as deployed with Tracing=Active")
    parser.add_argument("--importtime", action="store_true", help="also list the costliest imports")
    parser.add_argument("--top", type=int, default=15, help="imports listed by --importtime")
    parser.add_argument(
        "--instructions", action="store_true", help="also count each import's instructions (valgrind; slow)"
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    template = load_built_template(args.build_dir)
    if not args.functions:
        args.functions = stack_functions(template, tracing=args.tracing)
    runtime = build_runtime(template)
    interpreter = find_runtime_interpreter(runtime)
    pins = pinned_boto3(PINNED_REQUIREMENTS)
    boto3_dir = ensure_runtime_boto3(ROOT / DEFAULT_BOTO3_DIR, pins, interpreter, runtime.removeprefix("python"))
    triples = [
        function_cases(template, args.build_dir, name, interpreter, boto3_dir, tracing=args.tracing)
        for name in args.functions
    ]
    functions = [module_case for module_case, _, _ in triples]
    _, bare, libraries = triples[0]
    cases = [*functions, libraries, bare]
    tracing = "Tracing=Active" if args.tracing else "Tracing=Disabled"
    print(f"{interpreter} ({runtime}), boto3 from {boto3_dir}; {tracing}; {args.runs} runs per case, interleaved")
    for name in args.functions:
        print(f"{name}: {bytecode_files(args.build_dir, name)} .pyc files in the function and its layer")

    seconds: dict[str, list[float]] = {case.label: [] for case in cases}
    for _ in range(args.runs):
        for case in cases:
            seconds[case.label].append(float(run_once(case).stdout.strip().splitlines()[-1]))
    summaries = [summarise(case.label, seconds[case.label]) for case in cases]
    ratios, own_ms, libraries_ratio = figures(summaries, functions, bare, libraries)
    print(render(summaries, ratios, own_ms, libraries_ratio))

    offenders: dict[str, list[dict[str, Any]]] = {}
    if args.importtime:
        for module_case in functions:
            offenders[module_case.function] = import_offenders(module_case, args.top)
            print(f"\n{module_case.label}: costliest imports (cumulative, one run with -X importtime)")
            for row in offenders[module_case.function]:
                print(f"  {row['cumulative_ms']:8.1f} ms  {row['module']}  (imported by {row['imported_by']})")

    counts = count_instructions(functions, libraries, bare) if args.instructions else {}

    if args.out:
        report = {
            "config": {**vars(args), "build_dir": str(args.build_dir), "out": str(args.out)},
            "environment": {"python": runtime, "interpreter": str(interpreter), "machine": platform.machine()},
            "summaries": [asdict(summary) for summary in summaries],
            "ratios": ratios,
            "over_the_libraries_ms": own_ms,
            "libraries_ratio": libraries_ratio,
            "seconds": seconds,
            "importtime": offenders,
            "instructions": counts,
            "method": __doc__,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
