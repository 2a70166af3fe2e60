"""Optimizers and learning-rate schedules by name, with per-group learning rates.

Parameter groups follow the thesis reference code (Psomas 2020 §3.4): the backbone at ``lr``, the
embedding layer at ``lr × embedding_lr_mult``, loss parameters (proxies) at the loss's own lr.
Every schedule multiplies each group's own initial lr by the same factor, so the ratios between
groups are kept. Schedules step once per epoch, after that epoch's evaluation
(:func:`step_scheduler`); below, k = 1, 2, ... is the epoch being trained and lr its base lr.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.names import metric_mode
from dmlsearch.trainables.registry import Registry

__all__ = [
    "OPTIMIZERS",
    "LR_SCHEDULES",
    "build_optimizer",
    "build_scheduler",
    "param_groups",
    "step_scheduler",
]

Scheduler = torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau


@dataclasses.dataclass(frozen=True)
class Factory:
    """Registry entry. ``needs_metric``: the schedule steps on the validation metric;
    ``per_step``: it steps after every optimisation step instead of every epoch."""

    name: str
    build: Callable[..., Any]
    needs_metric: bool = False
    per_step: bool = False


OPTIMIZERS: Registry[Factory] = Registry("optimizer", option="optimizer")
LR_SCHEDULES: Registry[Factory] = Registry("learning-rate schedule", option="lr_schedule")


def _fused(groups: list[dict[str, Any]]) -> bool | None:
    """Fused (one-kernel) updates when every parameter is a float tensor on a GPU: the eager
    per-tensor update launches hundreds of small kernels a step, and on a GPU the host's
    launching becomes the bottleneck (docs/benchmarks.md, GPU). ``None``: torch's default."""
    params = [p for g in groups for p in g["params"]]
    if params and all(p.is_cuda and p.is_floating_point() for p in params):
        return True
    return None


@OPTIMIZERS.register("adamw", lambda fn: Factory("adamw", fn))
def _adamw(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay,
                             eps=cfg.adam_eps, fused=_fused(groups))


