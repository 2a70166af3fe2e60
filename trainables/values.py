"""What a value must be (:class:`Rule`), and the one function that reads and checks it.

A trial setting (:mod:`dmlsearch.trainables.config`) and a search option
(:mod:`dmlsearch.search.options`) each state their rule once; :func:`check_value` turns what
arrived (a YAML scalar, command-line text, a Python value, a results folder's record) into the
rule's type and checks its choices and range. Every mistake is one line: what was expected,
what arrived and, where the caller says, how to fix it. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.trainables.errors import UserError

__all__ = ["Rule", "check_value", "rule_for_hint", "shown"]

#: The types a rule reads, and how an error names them.
TYPE_WORDS = {"bool": "true or false", "int": "an integer", "float": "a number",
              "str": "a string", "path": "a path", "list": "a list",
              "pairs": "KEY=VALUE pairs"}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a value must be: its type (``TYPE_WORDS``), whether it may be unset (``None``; with
    ``none_words`` the words none/null too), the words it takes (``choices``; with ``paths`` "file" or "folder" a
    path is taken besides them), its range (``low``/``high``, open or closed), and for the
    message what the value means (``what``) and its unit."""

    type: str
    optional: bool = False
    none_words: bool = False  # "none"/"null" text is unset (a YAML file's or --set's words)
    choices: tuple[Any, ...] = ()
    paths: str = ""  # "", "file" (any other text names a file) or "folder" (a written path)
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    what: str = ""  # why the bound, in a few words: "trials per method"
    unit: str = ""  # after the value shown: " s"
    words: str = ""  # what the value must be, where the derived text says too little

    def __post_init__(self) -> None:
        assert self.type in TYPE_WORDS, self.type
        assert self.paths in ("", "file", "folder"), self.paths

    def expected(self) -> str:
        """What a value must be, in words: ``an integer >= 1``, ``one of fixed, kfold``."""
        if self.words:
            return self.words
        if self.choices:
            listed = ", ".join(str(c) for c in self.choices)
            if self.paths:
                return f"{listed} or a {self.paths}"
            return f"one of {listed}"
        return TYPE_WORDS[self.type] + self._range()

    def _range(self) -> str:
        low, high = self.low, self.high
        if low is not None and high is not None:
            if self.low_open and self.high_open:
                return f" strictly between {shown(low)} and {shown(high)}"
            if not self.low_open and not self.high_open:
                return f" in {shown(low)}..{shown(high)}"
        parts = []
        if low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {shown(low)}")
        if high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {shown(high)}")
        return (" " + " and ".join(parts)) if parts else ""


def shown(value: Any) -> str:
    """A value as a message shows it: text quoted, numbers plain (``0``, ``1e-05``)."""
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:g}"
    if isinstance(value, (str, Path)):
        return repr(str(value))
    return str(value)


def check_value(rule: Rule, value: Any, *, name: str, fix: str = "") -> Any:
    """``value`` read as ``rule``'s type, its choices and range checked; a :class:`UserError`
    ``<name> must be <expected>, got <value>; <fix>`` otherwise. Text reads as the type it
    spells (``"3"`` an integer, ``yes``/``on``/``1`` true), so a value from the command line,
    a YAML file or Python is read alike."""
    tail = f"; {fix}" if fix else ""
    if rule.optional and (value is None or (rule.none_words and isinstance(value, str)
                                            and value.strip().lower() in _NONE)):
        return None
    if value is None:  # `--set cache=` or `cache:` with nothing after it
        raise UserError(f"{name} must be {rule.expected()}, got an empty value{tail}")
    value = _typed(rule, value, name, tail)
    if rule.choices and value not in rule.choices:
        _check_path(rule, value, name, tail)
    if rule.type in ("int", "float"):
        _check_range(rule, value, name, tail)
    return value


def _wrong(rule: Rule, value: Any, name: str, tail: str, expected: str | None = None) -> UserError:
    what = f" ({rule.what})" if rule.what and expected is None else ""
    return UserError(f"{name} must be {expected or TYPE_WORDS[rule.type]}{what}, got "
                     f"{shown(value)}{tail}")


def _typed(rule: Rule, value: Any, name: str, tail: str) -> Any:
    kind = rule.type
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
    elif kind == "float":
        if not isinstance(value, bool) and isinstance(value, (int, float, str)):
            try:
                number = float(value)
            except ValueError:
                raise _wrong(rule, value, name, tail) from None
            if not math.isfinite(number):
                raise _wrong(rule, value, name, tail, "a finite number")
            return number
    elif kind == "str":
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif kind == "path":
        if isinstance(value, (str, os.PathLike)):
            return Path(value)
    elif kind == "list":
        if isinstance(value, (list, tuple)):
            return tuple(value)
        if isinstance(value, str):  # --set key=a,b
            return tuple(v.strip() for v in value.split(",") if v.strip())
    elif kind == "pairs":
        if isinstance(value, Mapping):
            return tuple(value.items())
        if isinstance(value, (list, tuple)) and all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
            return tuple((str(k), v) for k, v in value)
    raise _wrong(rule, value, name, tail)


def _check_path(rule: Rule, value: Any, name: str, tail: str) -> None:
    """A value that is none of the rule's words: a path where the rule takes one."""
    if not rule.paths:
        raise _wrong(rule, value, name, tail, rule.expected())
    text = str(value)
    if not text.strip():
        raise _wrong(rule, value, name, tail, rule.expected())
    if rule.paths == "folder" and not _written_as_path(text):
        listed = ", ".join(str(c) for c in rule.choices)
        raise UserError(f"{name} must be {rule.expected()}, got {shown(value)}, which is none "
                        f"of {listed} and not written as a path; fix the word, or write a "
                        f"folder as a path (./{text.strip()} for one here)")


def _written_as_path(text: str) -> bool:
    """Whether text names a folder as a path does (``./x``, ``/x``, ``~/x``, ``x/y``), not as
    a bare word that could be a mistyped choice."""
    return (os.sep in text or "/" in text or text.startswith(("~", "."))
            or (os.altsep is not None and os.altsep in text))


def _check_range(rule: Rule, value: float, name: str, tail: str) -> None:
    low_ok = rule.low is None or (value > rule.low if rule.low_open else value >= rule.low)
    high_ok = rule.high is None or (value < rule.high if rule.high_open else value <= rule.high)
    if not (low_ok and high_ok):
        what = f" ({rule.what})" if rule.what else ""
        raise UserError(f"{name} must be {rule.expected()}{what}, got {shown(value)}"
                        f"{rule.unit}{tail}")


def rule_for_hint(hint: Any, **rule: Any) -> Rule:
    """The rule of a typed field (``int``, ``float | None``, ``Path``, ``tuple[str, ...]``,
    ``tuple[tuple[str, Any], ...]``), with ``rule``'s choices and range."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (
        typing.Union, types.UnionType) else (hint,)
    optional = type(None) in members
    (base,) = [m for m in members if m is not type(None)][:1] or (str,)
    origin = typing.get_origin(base) or base
    if origin is tuple:
        kind = "pairs" if typing.get_args(base)[:1] == (tuple[str, Any],) else "list"
    else:
        kind = {bool: "bool", int: "int", float: "float", str: "str", Path: "path"}[origin]
    return Rule(type=kind, optional=optional, **rule)
