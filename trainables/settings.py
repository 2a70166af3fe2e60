"""How a trial setting is declared: once, as a field of :class:`~.config.TrialConfig`.

``lr: float = setting(1e-3, "learning rate ...", above=0)`` is the whole declaration: the
field's type and default, and in :func:`setting` its help, choices, range, whether it holds a
path, and the input kind it belongs to (``common``, or a kind of
:mod:`.input_kinds`: ``image``, ``audio``, ...). :class:`Setting`
is what the rest of the code reads (``config.SETTINGS``): ``--set``, a space's base, an
export, ``dmlsearch settings``, the path resolution and the kind check all derive from it, and
:meth:`Setting.check` reads a value with the one checker of :mod:`.values`. Imports nothing
heavy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dmlsearch.trainables.input_kinds import INPUT_KINDS
from dmlsearch.trainables.values import Rule
from dmlsearch.trainables.values import check_value
from dmlsearch.trainables.values import rule_for_hint

__all__ = ["COMMON", "FIX", "Setting", "kinds", "setting", "settings_of"]

#: The kind of a setting that belongs to every input kind.
COMMON = "common"
#: How a user fixes a bad setting (``dmlsearch train`` names its export file instead).
FIX = "fix it in the space file or --set"
_DECLARED = "dmlsearch.setting"


def kinds() -> tuple[str, ...]:
    """The kinds a setting may belong to: ``common``, then the input kinds registered now
    (:data:`~.input_kinds.INPUT_KINDS`: a kind registered later is one too)."""
    return (COMMON, *INPUT_KINDS.names())


def __getattr__(name: str) -> Any:
    if name == "KINDS":  # :func:`kinds`, read when asked (PEP 562)
        return kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class _Declared:
    help: str
    kind: str
    rule: dict[str, Any]
    legacy: Mapping[object, str]


def setting(default: Any, help: str, *, kind: str = "common",
            choices: tuple[str, ...] = (), paths: str = "", at_least: float | None = None,
            above: float | None = None, at_most: float | None = None,
            below: float | None = None, what: str = "", words: str = "",
            legacy: Mapping[object, str] | None = None) -> Any:
    """A :class:`~.config.TrialConfig` field declared as a setting: its default, its help, the
    input kind it belongs to, the words it takes (``choices``; ``paths`` "file" or "folder":
    a path besides them), its range (``at_least``/``above``, ``at_most``/``below``), what its
    bound means (``what``), what it takes in words where the derived text says too little
    (``words``) and old spellings of its values (``legacy``: ``{True: "all"}``)."""
    assert kind in kinds(), kind
    rule = {"choices": tuple(choices), "paths": paths, "what": what, "words": words,
            "none_words": True,
            "low": above if above is not None else at_least, "low_open": above is not None,
            "high": below if below is not None else at_most, "high_open": below is not None}
    return dataclasses.field(default=default, metadata={_DECLARED: _Declared(
        help=help, kind=kind, rule=rule, legacy=dict(legacy or {}))})


@dataclasses.dataclass(frozen=True)
class Setting:
    """One trial setting, as declared."""

    name: str
    default: Any
    help: str
    kind: str  # common, or an input kind (image, audio, ...)
    rule: Rule
    legacy: Mapping[object, str] = dataclasses.field(default_factory=dict)

    @property
    def path(self) -> bool:
        """Whether the setting may hold a path (a value other than its words)."""
        return bool(self.rule.paths)

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(str(c) for c in self.rule.choices)

    def check(self, value: Any, *, fix: str = FIX) -> Any:
        """``value`` read and checked (an old spelling read as what it meant then)."""
        return check_value(self.rule, self._legacy(value), name=self.name, fix=fix)

    def is_path(self, value: Any) -> bool:
        """Whether ``value`` of this setting names a file or folder (not one of its words)."""
        return self.path and isinstance(value, str) and value not in self.rule.choices

    def _legacy(self, value: Any) -> Any:
        word = value.lower() if isinstance(value, str) else value
        if self.legacy and isinstance(word, (bool, str)):
            return self.legacy.get(word, value)
        return value


def settings_of(cls: type, hints: Mapping[str, Any]) -> dict[str, Setting]:
    """The settings a dataclass declares with :func:`setting`, by name, in field order."""
    out: dict[str, Setting] = {}
    for field in dataclasses.fields(cls):
        declared = field.metadata.get(_DECLARED)
        if declared is None:
            continue
        out[field.name] = Setting(name=field.name, default=field.default, help=declared.help,
                                  kind=declared.kind,
                                  rule=rule_for_hint(hints[field.name], **declared.rule),
                                  legacy=declared.legacy)
    return out
