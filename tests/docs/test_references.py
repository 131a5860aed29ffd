"""No file of the repository cites a document the repository does not contain.

- A Markdown link resolves to a file of the repository, and a `#fragment` to one of its headings.
- Any other mention of a `*.md` file (a docstring, a comment, a YAML file) names a file of the repository, from
  the repository root or from the citing file's folder, and its `#fragment`, if any, a heading there.
- Notes the code was once written against and that live elsewhere (ECS_EVENTS, TOOLING, ARCHITECTURE, STYLE,
  "the design notes", a path on one machine) are not cited: what the code needs from them is in docs/.

This file is the only one exempt, since it has to name them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT

THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()
OUTSIDE_NOTES = re.compile(
    r"ECS_EVENTS|TOOLING\.md|(?-i:ARCHITECTURE\.md)|STYLE\.md|design[ -]notes?\b|/work/(?:shared|main)\b", re.IGNORECASE
)
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_MD_MENTION = re.compile(
    r"(?<![\w/.#-])(?P<path>(?:\.{1,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.md)(?!\w)(?:#(?P<anchor>[\w-]+))?"
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def repository_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(name for name in listed if (ROOT / name).is_file() and not (ROOT / name).is_symlink())


def text_of(name: str) -> str | None:
    try:
        return (ROOT / name).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    anchors, in_code = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            anchors.add(slug(line.lstrip("#")))
    return anchors


def resolve(citing: str, target: str) -> Path | None:
    """The cited file: from the citing file's folder, else from the repository root."""
    for base in ((ROOT / citing).parent, ROOT):
        candidate = (base / target).resolve()
        if candidate.is_file() and candidate.is_relative_to(ROOT):
            return candidate
    return None


def problems_in(name: str, text: str) -> list[str]:
    problems = []
    cited: list[tuple[str, str | None]] = []
    if name.endswith(".md"):
        for match in _LINK.finditer(text):
            target = match["target"]
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            cited.append((path or name, anchor or None))
    for match in _MD_MENTION.finditer(text):
        start = text.rfind(" ", 0, match.start()) + 1
        if "://" in text[start : match.start()]:  # part of a URL
            continue
        cited.append((match["path"], match["anchor"]))
    for path, anchor in cited:
        found = ROOT / name if path == name else resolve(name, path)
        if found is None:
            problems.append(f"{name} cites {path}, which is not in the repository")
        elif anchor is not None and found.suffix == ".md" and anchor not in anchors_of(found):
            problems.append(f"{name} cites {path}#{anchor}, which is no heading of {found.relative_to(ROOT)}")
    for match in OUTSIDE_NOTES.finditer(text):
        problems.append(f"{name} cites {match[0]!r}, a note outside the repository")
    return problems


def test_every_citation_names_a_document_of_the_repository() -> None:
    # Given every text file of the repository (this one excepted)
    problems = []
    for name in repository_files():
        text = text_of(name)
        if text is not None and name != THIS_FILE:
            # When its citations are resolved
            problems.extend(problems_in(name, text))

    # Then each names a file (and heading) the repository has, and none an outside note
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_are_for() -> None:
    # Given a document citing a missing file, a missing heading and an outside note
    text = "See [x](docs/nowhere.md), docs/ecs-events.md#no-such-heading and the design notes."

    # When it is checked, Then each is reported
    assert problems_in("docs/example.md", text) == [
        "docs/example.md cites docs/nowhere.md, which is not in the repository",
        "docs/example.md cites docs/nowhere.md, which is not in the repository",
        "docs/example.md cites docs/ecs-events.md#no-such-heading, which is no heading of docs/ecs-events.md",
        "docs/example.md cites 'design notes', a note outside the repository",
    ]
