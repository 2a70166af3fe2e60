"""``backbone=timm:<model_name>``: any timm model as a trunk, when timm is installed (optional).

``timm:resnet18``, ``timm:convnext_tiny``, ``timm:vit_small_patch16_224`` or a pretrained tag
(``timm:resnet18.a1_in1k``) name :func:`timm.create_model`'s models; the entry is built when the
name is first asked for (:meth:`Registry.add_family`), so timm is imported only then.

* **Trunk**: the timm model itself, built with ``pretrained=False, num_classes=0,
  global_pool=""`` (its classifier and pooling removed; ``dmlsearch``'s head pools), so its
  ``state_dict`` keys are timm's and a timm weights file loads by key. A forward hook turns what it
  returns into ``[B, C, ...]`` for :class:`EmbeddingNet`: CNN feature maps ``[B, C, H, W]`` pass;
  channels-last maps (Swin, MambaOut: ``output_fmt == "NHWC"``) are permuted; token sequences
  ``[B, N, C]`` (ViT and kin) lose their prefix tokens (class / register tokens) and become
  ``[B, C, N_patches]``, so ``pooling`` (gap, gmp, gap+gmp) pools the patch tokens, as timm's
  ``global_pool="avg"``. ViTs are built with ``dynamic_img_size=True`` (any image size).
* **Pixels**: the mean / std of the model's ``pretrained_cfg`` (:class:`InputSpec`); the
  resolution it was trained at is in the entry's description (``image_size`` sets the data's).
* **Grey images** are repeated to RGB, as for the torchvision backbones (:func:`rgb_in_channels`),
  rather than timm's ``in_chans=1``: the model keeps 3 input channels, so ImageNet weights load
  unchanged. Other channel counts are refused.
* **Weights** (never downloaded): ``pretrained=none``, a file (``.safetensors``, ``.pth``,
  ``.bin``; a classifier head in it is ignored; keys that do not fit are one error line), or
  ``imagenet``: the file timm itself would read, looked up in the local Hugging Face cache only
  (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; no network, as
  ``HF_HUB_OFFLINE=1``), else torch hub's cache for the few timm weights published by URL only.
* ``freeze_bn`` acts on timm's BatchNorm layers (``BatchNormAct2d`` is a ``BatchNorm2d``); a model
  without BatchNorm (ConvNeXt, ViT: LayerNorm) has nothing for it to freeze. ``head_warmup_epochs``
  works for every model (it freezes the trunk's parameters).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models._backbones import BACKBONES
from dmlsearch.trainables.models._backbones import BackboneInfo
from dmlsearch.trainables.models._backbones import rgb_in_channels
from dmlsearch.trainables.models._normalize import IMAGENET
from dmlsearch.trainables.models._normalize import InputSpec
from dmlsearch.trainables.models._weights import ImagenetWeights

__all__ = ["PREFIX", "HubWeights", "build_timm_backbone", "hf_cache_dir"]

PREFIX = "timm:"
_CLOSE = 6  # close names listed for an unknown model


def _timm(name: str) -> ModuleType:
    try:
        import timm
    except ImportError:
        raise UserError(
            f"backbone {PREFIX}{name} needs timm, which is not installed; pip install timm "
            "(or pip install 'dmlsearch[timm]'), or pick a built-in backbone"
        ) from None
    return timm


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it (read from the environment now)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _cached_file(cache: Path, repo_id: str, file_name: str) -> Path | None:
    """``file_name`` of the model repo ``repo_id`` in the hub cache ``cache``, or None.

    The cache layout: ``models--<org>--<name>/refs/main`` holds a commit, whose files are under
    ``snapshots/<commit>/``; a snapshot without refs (copied by hand) is taken as well.
    """
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    ref = folder / "refs" / "main"
    commits = [ref.read_text().strip()] if ref.is_file() else []
    snapshots = folder / "snapshots"
    if snapshots.is_dir():
        commits += sorted(p.name for p in snapshots.iterdir() if p.name not in commits)
    for commit in commits:
        path = snapshots / commit / file_name
        if path.is_file():
            return path
    return None


@dataclasses.dataclass(frozen=True)
class HubWeights(ImagenetWeights):
    """timm's pretrained weights: ``repo_id``'s file in the local Hugging Face cache (or, for
    weights published by URL only, torch hub's cache as the base class)."""

    repo_id: str = ""
    files: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin")  # timm's order

    def local_path(self) -> Path:
        cache = hf_cache_dir()
        if self.repo_id:
            for file_name in self.files:
                found = _cached_file(cache, self.repo_id, file_name)
                if found is not None:
                    return found
        if self.url:  # published by URL: torch hub's cache, where timm would have put it
            path = super().local_path()
            if path.is_file() or not self.repo_id:
                return path
        return cache / ("models--" + self.repo_id.replace("/", "--"))

    def missing(self, backbone: str, path: Path) -> str:
        if not self.repo_id:
            return super().missing(backbone, path)
        return (
            f"pretrained=imagenet for {backbone!r} reads timm's weights {self.repo_id} "
            f"({' or '.join(self.files)}) from the local Hugging Face cache {hf_cache_dir()}, "
            "which holds none (nothing is downloaded); fetch them once where there is network "
            f"(hf download {self.repo_id}, with the same HF_HUB_CACHE), or give the file: "
            f"pretrained=/path/to/{self.files[0]}, or use pretrained=none"
        )


def _imagenet(cfg: Any) -> ImagenetWeights | None:
    """Where ``pretrained=imagenet`` finds the weights of ``cfg`` (a timm PretrainedCfg)."""
    repo_id = getattr(cfg, "hf_hub_id", None) or ""
    url = getattr(cfg, "url", None) or ""
    if not repo_id and not url:
        return None  # an architecture without published weights
    if getattr(cfg, "hf_hub_filename", None):
        files: tuple[str, ...] = (cfg.hf_hub_filename,)
    else:
        files = HubWeights.files
    return HubWeights(url=url, repo_id=repo_id, files=files)


def _input_spec(cfg: Any) -> InputSpec:
    mean, std = getattr(cfg, "mean", None), getattr(cfg, "std", None)
    if not mean or not std or len(mean) != len(std) or len(mean) not in (1, 3):
        return IMAGENET
    return InputSpec(mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std),
                     rgb=True)


