"""A plug-in's loss (and miner) tried once on a small batch before any trial starts, so a loss
that returns a vector, a non-number, or nothing connected to the embeddings is one error that
names the plug-in, not a failure in every trial."""

from __future__ import annotations

import torch

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import MINERS
from dmlsearch.trainables.losses import build_loss

__all__ = ["check_plugin_loss"]


def check_plugin_loss(cfg: TrialConfig, *, num_classes: int) -> None:
    """Build ``cfg``'s loss for ``num_classes`` training classes and call it on a batch of
    random unit embeddings, two of each of up to four classes, when the loss or the miner is a
    plug-in's; a :class:`UserError` naming the plug-in when the result is not a finite scalar
    with a gradient."""
    plugin = LOSSES.origin(cfg.loss) or (MINERS.origin(cfg.miner) if cfg.miner in MINERS
                                         else None)
    if plugin is None:
        return
    what = f"plug-in {plugin}: loss {cfg.loss!r}" + (
        f" with miner {cfg.miner!r}" if cfg.miner not in ("default", "none") else "")
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(min(4, num_classes)).repeat_interleave(2)
    embeddings = torch.nn.functional.normalize(
        torch.randn(len(labels), cfg.embedding_size, generator=generator), dim=1)
    embeddings.requires_grad_(True)
    try:
        bundle = build_loss(cfg.loss, cfg.loss_params, num_classes=num_classes,
                            embedding_size=cfg.embedding_size, miner=cfg.miner,
                            miner_params=cfg.miner_params)
        value = bundle(embeddings, labels)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
        line = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise UserError(f"{what} failed on a batch of {len(labels)} embeddings of size "
                        f"{cfg.embedding_size}: {line}; fix the plug-in") from None
    if not isinstance(value, torch.Tensor):
        raise UserError(f"{what} returned {type(value).__name__}; expected a scalar tensor "
                        "(the batch's loss); fix the plug-in's forward")
    if value.numel() != 1:
        raise UserError(f"{what} returned a tensor of shape {list(value.shape)} for a batch of "
                        f"{len(labels)} embeddings; expected a scalar (reduce it, e.g. with "
                        ".mean())")
    if not torch.isfinite(value).all():
        raise UserError(f"{what} returned {value.item()} on a batch of random unit embeddings; "
                        "expected a finite number; fix the plug-in")
    if not value.requires_grad:
        raise UserError(f"{what} returned a value without a gradient (computed outside "
                        "autograd, e.g. with .item(), numpy or torch.no_grad()); expected a "
                        "tensor computed from the embeddings")
