"""A complete dmlsearch plug-in: one new loss, searched and compared like a shipped one.

    dmlsearch run --plugin examples/my_loss.py --set loss=margin_proxy
    dmlsearch compare --plugin examples/my_loss.py --methods margin_proxy proxy_anchor multi_similarity

The loss: one learned proxy per training class; each embedding's cosine to its own class's
proxy is lowered by a margin, every cosine is scaled by a temperature, and the loss is the
cross-entropy of the embedding against its class (the normalised-softmax family with an
additive margin, as in CosFace). It is here to show the plumbing, not to beat anything:

* ``@dmlsearch.register_loss(name, defaults)`` registers a factory. dmlsearch calls it with
  the trial's ``num_classes`` and ``embedding_size`` and the loss's settings (``loss.margin``,
  ``loss.scale``: the defaults below, or what a space, ``--set`` or the search chose).
* The factory returns a ``torch.nn.Module``; ``forward(embeddings, labels)`` gets a batch of
  L2-normalised embeddings ``[B, D]`` and integer labels ``[B]`` and returns a scalar.
* The module's own parameters (the proxies) train with the model, at the trial's learning rate
  times ``param_lr_mult`` (proxy losses train their proxies faster: Proxy-Anchor's code uses
  x 100).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import dmlsearch


class MarginProxyLoss(nn.Module):
    """Cross-entropy over scaled cosines to one proxy per class, the true class's cosine
    lowered by ``margin``."""

    def __init__(self, num_classes: int, embedding_size: int, *, margin: float,
                 scale: float) -> None:
        super().__init__()
        self.proxies = nn.Parameter(torch.empty(num_classes, embedding_size))
        nn.init.kaiming_normal_(self.proxies, mode="fan_out")
        self.margin, self.scale = margin, scale

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cosines = F.normalize(embeddings, dim=1) @ F.normalize(self.proxies, dim=1).T
        margins = self.margin * F.one_hot(labels, cosines.shape[1])
        return F.cross_entropy(self.scale * (cosines - margins), labels)


@dmlsearch.register_loss("margin_proxy", defaults={"margin": 0.1, "scale": 16.0},
                         param_lr_mult=100.0)
def margin_proxy(*, num_classes: int, embedding_size: int, margin: float,
                 scale: float) -> nn.Module:
    return MarginProxyLoss(num_classes, embedding_size, margin=margin, scale=scale)
