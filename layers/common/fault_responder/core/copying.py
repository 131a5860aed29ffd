"""Copies of the records the alert service changes: their values shared, their lists and dicts copied.

Records are copied where what was read must stay as it was while a changed copy is made: each derivation copies the
instance's known incidents, the alert service a lone fault's record before its deliveries start, the fleet code a
fleet incident's identity, and the in-memory store whatever it stores and returns. `copy.deepcopy` rebuilt every fact in
them, one `__reduce_ex__` and one datetime at a time, although no fact ever changes once made: in a storm of 1,000
events handled with the in-memory store, copying took a third of the CPU. Here:

- `Value`: a frozen dataclass whose fields hold only immutable things (text, numbers, datetimes, enums, None, tuples
  of those, other Values). A copy of it, deep or not, is itself.
- `Record`: a dataclass that the service changes in place. Its deep copy is a new instance of its class whose lists
  and dicts are new, holding copies of what they held: Values and other immutables shared, Records copied the same
  way, anything else through `copy.deepcopy`. Every field is copied, including ones added later.

tests/unit/test_copying.py checks that each Value's fields are immutable by their types, and that a Record's copy
shares no list or dict with the original.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime
from enum import Enum
from typing import Any, Self

_ATOMIC: tuple[type, ...] = (str, int, float, bool, type(None), datetime, Enum)


class Value:
    """A frozen dataclass of immutable fields: copying it gives itself."""

    __slots__ = ()

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self


_SHARED: tuple[type, ...] = (Value, *_ATOMIC)


class Record:
    """A dataclass changed in place: its deep copy copies its lists and dicts, and shares its values."""

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        kind = type(self)
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = tuple(field.name for field in dataclasses.fields(kind))  # type: ignore[arg-type]
        twin = object.__new__(kind)
        memo[id(self)] = twin
        for name in names:
            object.__setattr__(twin, name, _copied(getattr(self, name), memo))
        return twin


_FIELDS: dict[type, tuple[str, ...]] = {}
"""Each Record class's field names, as dataclasses.fields gives them (looked up once per class)."""


def _copied(value: Any, memo: dict[int, Any]) -> Any:
    if isinstance(value, _SHARED):
        return value
    if type(value) is list:
        return [_copied(item, memo) for item in value]
    if type(value) is dict:
        return {key: _copied(item, memo) for key, item in value.items()}
    if type(value) is tuple:
        items = tuple(_copied(item, memo) for item in value)
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    return copy.deepcopy(value, memo)
