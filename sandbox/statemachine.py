"""State machine definitions as SAM deploys them, and moto's ASL interpreter switched on to run them.

SAM reads `DefinitionUri` (a local file) or an inline `Definition`, then replaces each `${Name}` of
`DefinitionSubstitutions` in it; moto does neither, so the sandbox does it here, on the real
definition file: what runs is what would be deployed, with only the stack's parameters changed.
moto executes state machines only when its `stepfunctions.execute_state_machine` option is on, and
runs Lambda tasks without Docker only when `lambda.use_docker` is off
(docs/sandbox.md#step-functions-without-docker); both are process-wide settings of the moto server, so the
sandbox sets them when the stack has a state machine.
moto parses a definition (ANTLR, in Python) when the machine is created and again for every execution; the sandbox
keeps each definition's parse tree (`parse_once`) and builds moto's program from it each time, as moto would.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import requests
from moto.core.config import default_user_config

from sandbox.errors import SandboxError

_TREES_KEPT = 32

INTERPRETER_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def load_definition(logical_id: str, properties: Mapping[str, Any], base_dir: Path) -> str:
    """The definition as JSON text: `Definition` (inline, SAM), `DefinitionString` (CloudFormation) or
    `DefinitionUri` (a local JSON or YAML file)."""
    if "Definition" in properties:
        return json.dumps(properties["Definition"])
    if "DefinitionString" in properties:
        return str(properties["DefinitionString"])
    uri = properties.get("DefinitionUri")
    if not isinstance(uri, str):
        raise SandboxError(f"{logical_id}: only an inline Definition or a local DefinitionUri file can be emulated")
    path = base_dir / uri
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SandboxError(f"{logical_id}: cannot read DefinitionUri {path}: {exc.strerror}") from exc
    if path.suffix in (".yaml", ".yml"):
        import yaml  # noqa: PLC0415  (only YAML definitions need it)

        return json.dumps(yaml.safe_load(text))
    return text


def substitute(logical_id: str, definition: str, substitutions: Mapping[str, Any]) -> str:
    """`${Name}` replaced by each DefinitionSubstitutions value; a placeholder left over is an error.

    SAM substitutes into the JSON text, so a value lands inside whatever string holds its placeholder.
    """
    for name, value in substitutions.items():
        if isinstance(value, list | dict):
            raise SandboxError(f"{logical_id}: DefinitionSubstitutions {name} is not a string, number or boolean")
        text = json.dumps(value) if isinstance(value, bool) else str(value)
        definition = definition.replace("${" + name + "}", text)
    left = sorted(set(_PLACEHOLDER.findall(definition)))
    if left:
        names = ", ".join(left)
        raise SandboxError(f"{logical_id}: the definition uses ${{{names}}} but DefinitionSubstitutions has no value")
    try:
        json.loads(definition)
    except json.JSONDecodeError as exc:
        raise SandboxError(
            f"{logical_id}: the substituted definition is not JSON: {exc.msg} (line {exc.lineno})"
        ) from exc
    return definition


def enable_interpreter(moto_endpoint: str) -> None:
    """Make the moto server execute state machines, with Lambda tasks left to the sandbox (no Docker)."""
    try:
        requests.post(f"{moto_endpoint}/moto-api/config", json=INTERPRETER_CONFIG, timeout=10).raise_for_status()
    except requests.RequestException as exc:
        raise SandboxError(f"moto did not accept the Step Functions settings: {exc}") from exc


@contextlib.contextmanager
def moto_settings_restored() -> Iterator[None]:
    """moto's settings as they were before, once the block ends (the sandbox's moto runs in this process)."""
    saved = copy.deepcopy(dict(default_user_config))
    try:
        yield
    finally:
        default_user_config.update(saved)  # type: ignore[typeddict-item]


def parse_once() -> None:
    """Make moto parse each definition text once: its parse tree is kept (syntax errors are not, and raise each time,
    as moto's do) and moto's program built from it for every caller, as `AmazonStateLanguageParser.parse` builds
    it. The tree is only read afterwards; each caller gets a program of its own. Idempotent."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser  # noqa: PLC0415
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor  # noqa: PLC0415

    if getattr(AmazonStateLanguageParser.parse, "sandbox_parse_once", False):
        return
    parse = AmazonStateLanguageParser.parse
    trees: dict[str, Any] = {}

    def parse_kept(definition: str) -> tuple[Any, Any]:
        tree = trees.get(definition)
        if tree is None:
            program, tree = parse(definition)
            if len(trees) >= _TREES_KEPT:
                trees.clear()
            trees[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    parse_kept.sandbox_parse_once = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse_kept)  # type: ignore[method-assign]
