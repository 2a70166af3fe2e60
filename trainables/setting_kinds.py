"""What the settings' declarations (:data:`~.config.SETTINGS`) say across settings: which belong
to a configuration's input kind, and which hold paths. Imports nothing heavy.

A setting of the other input kind (``max_frames`` on images, ``cache`` on audio) given by the
user is refused, never ignored (:func:`refuse_other_kind`); an export holds only its kind's
settings (:func:`of_kind`); the path settings are made absolute after their value is checked, so
a mistyped word (``cache=shmm``) is an error, not a folder (:func:`absolute_paths`).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import kind_of

__all__ = ["absolute_paths", "kind_name", "of_kind", "other_kind_settings",
           "refuse_other_kind", "settings_of_kind"]


def kind_name(config: Mapping[str, Any]) -> str:
    """The input kind of a flat configuration (its dataset's or backbone's): image, audio..."""
    return kind_of(config).name


def _judged_kind(config: Mapping[str, Any]) -> str | None:
    """The kind whose settings ``config`` takes: its dataset's where the dataset's kind is
    known by name, else its backbone's, unless the two disagree (``None``: the driver refuses
    that pair itself, which says more than any setting would)."""
    default = kind_of({}).name
    dataset = kind_of({"dataset": config.get("dataset")}).name
    backbone = kind_of({"backbone": config.get("backbone")}).name
    return dataset if dataset != default or backbone == default else None


def settings_of_kind(kind: str) -> list[str]:
    """The settings a configuration of input kind ``kind`` takes: the common ones and its own."""
    return [name for name, s in SETTINGS.items() if s.kind in ("common", kind)]


def other_kind_settings(keys: Iterable[str], kind: str) -> list[str]:
    """The settings among ``keys`` that belong to an input kind other than ``kind``."""
    return [key for key in keys if key in SETTINGS and SETTINGS[key].kind not in ("common", kind)]


def refuse_other_kind(given: Mapping[str, Any], config: Mapping[str, Any], *, where: str,
                      defaults_pass: bool = False) -> None:
    """A :class:`UserError` for the first setting in ``given`` (what the user wrote, in
    ``where``) of another input kind than ``config``'s; with ``defaults_pass``, one at its
    default passes (an export written when every setting was exported)."""
    kind = _judged_kind(config)
    if kind is None:
        return
    for key in other_kind_settings(given, kind):
        if defaults_pass and _same(given[key], SETTINGS[key].default):
            continue
        dataset = config.get("dataset", SETTINGS["dataset"].default)
        source = f"dataset {dataset} is {kind} data"
        raise UserError(
            f"{key} is a setting of {SETTINGS[key].kind} datasets, but {source}: it would be "
            f"ignored; remove {key} from {where} (`dmlsearch settings` lists each kind's "
            "settings)")


def of_kind(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``flat`` without the settings of another input kind than its own."""
    other = set(other_kind_settings(flat, kind_name(flat)))
    return {k: v for k, v in flat.items() if k not in other}


def absolute_paths(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The path settings of ``flat`` that hold a path, made absolute (relative paths are meant
    from here; trials run in other folders, and on other nodes). Each value is checked first:
    a word that is none of the setting's words and not written as a path is an error."""
    out = {}
    for key, value in flat.items():
        setting = SETTINGS.get(key)
        if setting is None or not setting.path:
            continue
        value = setting.check(value)
        if setting.is_path(value):
            out[key] = str(Path(value).expanduser().resolve())
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a).lower() == str(b).lower()
