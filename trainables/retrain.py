"""The retrain: the chosen configuration on *all* training classes, then one test evaluation.

Psomas 2020 §5.2: after the search, the configuration is retrained on every training class (no
validation split, so no model selection happens here) for a fixed number of epochs, and the
test classes are touched exactly once. ``dmlsearch train`` and the search's retrain both call
:func:`retrain`, so an exported configuration reproduces the retrain's numbers.

For a k-fold configuration, :func:`train_fold_ensemble` is the MLRC protocol's test evaluation
(Musgrave et al. ECCV 2020 §4; MemVir's Table 2): the k fold models (each trained on k−1 class
groups, its best validation epoch kept, exactly as in the search's trial) are evaluated on the
test classes one by one (mean ± std over folds) and as an **ensemble**: each model's embedding
L2-normalised, the k embeddings concatenated (a k·d vector), retrieval scored by cosine (and, for
a dataset with a trial list, its trials by cosine).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import cast

import numpy as np

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import AnyImageSet
from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.fit import EpochReport
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.metrics.evaluate import embed
from dmlsearch.trainables.metrics.evaluate import embedding_metrics
from dmlsearch.trainables.metrics.evaluate import listed_pairs
from dmlsearch.trainables.metrics.evaluate import verification_options
from dmlsearch.trainables.metrics.names import ks_for_metric
from dmlsearch.trainables.metrics.retrieval import retrieval_metrics
from dmlsearch.trainables.metrics.verification import PairScorer
from dmlsearch.trainables.metrics.verification import pair_verification_metrics
from dmlsearch.trainables.models import EmbeddingNet
from dmlsearch.trainables.trial import fold_fitter
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import splits_for

__all__ = ["EnsembleResult", "RetrainResult", "ensemble_embeddings", "train_fold_ensemble",
           "retrain"]


@dataclasses.dataclass
class RetrainResult:
    model: EmbeddingNet
    test_metrics: dict[str, float]
    history: list[dict[str, float]]
    seconds: float
    test_embeddings: np.ndarray | None = None  # the embeddings the test metrics were scored on
    test_labels: np.ndarray | None = None
    # The model's input, as its input kind's ModelInput reads it: the items' channels (an
    # image's colours, an utterance's features, a vector's dimension) and, for pixels, the
    # image size (None: the kind's items have no size).
    input_channels: int = 0
    input_size: int | None = None
    # What the retrieval galleries draw: the test images, in the order of test_embeddings (a
    # file-backed set reads a file only when asked), and the learned distance D that scored the
    # verification trials (the e2e loss's criterion, on the training device; None otherwise).
    test_images: AnyImageSet | None = None
    pair_scorer: PairScorer | None = None
    # The CPU threads it trained and tested with (fit.py; None: a GPU run that left them alone):
    # what the export records, so `dmlsearch train` computes with the same team.
    threads: int | None = None


def retrain(
    cfg: TrialConfig,
    *,
    dataset: Dataset | None = None,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> RetrainResult:
    started = time.perf_counter()
    dataset = load_for(cfg) if dataset is None else dataset
    fitter = Fitter(cfg, dataset.train(), None)
    result = fitter.run(None if on_epoch is None else (lambda ep, _state: on_epoch(ep)))
    test_set = dataset.test()
    embeddings = embed(result.model, test_set, device=fitter.device, workers=cfg.workers)
    options = verification_options(cfg, fitter.loss.criterion)
    pairs = listed_pairs(test_set)  # a trial list (speaker verification) scores its own pairs
    if pairs is not None:
        options["verification"] = True
    ks = ks_for_metric(cfg.metric, dataset_info(cfg.dataset).recall_ks)
    test = embedding_metrics(embeddings, test_set.labels, ks=ks,
                             device=fitter.device, pairs=pairs, **options)
    pixels = input_kind(dataset.input_kind).pixels  # else features: [N, channels, ...]
    return RetrainResult(model=result.model, test_metrics=test, history=result.history,
                       seconds=time.perf_counter() - started, test_embeddings=embeddings,
                       test_labels=np.asarray(test_set.labels),
                       input_channels=int(dataset.images.channels),
                       input_size=_image_size(dataset, cfg) if pixels else None,
                       test_images=test_set,
                       pair_scorer=cast("PairScorer | None", options["scorer"]),
                       threads=fitter.threads)


def _image_size(dataset: Dataset, cfg: TrialConfig) -> int:
    return int(getattr(dataset.images, "image_size", cfg.image_size))


@dataclasses.dataclass
class EnsembleResult:
    """Test metrics of the k fold models: each alone, their mean ± std, and their ensemble."""

    fold_test_metrics: list[dict[str, float]]
    fold_mean: dict[str, float]
    fold_std: dict[str, float]
    ensemble_metrics: dict[str, float]
    fold_best_epochs: list[int]
    fold_val_values: list[float]
    seconds: float

    def flat_metrics(self) -> dict[str, float]:
        """One flat dict for tracking: ``ensemble_*``, ``folds_mean_*``, ``folds_std_*``."""
        out = {f"ensemble_{k}": v for k, v in self.ensemble_metrics.items()}
        out.update({f"folds_mean_{k}": v for k, v in self.fold_mean.items()})
        out.update({f"folds_std_{k}": v for k, v in self.fold_std.items()})
        return out


def ensemble_embeddings(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-model embeddings of the same items, each row L2-normalised first."""
    if not parts or any(p.shape[0] != parts[0].shape[0] for p in parts):
        raise ValueError("ensemble_embeddings needs >= 1 arrays with the same number of rows")
    normed = []
    for part in parts:
        part = np.asarray(part, dtype=np.float32)
        norms = np.linalg.norm(part, axis=1, keepdims=True)
        normed.append(part / np.maximum(norms, 1e-12))
    return np.concatenate(normed, axis=1)


