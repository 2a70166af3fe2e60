"""``backbone=timm:<model_name>`` (trainables/models/_timm.py): timm's tiny test models as
trunks, their weights from files or the local Hugging Face cache (never downloaded), the errors
for unknown names, files that do not fit and a missing timm, the recipe's BN freezing, and one
tiny fit on glyphs."""

from __future__ import annotations

import copy
import importlib.util
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.models import prepare_input
from dmlsearch.trainables.models._timm import HubWeights
from tests.trainables._model_helpers import few_threads  # noqa: F401 (fixture)
from tests.trainables._model_helpers import no_network  # noqa: F401 (fixture)
from tests.trainables._model_helpers import random_images as _images

#: Every test but the one that simulates a missing timm needs it (an optional extra).
needs_timm = pytest.mark.skipif(
    importlib.util.find_spec("timm") is None,
    reason="timm is not installed (an optional extra): pip install 'dmlsearch[timm]'")

CPU = torch.device("cpu")
# timm's test models (160x160 at training, a few hundred thousand parameters): a CNN with
# BatchNorm, a ViT (tokens), a ConvNeXt (LayerNorm); their feature channels.
TINY = {"test_resnet": 96, "test_vit": 64, "test_convnext": 64}


@pytest.fixture(autouse=True)
def _fresh_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``timm:`` entry is cached in BACKBONES once asked for: keep it out of other tests
    (which list the registered backbones)."""
    monkeypatch.setattr(BACKBONES, "_entries", dict(BACKBONES._entries))


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None) -> Path:
    """An empty Hugging Face hub cache (HF_HUB_CACHE → tmp)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path / "hf"


def _model(name: str, *, in_channels: int = 3, **kw: str) -> nn.Module:
    return build_model(backbone=f"timm:{name}", in_channels=in_channels, embedding_size=16,
                       pooling="gap+gmp", **kw)


def _trunk_out(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model.trunk(prepare_input(model, images, CPU))


# ---- the registry entry and the embedding model ----------------------------------------------
@needs_timm
def test_the_entry_carries_timms_pixel_convention_and_weights_source() -> None:
    info = BACKBONES.get("timm:test_efficientnet")
    assert info.name == "timm:test_efficientnet" and info.input_kind == "image"
    assert info.input.mean == (0.485, 0.456, 0.406) and info.input.std == (0.229, 0.224, 0.225)
    assert info.input.rgb and "160x160" in info.description
    assert isinstance(info.imagenet, HubWeights)
    assert info.imagenet.repo_id == "timm/test_efficientnet.r160_in1k"
    assert BACKBONES.get("timm:test_efficientnet") is info  # built once
    assert "timm:test_resnet" in BACKBONES
    assert any(h.startswith("timm:<model_name>") for h in BACKBONES.families())


@needs_timm
@pytest.mark.parametrize("name", sorted(TINY))
@pytest.mark.parametrize("channels", [1, 3])
def test_timm_trunk_embeds_l2_normalised(name: str, channels: int) -> None:
    model = _model(name, in_channels=channels)
    assert model.embedding.in_features == TINY[name]
    images = _images((2, channels, 64, 64))
    fmap = _trunk_out(model, images)
    assert fmap.ndim == 4 or name == "test_vit"
    assert fmap.shape[:2] == (2, TINY[name])
    if name == "test_vit":  # the 4x4 patch tokens, the class token dropped
        assert fmap.shape == (2, 64, 16)
    with torch.no_grad():
        out = model(prepare_input(model, images, CPU))
    assert out.shape == (2, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(2))


@needs_timm
def test_other_channel_counts_are_refused() -> None:
    with pytest.raises(UserError, match="1 .grey, repeated to RGB. or 3"):
        _model("test_resnet", in_channels=4)


@needs_timm
def test_the_model_copies_and_pickles_with_its_feature_map_hook() -> None:
    model = _model("test_vit")
    images = _images((2, 3, 32, 32))
    want = _trunk_out(model, images)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        torch.testing.assert_close(_trunk_out(other, images), want, rtol=0, atol=0)


# ---- weights from files ----------------------------------------------------------------------
@needs_timm
@pytest.mark.parametrize("suffix", [".safetensors", ".pth", ".bin"])
def test_weights_saved_to_a_file_load_to_identical_outputs(tmp_path: Path, suffix: str) -> None:
    torch.manual_seed(1)
    source = _model("test_resnet")
    for m in source.trunk.modules():  # non-default statistics, so a fresh trunk would differ
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_mean)
            nn.init.uniform_(m.running_var, 0.5, 2.0)
    state = dict(source.trunk.state_dict())
    state["fc.weight"], state["fc.bias"] = torch.zeros(1000, 96), torch.zeros(1000)  # a head
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    torch.manual_seed(2)
    loaded = _model("test_resnet", pretrained=str(path))
    images = _images((2, 1, 48, 48))
    torch.testing.assert_close(_trunk_out(loaded, images), _trunk_out(source, images),
                               rtol=0, atol=0)


