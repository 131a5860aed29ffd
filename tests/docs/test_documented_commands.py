"""Every command the documentation shows as runnable runs, as written, from the repository root.

The convention (README.md, "Test it"): every fenced block in a Markdown file of the repository names its language;
commands are in ```bash blocks, and each of those runs here and must exit 0, unless the line just above it says why
it cannot, with one of these markers, each checked for what it claims:

- `<!-- doc-check: needs-aws -->`: every command is an `aws` call, a `sam` deploy-type command, names an `s3://`
  location, runs `fault-responder` against a deployed stack, table or cluster (`--stack`, `--table` or
  `--cluster`, and no `--endpoint-url`), or runs `sam local` with `--env-vars env.json`, whose values name a deployed
  stack's table and queue (nothing here has AWS credentials). `sam local` against the local stack runs here (`make
  local-up` starts Docker);
- `<!-- doc-check: slow -->`: every command's program (its first two words) also runs in a runnable block of the same
  file, in a quicker form;
- `<!-- doc-check: checked-by PATH -->`: a command that does not return on its own (`make test` would run this test
  again; a server runs until Ctrl-C): PATH, a file of the repository, contains every command of the block and runs it.

Nothing is skipped: each block is either run or one of these checks. A block must also leave the checkout as it found
it, apart from git-ignored output (.aws-sam/, reports/).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, checkout_lock, local_runs_idle

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!-- doc-check: (?P<kind>[a-z-]+)(?: (?P<argument>\S+))? -->\s*$")
MARKERS = ("needs-aws", "slow", "checked-by")
SHELL_LANGUAGES = {"sh", "shell", "console", "zsh", "shell-session"}
BLOCK_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    language: str
    body: str
    marker: str | None
    argument: str | None

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, comments and blank lines left out."""
        joined = self.body.replace("\\\n", " ")
        return [
            " ".join(line.split()) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]


def documents() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / name for name in listed if (ROOT / name).is_file())


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = next(
            (
                i
                for i in range(index + 1, len(lines))
                if lines[i].strip().startswith(fence) and not lines[i].strip()[len(fence) :].strip()
            ),
            len(lines),
        )
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(previous)
        body = textwrap.dedent(
            "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[index + 1 : end])
        )
        found.append(
            Block(
                document=path.relative_to(ROOT).as_posix(),
                line=index + 1,
                language=opening["info"].strip().split(" ")[0],
                body=body + "\n",
                marker=marker["kind"] if marker else None,
                argument=marker["argument"] if marker else None,
            )
        )
        index = end + 1
    return found


ALL_BLOCKS = [block for path in documents() for block in blocks_of(path)]
BASH = [block for block in ALL_BLOCKS if block.language == "bash"]
RUNNABLE = [block for block in BASH if block.marker is None]
MARKED = [block for block in BASH if block.marker is not None]


def test_every_block_names_its_language_and_commands_are_bash() -> None:
    unnamed = [block.id for block in ALL_BLOCKS if not block.language]
    other_shells = [block.id for block in ALL_BLOCKS if block.language in SHELL_LANGUAGES]

    assert not unnamed, f"fenced blocks without a language (use text for output and diagrams): {unnamed}"
    assert not other_shells, f"commands must be in ```bash blocks, to be run or marked: {other_shells}"
    assert RUNNABLE, "no runnable block found: the parser is broken"


def test_markers_stand_just_above_a_bash_block() -> None:
    # Given every marker line in the documents
    misplaced = []
    for path in documents():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip().startswith("<!-- doc-check"):
                continue
            following = next((text for text in lines[number:] if text.strip()), "")
            opening = _FENCE.match(following)
            if _MARKER.match(line) is None or opening is None or opening["info"].strip() != "bash":
                misplaced.append(f"{path.relative_to(ROOT)}:{number}")

    # Then each one is well formed and applies to the bash block that follows it
    assert not misplaced, f"doc-check markers not directly above a ```bash block, or malformed: {misplaced}"
    assert all(block.marker in MARKERS for block in MARKED), [b.id for b in MARKED if b.marker not in MARKERS]


