"""Embed an image set with a model and score retrieval (and verification) on it.

Which metrics a trial can optimise, and their direction, is :mod:`.names`. Verification metrics
are computed when the metric is one of them or the loss has a distance model (then the retrieval
metrics are reported as well).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import AnyImageSet
from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import iterate_batches
from dmlsearch.trainables.data import sequential_batches
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.names import DEFAULT_KS
from dmlsearch.trainables.metrics.names import NEED_SCORER
from dmlsearch.trainables.metrics.names import is_verification_metric
from dmlsearch.trainables.metrics.retrieval import retrieval_metrics
from dmlsearch.trainables.metrics.verification import PairScorer
from dmlsearch.trainables.metrics.verification import pair_verification_metrics
from dmlsearch.trainables.models import prepare_input

__all__ = ["embed", "embedding_metrics", "evaluate", "listed_pairs", "verification_options"]

DEFAULT_VERIFY_PAIRS = TrialConfig.verify_pairs
DIAGNOSTIC_EVAL_SAMPLE = 20_000
"""Pairs and triplets of the distance diagnostics reported with every evaluation (``diag_*``);
the histograms saved at the end of a fit use more (:data:`dmlsearch.trainables.trial.DIAGNOSTIC_SAMPLE`)."""


def verification_options(cfg: TrialConfig, criterion: object) -> dict[str, object]:
    """The verification keywords of :func:`evaluate` for a trial whose loss is ``criterion``.

    The criterion scores pairs when it has ``pair_scores`` (the ``e2e`` loss). A metric that
    needs one (``*_e2e``, ``*_fusion``) without it is a user error.
    """
    scorer = criterion if callable(getattr(criterion, "pair_scores", None)) else None
    if scorer is None and cfg.metric in NEED_SCORER:
        raise UserError(
            f"metric {cfg.metric} scores pairs with the learned distance of loss e2e, but "
            f"loss is {cfg.loss!r}; set loss=e2e or metric=eer_cosine"
        )
    return {"scorer": scorer, "verification": is_verification_metric(cfg.metric)
            or scorer is not None, "verify_pairs": cfg.verify_pairs}


@torch.no_grad()
def embed(
    model: nn.Module, images: AnyImageSet, *, device: torch.device, batch_size: int = 256,
    workers: int = 0, loader: BatchLoader | None = None, amp_dtype: torch.dtype | None = None,
    on_device: bool = False,
) -> np.ndarray | torch.Tensor:
    """Embeddings of every image, in order (eval transform; ``loader`` reuses its workers).

    The batches' embeddings stay on ``device`` until the last (no host synchronisation per
    batch); ``amp_dtype`` runs the model under autocast (the trial's precision), the embeddings
    are fp32. Returns a NumPy array, or the fp32 tensor on ``device`` with ``on_device``.
    """
    was_training = model.training
    model.eval()
    batches = sequential_batches(len(images), batch_size)
    stream = loader.epoch(batches) if loader is not None else iterate_batches(
        images, batches, train=False, workers=workers, pin_memory=device.type == "cuda",
        device=device)
    out = []
    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        for x, _ in stream:
            out.append(model(prepare_input(model, x, device)).float())
    model.train(was_training)
    embeddings = torch.cat(out)
    return embeddings if on_device else embeddings.cpu().numpy()


def evaluate(
    model: nn.Module, images: AnyImageSet, *, device: torch.device,
    ks: Sequence[int] = DEFAULT_KS, workers: int = 0, loader: BatchLoader | None = None,
    scorer: PairScorer | None = None, verification: bool | None = None,
    verify_pairs: int = DEFAULT_VERIFY_PAIRS, amp_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Retrieval (and verification) metrics of ``images`` embedded by ``model``.

    See :func:`embedding_metrics` for ``scorer``, ``verification`` and ``verify_pairs``;
    :func:`verification_options` gives them for a trial configuration and its loss. On a GPU
    the embeddings stay there and the kNN search runs there too.
    """
    embeddings = embed(model, images, device=device, workers=workers, loader=loader,
                       amp_dtype=amp_dtype, on_device=True)
    pairs = listed_pairs(images)
    return embedding_metrics(embeddings, images.labels, ks=ks, device=device, scorer=scorer,
                             verification=True if pairs is not None else verification,
                             verify_pairs=verify_pairs, pairs=pairs)


def listed_pairs(images: object) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The trial list of a set that has one (an audio set: ``AudioSet.listed_pairs``) as
    (left, right, same) positions into it; None for every other set."""
    listed = getattr(images, "listed_pairs", None)
    return listed() if callable(listed) else None


def embedding_metrics(
    embeddings: np.ndarray | torch.Tensor, labels: np.ndarray, *,
    ks: Sequence[int] = DEFAULT_KS,
    device: torch.device | str = "cpu", scorer: PairScorer | None = None,
    verification: bool | None = None, verify_pairs: int = DEFAULT_VERIFY_PAIRS,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """Metrics of an embedding set (plain Python numbers).

    Retrieval metrics always; verification metrics (``eer_*``, ``auc_*``, ``eer``, ``auc``,
    ``verify_trials``; :func:`trainables.verification.pair_verification_metrics`) when
    ``verification`` is true, or when it is ``None`` and a ``scorer`` (e.g. the ``e2e`` loss's
    criterion, on ``device``) is given. Trials: all pairs i < j, or a fixed-seed sample of
    ``verify_pairs`` of them when there are more (0: all); or, with ``pairs`` (a trial list's
    (left, right, same), positions into ``embeddings``: ``AudioSet.listed_pairs``), those. The
    kNN search runs on ``device`` (faiss on a CPU; on a GPU faiss or torch,
    :func:`~trainables.metrics.retrieval_metrics`).
    """
    on_gpu = torch.device(device).type == "cuda"
    metrics = retrieval_metrics(embeddings, labels, ks=tuple(ks),
                                device=device if on_gpu else None)
    if isinstance(embeddings, torch.Tensor):
        embeddings = embeddings.cpu().numpy()
    out: dict[str, float] = {k: int(v) if k == "num_queries" else float(v)
                             for k, v in metrics.items()}
    if verification or (verification is None and scorer is not None):
        out.update(pair_verification_metrics(embeddings, labels, scorer=scorer,
                                              max_pairs=verify_pairs, device=device,
                                              pairs=pairs))
    if scorer is not None:  # how far D' = 1 - D is from a metric, a curve over the epochs
        from dmlsearch.trainables.metrics.diagnostics import distance_diagnostics
        from dmlsearch.trainables.metrics.diagnostics import e2e_pseudo_distance

        diag = distance_diagnostics(e2e_pseudo_distance(scorer), embeddings, device=device,
                                    pairs=DIAGNOSTIC_EVAL_SAMPLE, triplets=DIAGNOSTIC_EVAL_SAMPLE)
        out.update({f"diag_{k}": v for k, v in diag.items()})
    return out
