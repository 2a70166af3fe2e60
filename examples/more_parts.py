"""A plug-in with one of every other part: a backbone, a miner, a batch sampler and a dataset.

    dmlsearch run --plugin examples/more_parts.py --dataset noisy_bars \\
        --set backbone=tiny_convnet --set loss=contrastive --set miner=hardest_pairs \\
        --set batch_sampler=two_per_class --set m_per_class=2

Each decorator registers a name that a space file, ``--set`` or ``--dataset`` then chooses, as
for a shipped part (docs/guide/plugins.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

import dmlsearch


@dmlsearch.register_backbone("tiny_convnet", description="two conv blocks (an example)")
def tiny_convnet(*, in_channels: int) -> tuple[nn.Module, int]:
    """A trunk from pixels in [-1, 1] ``[B, C, H, W]`` to a feature map; its channel count."""
    trunk = nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
    return trunk, 32


@dmlsearch.register_miner("hardest_pairs", defaults={"keep": 0.5})
def hardest_pairs(*, keep: float) -> nn.Module:
    """The hardest ``keep`` fraction of the batch's positive and of its negative pairs, as
    pytorch-metric-learning's index tuple ``(a1, p, a2, n)`` that its pair losses take."""

    class HardestPairs(nn.Module):
        def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple:
            with torch.no_grad():
                similarity = embeddings @ embeddings.T
            same = labels[:, None] == labels[None, :]
            upper = torch.ones_like(same).triu(diagonal=1)
            positives = (same & upper).nonzero()
            negatives = (~same & upper).nonzero()
            pos = positives[similarity[positives[:, 0], positives[:, 1]].argsort()]
            neg = negatives[similarity[negatives[:, 0], negatives[:, 1]].argsort(
                descending=True)]
            pos = pos[: max(1, int(len(pos) * keep))]
            neg = neg[: max(1, int(len(neg) * keep))]
            return pos[:, 0], pos[:, 1], neg[:, 0], neg[:, 1]

    return HardestPairs()


@dmlsearch.register_batch_sampler("two_per_class")
def two_per_class(labels: np.ndarray, batch_size: int, m: int,
                  rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Batches of pairs: classes in a random order, two random images of each."""
    del m  # always two
    classes = rng.permutation(np.unique(labels))
    per_batch = batch_size // 2
    for start in range(0, len(classes) - per_batch + 1, per_batch):
        batch = [rng.choice(np.flatnonzero(labels == c), 2, replace=False)
                 for c in classes[start:start + per_batch]]
        yield np.concatenate(batch)


@dmlsearch.register_dataset("noisy_bars", description="bars at 24 angles, with noise (an "
                            "example)", image_size=32)
def noisy_bars(*, root: str | None, image_size: int, seed: int) -> dmlsearch.Dataset:
    """24 classes, one bar angle each, 12 noisy images per class; the first 12 classes train,
    the last 12 are the test classes (``with_standard_split``)."""
    del root  # built in memory
    rng = np.random.default_rng(seed)
    grid = np.mgrid[0:image_size, 0:image_size] - (image_size - 1) / 2
    images, labels = [], []
    for label, angle in enumerate(np.linspace(0, np.pi, 24, endpoint=False)):
        distance = np.abs(grid[0] * np.cos(angle) - grid[1] * np.sin(angle))
        bar = np.clip(1.5 - distance / 2, 0, 1)
        for _ in range(12):
            noisy = np.clip(bar + rng.normal(0, 0.25, bar.shape), 0, 1)
            images.append((noisy * 255).astype(np.uint8)[None])
            labels.append(label)
    return dmlsearch.Dataset.with_standard_split(name="noisy_bars", images=dmlsearch.ImageSet(
        images=torch.from_numpy(np.stack(images)), labels=np.asarray(labels),
        class_names=tuple(f"angle{n:02d}" for n in range(24))))