def _scalar(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if k != "num_queries"}


def train_fold_ensemble(
    cfg: TrialConfig,
    *,
    dataset: Dataset | None = None,
    on_epoch: Callable[[int, EpochReport], None] | None = None,
) -> EnsembleResult:
    """Train the k fold models of a k-fold configuration and evaluate them once on test.

    ``on_epoch(fold, report)`` is called after every epoch of every fold.
    """
    if cfg.protocol != "kfold":
        raise UserError(
            f"the fold ensemble needs protocol=kfold, got protocol={cfg.protocol!r}; "
            "set protocol=kfold (and folds) or evaluate the single retrained model"
        )
    started = time.perf_counter()
    dataset = load_for(cfg) if dataset is None else dataset
    test = dataset.test()
    ks = ks_for_metric(cfg.metric, dataset_info(cfg.dataset).recall_ks)
    pairs = listed_pairs(test)  # a trial list: each model and the ensemble scored on it too

    def scored(emb: np.ndarray) -> dict[str, float]:
        out = _scalar(retrieval_metrics(emb, test.labels, ks=ks))
        if pairs is not None:  # by cosine (the fold models' distances cannot be ensembled)
            out.update(_scalar(pair_verification_metrics(emb, test.labels, pairs=pairs)))
        return out

    parts, per_fold, best_epochs, val_values = [], [], [], []
    for split in splits_for(cfg, dataset):
        fitter = fold_fitter(cfg, dataset, split)
        callback = None if on_epoch is None else (
            lambda ep, _state, fold=split.fold: on_epoch(fold, ep))
        result = fitter.run(callback)
        emb = embed(result.model, test, device=fitter.device, workers=cfg.workers)
        parts.append(emb)
        per_fold.append(scored(emb))
        best_epochs.append(int(result.best_epoch or result.epochs_run))
        val_values.append(float(result.best_value) if result.best_value is not None
                          else float("nan"))
    keys = sorted(per_fold[0])
    ensemble = scored(ensemble_embeddings(parts))
    return EnsembleResult(
        fold_test_metrics=per_fold,
        fold_mean={k: float(np.mean([m[k] for m in per_fold])) for k in keys},
        fold_std={k: float(np.std([m[k] for m in per_fold])) for k in keys},
        ensemble_metrics=ensemble,
        fold_best_epochs=best_epochs,
        fold_val_values=val_values,
        seconds=time.perf_counter() - started,
    )
