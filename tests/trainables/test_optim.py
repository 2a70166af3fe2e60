"""Optimizers build on the three parameter groups, step, and keep per-group lrs; schedules give
the hand-computed lr sequence; plateau decays on the validation metric (also through Fitter)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.optim import LR_SCHEDULES
from dmlsearch.trainables.optim import OPTIMIZERS
from dmlsearch.trainables.optim import build_optimizer
from dmlsearch.trainables.optim import build_scheduler
from dmlsearch.trainables.optim import param_groups
from dmlsearch.trainables.optim import step_scheduler


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(4, 6)
        self.embedding = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embedding(self.trunk(x))


def _cfg(**kw: object) -> TrialConfig:
    return TrialConfig.from_flat({"lr": 1.0, "embedding_lr_mult": 2.0, **kw})


def _optimizer(cfg: TrialConfig) -> tuple[_Net, nn.Parameter, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net, proxy = _Net(), nn.Parameter(torch.randn(5, 3))
    return net, proxy, build_optimizer(param_groups(net, [proxy], 0.25, cfg), cfg)


@pytest.mark.parametrize("name", OPTIMIZERS.names())
def test_optimizer_steps_every_group_at_its_own_lr(name: str) -> None:
    cfg = _cfg(optimizer=name, lr=1e-2)
    net, proxy, opt = _optimizer(cfg)
    assert [g["name"] for g in opt.param_groups] == ["backbone", "embedding", "loss"]
    assert [g["lr"] for g in opt.param_groups] == [1e-2, 2e-2, 0.25]
    # The loss's parameters decay like the rest, as in the sources' optimizers (one weight decay
    # for every group: thesis/Proxy-Anchor train.py, MemVir main.py, the E2E code).
    assert [g["weight_decay"] for g in opt.param_groups] == [cfg.weight_decay] * 3
    before = [p.detach().clone() for p in [*net.parameters(), proxy]]
    opt.zero_grad()
    (net(torch.randn(8, 4)) @ proxy.t()).square().mean().backward()
    opt.step()
    after = [p.detach() for p in [*net.parameters(), proxy]]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))


def test_sgd_and_rmsprop_take_momentum_and_nesterov() -> None:
    sgd = _optimizer(_cfg(optimizer="sgd", momentum=0.7, nesterov=True))[2]
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.defaults["momentum"], sgd.defaults["nesterov"]) == (0.7, True)
    rms = _optimizer(_cfg(optimizer="rmsprop", momentum=0.5))[2]
    assert isinstance(rms, torch.optim.RMSprop) and rms.defaults["momentum"] == 0.5


def test_nesterov_without_momentum_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"nesterov needs momentum > 0.*momentum=0.*set momentum"):
        _optimizer(_cfg(optimizer="sgd", momentum=0.0, nesterov=True))


def _lrs(cfg: TrialConfig, epochs: int, metrics: list[float] | None = None) -> list[float]:
    """The backbone lr each epoch trains with; checks every group keeps its ratio to it."""
    _, _, opt = _optimizer(cfg)
    scheduler, seen = build_scheduler(opt, cfg), []
    for epoch in range(epochs):
        lrs = [g["lr"] for g in opt.param_groups]
        assert lrs[1] == pytest.approx(2 * lrs[0]) and lrs[2] == pytest.approx(0.25 * lrs[0])
        seen.append(lrs[0])
        opt.step()  # (no gradients: a no-op that keeps PyTorch's step-order check quiet)
        step_scheduler(scheduler, cfg, {} if metrics is None else {"recall@1": metrics[epoch]})
    return seen


@pytest.mark.parametrize(("settings", "expected"), [
    ({"lr_schedule": "none"}, [1, 1, 1]),
    ({"lr_schedule": "step", "lr_step_size": 2, "lr_gamma": 0.5}, [1, 1, .5, .5, .25, .25]),
    ({"lr_schedule": "exponential", "lr_gamma": 0.5}, [1, .5, .25, .125]),
    ({"lr_schedule": "warmup_invsqrt", "warmup_epochs": 4},
     [.25, .5, .75, 1, math.sqrt(4 / 5), math.sqrt(4 / 6), math.sqrt(4 / 7), math.sqrt(4 / 8)]),
    ({"lr_schedule": "warmup_invsqrt", "warmup_epochs": 0}, [1, math.sqrt(1 / 2), math.sqrt(1 / 3)]),
    ({"lr_schedule": "warmup_step", "warmup_epochs": 2, "lr_step_size": 2, "lr_gamma": 0.1},
     [.5, 1, 1, 1, .1, .1, .01]),
    ({"lr_schedule": "warmup_step", "warmup_epochs": 0, "lr_step_size": 2, "lr_gamma": 0.5},
     [1, 1, .5, .5, .25]),
])
def test_schedule_gives_the_hand_computed_lrs(settings: dict, expected: list[float]) -> None:
    assert _lrs(_cfg(**settings), len(expected)) == pytest.approx(expected)


def test_only_plateau_needs_the_metric() -> None:
    assert {n for n in LR_SCHEDULES.names() if LR_SCHEDULES.get(n).needs_metric} == {"plateau"}


def test_plateau_decays_after_lr_patience_tolerated_bad_evaluations() -> None:
    cfg = _cfg(lr_schedule="plateau", lr_patience=2, lr_gamma=0.5)
    metrics = [.5, .6, .6, .6, .6, .6, .6, .7, .7]
    # The lr used in epoch k+1: bad evaluations 3, 4 are tolerated, the 3rd bad one (epoch 5)
    # halves the lr, the count restarts; 6, 7 bad again, 8 improves.
    assert _lrs(cfg, 9, metrics) == pytest.approx([1, 1, 1, 1, 1, .5, .5, .5, .5])


def test_plateau_skips_epochs_without_an_evaluation() -> None:
    cfg = _cfg(lr_schedule="plateau", lr_patience=0, lr_gamma=0.5)
    _, _, opt = _optimizer(cfg)
    scheduler = build_scheduler(opt, cfg)
    for metrics in [{"recall@1": .5}, {}, {}, {}, {"recall@1": .5}]:
        opt.step()
        step_scheduler(scheduler, cfg, metrics)
        if metrics == {}:
            assert opt.param_groups[0]["lr"] == 1.0
    assert opt.param_groups[0]["lr"] == 0.5


def _tiny_split() -> tuple[ImageSet, ImageSet]:
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (48, 1, 32, 32), dtype=np.uint8))
    labels, names = np.repeat(np.arange(6), 8), tuple("abcdef")
    train = ImageSet(images=images[:32], labels=labels[:32], class_names=names)
    return train, ImageSet(images=images[32:], labels=labels[32:], class_names=names)


@pytest.mark.parametrize(("settings", "expected"), [
    ({"lr_schedule": "plateau", "lr_patience": 0, "lr_gamma": 0.5}, [1e-9, 5e-10, 2.5e-10]),
    ({"lr_schedule": "step", "lr_step_size": 1, "lr_gamma": 0.5}, [5e-10, 2.5e-10, 1.25e-10]),
])
def test_fitter_steps_schedules_once_per_epoch(settings: dict, expected: list[float],
                                              tmp_path: Path) -> None:
    # lr 1e-9 and frozen BatchNorm of a "pretrained" trunk (BN is frozen only then): the model
    # hardly moves, the metric never improves.
    trunk = tmp_path / "trunk.pt"
    torch.save(build_model(backbone="smallcnn", in_channels=1, embedding_size=8,
                           pooling="gap").trunk.state_dict(), trunk)
    cfg = TrialConfig.from_flat({"epochs": 3, "batch_size": 16, "m_per_class": 4,
                                 "embedding_size": 8, "lr": 1e-9, "freeze_bn": "all",
                                 "pretrained": str(trunk), "threads": 1, "device": "cpu",
                                 **settings})
    fitter, lrs = Fitter(cfg, *_tiny_split()), []
    fitter.run(lambda report, state: lrs.append(fitter.optimizer.param_groups[0]["lr"]))
    assert lrs == pytest.approx(expected)
