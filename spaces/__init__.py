"""Search spaces as data files: fixed base settings, searched params, warm starts.

A space file (``spaces/files/<name>.yaml``, grammar in :mod:`spaces._loader`) turns into a
:class:`Space`: an Optuna define-by-run function (:meth:`Space.define_by_run`, for Ray's
``OptunaSearch``) plus fixed base settings and warm-start points. :func:`config_from_sample` maps a
Ray trial config (Optuna names + constants) back to flat config keys. :func:`preview` turns any
space into the same search on the built-in ``glyphs`` data, sized for a CPU (``--preview``).
:func:`recipe_card` states in words what a trial of a space trains (``dmlsearch spaces show``).

Imports nothing of torch or Ray (and Optuna only in the caller's hands: a trial is passed in);
the recipe cards, which read the trainables' registries, load torch when first asked for.
"""

from __future__ import annotations

from typing import Any

from dmlsearch.spaces._loader import load_space
from dmlsearch.spaces._loader import parse_value
from dmlsearch.spaces._loader import space_names
from dmlsearch.spaces._params import Param
from dmlsearch.spaces._preview import PreviewChange
from dmlsearch.spaces._preview import preview
from dmlsearch.spaces._preview import preview_text
from dmlsearch.spaces._space import Difference
from dmlsearch.spaces._space import Space
from dmlsearch.spaces._space import config_from_sample

__all__ = [
    "Difference", "Param", "PreviewChange", "Space", "config_from_sample", "load_space",
    "parse_value", "preview", "preview_text", "recipe_card", "show_text", "space_names",
]

_RECIPE = ("recipe_card", "show_text")  # from spaces._recipe, which imports torch


def __getattr__(name: str) -> Any:
    """``recipe_card`` and ``show_text``, imported on first use (they load torch)."""
    if name in _RECIPE:
        from dmlsearch.spaces import _recipe

        return getattr(_recipe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
