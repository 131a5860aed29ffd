"""README's table of the package's folders is the tree, in the order the import contracts allow."""

from __future__ import annotations

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