def _program(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    while words and "=" in words[0] and not words[0].startswith("-"):  # leading VAR=value assignments
        words = words[1:]
    return words


def _needs_aws(command: str) -> bool:
    words = _program(command)
    sam = bool(words) and Path(words[0]).name == "sam" and len(words) > 1
    cli = (
        (Path(words[0]).name == "fault-responder" or "fault_responder.cli" in words)
        and bool({"--stack", "--table", "--cluster"} & set(words))
        and "--endpoint-url" not in words
    )
    deployed_stack_variables = sam and words[1] == "local" and "env.json" in _option_values(words, "--env-vars")
    return (
        (bool(words) and words[0] == "aws")
        or (sam and words[1] in {"deploy", "sync", "logs", "delete"})
        or ("s3://" in command)
        or cli
        or deployed_stack_variables
    )


def _option_values(words: list[str], option: str) -> list[str]:
    """The values `option` is given in `words` (`--option VALUE` or `--option=VALUE`)."""
    values = [word.split("=", 1)[1] for word in words if word.startswith(option + "=")]
    return values + [words[i + 1] for i, word in enumerate(words[:-1]) if word == option]


@pytest.mark.parametrize("block", MARKED, ids=[block.id for block in MARKED])
def test_a_block_that_is_not_run_here_says_truly_why(block: Block) -> None:
    # Given a bash block marked as not run by this test
    assert block.commands, f"{block.id}: an empty block"

    # Then what the marker claims holds for every command in it
    if block.marker == "needs-aws":
        assert all(_needs_aws(command) for command in block.commands), f"{block.id}: not every command needs AWS"
    elif block.marker == "slow":
        runnable_programs = {
            tuple(_program(command)[:2])
            for other in RUNNABLE
            if other.document == block.document
            for command in other.commands
        }
        missing = [command for command in block.commands if tuple(_program(command)[:2]) not in runnable_programs]
        assert not missing, f"{block.id}: no quicker runnable block of {block.document} runs {missing}"
    else:
        assert block.argument, f"{block.id}: checked-by needs the file that runs the command"
        checker = ROOT / block.argument
        assert checker.is_file(), f"{block.id}: {block.argument} is not a file of the repository"
        text = " ".join(checker.read_text(encoding="utf-8").split())
        missing = [command for command in block.commands if command not in text]
        assert not missing, f"{block.id}: {block.argument} does not run {missing}"


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def _environment() -> dict[str, str]:
    # As CI runs it: nothing may reach AWS.
    environment = {
        name: value
        for name, value in os.environ.items()
        if name
        not in {"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "SANDBOX_FAULTS"}
    }
    return {**environment, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"}


def _builds(block: Block) -> bool:
    """Whether the block runs a make target (which may build into the checkout, or set it up): it runs alone."""
    return any(_program(command)[:1] == ["make"] for command in block.commands)


def _starts_a_local_run(block: Block) -> bool:
    """Whether the block starts a local run (Docker, `make local-up`), of which a machine runs one at a time."""
    return any(_program(command)[:2] in (["make", "local-up"], ["make", "local-invoke"]) for command in block.commands)


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_a_runnable_block_runs_as_written(block: Block) -> None:
    if _starts_a_local_run(block):
        local_runs_idle()  # another's first, without holding the checkout meanwhile
    with checkout_lock(shared=not _builds(block)):
        # Given a bash block the documentation presents as runnable, and the checkout's state
        before = _git_status()

        # When it runs from the repository root, as a reader would paste it
        completed = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.body],
            cwd=ROOT,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_SECONDS,
            check=False,
        )
        after = _git_status()

    # Then it succeeds, and leaves the checkout as it found it
    assert completed.returncode == 0, (
        f"{block.id} exited {completed.returncode}:\n{block.body}\n{completed.stdout[-3000:]}{completed.stderr[-3000:]}"
    )
    assert after == before, f"{block.id} changed the checkout"


_FIXED_FUTURE_TIME = re.compile(r"--(?:starts|ends)[= ]+['\"]?\d{4}-\d{2}-\d{2}")


def test_no_command_gives_a_silence_a_fixed_date() -> None:
    # A silence's start and end must lie ahead when the command runs: a fixed date in an example stops working once
    # it has passed. (A fixed `--at`, a moment to evaluate routing at, does not expire.)
    fixed = [block.id for block in BASH for command in block.commands if _FIXED_FUTURE_TIME.search(command)]

    assert not fixed, f"--starts/--ends with a fixed date (compute it from now, with date): {fixed}"
