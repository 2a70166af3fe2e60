"""One searched parameter of a space: a typed, validated, frozen spec.

A :class:`Param` knows how to ask an Optuna trial for its value (``suggest``), whether a value lies
in its domain (``contains``), how to clean a sampled value (``snap``: Python ``int``/``float``,
floats with a step put exactly on the decimal grid so that ``0.30000000000000004`` reads ``0.3``)
and whether it is active given the values sampled before it (``is_active``).

Nothing here imports Optuna: the trial is duck-typed (``suggest_float``/``suggest_int``/
``suggest_categorical``), so loading and describing a space stays cheap.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from typing import Protocol

from dmlsearch.trainables.errors import UserError

__all__ = ["Param", "KINDS", "same_value", "is_in", "format_value"]

KINDS = ("float", "int", "categorical")

#: A `when` condition: ((config key, allowed values), ...); every clause must hold.
When = tuple[tuple[str, tuple[Any, ...]], ...]


class _Trial(Protocol):  # the part of optuna.Trial a Param uses
    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = ...,
                      log: bool = ...) -> float: ...
    def suggest_int(self, name: str, low: int, high: int, *, step: int = ...,
                    log: bool = ...) -> int: ...
    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from numbers (``True`` is not ``1`` here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def is_in(value: Any, allowed: Iterable[Any]) -> bool:
    return any(same_value(value, v) for v in allowed)


def format_value(value: Any) -> str:
    """A short, YAML-like rendering of a scalar for messages and tables."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        small_or_big = value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5)
        return f"{value:g}" if small_or_big else repr(value)
    return str(value)


def _dec(x: float | int) -> Decimal:
    return Decimal(repr(x)) if isinstance(x, float) else Decimal(x)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Param:
    """A searched parameter. ``key`` is the flat trial-config key; ``optuna_name`` the name the
    Optuna trial records (``key``, or ``key[branch]`` when the key is searched under several
    conditions); ``line`` is where it is declared in its space file (0 when unknown)."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    when: When = ()
    optuna_name: str = ""
    line: int = 0

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        if not self.optuna_name:
            object.__setattr__(self, "optuna_name", self.key)

    # -- sampling -------------------------------------------------------------------------------

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """True when every key of ``when`` has a value in ``values`` among the allowed ones."""
        return all(k in values and is_in(values[k], allowed) for k, allowed in self.when)

    def suggest(self, trial: _Trial) -> Any:
        """Ask ``trial`` for this parameter under ``optuna_name``; return the cleaned value."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.optuna_name, list(self.choices))
        if self.kind == "int":
            assert isinstance(self.low, int) and isinstance(self.high, int)
            step = int(self.step) if self.step is not None else 1
            return self.snap(trial.suggest_int(self.optuna_name, self.low, self.high, step=step,
                                               log=self.log))
        assert self.low is not None and self.high is not None
        value = trial.suggest_float(self.optuna_name, float(self.low), float(self.high),
                                    step=None if self.step is None else float(self.step),
                                    log=self.log)
        return self.snap(value)

    def snap(self, value: Any) -> Any:
        """The clean form of a value of this parameter: a Python int/float, on the step grid."""
        if self.kind == "categorical":
            return value
        if self.kind == "int":
            return int(value)
        value = float(value)
        if self.step is None or not math.isfinite(value):
            return value
        assert self.low is not None and self.high is not None
        k = round((value - self.low) / self.step)
        snapped = float(_dec(self.low) + k * _dec(self.step))
        return min(max(snapped, float(self.low)), float(self.high))

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a value this parameter can take (type, range, grid, choices)."""
        if self.kind == "categorical":
            return is_in(value, self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                return False
            value = int(value)
            step = int(self.step or 1)
            return self.low <= value <= self.high and (value - self.low) % step == 0
        if not math.isfinite(value) or not self.low <= value <= self.high:
            return False
        if self.step is None:
            return True
        k = (value - self.low) / self.step
        return abs(k - round(k)) < 1e-8  # Optuna's own tolerance (FloatDistribution._contains)

    def grid_values(self) -> list[Any]:
        """Every value of a finite domain (choices, or a stepped range), for grid studies.

        A continuous range (no ``step``) has no grid: a :class:`UserError` says how to fix it.
        """
        if self.kind == "categorical":
            return list(self.choices)
        if self.step is None:
            raise UserError(
                f"a grid study needs every searched parameter to be categorical or stepped, but "
                f"{self.optuna_name} is a continuous range {self.domain_text()}"
                f"{' (log)' if self.log else ''}; give it a step or choices, or use another "
                "sampler (--sampler tpe)"
            )
        assert self.low is not None and self.high is not None
        count = int(round((_dec(self.high) - _dec(self.low)) / _dec(self.step))) + 1
        return [self.snap(_dec(self.low) + k * _dec(self.step)) for k in range(count)]

    def default(self) -> Any:
        """A representative value: the first choice, or the low bound."""
        return self.choices[0] if self.kind == "categorical" else self.snap(self.low)

    # -- describing -----------------------------------------------------------------------------

    @property
    def branch(self) -> str:
        """The condition's values joined: ``a|b`` within a clause, ``,`` between clauses."""
        return ",".join("|".join(format_value(v) for v in allowed) for _, allowed in self.when)

    def domain_text(self) -> str:
        if self.kind == "categorical":
            return "{" + ", ".join(format_value(c) for c in self.choices) + "}"
        return f"[{format_value(self.low)}, {format_value(self.high)}]"

    def scale_text(self) -> str:
        if self.log:
            return "log"
        if self.step is not None:
            return f"step {format_value(self.step)}"
        return ""

    def when_text(self) -> str:
        return ", ".join(
            f"{k} = {'|'.join(format_value(v) for v in allowed)}" for k, allowed in self.when
        )
