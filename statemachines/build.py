"""Write each workflow's ASL JSON from its Python source, or check (--check) that the checked-in JSON is up to date.

python -m statemachines.build            # rewrite what is out of date (make workflow)
python -m statemachines.build --check    # exit 1, naming the states that differ, if a JSON is out of date
python -m statemachines.build --stdout   # print the generated JSON instead
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from statemachines import resume_training
from statemachines.asl import Json, differences, render

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Each generated file, and the definition its source builds.
WORKFLOWS: dict[Path, Json] = {
    HERE / "resume_training.asl.json": resume_training.DEFINITION,
}


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def stale(path: Path, definition: Json) -> list[str]:
    """Why `path` is not what `definition` renders to (nothing if it is): the states that differ, by name."""
    if not path.is_file():
        return [f"{_relative(path)} is missing"]
    text, generated = path.read_text(encoding="utf-8"), render(definition)
    if text == generated:
        return []
    try:
        current = json.loads(text)
    except json.JSONDecodeError as error:
        return [f"{_relative(path)} is not valid JSON ({error})"]
    if not isinstance(current, dict):
        return [f"{_relative(path)} is not a state machine (a JSON object)"]
    changed = differences(current, definition)
    if not changed:
        return [f"{_relative(path)} has the same content as its source, but in another order or formatting"]
    return [f"{_relative(path)} differs from its source in: {', '.join(changed)}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statemachines.build", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a JSON is out of date")
    mode.add_argument("--stdout", action="store_true", help="print the generated JSON instead of writing it")
    arguments = parser.parse_args(argv)

    problems: list[str] = []
    for path, definition in WORKFLOWS.items():
        if arguments.stdout:
            sys.stdout.write(render(definition))
        elif arguments.check:
            problems.extend(stale(path, definition))
        elif stale(path, definition):
            path.write_text(render(definition), encoding="utf-8")
            print(f"wrote {_relative(path)}")
        else:
            print(f"{_relative(path)} is up to date")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print("The JSON is generated: edit the source (statemachines/*.py), then run `make workflow`.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
