"""Optimizers and learning-rate schedules by name, with per-group learning rates.

Parameter groups follow the thesis reference code (SPEC §4): the backbone at ``lr``, the
embedding layer at ``lr × embedding_lr_mult``, loss parameters (proxies) at the loss's own lr.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainables.config import TrialConfig
from trainables.registry import Registry

__all__ = ["OPTIMIZERS", "SCHEDULERS", "build_optimizer", "build_scheduler", "param_groups"]


@dataclasses.dataclass(frozen=True)
class Factory:
    name: str
    build: Callable[..., Any]


OPTIMIZERS: Registry[Factory] = Registry("optimizer", option="optimizer")
SCHEDULERS: Registry[Factory] = Registry("scheduler", option="scheduler")


@OPTIMIZERS.register("adamw", lambda fn: Factory("adamw", fn))
def _adamw(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)


@SCHEDULERS.register("step", lambda fn: Factory("step", fn))
def _step(opt: torch.optim.Optimizer, cfg: TrialConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """StepLR: lr × lr_gamma every lr_step_size epochs (the thesis's Table 3 schedule)."""
    return torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.lr_step_size, gamma=cfg.lr_gamma)


@SCHEDULERS.register("none", lambda fn: Factory("none", fn))
def _none(opt: torch.optim.Optimizer, cfg: TrialConfig) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0)


def param_groups(
    model: nn.Module, loss_params: list[nn.Parameter], loss_lr: float | None, cfg: TrialConfig
) -> list[dict[str, Any]]:
    embedding = getattr(model, "embedding")
    head_ids = {id(p) for p in embedding.parameters()}
    trunk = [p for p in model.parameters() if id(p) not in head_ids and p.requires_grad]
    groups: list[dict[str, Any]] = [
        {"params": trunk, "lr": cfg.lr, "name": "backbone"},
        {"params": list(embedding.parameters()), "lr": cfg.lr * cfg.embedding_lr_mult,
         "name": "embedding"},
    ]
    if loss_params:
        groups.append({"params": loss_params, "lr": loss_lr or cfg.lr, "weight_decay": 0.0,
                       "name": "loss"})
    return [g for g in groups if g["params"]]


def build_optimizer(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(cfg.optimizer).build(groups, cfg)


def build_scheduler(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    return SCHEDULERS.get(cfg.scheduler).build(opt, cfg)
