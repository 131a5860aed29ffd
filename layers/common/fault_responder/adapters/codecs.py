"""Codecs derived from dataclasses: a record to the plain JSON-like dict a store keeps, and back.

A codec reads its dataclass's fields and type hints once, on first use, and writes each field under its name:
- text, numbers, booleans and None as they are; datetimes as `datetime.isoformat()`; enums as their values;
- lists and tuples as lists, dicts with their keys; a nested dataclass through the codec of its class (codec_of).

Reading is as tolerant of older items as the store needs:
- a field with no default must be there (KeyError), unless its type allows None: then it reads as None when missing;
- a field with a default reads as its default when missing or empty (None, "", 0, False, an empty list);
- a field whose type allows None reads as None when missing or null (a datetime or a nested record also when empty);
- numbers with int() and float(), booleans with bool(), enums by their value, datetimes with `datetime.fromisoformat`;
  an empty datetime where one is required is refused (ValueError);
- text as it is stored, or through str() in the fields a codec names in `texts`;
- a key the codec does not know is ignored (a `strict` codec refuses it, TypeError, and leaves a missing field to
  the dataclass, which refuses it too).

Where a stored shape is not the field's own, the codec says so: `keys` (a field stored under another name), `skip` and
`only` (fields not stored, given back when reading), `omit` (a field left out of the item at some values), `order` (the
stored order of the keys).

What the codec works out is compiled once per class into two plain functions (`source` shows them), as
`dataclasses` compiles a class's `__init__`: a record is written and read as fast as by a hand-written pair.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, Generic, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
Convert = Callable[[Any], Any]

_REQUIRED, _OPTIONAL, _DEFAULTED = "required", "optional", "defaulted"


def absent(value: Any) -> bool:
    """`omit` a field when it is None."""
    return value is None


def empty(value: Any) -> bool:
    """`omit` a field when it is empty (None, "", an empty tuple)."""
    return not value


def moment(value: Any) -> datetime:
    """A stored time that must be there."""
    if not value:
        raise ValueError("a stored fact has no time")
    return datetime.fromisoformat(value)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class _Field(NamedTuple):
    """What a codec works out of one stored field."""

    name: str
    key: str
    write: Convert | None
    """How the value is written (None: as it is)."""
    read: Convert | None
    """How the stored value is read (None: as it is)."""
    mode: str
    """_REQUIRED (no default), _OPTIONAL (None when missing or null), _DEFAULTED (its default when missing or empty)."""
    blank: bool
    """An empty stored value counts as none (a datetime, a nested record)."""
    omit: Callable[[Any], bool] | None
    default: Any
    factory: Callable[[], Any] | None


class Codec(Generic[T]):
    """A dataclass's records to dicts and back (see the module's docstring)."""

    def __init__(
        self,
        cls: type[T],
        *,
        keys: Mapping[str, str] | None = None,
        skip: Collection[str] = (),
        only: Sequence[str] | None = None,
        omit: Mapping[str, Callable[[Any], bool]] | None = None,
        texts: Collection[str] = (),
        order: Sequence[str] | None = None,
        strict: bool = False,
    ) -> None:
        self.cls = cls
        names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
        stored = [name for name in names if name not in skip and (only is None or name in only)]
        for option in (keys or {}, skip, only or (), omit or {}, texts, order or ()):
            unknown = set(option) - set(names)
            if unknown:
                raise ValueError(f"{cls.__name__} has no field {sorted(unknown)}")
        if order is not None:
            if sorted(order) != sorted(stored):
                raise ValueError(f"the order of {cls.__name__}'s keys must name each stored field once")
            stored = list(order)
        self.names: tuple[str, ...] = tuple(stored)
        self._whole = len(stored) == len(names)
        self._keys = dict(keys or {})
        self._omit = dict(omit or {})
        self._texts = frozenset(texts)
        self._strict = strict
        self._fields: tuple[_Field, ...] = ()
        self._encode: Callable[[T], dict[str, Any]] | None = None
        self._decode: Callable[..., T] | None = None
        self.source = ""

    def encode(self, record: T) -> dict[str, Any]:
        return (self._encode or self.compiled()[0])(record)

    def decode(self, data: Mapping[str, Any], **given: Any) -> T:
        """The record `data` holds; `given`: the fields not stored (skip, only)."""
        return (self._decode or self.compiled()[1])(data, given)

    def encode_all(self, records: Iterable[T]) -> list[dict[str, Any]]:
        encode = self._encode or self.compiled()[0]
        return [encode(record) for record in records]

    def decode_all(self, data: Iterable[Mapping[str, Any]] | None) -> list[T]:
        decode = self._decode or self.compiled()[1]
        return [decode(item) for item in data or ()]

    def compiled(self) -> tuple[Callable[[T], dict[str, Any]], Callable[..., T]]:
        """The codec's two functions, worked out from the dataclass the first time."""
        if self._encode is None or self._decode is None:
            self._fields = tuple(self._planned())
            namespace: dict[str, Any] = {"_cls": self.cls, "_keys": frozenset(field.key for field in self._fields)}
            namespace["_nothing"] = types.MappingProxyType({})
            for number, field in enumerate(self._fields):
                namespace.update(
                    {
                        f"_w{number}": field.write,
                        f"_r{number}": field.read,
                        f"_o{number}": field.omit,
                        f"_d{number}": field.default,
                        f"_f{number}": field.factory,
                    }
                )
            decoder = _decoder(self._fields, strict=self._strict, whole=self._whole)
            self.source = _encoder(self._fields) + "\n" + decoder
            # Compiled as dataclasses compiles a class's __init__: the source holds nothing but the dataclass's field
            # names (identifiers, checked) and its keys (as literals); every value is a name of `namespace`.
            code = compile(self.source, f"<codec of {self.cls.__qualname__}>", "exec")
            exec(code, namespace)  # noqa: S102  # nosec B102  # see above
            self._encode, self._decode = namespace["encode"], namespace["decode"]
        return self._encode, self._decode

    def _planned(self) -> Iterable[_Field]:
        hints = get_type_hints(self.cls)
        fields = {field.name: field for field in dataclasses.fields(self.cls)}  # type: ignore[arg-type]
        for name in self.names:
            field = fields[name]
            key = self._keys.get(name, name)
            if not name.isidentifier() or not isinstance(key, str):
                raise ValueError(f"{self.cls.__name__}.{name} cannot be compiled")
            inner, nullable = _unwrapped(hints[name])
            write, read = _converters(inner, name in self._texts)
            if nullable and write is not None and write is not iso:
                write = _or_none(write)
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if has_default:
                mode = _OPTIONAL if nullable and field.default is None else _DEFAULTED
            else:
                mode = _OPTIONAL if nullable else _REQUIRED
            factory = None if field.default_factory is dataclasses.MISSING else field.default_factory
            yield _Field(
                name,
                key,
                write,
                read,
                mode,
                blank=inner is datetime or dataclasses.is_dataclass(inner),
                omit=self._omit.get(name),
                default=None if field.default is dataclasses.MISSING else field.default,
                factory=factory,
            )


