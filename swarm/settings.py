"""The one policy for user-facing settings: pydantic models that refuse, never guess.

Node config, task files, task params and simulator scenarios are each declared once as a subclass
of `Settings`: the field's type, default, range and help text live together. Every model refuses
unknown keys and wrong types (no string "4001" for an integer, no 1 for true) and is frozen; a bad
input fails with one line that names the key (`explain`). Containers are declared with the
`Strict(False)` aliases below only so a TOML array can fill a tuple; their items stay strict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Strict, StrictFloat, StrictStr, ValidationError

Strs = Annotated[tuple[StrictStr, ...], Strict(False)]  # a TOML array of strings, kept as a tuple
Floats = Annotated[tuple[StrictFloat, ...], Strict(False)]
FilePath = Annotated[Path, Strict(False)]  # a string in a file, a Path in the program


class Settings(BaseModel):
    """Base of every settings model: strict types, no unknown keys, immutable once built."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def key_path(loc: tuple, root: str = "") -> str:
    """('peers', 2, 'count') -> 'peers[2].count' (after `root`, when given)."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _kind(value: Any) -> str:
    return type(value).__name__


def reason(error: dict) -> str:
    """What is wrong with one value, in words ('must be >= 1, got 0'), from a pydantic error dict."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    bounds = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
              "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}
    if kind in bounds:
        word, name = bounds[kind]
        return f"must be {word} {ctx[name]:g}, got {got:g}"
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return f"must be an integer, not {_kind(got)} {got!r}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, not {_kind(got)} {got!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, not {_kind(got)} {got!r}"
    if kind == "string_type":
        return f"must be a string, not {_kind(got)} {got!r}"
    if kind in ("tuple_type", "list_type"):
        return f"must be an array, not {_kind(got)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a table"
    if kind == "literal_error":
        return f"must be {ctx['expected']}, not {got!r}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("path_type", "is_instance_of"):
        return f"must be a path (a string), not {_kind(got)}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"]


def explain(exc: ValidationError, root: str = "") -> str:
    """The first error of a failed validation as one line: '<root>.<key>: <reason>'."""
    error = exc.errors(include_url=False)[0]
    path = key_path(tuple(error["loc"]), root)
    return f"{path}: {reason(error)}" if path else reason(error)
