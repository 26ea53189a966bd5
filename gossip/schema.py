"""Frozen, self-validating message structs and their strict wire form.

A struct is a frozen dataclass whose fields carry limits (`f(max=...)`). Construction validates
every field, so an instance that exists is well-formed whether it was built locally or decoded from
the network. The wire form is a msgpack-ready map with exactly the declared keys; decoding refuses
unknown or missing keys, wrong types (a bool is not an int) and anything over its limit.

Written here rather than taken from a schema library because the permitted dependencies of
`gossip/` are msgpack and pynacl only, and the rules we need (bytes vs str, exact sizes, caps on
every container) are a page of code.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Union

from gossip.errors import SCHEMA, Rejected

Scalar = Union[int, float, str, bool]


MAX_EXTRA_KEYS = 8  # unknown trailing keys a body may carry (fields of a newer minor release)
MAX_EXTRA_KEY = 32  # characters in such a key


def f(*, max: int | None = None, min: int | float | None = None, size: int | None = None,
      item_max: int | None = None, default: Any = dataclasses.MISSING, optional: bool = False) -> Any:
    """A field with limits: `max` caps str/bytes length, container items or a number; `size` is an
    exact length (keys, hashes); `item_max` caps each item's length inside a container.

    `optional`: a field added by a minor release (docs/protocol.md §3, §10). It has a default and
    sits at the end of its struct; the encoding leaves out the trailing run of optional fields that
    hold their defaults, so a body that says nothing new is byte for byte what older peers send."""
    if optional and default is dataclasses.MISSING:
        raise TypeError("an optional field needs a default")
    meta = {"max": max, "min": min, "size": size, "item_max": item_max, "optional": optional}
    return dataclasses.field(default=default, metadata=meta)


class Struct:
    """Base for frozen wire structs. Subclasses are `@dataclass(frozen=True)`."""

    _hints_cache: ClassVar[dict[type, list[tuple[str, Any, dict]]]] = {}

    def __post_init__(self) -> None:
        for name, check in _checked_fields(type(self)):
            value = getattr(self, name)
            checked = check(value)
            if checked is not value:  # normalised (a list to a tuple, an int to a float, ...)
                object.__setattr__(self, name, checked)

    def to_wire(self) -> dict[str, Any]:
        fields = _fields_of(type(self))
        end = len(fields)
        while end and fields[end - 1][2].get("optional") and getattr(self, fields[end - 1][0]) == _default(type(self), end - 1):
            end -= 1
        return {name: v if type(v := getattr(self, name)) in _PLAIN else _to_wire(v) for name, _, _ in fields[:end]}

    def wire_of(self, names: list[str]) -> dict[str, Any]:
        """The wire form of exactly these fields, in this order (re-encoding what a sender carried)."""
        return {name: _to_wire(getattr(self, name)) for name in names}

    @classmethod
    def from_wire_tolerant(cls, obj: Any) -> tuple["Struct", list[str], dict]:
        """Decode a message body written by any minor release of this major: (struct, the declared keys
        it carried, its unknown trailing keys). The body's keys are the struct's first fields in
        declaration order (an older sender leaves out optional fields it does not know; they take their
        defaults), then at most MAX_EXTRA_KEYS unknown keys (fields of a newer release, ignored)."""
        if not isinstance(obj, dict):
            raise Rejected(SCHEMA, f"{cls.__name__}: expected a map, got {type(obj).__name__}")
        fields = _fields_of(cls)
        names = [name for name, _, _ in fields]
        keys = list(obj)
        known = 0
        while known < len(keys) and known < len(names) and keys[known] == names[known]:
            known += 1
        extras = keys[known:]
        missing = names[known:]
        if any(not fields[i][2].get("optional") for i in range(known, len(names))) \
                or any(k in names for k in extras):
            raise Rejected(SCHEMA, f"{cls.__name__}: keys {[str(k) for k in keys][:24]} are not its fields "
                                   f"{names} in order (missing {missing})")
        if len(extras) > MAX_EXTRA_KEYS or any(not isinstance(k, str) or not k or len(k) > MAX_EXTRA_KEY for k in extras):
            raise Rejected(SCHEMA, f"{cls.__name__}: {len(extras)} unknown keys {[str(k)[:40] for k in extras][:9]}: "
                                   f"at most {MAX_EXTRA_KEYS}, each 1..{MAX_EXTRA_KEY} characters")
        values = {name: _from_wire(obj[name], hint) if nested else obj[name]
                  for name, hint, nested in _nested_of(cls)[:known]}
        try:
            struct = cls(**values)
        except (TypeError, ValueError) as exc:
            raise Rejected(SCHEMA, str(exc)) from None
        return struct, names[:known], {k: obj[k] for k in extras}

    @classmethod
    def from_wire(cls, obj: Any) -> "Struct":
        if not isinstance(obj, dict):
            raise Rejected(SCHEMA, f"{cls.__name__}: expected a map, got {type(obj).__name__}")
        fields = _fields_of(cls)
        names = [name for name, _, _ in fields]
        if list(obj) == names:  # every field, in order (what a canonical body holds): nothing to report
            return _construct(cls, {name: _from_wire(obj[name], hint) if nested else obj[name]
                                    for name, hint, nested in _nested_of(cls)})
        missing = sorted(name for name, _, meta in fields if name not in obj and not meta.get("optional"))
        if missing or len(obj) > len(names) or not set(obj) <= set(names):
            extra = sorted(str(k) for k in set(obj) - set(names))
            raise Rejected(SCHEMA, f"{cls.__name__}: unknown keys {extra}, missing keys {missing}")
        return _construct(cls, {name: _from_wire(obj[name], hint) for name, hint, _ in fields if name in obj})


def _construct(cls: type, values: dict) -> "Struct":
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise Rejected(SCHEMA, str(exc)) from None


_CHECKED: dict[type, list[tuple[str, Callable[[Any], Any]]]] = {}


def _checked_fields(cls: type) -> list[tuple[str, Callable[[Any], Any]]]:
    """Each field's checker, made once per class (`field_checker`)."""
    cached = _CHECKED.get(cls)
    if cached is None:
        cached = _CHECKED[cls] = [(name, field_checker(hint, meta, f"{cls.__name__}.{name}"))
                                  for name, hint, meta in _fields_of(cls)]
    return cached