def _unknown(timm: ModuleType, name: str) -> UserError:
    arch = name.split(".", 1)[0]
    names = timm.list_models()
    close = difflib.get_close_matches(arch, names, n=_CLOSE, cutoff=0.6)
    close += [n for n in timm.list_models(f"*{arch}*") if n not in close][: _CLOSE - len(close)]
    near = f"close names: {', '.join(PREFIX + n for n in close)}; " if close else ""
    return UserError(
        f"backbone {PREFIX}{name}: expected a timm model name; got {name!r}, which timm "
        f"{timm.__version__} does not know; {near}see timm.list_models() (fix the backbone)"
    )


def _pretrained_cfg(timm: ModuleType, name: str) -> Any:
    from timm.models import get_pretrained_cfg

    try:
        return get_pretrained_cfg(name)
    except RuntimeError:  # an unknown pretrained tag
        arch = name.split(".", 1)[0]
        tags = timm.list_pretrained(f"{arch}.*")
        listed = ", ".join(PREFIX + t for t in tags[:_CLOSE]) + (", ..." if len(tags) > _CLOSE
                                                                  else "")
        raise UserError(
            f"backbone {PREFIX}{name}: expected one of {arch}'s pretrained tags; got "
            f"{name.split('.', 1)[1]!r}; {listed or 'it has none'} (see timm.list_pretrained"
            f"('{arch}.*')), or name the architecture alone: {PREFIX}{arch}"
        ) from None


def _to_feature_map(module: nn.Module, args: Any, out: Any) -> torch.Tensor:
    """Forward hook: what the timm model returns → ``[B, C, ...]`` (pooled by EmbeddingNet)."""
    if isinstance(out, (list, tuple)):  # a model that returns several outputs: the last stage
        out = out[-1]
    if out.ndim == 4:
        if getattr(module, "output_fmt", "NCHW") == "NHWC":
            out = out.permute(0, 3, 1, 2)
        return out
    if out.ndim == 3:  # tokens [B, N, C]: the patch tokens, channels first
        prefix = int(getattr(module, "num_prefix_tokens", 0) or 0)
        if 0 < prefix < out.shape[1]:
            out = out[:, prefix:]
        return out.transpose(1, 2)
    if out.ndim == 2:  # already pooled [B, C]
        return out.unsqueeze(-1)
    return out


def _create(timm: ModuleType, name: str) -> nn.Module:
    kwargs: dict[str, Any] = {"pretrained": False, "num_classes": 0, "global_pool": ""}
    try:
        model = timm.create_model(name, **kwargs)
        if getattr(model, "dynamic_img_size", None) is False:  # a ViT fixed to one image size
            model = timm.create_model(name, dynamic_img_size=True, **kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as exc:
        raise UserError(
            f"backbone {PREFIX}{name}: timm could not build it as a feature trunk (num_classes=0, "
            f"global_pool=''): {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
            "; pick another timm model"
        ) from None
    model.register_forward_hook(_to_feature_map)
    return model


def build_timm_backbone(name: str) -> BackboneInfo:
    """The registry entry for ``timm:<name>`` (a :class:`UserError` when timm lacks it)."""
    timm = _timm(name)
    if not name or not timm.is_model(name):
        raise _unknown(timm, name)
    cfg = _pretrained_cfg(timm, name)
    backbone = PREFIX + name

    def build(*, in_channels: int) -> tuple[nn.Module, int]:
        rgb_in_channels(backbone, in_channels)
        model = _create(timm, name)
        # What the model returns after its head (without pooling or classifier) has
        # head_hidden_size channels (a pre-logits layer, as MambaOut's), else num_features.
        return model, int(getattr(model, "head_hidden_size", None) or model.num_features)

    size = getattr(cfg, "input_size", None)
    trained = f", pretrained at {size[1]}x{size[2]}" if size and len(size) == 3 else ""
    return BackboneInfo(
        name=backbone, build=build,
        description=f"timm model {name} (timm.create_model, feature map of its last stage"
                    f"{trained})",
        input=_input_spec(cfg), imagenet=_imagenet(cfg),
    )


BACKBONES.add_family(PREFIX, build_timm_backbone,
                     hint="timm:<model_name> (any timm model, when timm is installed)")
