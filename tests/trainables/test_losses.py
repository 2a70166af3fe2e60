"""Every registered loss gives a finite loss with gradients on a small batch, and builds with
its Table 4 defaults; the PML objects get the parameters the config names."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainables.losses import LOSSES
from trainables.losses import build_loss
from trainables.losses import resolve_loss_params


@pytest.mark.parametrize("name", LOSSES.names())
def test_loss_is_finite_and_differentiable(name: str) -> None:
    torch.manual_seed(0)
    emb = F.normalize(torch.randn(16, 8), dim=1).requires_grad_()
    labels = torch.arange(4).repeat_interleave(4)
    bundle = build_loss(name, resolve_loss_params(name, {}), num_classes=4, embedding_size=8)
    loss = bundle(emb, labels)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all()


def test_multi_similarity_maps_thesis_names_to_pml() -> None:
    bundle = build_loss("multi_similarity",
                        resolve_loss_params("multi_similarity", {"margin": 0.8, "alpha": 18,
                                                                 "beta": 76, "epsilon": 0.4}),
                        num_classes=4, embedding_size=8)
    assert (bundle.criterion.base, bundle.criterion.alpha, bundle.criterion.beta) == (0.8, 18, 76)
    assert bundle.miner is not None and bundle.miner.epsilon == 0.4


def test_proxy_anchor_has_proxies_with_their_own_lr() -> None:
    bundle = build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr": 5e-3}),
                        num_classes=7, embedding_size=8)
    assert bundle.param_lr == 5e-3
    assert [tuple(p.shape) for p in bundle.parameters()] == [(7, 8)]