def field_checker(hint: Any, meta: dict, where: str) -> Callable[[Any], Any]:
    """`check_value` for one field, with a fast path for the common scalars: a value of exactly the type,
    within its limits, is returned as it is (what `check_value` does with it); anything else goes to `check_value`,
    which normalises it or raises the same error as ever. Checking each field through `check_value`'s chain
    of type tests was most of decoding a heartbeat."""
    inner = _is_optional(hint)[1]
    lo, hi, size = meta.get("min"), meta.get("max"), meta.get("size")

    def slow(value: Any) -> Any:
        return check_value(value, hint, meta, where)

    if inner in (str, bytes):
        def check_text(value: Any) -> Any:
            if type(value) is inner and (size is None or len(value) == size) and (hi is None or len(value) <= hi):
                return value
            return slow(value)
        return check_text
    if inner is int:
        def check_int(value: Any) -> Any:
            if type(value) is int and -(2**63) <= value < 2**64 and (lo is None or value >= lo) \
                    and (hi is None or value <= hi):
                return value
            return slow(value)
        return check_int
    if inner is float:
        def check_float(value: Any) -> Any:
            if type(value) is float and math.isfinite(value) and (lo is None or value >= lo) \
                    and (hi is None or value <= hi):
                return value
            return slow(value)
        return check_float
    return slow


