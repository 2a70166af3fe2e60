"""Embed an image set with a model and score retrieval on it (SPEC §6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from trainables.data import AnyImageSet
from trainables.data import BatchLoader
from trainables.data import iterate_batches
from trainables.data import sequential_batches
from trainables.errors import UserError
from trainables.metrics import retrieval_metrics
from trainables.models import prepare_input

__all__ = ["DEFAULT_KS", "embed", "evaluate", "ks_for_metric", "resolve_device"]

DEFAULT_KS: tuple[int, ...] = (1, 2, 4, 8)
_SCALAR_METRICS = ("precision@1", "r_precision", "map@r")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "device 'cuda' was asked for, but no GPU is visible to torch on this machine; "
            "use --set device=auto (GPU when present) or device=cpu"
        )
    return torch.device(name)


def ks_for_metric(metric: str, ks: Sequence[int] = DEFAULT_KS) -> tuple[int, ...]:
    """The recall cut-offs to compute so that ``metric`` is among the results."""
    if metric in _SCALAR_METRICS:
        return tuple(ks)
    if metric.startswith("recall@"):
        try:
            k = int(metric.split("@", 1)[1])
        except ValueError:
            k = 0
        if k >= 1:
            return tuple(sorted(set(ks) | {k}))
    raise UserError(
        f"metric must be recall@<k>, {', '.join(_SCALAR_METRICS)}; got {metric!r} "
        "(fix `metric` in the space file or --set metric=recall@1)"
    )


@torch.no_grad()
def embed(
    model: nn.Module, images: AnyImageSet, *, device: torch.device, batch_size: int = 256,
    workers: int = 0, loader: BatchLoader | None = None,
) -> np.ndarray:
    """Embeddings of every image, in order (eval transform; ``loader`` reuses its workers)."""
    was_training = model.training
    model.eval()
    batches = sequential_batches(len(images), batch_size)
    stream = loader.epoch(batches) if loader is not None else iterate_batches(
        images, batches, train=False, workers=workers, pin_memory=device.type == "cuda")
    out = [model(prepare_input(model, x, device)).float().cpu() for x, _ in stream]
    model.train(was_training)
    return torch.cat(out).numpy()


def evaluate(
    model: nn.Module, images: AnyImageSet, *, device: torch.device,
    ks: Sequence[int] = DEFAULT_KS, workers: int = 0, loader: BatchLoader | None = None,
) -> dict[str, float]:
    """Retrieval metrics of ``images`` embedded by ``model`` (plain Python numbers)."""
    embeddings = embed(model, images, device=device, workers=workers, loader=loader)
    metrics = retrieval_metrics(embeddings, images.labels, ks=tuple(ks))
    return {k: int(v) if k == "num_queries" else float(v) for k, v in metrics.items()}
