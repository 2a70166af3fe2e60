"""The recipe's per-epoch trunk settings (trainables.recipe): frozen BatchNorm, head-only warm-up,
and that neither touches a trunk trained from scratch; Adam's eps reaches the optimizer."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.recipe import effective_freeze_bn
from dmlsearch.trainables.recipe import effective_head_warmup
from dmlsearch.trainables.recipe import inert_settings


def _data() -> ImageSet:
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (32, 3, 16, 16), dtype=np.uint8))
    return ImageSet(images=images, labels=np.repeat(np.arange(4), 8), class_names=tuple("abcd"))


@pytest.fixture(scope="module")
def trunk_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 'pretrained' trunk: the recipe freezes BN and warms up only with pretrained weights."""
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("weights") / "trunk.pt"
    torch.save(build_model(backbone="smallcnn", in_channels=3, embedding_size=8,
                           pooling="gap").trunk.state_dict(), path)
    return str(path)


def _fitter(**settings: object) -> Fitter:
    cfg = TrialConfig.from_flat({"loss": "proxy_anchor", "batch_sampler": "random",
                                 "batch_size": 8, "embedding_size": 8, "epochs": 2,
                                 "lr": 1e-2, "device": "cpu", "threads": 1, **settings})
    return Fitter(cfg, _data(), None, seed=0)


def _snapshot(fitter: Fitter) -> dict[str, torch.Tensor]:
    state = {f"model.{k}": v.clone() for k, v in fitter.model.state_dict().items()}
    state.update({f"loss.{k}": v.clone() for k, v in fitter.loss.criterion.state_dict().items()})
    return state


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> set[str]:
    return {k for k in before if not torch.equal(before[k], after[k])}


def _bn(fitter: Fitter) -> list[nn.BatchNorm2d]:
    return [m for m in fitter.model.trunk.modules() if isinstance(m, nn.BatchNorm2d)]


def test_head_warmup_trains_only_the_embedding_and_the_proxies_then_everything(
    trunk_file: str,
) -> None:
    fitter = _fitter(pretrained=trunk_file, head_warmup_epochs=1, freeze_bn="stats")
    first = _snapshot(fitter)
    fitter.train_epoch()
    fitter.finish_epoch()
    warm = _snapshot(fitter)
    changed = _changed(first, warm)
    assert changed == {"model.embedding.weight", "model.embedding.bias", "loss.weight"}
    assert all(not p.requires_grad for p in fitter.model.trunk.parameters())
    fitter.train_epoch()  # epoch 2: the trunk trains, BN's affine parameters included
    changed = _changed(warm, _snapshot(fitter))
    trunk = {k for k in changed if k.startswith("model.trunk.")}
    assert any(k.endswith(".weight") and ".body.1." in k for k in trunk)  # a BN's gamma
    assert not any(k.endswith(("running_mean", "running_var")) for k in trunk)  # stats frozen
    assert all(not m.training for m in _bn(fitter)) and fitter.model.embedding.training


def test_freeze_bn_all_never_trains_batchnorm_stats_or_affine(trunk_file: str) -> None:
    fitter = _fitter(pretrained=trunk_file, freeze_bn="all")
    before = _snapshot(fitter)
    fitter.train_epoch()
    changed = _changed(before, _snapshot(fitter))
    bn_keys = {f"model.trunk.body.{i}.{name}" for i in (1, 5, 9, 13)
               for name in ("weight", "bias", "running_mean", "running_var")}
    assert not changed & bn_keys
    assert "model.trunk.body.0.weight" in changed  # the convolutions train


def test_freeze_bn_off_updates_the_running_statistics(trunk_file: str) -> None:
    fitter = _fitter(pretrained=trunk_file, freeze_bn="off")
    before = _snapshot(fitter)
    fitter.train_epoch()
    assert "model.trunk.body.1.running_mean" in _changed(before, _snapshot(fitter))


def test_a_trunk_from_scratch_trains_as_if_neither_were_set() -> None:
    """pretrained none: frozen random statistics and an idle random trunk would only harm, so
    the same seed gives bit-identical weights with and without the settings."""
    recipe = _fitter(freeze_bn="stats", head_warmup_epochs=1)
    plain = _fitter()
    assert (effective_freeze_bn(recipe.cfg), effective_head_warmup(recipe.cfg)) == ("off", 0)
    assert inert_settings(recipe.cfg) == ["freeze_bn=stats", "head_warmup_epochs=1"]
    assert inert_settings(plain.cfg) == []
    for fitter in (recipe, plain):
        fitter.train_epoch()
    a, b = _snapshot(recipe), _snapshot(plain)
    assert not _changed(a, b)


def test_a_pretrained_trunk_has_no_inert_settings(trunk_file: str) -> None:
    cfg = _fitter(pretrained=trunk_file, freeze_bn="stats", head_warmup_epochs=1).cfg
    assert inert_settings(cfg) == []
    assert (effective_freeze_bn(cfg), effective_head_warmup(cfg)) == ("stats", 1)


def test_a_resumed_fit_freezes_and_warms_up_as_the_uninterrupted_one(trunk_file: str) -> None:
    settings = {"pretrained": trunk_file, "head_warmup_epochs": 1, "freeze_bn": "stats"}
    whole = _fitter(**settings)
    for _ in range(2):
        whole.train_epoch()
        whole.finish_epoch()
    first = _fitter(**settings)
    first.train_epoch()
    first.finish_epoch()
    resumed = _fitter(**settings)
    resumed.load_state_dict(first.state_dict())
    resumed.train_epoch()
    resumed.finish_epoch()
    assert not _changed(_snapshot(whole), _snapshot(resumed))


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_eps_reaches_the_optimizer(optimizer: str, trunk_file: str) -> None:
    fitter = _fitter(optimizer=optimizer, adam_eps=0.01)
    assert {g["eps"] for g in fitter.optimizer.param_groups} == {0.01}


def test_the_loss_parameters_learn_at_a_multiple_of_lr() -> None:
    for lr, mult in ((1e-4, 100.0), (6e-4, 100.0), (1e-3, 10.0)):
        fitter = _fitter(lr=lr, **{"loss.lr_mult": mult})
        groups = {g["name"]: g for g in fitter.optimizer.param_groups}
        assert groups["loss"]["lr"] == pytest.approx(lr * mult)
        assert groups["loss"]["weight_decay"] == fitter.cfg.weight_decay


