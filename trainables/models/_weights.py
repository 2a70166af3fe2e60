"""Pretrained trunk weights: ``none``, ``imagenet`` (local torch hub cache only) or a file path.

Nothing is ever downloaded. ``imagenet`` reads the file torch hub would have downloaded,
``torch.hub.get_dir()/checkpoints/<file name of the URL>`` (``$TORCH_HOME/hub/checkpoints`` when
``TORCH_HOME`` is set, else ``~/.cache/torch/hub/checkpoints``); a missing file is a
:class:`UserError` naming the path to fill and the URL to fetch it from. Files are read with
``torch.load(..., weights_only=True)``, ``.safetensors`` files with safetensors: no code in a
weights file ever runs. (timm backbones find ``imagenet`` in the Hugging Face cache: ``_timm``.)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from dmlsearch.trainables.errors import UserError

__all__ = [
    "ImagenetWeights",
    "imagenet_path",
    "load_pretrained",
    "load_weights",
    "resolve_pretrained",
]

logger = logging.getLogger(__name__)

# Prefixes that wrap a trunk's keys in other checkpoints: DataParallel, our EmbeddingNet, others.
_PREFIXES = ("module.", "model.", "trunk.", "backbone.")
_SHOWN = 6  # keys listed in a message


@dataclasses.dataclass(frozen=True)
class ImagenetWeights:
    """Where a backbone's ImageNet weights come from (the URL torch hub would download)."""

    url: str

    @property
    def file_name(self) -> str:
        return os.path.basename(urllib.parse.urlparse(self.url).path)

    def local_path(self) -> Path:
        """The local file ``pretrained=imagenet`` reads (a subclass may look in another cache)."""
        return Path(torch.hub.get_dir()) / "checkpoints" / self.file_name

    def missing(self, backbone: str, path: Path) -> str:
        """The error line when :meth:`local_path` is no file: what to fetch, where to put it."""
        return (
            f"pretrained=imagenet for {backbone!r} reads the local file {path}, which does "
            f"not exist (nothing is downloaded); fetch {self.url} and place it there as "
            f"{self.file_name} (or set TORCH_HOME to the folder holding hub/checkpoints), "
            "or use pretrained=none"
        )


def imagenet_path(weights: ImagenetWeights) -> Path:
    """The local file that ``pretrained=imagenet`` reads (the torch hub cache's, by default)."""
    return weights.local_path()


def resolve_pretrained(
    pretrained: str, *, backbone: str, imagenet: ImagenetWeights | None
) -> Path | None:
    """The file ``pretrained`` names (``None`` for ``none``); checked before any model is built."""
    if pretrained == "none":
        return None
    if pretrained == "imagenet":
        if imagenet is None:
            raise UserError(
                f"pretrained=imagenet: backbone {backbone!r} has no ImageNet weights; expected "
                "pretrained=none or a path to a weights file (fix --set pretrained=...)"
            )
        path = imagenet_path(imagenet)
        if not path.is_file():
            raise UserError(imagenet.missing(backbone, path))
        return path
    path = Path(pretrained).expanduser()
    if not path.is_file():
        raise UserError(
            f"pretrained: expected none, imagenet or a path to a weights file; got "
            f"{pretrained!r}, which is no file (fix the path; relative paths are read from the working directory)"
        )
    return path


def load_pretrained(
    trunk: nn.Module, *, backbone: str, pretrained: str, imagenet: ImagenetWeights | None
) -> None:
    """Fill ``trunk`` from ``pretrained`` (``none`` leaves it as initialised)."""
    path = resolve_pretrained(pretrained, backbone=backbone, imagenet=imagenet)
    if path is not None:
        load_weights(trunk, path, backbone=backbone, classifier_expected=pretrained == "imagenet")


