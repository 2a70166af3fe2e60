"""What a registered loss is: its defaults, its miner and how to build it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._miners import OWN_MINER
from dmlsearch.trainables.losses._miners import build_miner
from dmlsearch.trainables.registry import Registry

__all__ = ["LossInfo", "LossBundle", "LOSSES", "register_loss", "resolve_loss_params"]


@dataclasses.dataclass
class LossBundle:
    """A built loss: the criterion, its miner (or None), and the lr of its own parameters:
    ``param_lr`` (an absolute lr) or ``param_lr_mult`` (a multiple of the trial's ``lr``, as
    the thesis and Proxy-Anchor code give their proxies: lr × 100)."""

    criterion: nn.Module
    miner: nn.Module | None = None
    param_lr: float | None = None
    param_lr_mult: float | None = None

    def lr_for(self, lr: float) -> float | None:
        """The learning rate of the loss's own parameters in a trial whose ``lr`` is ``lr``
        (None: the loss has no lr of its own, its parameters train at ``lr``)."""
        if self.param_lr_mult is not None:
            return lr * self.param_lr_mult
        return self.param_lr

    def __call__(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.miner is None:
            return self.criterion(embeddings, labels)
        return self.criterion(embeddings, labels, self.miner(embeddings, labels))

    def parameters(self) -> list[nn.Parameter]:
        return list(self.criterion.parameters())

    def start_epoch(self, epoch: int) -> None:
        """Tell the criterion that epoch ``epoch`` (0-based) starts, if it wants to know (MemVir's
        warm-up is counted in epochs); the fit loop calls this at the start of every epoch."""
        hook = getattr(self.criterion, "start_epoch", None)
        if hook is not None:
            hook(epoch)


@dataclasses.dataclass(frozen=True)
class LossInfo:
    """Registry entry. ``defaults`` are the loss's hyperparameters (Psomas 2020 Table 4 names)."""

    name: str
    defaults: Mapping[str, float]
    build: Callable[..., LossBundle]
    source: str
    uses_proxies: bool = False
    needs_m_per_class: bool = False
    supports_memvir: bool = False  # a ClassWeightLoss: MemVir can extend its classes
    learned_distance: bool = False  # its criterion scores pairs (``pair_scores``; E2E)


LOSSES: Registry[LossInfo] = Registry("loss", option="loss")


def register_loss(
    name: str,
    *,
    defaults: Mapping[str, float],
    source: str,
    uses_proxies: bool = False,
    needs_m_per_class: bool = False,
    supports_memvir: bool = False,
    learned_distance: bool = False,
) -> Callable:
    """Register ``build(num_classes=, embedding_size=, **params) -> LossBundle`` under ``name``."""
    return LOSSES.register(
        name,
        lambda fn: LossInfo(
            name=name,
            defaults=dict(defaults),
            build=fn,
            source=source,
            uses_proxies=uses_proxies,
            needs_m_per_class=needs_m_per_class,
            supports_memvir=supports_memvir,
            learned_distance=learned_distance,
        ),
    )


def resolve_loss_params(loss: str, given: Mapping[str, Any]) -> dict[str, float]:
    """The loss's defaults updated by ``given``; unknown names and non-numbers are user errors."""
    info = LOSSES.get(loss)
    unknown = sorted(set(given) - set(info.defaults))
    if unknown:
        valid = ", ".join(f"loss.{k}" for k in info.defaults) or "(none)"
        raise UserError(
            f"loss {loss!r} has no parameter {', '.join('loss.' + k for k in unknown)}; "
            f"its parameters are: {valid} (remove or rename the key)"
        )
    params = dict(info.defaults)
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise UserError(f"loss.{key} must be a number, got {value!r}")
        try:
            params[key] = float(value)
        except ValueError:
            raise UserError(f"loss.{key} must be a number, got {value!r}") from None
    return params


def build_loss(
    loss: str, params: Mapping[str, float], *, num_classes: int, embedding_size: int,
    miner: str = OWN_MINER, miner_params: Mapping[str, float] | None = None,
) -> LossBundle:
    """The loss ``loss`` with ``params``; its own miner unless ``miner`` names another (or
    ``none``)."""
    info = LOSSES.get(loss)
    bundle = info.build(num_classes=num_classes, embedding_size=embedding_size, **params)
    if miner != OWN_MINER:
        bundle.miner = build_miner(miner, miner_params or {})
    return bundle