@OPTIMIZERS.register("adam", lambda fn: Factory("adam", fn))
def _adam(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    """Adam with L2 weight decay added to the gradient (not decoupled as in AdamW); MemVir's
    code runs it with eps 0.01 (``adam_eps``), where a step scales with the gradient."""
    return torch.optim.Adam(groups, lr=cfg.lr, weight_decay=cfg.weight_decay,
                            eps=cfg.adam_eps, fused=_fused(groups))


@OPTIMIZERS.register("sgd", lambda fn: Factory("sgd", fn))
def _sgd(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    """SGD with ``momentum`` and optional ``nesterov`` (which needs momentum > 0)."""
    if cfg.nesterov and cfg.momentum <= 0:
        raise UserError(
            f"nesterov needs momentum > 0, got momentum={cfg.momentum:g} with nesterov=true; "
            "set momentum (e.g. 0.9) or nesterov=false"
        )
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay, fused=_fused(groups))


@OPTIMIZERS.register("rmsprop", lambda fn: Factory("rmsprop", fn))
def _rmsprop(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    """RMSprop with ``momentum``; smoothing constant alpha 0.9 as in the thesis code's train.py."""
    return torch.optim.RMSprop(groups, lr=cfg.lr, alpha=0.9, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)


@LR_SCHEDULES.register("step", lambda fn: Factory("step", fn))
def _step(opt: torch.optim.Optimizer, cfg: TrialConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """StepLR (the thesis's Table 3 schedule): lr · lr_gamma^⌊(k−1)/lr_step_size⌋."""
    return torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.lr_step_size, gamma=cfg.lr_gamma)


@LR_SCHEDULES.register("none", lambda fn: Factory("none", fn))
def _none(opt: torch.optim.Optimizer, cfg: TrialConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """Constant lr."""
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0)


@LR_SCHEDULES.register("exponential", lambda fn: Factory("exponential", fn))
def _exponential(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """ExponentialLR: lr · lr_gamma^(k−1)."""
    return torch.optim.lr_scheduler.ExponentialLR(opt, gamma=cfg.lr_gamma)


@LR_SCHEDULES.register("plateau", lambda fn: Factory("plateau", fn, needs_metric=True))
def _plateau(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.ReduceLROnPlateau:
    """ReduceLROnPlateau on the validation ``metric`` (in its direction: EER is minimised, the
    others maximised; :func:`trainables.evaluate.metric_mode`), as in the E2E code (Monteiro et
    al. 2020).

    Steps only after an evaluation. PyTorch's patience: the lr is multiplied by lr_gamma when
    the metric has not improved (by more than 1e-4 relative) for lr_patience + 1 consecutive
    evaluations, i.e. lr_patience bad evaluations are tolerated; the count then restarts.
    A fit without validation (the final retrain) never steps it: its lr stays constant.
    ``eps=0``: PyTorch's default 1e-8 skips decays smaller than that, which would stop small
    lrs (ProxyNCA's 1e-5 proxies after a few decays) and break the ratios between groups.
    """
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode=metric_mode(cfg.metric), factor=cfg.lr_gamma, patience=cfg.lr_patience,
        eps=0.0,
    )


@LR_SCHEDULES.register("warmup_invsqrt", lambda fn: Factory("warmup_invsqrt", fn))
def _warmup_invsqrt(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """Linear warm-up, then inverse-square-root decay (Monteiro et al. 2020, App. A.3), per epoch.

    With W = max(warmup_epochs, 1): lr · k/W for k ≤ W, lr · sqrt(W/k) for k > W; i.e.
    lr · min(k/W, sqrt(W/k)), peaking at lr in epoch W. This is the Transformer ("Noam")
    schedule the E2E code steps per iteration, lr·min(t^-0.5, t·W^-1.5), rescaled by sqrt(W)
    so its peak is lr, and counted in epochs. warmup_epochs 0 gives lr · sqrt(1/k).
    """
    warmup = max(cfg.warmup_epochs, 1)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda e: min((e + 1) / warmup, math.sqrt(warmup / (e + 1)))
    )


@LR_SCHEDULES.register("warmup_invsqrt_steps",
                       lambda fn: Factory("warmup_invsqrt_steps", fn, per_step=True))
def _warmup_invsqrt_steps(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """The E2E source's VoxCeleb schedule, per optimisation step t = 1, 2, ...: linear warm-up
    over W = warmup_steps steps, then inverse-square-root decay: lr · min(t/W, sqrt(W/t)).

    The reference (``TransformerOptimizer``, 4,000 warm-up steps by default) sets
    base·min(t^-0.5, t·W^-1.5), whose peak is base/sqrt(W): the same curve with lr =
    base/sqrt(W), so a space lists the source's base learning rates divided by sqrt(W). The
    schedule steps after every optimiser step (the fit loop's), never at an epoch's end.
    """
    warmup = max(cfg.warmup_steps, 1)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: min((t + 1) / warmup, math.sqrt(warmup / (t + 1)))
    )


@LR_SCHEDULES.register("warmup_step", lambda fn: Factory("warmup_step", fn))
def _warmup_step(
    opt: torch.optim.Optimizer, cfg: TrialConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """Linear warm-up, then StepLR counted from its end.

    With W = warmup_epochs: lr · k/W for k ≤ W, then lr · lr_gamma^⌊(k−W−1)/lr_step_size⌋.
    warmup_epochs 0 is exactly ``step``.
    """
    warmup, size, gamma = cfg.warmup_epochs, cfg.lr_step_size, cfg.lr_gamma

    def factor(e: int) -> float:
        k = e + 1
        return k / warmup if k <= warmup else gamma ** ((k - warmup - 1) // size)

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def param_groups(
    model: nn.Module, loss_params: list[nn.Parameter], loss_lr: float | None, cfg: TrialConfig
) -> list[dict[str, Any]]:
    """The optimizer's groups: trunk at ``lr``, embedding layer at ``lr × embedding_lr_mult``,
    the loss's own parameters (proxies, class weights, E2E's D) at ``loss_lr`` (its bundle's
    :meth:`~trainables.losses.LossBundle.lr_for`; ``lr`` when None).

    Every group gets ``weight_decay``, the loss's parameters too, as the sources' code does: its
    optimizers take one weight decay and none of their groups overrides it (thesis and
    Proxy-Anchor ``train.py``, ``param_groups``; MemVir ``main.py``, ``params_list``; the E2E
    code's optimizer over all its parameters). Every trunk parameter is listed, whether or not it
    trains in the first epochs (:mod:`trainables.recipe`): one that has no gradient in a step
    is skipped by the optimizer.
    """
    embedding = model.embedding
    head_ids = {id(p) for p in embedding.parameters()}
    trunk = [p for p in model.parameters() if id(p) not in head_ids]
    groups: list[dict[str, Any]] = [
        {"params": trunk, "lr": cfg.lr, "name": "backbone"},
        {"params": list(embedding.parameters()), "lr": cfg.lr * cfg.embedding_lr_mult,
         "name": "embedding"},
    ]
    if loss_params:
        groups.append({"params": loss_params, "lr": loss_lr or cfg.lr, "name": "loss"})
    return [g for g in groups if g["params"]]


def build_optimizer(groups: list[dict[str, Any]], cfg: TrialConfig) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(cfg.optimizer).build(groups, cfg)


def build_scheduler(opt: torch.optim.Optimizer, cfg: TrialConfig) -> Scheduler:
    return LR_SCHEDULES.get(cfg.lr_schedule).build(opt, cfg)


def step_scheduler(scheduler: Scheduler, cfg: TrialConfig, metrics: Mapping[str, float]) -> None:
    """Advance the schedule at the end of an epoch, after its evaluation (``metrics``, empty if
    none): metric-driven schedules step on ``metrics[cfg.metric]`` and skip epochs without an
    evaluation; per-step schedules not at all (the fit loop steps them); the others every
    epoch."""
    factory = LR_SCHEDULES.get(cfg.lr_schedule)
    if factory.per_step:
        return
    if factory.needs_metric:
        if metrics:
            scheduler.step(metrics[cfg.metric])
    else:
        scheduler.step()