@needs_timm
def test_a_file_that_does_not_fit_is_one_error_line(tmp_path: Path) -> None:
    state = _model("test_resnet").trunk.state_dict()
    partial = tmp_path / "partial.pth"
    torch.save({k: v for k, v in state.items() if not k.startswith("conv1.")}, partial)
    with pytest.raises(UserError, match="does not fit backbone 'timm:test_resnet'") as err:
        _model("test_resnet", pretrained=str(partial))
    assert "conv1" in str(err.value) and "\n" not in str(err.value)
    other = tmp_path / "convnext.pth"  # another architecture
    torch.save(_model("test_convnext").trunk.state_dict(), other)
    with pytest.raises(UserError, match="pretrained") as err:
        _model("test_resnet", pretrained=str(other))
    assert "\n" not in str(err.value)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not safetensors")
    with pytest.raises(UserError, match="expected a safetensors file") as err:
        _model("test_resnet", pretrained=str(junk))
    assert "\n" not in str(err.value)


# ---- pretrained=imagenet: the local Hugging Face cache only -----------------------------------
@needs_timm
def test_imagenet_absent_from_the_hf_cache_names_the_repo_and_never_downloads(
    hf_cache: Path,
) -> None:
    with pytest.raises(UserError) as err:
        _model("test_resnet", pretrained="imagenet")
    message = str(err.value)
    assert "timm/test_resnet.r160_in1k" in message and str(hf_cache) in message
    assert "pretrained=/path/to/model.safetensors" in message and "\n" not in message


@needs_timm
def test_imagenet_loads_from_the_hf_cache(hf_cache: Path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(3)
    source = _model("test_resnet")
    state = {k: v.contiguous() for k, v in source.trunk.state_dict().items()}
    state["fc.weight"], state["fc.bias"] = torch.ones(1000, 96), torch.ones(1000)
    repo = hf_cache / "models--timm--test_resnet.r160_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    save_file(state, str(repo / "snapshots" / "abc123" / "model.safetensors"))
    torch.manual_seed(4)
    loaded = _model("test_resnet", pretrained="imagenet")
    images = _images((2, 3, 32, 32))
    torch.testing.assert_close(_trunk_out(loaded, images), _trunk_out(source, images),
                               rtol=0, atol=0)


# ---- names ------------------------------------------------------------------------------------
@needs_timm
def test_an_unknown_model_names_close_ones() -> None:
    with pytest.raises(UserError) as err:
        BACKBONES.get("timm:resnet_18")
    message = str(err.value)
    assert "timm:resnet18" in message and "timm.list_models()" in message
    assert "\n" not in message
    with pytest.raises(UserError, match="pretrained tags"):
        BACKBONES.get("timm:test_resnet.no_such_tag")
    assert "timm:nothing_like_this_at_all" not in BACKBONES


def test_without_timm_the_error_says_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    with pytest.raises(UserError, match=r"timm:test_byobnet needs timm.*pip install timm"):
        BACKBONES.get("timm:test_byobnet")


# ---- the recipe: frozen BatchNorm, head warm-up -----------------------------------------------
@needs_timm
def test_freeze_bn_and_head_warmup_act_on_timm_batchnorm(tmp_path: Path) -> None:
    path = tmp_path / "trunk.pth"
    torch.save(_model("test_resnet").trunk.state_dict(), path)
    rng = np.random.default_rng(0)
    data = ImageSet(images=torch.from_numpy(rng.integers(0, 256, (32, 3, 32, 32), dtype=np.uint8)),
                    labels=np.repeat(np.arange(4), 8), class_names=tuple("abcd"))
    cfg = TrialConfig.from_flat({
        "backbone": "timm:test_resnet", "pretrained": str(path), "freeze_bn": "all",
        "head_warmup_epochs": 1, "loss": "proxy_anchor", "batch_sampler": "random",
        "batch_size": 8, "embedding_size": 8, "epochs": 2, "lr": 1e-2, "device": "cpu",
        "threads": 1})
    fitter = Fitter(cfg, data, None, seed=0)
    named = {n: m for n, m in fitter.model.trunk.named_modules() if isinstance(m, nn.BatchNorm2d)}
    bns = list(named.values())
    assert bns  # timm's BatchNormAct2d is a BatchNorm2d
    fitter.train_epoch()  # the warm-up: only the head trains
    assert all(not p.requires_grad for p in fitter.model.trunk.parameters())
    fitter.finish_epoch()
    before = {k: v.clone() for k, v in fitter.model.trunk.state_dict().items()}
    fitter.train_epoch()
    after = fitter.model.trunk.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert "conv1.0.weight" in changed  # the convolutions train after the warm-up
    assert not {k for k in changed if k.rsplit(".", 1)[0] in named}  # BN: stats, affine frozen
    assert all(not m.training for m in bns)


# ---- a tiny real trial -------------------------------------------------------------------------
@needs_timm
def test_a_tiny_trial_fits_glyphs_with_a_timm_backbone() -> None:
    from dmlsearch.trainables.trial import run_trial
    from tests.helpers import small_config

    result = run_trial(small_config(backbone="timm:test_resnet", epochs=1, device="cpu",
                                    embedding_size=16))
    assert result.epochs_run == 1 and len(result.fold_values) == 1
    assert math.isfinite(result.score) and 0.0 <= result.score <= 1.0
    assert all(math.isfinite(v) for v in result.best_metrics.values())
