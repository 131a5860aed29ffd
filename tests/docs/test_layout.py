"""README's table of the package's folders is the tree, in the order the import contracts allow."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "common" / "fault_responder"
_CODE = re.compile(r"`([^`]+)`")


def _table_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("| folder | what it decides | look here for |") :]
    rows = []
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _folders(cell: str) -> list[str]:
    return [name.rstrip("/") for name in _CODE.findall(cell)]


def test_the_table_names_every_folder_of_the_package_once_and_nothing_else() -> None:
    named = [folder for row in _table_rows() for folder in _folders(row[0])]
    on_disk = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert sorted(named) == on_disk


def test_every_file_the_table_points_at_exists() -> None:
    pointed = [path for row in _table_rows() for path in _CODE.findall(row[2])]
    assert pointed, "the table points at no file"
    missing = [path for path in pointed if not (PACKAGE / path).exists()]
    assert not missing, f"README's layout table points at what the package does not have: {missing}"


def test_the_table_lists_the_folders_in_the_order_the_import_contracts_allow() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(contract["layers"] for contract in contracts if contract["type"] == "layers")
    allowed = [sorted(name.strip() for name in layer.split("|")) for layer in layers]
    table = [sorted(_folders(row[0])) for row in _table_rows()]
    flattened = [folder for row in table for folder in row]
    in_contract_order = [folder for layer in allowed for folder in layer]
    assert flattened == [folder for folder in in_contract_order if folder in flattened]
    assert sorted(flattened) == sorted(in_contract_order)


MAX_MODULE_LINES = 700
MAX_PROTOCOL_METHODS = 12


def _modules() -> dict[str, Path]:
    return {path.relative_to(PACKAGE).as_posix(): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_protocol_base(base: ast.expr) -> bool:
    """`Protocol`, `typing.Protocol`, or either subscripted (`Protocol[T]`)."""
    if isinstance(base, ast.Subscript):
        base = base.value
    return (isinstance(base, ast.Name) and base.id == "Protocol") or (
        isinstance(base, ast.Attribute) and base.attr == "Protocol"
    )


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.id if isinstance(base, ast.Name) else None


def protocol_methods(sources: dict[str, str]) -> dict[str, set[str]]:
    """Every Protocol of `sources` (module path under the package -> its text) as "module.py:Name", with the names of
    the methods and properties it declares itself and inherits from the Protocols it extends (of its module, or
    imported from the package)."""
    classes: dict[str, ast.ClassDef] = {}
    scopes: dict[str, dict[str, str]] = {}  # module -> a name used there -> "module.py:Name"
    for name, text in sources.items():
        scope: dict[str, str] = {}
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                classes[f"{name}:{node.name}"] = node
                scope.setdefault(node.name, f"{name}:{node.name}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fault_responder."):
                module = (node.module or "").removeprefix("fault_responder.").replace(".", "/") + ".py"
                for alias in node.names:
                    scope[alias.asname or alias.name] = f"{module}:{alias.name}"
        scopes[name] = scope
    protocols = {key for key, node in classes.items() if any(_is_protocol_base(base) for base in node.bases)}

    def methods(key: str) -> set[str]:
        node = classes[key]
        own = {item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
        module = key.split(":", 1)[0]
        for base in node.bases:
            parent = scopes[module].get(_base_name(base) or "")
            if parent in protocols and parent != key:
                own |= methods(parent)
        return own

    return {key: methods(key) for key in sorted(protocols)}


def test_no_module_of_the_package_is_over_700_lines() -> None:
    # Given every module of the package, When their lines are counted
    long = {
        name
        for name, path in _modules().items()
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES
    }
    # Then none is over the limit
    assert long == set(), "split these by what they decide"


def test_no_protocol_of_the_package_declares_more_than_12_methods() -> None:
    # Given every Protocol of the package, with what it inherits from the Protocols it extends
    found = protocol_methods({name: path.read_text(encoding="utf-8") for name, path in _modules().items()})
    assert "alerting/store.py:Fleets" in found and "resume/ports.py:EcsPort" in found
    # When their methods and properties are counted
    wide = {key for key, names in found.items() if len(names) > MAX_PROTOCOL_METHODS}
    # Then none is over the limit
    assert wide == set(), "split these by what their callers need"


def test_a_protocol_counts_its_own_methods_and_properties_and_those_of_the_protocols_it_extends() -> None:
    # Given a Protocol extending one of its module's and one imported from another module, and a plain class
    sources = {
        "a/ports.py": (
            "import typing\n"
            "from typing import Protocol\n"
            "class Reads(typing.Protocol):\n"
            "    def load(self) -> int: ...\n"
            "    @property\n"
            "    def size(self) -> int: ...\n"
        ),
        "b/store.py": (
            "from typing import Protocol\n"
            "from fault_responder.a.ports import Reads as Loads\n"
            "class Writes(Protocol):\n"
            "    def save(self) -> None: ...\n"
            "    def load(self) -> int: ...\n"
            "class Store(Loads, Writes, Protocol):\n"
            "    async def lock(self) -> None: ...\n"
            "class Table(Store):\n"
            "    def drop(self) -> None: ...\n"
        ),
    }
    # When their methods are counted
    found = protocol_methods(sources)
    # Then each Protocol counts its own and its Protocol bases' names once, and the plain class is no Protocol
    assert found == {
        "a/ports.py:Reads": {"load", "size"},
        "b/store.py:Store": {"load", "size", "save", "lock"},
        "b/store.py:Writes": {"save", "load"},
    }
