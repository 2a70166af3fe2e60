"""Miners by name: what picks the pairs or triplets of a batch a loss is computed on.

A loss brings its own miner (``miner: default``: multi_similarity's MS miner, margin's
distance-weighted one, none for most); ``miner: none`` drops it; any other name is an entry of
:data:`MINERS` (a plug-in's, or ``pml:<ClassName>``), built with its ``miner.<param>``
settings. A miner is called ``miner(embeddings, labels)`` and returns what the loss's criterion
takes as its third argument (pytorch-metric-learning's index tuples for PML-based losses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry

__all__ = ["MINERS", "MinerInfo", "OWN_MINER", "NO_MINER", "build_miner", "register_miner",
           "resolve_miner_params"]

OWN_MINER, NO_MINER = "default", "none"


@dataclasses.dataclass(frozen=True)
class MinerInfo:
    """Registry entry: ``build(**params) -> nn.Module`` with ``defaults`` as its parameters."""

    name: str
    defaults: Mapping[str, float]
    build: Callable[..., nn.Module]
    source: str


MINERS: Registry[MinerInfo] = Registry("miner", option="miner")


def register_miner(name: str, *, defaults: Mapping[str, float] | None = None,
                   source: str = "") -> Callable:
    """Register ``build(**params) -> nn.Module`` under ``name``."""
    return MINERS.register(name, lambda fn: MinerInfo(
        name=name, defaults=dict(defaults or {}), build=fn, source=source))


def resolve_miner_params(miner: str, given: Mapping[str, Any]) -> dict[str, float]:
    """The miner's defaults updated by ``given`` (``default`` and ``none`` take none)."""
    defaults = {} if miner in (OWN_MINER, NO_MINER) else dict(MINERS.get(miner).defaults)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(f"miner.{k}" for k in defaults) or "(none)"
        raise UserError(
            f"miner {miner!r} has no parameter {', '.join('miner.' + k for k in unknown)}; "
            f"its parameters are: {valid} (remove or rename the key)")
    params = dict(defaults)
    for key, value in given.items():
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError
            params[key] = float(value)
        except ValueError:
            raise UserError(f"miner.{key} must be a number, got {value!r}") from None
    return params


def build_miner(miner: str, params: Mapping[str, float]) -> nn.Module | None:
    """The miner named ``miner`` (None for ``none``); ``default`` is not built here."""
    if miner == NO_MINER:
        return None
    return MINERS.get(miner).build(**params)