def _encoder(fields: Sequence[_Field]) -> str:
    """`def encode(record)`: the dict literal of the fields, a field that may be omitted added after a test."""
    lines, literal, after = ["def encode(record):"], [], False
    for number, field in enumerate(fields):
        value = f"record.{field.name}" if field.write is None else f"_w{number}(record.{field.name})"
        if field.omit is None and not after:
            literal.append(f"{field.key!r}: {value}")
            continue
        if not after:
            lines.append(f"    data = {{{', '.join(literal)}}}")
            after = True
        if field.omit is None:
            lines.append(f"    data[{field.key!r}] = {value}")
        else:
            lines.append(f"    if not _o{number}(record.{field.name}):")
            lines.append(f"        data[{field.key!r}] = {value}")
    lines.append("    return data" if after else f"    return {{{', '.join(literal)}}}")
    return "\n".join(lines) + "\n"


def _decoder(fields: Sequence[_Field], *, strict: bool, whole: bool) -> str:
    """`def decode(data, given)`: one call of the class, each field's value read in the order of the fields (and the
    fields not stored from `given`, unless the class has none: `whole`)."""
    if strict:
        return _strict_decoder(fields)
    arguments = []
    for number, field in enumerate(fields):
        key, read = repr(field.key), _reader(field, number)
        if field.mode == _REQUIRED:
            value = read(f"data[{key}]")
        elif field.mode == _OPTIONAL:
            if field.read is None and not field.blank:
                value = f"data.get({key})"
            else:
                test = "not (_v := data.get({}))" if field.blank else "(_v := data.get({})) is None"
                value = f"None if {test.format(key)} else {read('_v')}"
        else:
            default = f"_d{number}" if field.factory is None else f"_f{number}()"
            value = f"{read('_v')} if (_v := data.get({key})) else {default}"
        arguments.append(f"        {field.name}={value},")
    if not whole:
        arguments.append("        **given,")
    return "def decode(data, given=_nothing):\n    return _cls(\n" + "\n".join(arguments) + "\n    )\n"