@functools.cache
def _nested_of(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, hint, whether its values hold structs to rebuild) per field: the others are taken as decoded."""
    return [(name, hint, _holds_structs(hint)) for name, hint, _ in _fields_of(cls)]


def _fields_of(cls: type) -> list[tuple[str, Any, dict]]:
    cached = Struct._hints_cache.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = [(fl.name, hints[fl.name], dict(fl.metadata)) for fl in dataclasses.fields(cls)]
        Struct._hints_cache[cls] = cached
    return cached


def _default(cls: type, index: int) -> Any:
    fl = _dataclass_fields(cls)[index]
    return fl.default if fl.default_factory is dataclasses.MISSING else fl.default_factory()


_dataclass_fields = functools.cache(dataclasses.fields)  # per class: asked for each optional field of each encoding


# typing's introspection of a hint, cached by hint: every field of every message is checked on each
# construction and decode, and get_origin/get_args/_is_optional were 10% of a 3,000-peer simulation's CPU.
_origin = functools.cache(typing.get_origin)
_args = functools.cache(typing.get_args)


@functools.cache
def _is_optional(hint: Any) -> tuple[bool, Any]:
    if _origin(hint) in (Union, types.UnionType):
        args = [a for a in _args(hint) if a is not type(None)]
        if len(args) == 1 and len(_args(hint)) == 2:
            return True, args[0]
    return False, hint


def check_value(value: Any, hint: Any, meta: dict, where: str) -> Any:
    """Validate (and normalise: lists to tuples, ints to floats) one value against its hint."""
    optional, inner = _is_optional(hint)
    if value is None:
        if optional:
            return None
        raise ValueError(f"{where}: must not be empty")
    hint = inner
    if hint is Scalar:
        if isinstance(value, bool) or isinstance(value, int):
            return check_value(value, int if not isinstance(value, bool) else bool, {}, where)
        if isinstance(value, float):
            return check_value(value, float, {}, where)
        if isinstance(value, str):
            return check_value(value, str, {"max": 256}, where)
        raise ValueError(f"{where}: expected a number, string or bool, got {type(value).__name__}")
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected bool, got {type(value).__name__}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected int, got {type(value).__name__}")
        _check_range(value, meta, where)
        if not -(2**63) <= value < 2**64:
            raise ValueError(f"{where}: integer out of 64-bit range")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected float, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{where}: must be finite")
        _check_range(value, meta, where)
        return value
    if hint in (str, bytes):
        if not isinstance(value, hint):
            raise ValueError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
        _check_length(len(value), meta, where)
        return value
    origin = _origin(hint)
    if origin is tuple:
        args = _args(hint)
        if not isinstance(value, (tuple, list)):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            if meta.get("max") is not None and len(value) > meta["max"]:
                raise ValueError(f"{where}: {len(value)} items, at most {meta['max']}")
            item, item_max = args[0], meta.get("item_max")
            if item in (str, bytes) and all(type(v) is item and (item_max is None or len(v) <= item_max)
                                            for v in value) or \
                    isinstance(item, type) and issubclass(item, Struct) and all(type(v) is item for v in value):
                return tuple(value)  # the common cases, without an error place made per item
            item_meta = {"max": item_max, "size": None, "min": None}
            return tuple(check_value(v, item, item_meta, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ValueError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(check_value(v, a, {}, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        key_hint, value_hint = _args(hint)
        if not isinstance(value, (dict, types.MappingProxyType)):
            raise ValueError(f"{where}: expected a map, got {type(value).__name__}")
        if meta.get("max") is not None and len(value) > meta["max"]:
            raise ValueError(f"{where}: {len(value)} entries, at most {meta['max']}")
        key_meta = {"max": meta.get("item_max") or 64}
        checked = {}
        for k in sorted(value, key=repr):
            ck = check_value(k, key_hint, key_meta, f"{where} key")
            checked[ck] = check_value(value[k], value_hint, {}, f"{where}[{k!r}]")
        return types.MappingProxyType(checked)
    if isinstance(hint, type) and issubclass(hint, Struct):
        if not isinstance(value, hint):
            raise ValueError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
        return value
    raise TypeError(f"{where}: unsupported schema type {hint!r}")


def _check_range(value: float, meta: dict, where: str) -> None:
    if meta.get("min") is not None and value < meta["min"]:
        raise ValueError(f"{where}: {value} is below the minimum {meta['min']}")
    if meta.get("max") is not None and value > meta["max"]:
        raise ValueError(f"{where}: {value} is above the maximum {meta['max']}")


def _check_length(length: int, meta: dict, where: str) -> None:
    if meta.get("size") is not None and length != meta["size"]:
        raise ValueError(f"{where}: length {length}, expected exactly {meta['size']}")
    if meta.get("max") is not None and length > meta["max"]:
        raise ValueError(f"{where}: length {length}, at most {meta['max']}")


_PLAIN = frozenset({str, bytes, int, float, bool})  # wire form is the value itself


def _to_wire(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_wire()
    if isinstance(value, tuple):
        return [v if type(v) in _PLAIN else _to_wire(v) for v in value]
    if isinstance(value, (dict, types.MappingProxyType)):
        return {k: _to_wire(v) for k, v in value.items()}
    return value


@functools.cache
def _holds_structs(hint: Any) -> bool:
    """Whether values of `hint` contain structs to rebuild; other decoded values go to construction as
    they are (it checks them, and turns lists into tuples and maps into read-only ones)."""
    inner = _is_optional(hint)[1]
    if isinstance(inner, type) and issubclass(inner, Struct):
        return True
    return _origin(inner) in (tuple, dict) and any(a is not Ellipsis and _holds_structs(a) for a in _args(inner))


def _from_wire(value: Any, hint: Any) -> Any:
    """Rebuild nested structs from decoded msgpack; leaves validation to construction."""
    if value is None or not _holds_structs(hint):
        return value
    inner = _is_optional(hint)[1]
    origin = _origin(inner)
    if isinstance(inner, type) and issubclass(inner, Struct):
        return inner.from_wire(value)
    if origin is tuple and isinstance(value, (list, tuple)):
        args = _args(inner)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_wire(v, args[0]) for v in value)
        return tuple(_from_wire(v, a) for v, a in zip(value, args)) if len(value) == len(args) else value
    if origin is dict and isinstance(value, dict):
        _, value_hint = _args(inner)
        return {k: _from_wire(v, value_hint) for k, v in value.items()}
    return value
