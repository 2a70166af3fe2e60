"""MemVir: memory-based virtual classes (Ko et al., ICCV 2021) around a class-weight loss.

MemVir(N, M) wraps any :class:`~trainables.losses._class_weights.ClassWeightLoss` (Norm-softmax,
CosFace, ArcFace, CurricularFace, Proxy-NCA, Proxy-Anchor, and the thesis's proxy loss, which has
the same form). What it does, in the order of the paper (§3.2, Algorithm 1) and of its reference
code (``navervision/MemVir``, ``loss/memvir.py``):

1. **Warm-up.** During the first ``warmup_epochs`` epochs (U_e) MemVir is off: no queue, the loss
   is the plain loss. The fit loop announces each epoch through :meth:`MemVir.start_epoch` (0-based
   index), so MemVir is on from epoch index U_e, i.e. after U_e full epochs (the code's
   ``if epoch <= warm_epoch: return`` with 1-based epochs).
2. **Step t after warm-up** (t = 0, 1, … counts training steps since MemVir turned on, across
   epochs), *before* this step's batch is stored:

   - the queue holds the entries of steps max(0, t − N(M+1)) … t − 1 (queue length N(M+1) steps);
   - the virtual steps are t − (M+1), t − 2(M+1), …, t − k(M+1): M steps are skipped between two
     used steps. With **step-pacing** (the paper's schedule) k = min(N, ⌊L/(M+1)⌋), L the queue
     length, so one virtual step is added every M+1 steps (k(t) = min(N, ⌊t/(M+1)⌋): the staircase
     of the paper's Eq. 4) until N are active. The current batch is never its own virtual class.
   - Virtual step j (j = 1…k, j = 1 the most recent) contributes its stored embeddings with labels
     y + j·C (C = the wrapped loss's number of classes) and its stored weight matrix W_{t−j(M+1)}
     as the weights of those classes. The loss is the wrapped loss's own ``loss_from`` on
     cat[x_t, x_{t−(M+1)}, …] with labels cat[y, y + C, …] against cat[W_t, W_{t−(M+1)}, …]
     (C·(1+k) classes, B·(1+k) rows, all rows weighted alike): the paper's Eq. 5, "without any
     modification of the loss function".
3. **Enqueue** the batch's L2-normalised embeddings (detached), its labels, and a detached copy
   of W_t, taken in the forward pass, i.e. before this step's optimizer update; the oldest entry
   leaves once the queue holds N(M+1) steps.

No gradient reaches queued tensors (they are detached copies). Gradients still flow to W_t from the
virtual embeddings (as negatives) and to the current embeddings from the virtual weights.

**Without step-pacing** (``step_pacing=False``, the paper's "w/o step-pacing" ablation, §3.3.1 and
Fig. 3a: "adds all virtual classes at once after warm-up"): the queue is filled exactly as above,
but no virtual class is used until the queue holds all N selected steps, i.e. until t ≥ N(M+1);
from then on all N are used at every step (k jumps from 0 to N). This is our reading: the paper
gives no algorithm for the ablation, and the selected past steps cannot exist before N(M+1) steps
have been stored. (Another reading, filling the queue during the last warm-up steps so that all N
appear at the first step after warm-up, would change what "warm-up" means; we did not take it.)

With N = 0, before warm-up, outside training mode (``module.eval()``), and while no virtual step
is selected, the loss is exactly the wrapped loss (``self.loss(embeddings, labels)``, which is
``loss_from(embeddings, labels, W_t)``: the same code).

The queue, the step counter and the epoch are part of :meth:`MemVir.state_dict` (``_extra_state``)
so a resumed fit continues with the same virtual classes. Memory: N(M+1) copies of W (C × d) and of
a batch of embeddings; e.g. the published CARS196 recipe (N = 45, M = 10, C = 196 global classes,
d = 512, batch 128) keeps 495 × (196 + 128) × 512 floats ≈ 330 MB, on the loss's device.

Where anything else and the paper could disagree, the paper and its reference code
decide; the queue length N(M+1), the selection t − j(M+1), the label offset j·C, the weights
copied before the update and the select-then-enqueue order are all taken from there (the text of
the paper we have lacks its equations and Algorithm 1, so the code settles the details).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss

__all__ = ["MemVir", "with_memvir"]


@dataclasses.dataclass
class _Entry:
    step: int  # the training step (since MemVir turned on) that stored it
    embeddings: torch.Tensor  # B × d, L2-normalised, detached
    labels: torch.Tensor  # B
    weights: torch.Tensor  # C × d, detached copy of W before that step's update


class MemVir(nn.Module):
    """MemVir(N=``steps``, M=``gap``) with ``warmup_epochs`` around ``loss`` (see module doc)."""

    def __init__(self, loss: ClassWeightLoss, *, steps: int, gap: int, warmup_epochs: int = 0,
                 step_pacing: bool = True) -> None:
        super().__init__()
        if not isinstance(loss, ClassWeightLoss):
            raise TypeError(f"MemVir wraps a ClassWeightLoss, got {type(loss).__name__}")
        if steps < 0 or gap < 0 or warmup_epochs < 0:
            raise ValueError(f"N, M and warm-up must be >= 0, got {steps}, {gap}, "
                             f"{warmup_epochs}")
        self.loss = loss
        self.steps, self.gap = steps, gap
        self.warmup_epochs, self.step_pacing = warmup_epochs, step_pacing
        self.epoch = 0  # index of the epoch in progress (0-based), set by start_epoch
        self.step = 0  # training steps since MemVir turned on
        self._queue: list[_Entry] = []

    @property
    def capacity(self) -> int:
        """Queue length in steps: N(M+1)."""
        return self.steps * (self.gap + 1)

    @property
    def active(self) -> bool:
        """MemVir is on: N > 0 and warm-up is over."""
        return self.steps > 0 and self.epoch >= self.warmup_epochs

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def queued_steps(self) -> list[int]:
        """The steps whose entries are in the queue, oldest first."""
        return [e.step for e in self._queue]

    def virtual_steps(self) -> list[int]:
        """The stored steps the next training step uses as virtual classes: t − (M+1), …"""
        return [e.step for e in self._chosen()]

    def _chosen(self) -> list[_Entry]:
        if not self.active:
            return []
        stride, held = self.gap + 1, len(self._queue)
        if self.step_pacing:
            k = min(self.steps, held // stride)
        else:
            k = self.steps if held >= self.capacity else 0
        return [self._queue[-j * stride] for j in range(1, k + 1)]

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.active):
            return self.loss(embeddings, labels)
        chosen = self._chosen()
        weight = self.loss.weight
        if not chosen:
            loss = self.loss(embeddings, labels)
        else:
            c = weight.shape[0]
            loss = self.loss.loss_from(
                torch.cat([embeddings] + [e.embeddings.to(embeddings.dtype) for e in chosen]),
                torch.cat([labels] + [e.labels + j * c for j, e in enumerate(chosen, 1)]),
                torch.cat([weight] + [e.weights.to(weight.dtype) for e in chosen]),
            )
        self._queue.append(_Entry(
            step=self.step,
            embeddings=F.normalize(embeddings.detach(), dim=1),
            labels=labels.detach().clone(),
            weights=weight.detach().clone(),
        ))
        del self._queue[: max(0, len(self._queue) - self.capacity)]
        self.step += 1
        return loss

    # ---- state: queue and counters travel with state_dict() ----------------------------
    def get_extra_state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "queue": [dataclasses.asdict(e) for e in self._queue],
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        device = self.loss.weight.device
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        entries = state["queue"][max(0, len(state["queue"]) - self.capacity):]
        self._queue = [
            _Entry(step=int(e["step"]), embeddings=e["embeddings"].to(device),
                   labels=e["labels"].to(device), weights=e["weights"].to(device))
            for e in entries
        ]

    def extra_repr(self) -> str:
        return (f"N={self.steps}, M={self.gap}, warmup_epochs={self.warmup_epochs}, "
                f"step_pacing={self.step_pacing}")


def with_memvir(bundle: LossBundle, *, loss: str, steps: int, gap: int, warmup_epochs: int,
                step_pacing: bool = True) -> LossBundle:
    """``bundle`` with its criterion wrapped in MemVir (same miner, same parameter lr)."""
    if not isinstance(bundle.criterion, ClassWeightLoss):
        raise UserError(f"memvir_n > 0 needs a loss with class weights/proxies, got loss={loss!r}")
    criterion = MemVir(bundle.criterion, steps=steps, gap=gap, warmup_epochs=warmup_epochs,
                       step_pacing=step_pacing)
    return dataclasses.replace(bundle, criterion=criterion)