def _strict_decoder(fields: Sequence[_Field]) -> str:
    """`def decode(data, given)` refusing a key that names no field (TypeError), and leaving a field that is missing to
    the class (which refuses one with no default, TypeError)."""
    lines = [
        "def decode(data, given=_nothing):",
        "    given = dict(given)",
        "    unknown = data.keys() - _keys",
        "    if unknown:",
        "        raise TypeError(f'{_cls.__name__} has no field {sorted(unknown)[:3]}')",
    ]
    for number, field in enumerate(fields):
        key, read = repr(field.key), _reader(field, number)
        if field.mode == _DEFAULTED:
            lines.append(f"    if _v := data.get({key}):")
            lines.append(f"        given[{field.name!r}] = {read('_v')}")
            continue
        lines.append(f"    if {key} in data:")
        if field.mode == _REQUIRED or (field.read is None and not field.blank):
            lines.append(f"        given[{field.name!r}] = {read(f'data[{key}]')}")
        else:
            test = "not _v" if field.blank else "_v is None"
            lines.append(f"        given[{field.name!r}] = None if {test} else {read('_v')}")
            lines.insert(-1, f"        _v = data[{key}]")
    lines.append("    return _cls(**given)")
    return "\n".join(lines) + "\n"


def _reader(field: _Field, number: int) -> Callable[[str], str]:
    """The expression that reads a stored value (given as an expression) of the field."""
    if field.read is None:
        return lambda value: value
    return lambda value: f"_r{number}({value})"


def _unwrapped(hint: Any) -> tuple[Any, bool]:
    """`X | None` as (X, True); any other hint as (itself, False)."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [arg for arg in get_args(hint) if arg is not type(None)]
        nullable = len(args) < len(get_args(hint))
        return (args[0] if len(args) == 1 else Any), nullable
    return hint, False


def _converters(hint: Any, text: bool) -> tuple[Convert | None, Convert | None]:
    """How a value of type `hint` is written and read (None: as it is)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is datetime:
        return iso, moment
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _value, hint
    if hint is bool or hint is int or hint is float:
        return None, hint
    if hint is str:
        return None, str if text else None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return codec_of(hint).compiled()
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        write, read = _converters(args[0], text)
        return _sequence(list, write), _sequence(origin, read)
    if origin is tuple:
        pairs = [_converters(arg, text) for arg in args]
        writes, reads = [write for write, _ in pairs], [read for _, read in pairs]
        return (list if all(write is None for write in writes) else _fixed(writes, list)), _fixed(reads, tuple)
    if origin is dict:
        write, read = _converters(args[1], text)
        return _mapping(write), _mapping(read)
    return None, None


def _value(member: Enum) -> Any:
    return member.value


def _or_none(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def _sequence(kind: type, each: Convert | None) -> Convert:
    if each is None:
        return kind
    if kind is list:
        return lambda values: [each(value) for value in values]
    return lambda values: kind(each(value) for value in values)


def _fixed(positions: list[Convert | None], kind: type) -> Convert:
    """A tuple of fixed length (`tuple[str, str]`): refused when it has another (ValueError)."""
    count, same = len(positions), set(positions)
    only = same.pop() if len(same) == 1 else None

    def convert(values: Any) -> Any:
        items = tuple(values)
        if len(items) != count:
            raise ValueError(f"expected {count} values, got {len(items)}")
        if only is not None:
            return kind(map(only, items))
        return kind(value if each is None else each(value) for each, value in zip(positions, items, strict=True))

    return convert


def _mapping(each: Convert | None) -> Convert:
    if each is None:
        return dict
    return lambda values: {key: each(value) for key, value in values.items()}


_CODECS: dict[type, Codec[Any]] = {}


def codec(cls: type[T], **options: Any) -> Codec[T]:
    """The codec of `cls`, made with `options`: what codec_of gives for `cls` from then on, in nested records too (make
    it before any codec whose records hold one is first used)."""
    made = Codec(cls, **options)
    _CODECS[cls] = made
    return made


def codec_of(cls: type[T]) -> Codec[T]:
    """The codec of `cls`: the one made for it, or one derived with no options."""
    found = _CODECS.get(cls)
    if found is None:
        found = _CODECS[cls] = Codec(cls)
    return found