def _read(path: Path) -> Mapping[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling refused, truncated file, not a torch file, ...
        raise UserError(
            f"pretrained: expected a torch weights file (a state_dict of tensors) at {path}; it "
            f"could not be read with weights_only=True ({_reason(exc)}); code in a weights file "
            "is never run: re-save it with torch.save(model.state_dict(), path), or fix the path"
        ) from None
    if isinstance(obj, Mapping):
        # Training checkpoints: most keep the weights under state_dict, ours under model.
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj:
        raise UserError(
            "pretrained: expected a state_dict (name → tensor) or a checkpoint with 'state_dict' "
            f"in {path}; got {type(obj).__name__}; fix the file"
        )
    return {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}


def _read_safetensors(path: Path) -> Mapping[str, torch.Tensor]:
    """A ``.safetensors`` file (tensors only: nothing in it can run)."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise UserError(
            f"pretrained: {path} is a .safetensors file, which needs the safetensors package; "
            "got none installed: pip install safetensors (or give a .pth file)"
        ) from None
    try:
        tensors = load_file(str(path), device="cpu")
    except Exception as exc:  # truncated, not a safetensors file, ...
        raise UserError(
            f"pretrained: expected a safetensors file at {path}; it could not be read "
            f"({_reason(exc)}); fix the path or the file"
        ) from None
    if not tensors:
        raise UserError(f"pretrained: expected tensors in {path}; got an empty file; fix the file")
    return tensors


def _reason(exc: Exception) -> str:
    """The telling line of torch.load's (long, multi-line) error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Unsupported" in line:  # weights_only refused a pickled global / opcode
            return line[line.index("Unsupported"):].split(". ")[0][:160]
    return (lines[0].split(". ")[0][:160] if lines else "") or type(exc).__name__


def _rename(key: str, targets: Mapping[str, torch.Tensor]) -> str:
    while key not in targets and key.startswith(_PREFIXES):
        key = key.split(".", 1)[1]
    return key


def _fit_shape(value: torch.Tensor, shape: torch.Size) -> torch.Tensor | None:
    """``value`` reshaped to ``shape`` if they differ only by size-1 dims (Cadene's [1, C] BN)."""
    if value.shape == shape:
        return value
    squeezed = [d for d in value.shape if d != 1]
    if squeezed == [d for d in shape if d != 1] and value.numel() == shape.numel():
        return value.reshape(shape)
    return None


def load_weights(
    trunk: nn.Module, path: Path, *, backbone: str, classifier_expected: bool = False
) -> None:
    """Load a state_dict file into ``trunk`` by key; a partial or foreign file is a UserError.

    Keys may carry a ``module.`` / ``model.`` / ``trunk.`` / ``backbone.`` prefix; keys the trunk
    lacks (a classifier, an embedding layer) are ignored with a warning (an info line when
    ``classifier_expected``, as for ImageNet files). Missing trunk tensors are an error.
    """
    targets = trunk.state_dict()
    loaded, unexpected, wrong_shape = {}, [], []
    for key, value in _read(path).items():
        name = _rename(key, targets)
        if name not in targets:
            unexpected.append(key)
            continue
        fitted = _fit_shape(value, targets[name].shape)
        if fitted is None:
            wrong_shape.append(f"{name} {tuple(value.shape)} vs {tuple(targets[name].shape)}")
        else:
            loaded[name] = fitted.to(targets[name].dtype)
    # BatchNorm step counters are absent from older files (torchvision, Cadene); they are unused.
    missing = [k for k in targets if k not in loaded and not k.endswith("num_batches_tracked")]
    if not loaded:
        raise UserError(
            f"pretrained: expected weights for backbone {backbone!r} in {path}; no key matched "
            f"(file keys: {_few(unexpected or wrong_shape)}; the trunk's: {_few(list(targets))}); "
            "fix the backbone or the file"
        )
    if wrong_shape or missing:
        raise UserError(
            f"pretrained: {path} does not fit backbone {backbone!r}: {len(missing)} trunk tensors "
            f"missing ({_few(missing)}), {len(wrong_shape)} of another shape "
            f"({_few(wrong_shape)}); expected weights of the same architecture, fix the file or "
            "the backbone"
        )
    trunk.load_state_dict(loaded, strict=False)
    if unexpected:
        log = logger.info if classifier_expected else logger.warning
        log("pretrained %s: loaded %d tensors into %s; ignored %d keys the trunk has no use for "
            "(a classifier or embedding head): %s", path, len(loaded), backbone, len(unexpected),
            _few(unexpected))
    else:
        logger.info("pretrained %s: loaded %d tensors into %s", path, len(loaded), backbone)


def _few(keys: list[str]) -> str:
    more = f", ... (+{len(keys) - _SHOWN})" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more if keys else "none"
