"""A small typed registry: a decorator fills a name → entry map; lookups name the valid choices.

Modelled on timm's ``register_model``, with the error message PML-style (list the valid names).
Registries are filled at import time and never changed afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from typing import Generic
from typing import TypeVar

from dmlsearch.trainables.errors import UserError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → entry map for one kind of swappable part (losses, backbones, samplers, ...)."""

    def __init__(self, kind: str, *, option: str,
                 fix: str = "fix the name in the space file or --set") -> None:
        self.kind = kind
        self.option = option  # the setting (or command-line option) that selects an entry
        self.fix = fix  # where the user corrects a wrong name, for error messages
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise RuntimeError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str, make: Callable[[Callable[..., object]], T]) -> Callable:
        """Decorator: ``make(fn)`` builds the entry stored under ``name``; returns ``fn``."""

        def decorator(fn: Callable[..., object]) -> Callable[..., object]:
            self.add(name, make(fn))
            return fn

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(
                f"unknown {self.kind} {name!r} for {self.option}; expected one of: "
                f"{', '.join(self.names())} ({self.fix})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
