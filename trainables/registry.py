"""A small typed registry: a decorator fills a name → entry map; lookups name the valid choices.

Modelled on timm's ``register_model``, with the error message PML-style (list the valid names).
dmlsearch's own entries are registered at import time. A user's plug-in
(:mod:`trainables.plugins`) adds entries through the package face's decorators
(``dmlsearch.register_loss``...), which register inside :func:`registering_for`: each entry
remembers the plug-in it came from, a name that clashes with another entry is an error that names both, and a plug-in
loaded again after an edit replaces its own entries. A *family* answers names with a prefix
(``pml:ContrastiveLoss``) by building the entry when it is first asked for.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import Generic
from typing import TypeVar

from dmlsearch.trainables.errors import UserError

__all__ = ["Registry", "current_plugin", "loading_plugin", "registering_for"]

T = TypeVar("T")

#: The plug-in being imported (its label), or None.
_PLUGIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("plugin", default=None)
#: The plug-in an entry is being registered for (by ``dmlsearch.register_loss`` and the like);
#: None: dmlsearch's own, also when a plug-in's import makes dmlsearch import its parts.
_ORIGIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("origin", default=None)


@contextlib.contextmanager
def loading_plugin(label: str) -> Iterator[None]:
    """The plug-in ``label`` is being imported inside the block (:func:`current_plugin`)."""
    token = _PLUGIN.set(label)
    try:
        yield
    finally:
        _PLUGIN.reset(token)


@contextlib.contextmanager
def registering_for(plugin: str | None) -> Iterator[None]:
    """Entries added inside the block are the plug-in ``plugin``'s (its decorators' block)."""
    token = _ORIGIN.set(plugin)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def current_plugin() -> str | None:
    """The plug-in being imported now (None: none is)."""
    return _PLUGIN.get()


class Registry(Generic[T]):
    """Name → entry map for one kind of swappable part (losses, backbones, samplers, ...)."""

    _every: weakref.WeakSet[Registry[Any]] = weakref.WeakSet()

    def __init__(self, kind: str, *, option: str,
                 fix: str = "fix the name in the space file or --set") -> None:
        self.kind = kind
        self.option = option  # the setting (or command-line option) that selects an entry
        self.fix = fix  # where the user corrects a wrong name, for error messages
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # name → the plug-in that registered it
        self._families: dict[str, tuple[Callable[[str], T], str]] = {}  # prefix → (build, hint)
        Registry._every.add(self)

    @classmethod
    def every(cls) -> list[Registry[Any]]:
        """Every registry made in this process (a plug-in's entries may be in any)."""
        return list(cls._every)

    def copy(self) -> Registry[T]:
        """A registry with the same entries (a test registers into it without a trace)."""
        other: Registry[T] = Registry(self.kind, option=self.option, fix=self.fix)
        other._entries, other._origins = dict(self._entries), dict(self._origins)
        other._families = dict(self._families)
        return other

    def add(self, name: str, entry: T) -> T:
        plugin = _ORIGIN.get()
        if plugin is not None and self._origins.get(name) == plugin:
            self._entries[name] = entry  # its own entry again (a notebook cell run twice)
            return entry
        if name in self._entries or any(name.startswith(p) for p in self._families):
            if plugin is None:
                raise RuntimeError(f"{self.kind} {name!r} is registered twice")
            other = self._origins.get(name)
            owner = f"plug-in {other}" if other else "dmlsearch"
            raise UserError(
                f"plug-in {plugin} registers {self.kind} {name!r}, a name {owner} already "
                f"uses; rename it in {plugin} (e.g. 'my_{name.split(':')[-1]}')")
        self._entries[name] = entry
        if plugin is not None:
            self._origins[name] = plugin
        return entry

    def register(self, name: str, make: Callable[[Callable[..., object]], T]) -> Callable:
        """Decorator: ``make(fn)`` builds the entry stored under ``name``; returns ``fn``."""

        def decorator(fn: Callable[..., object]) -> Callable[..., object]:
            self.add(name, make(fn))
            return fn

        return decorator

    def add_family(self, prefix: str, build: Callable[[str], T], *, hint: str) -> None:
        """Names ``prefix + rest`` are answered by ``build(rest)`` (a :class:`UserError` when
        ``rest`` names nothing), built once, when first asked for. ``hint`` is how error
        messages list the family (``pml:<ClassName> (any pytorch-metric-learning loss)``)."""
        self._families[prefix] = (build, hint)

    def forget_plugin(self, plugin: str) -> None:
        """Remove what the plug-in ``plugin`` registered (before it is loaded again)."""
        for name in [n for n, p in self._origins.items() if p == plugin]:
            del self._entries[name], self._origins[name]

    def origin(self, name: str) -> str | None:
        """The plug-in that registered ``name`` (None: dmlsearch's own, or a family's)."""
        return self._origins.get(name)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            pass
        for prefix, (build, _) in self._families.items():
            if name.startswith(prefix):
                entry = self._entries[name] = build(name[len(prefix):])
                return entry
        listed = ", ".join([*self.names(), *(h for _, h in self._families.values())])
        raise UserError(
            f"unknown {self.kind} {name!r} for {self.option}; expected one of: {listed} "
            f"({self.fix})"
        ) from None

    def names(self) -> list[str]:
        """The registered names (a family's names only once asked for)."""
        return sorted(self._entries)

    def families(self) -> list[str]:
        """How the families are listed (``pml:<ClassName> (...)``)."""
        return [hint for _, hint in self._families.values()]

    def __contains__(self, name: object) -> bool:
        if name in self._entries:
            return True
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UserError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
