"""One trial: a configuration evaluated under its validation protocol (Psomas 2020 ch. 5).

``fixed``: one fit on the training classes minus a random class-disjoint validation group.
``kfold``: k fits, fold i validating on class group i; the trial's score is the mean of the
folds' best validation metric (± std). With ``repeats`` r > 1 every split is fitted r times with
different seeds (repeated seeds per configuration) and the score is the mean of all k·r bests. Progress is reported after every epoch of every fold, so
an early-stopping scheduler sees folds as fidelity, and the state returned with each report
resumes the trial at the same fold and epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import FileImageSet
from dmlsearch.trainables.data import StoreStats
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.device import resolve_device
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.fit import EpochReport
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.metrics.names import ks_for_metric
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.optim import LR_SCHEDULES
from dmlsearch.trainables.optim import OPTIMIZERS
from dmlsearch.trainables.protocol import Split
from dmlsearch.trainables.protocol import fixed_split
from dmlsearch.trainables.protocol import kfold_splits
from dmlsearch.trainables.sampling import BATCH_SAMPLERS

__all__ = [
    "TrialProgress", "TrialResult", "check_parts", "check_settings", "fold_fitter", "load_for",
    "open_dataset", "preflight", "read_dataset", "run_trial", "splits_for",
]


@dataclasses.dataclass(frozen=True)
class TrialProgress:
    iteration: int  # epochs trained so far, over all folds (the scheduler's time axis)
    fold: int
    epoch: int
    train_loss: float
    metrics: dict[str, float]  # this epoch's validation metrics
    score: float | None  # best-so-far trial score: mean over folds of each fold's best
    score_std: float | None  # population std of those per-fold bests (0 with one fold)
    fold_values: list[float]  # each fit's best so far, in order (repeat-major; done + current)
    folds_done: int
    best_epoch: int | None  # mean (rounded) over folds of each fold's best epoch so far
    last: bool  # the trial's final report: nothing follows


@dataclasses.dataclass(frozen=True)
class TrialResult:
    score: float
    score_std: float
    fold_values: list[float]
    fold_best_epochs: list[int]
    best_metrics: dict[str, float]  # mean over folds of each fold's best-epoch metrics
    epochs_run: int
    # learned-distance losses: the distance diagnostics of the best models (mean over fits)
    diagnostics: dict[str, float] = dataclasses.field(default_factory=dict)


ProgressCallback = Callable[[TrialProgress, Callable[[], dict[str, Any]]], None]


def load_for(cfg: TrialConfig) -> Dataset:
    """The trial's dataset; photo datasets read from their decoded store (built on first use
    on this node, :mod:`trainables.data._store`) unless ``cache`` is ``off``; an audio dataset
    with ``cfg``'s audio settings (features, crops, trial list: :func:`trainables.audio.configure`).
    Checked by :func:`preflight` before a store is built (a refused configuration decodes
    nothing: ``dmlsearch train``'s order too).
    """
    return open_dataset(cfg, check_files=False)[0]


def read_dataset(cfg: TrialConfig) -> Dataset:
    """``cfg``'s dataset as its layout lists it (files, labels, split; an audio dataset with
    ``cfg``'s audio settings), no file decoded into a store or checked one by one: what
    :func:`preflight` needs, and all a refused configuration costs."""
    dataset = load_dataset(cfg.dataset, root=cfg.data_root, image_size=cfg.image_size,
                           train_crops=cfg.train_crops)
    return input_kind(dataset.input_kind).prepared(dataset, cfg)


def open_dataset(cfg: TrialConfig, *, check_files: bool = True, dataset: Dataset | None = None
                 ) -> tuple[Dataset, StoreStats | None]:
    """:func:`load_for`, and what opening the decoded store cost (``None``: no store).

    ``dataset``: what :func:`read_dataset` gave for ``cfg``, already checked by
    :func:`preflight`; without it, it is read here, and checked first when files are to be
    decoded or written (a store built, every file checked). Either way no file is decoded or
    written for a configuration a check refuses.

    With ``check_files`` (the driver, before a search) every image file has been decoded once
    when this returns (the store's build decodes them; with ``cache=off`` a check does) and
    every audio file's header read, so an unreadable file is a user error before any trial
    starts, not a failed trial later.
    """
    if dataset is None:
        dataset = read_dataset(cfg)
        if check_files or (cfg.cache != "off" and isinstance(dataset.images, FileImageSet)):
            preflight(cfg, dataset)  # the expensive work comes after the cheap checks
    return input_kind(dataset.input_kind).opened(dataset, cfg, check_files=check_files)


def splits_for(cfg: TrialConfig, dataset: Dataset) -> list[Split]:
    if cfg.protocol == "fixed":
        return [fixed_split(dataset.train_classes, val_ratio=cfg.val_ratio, seed=cfg.split_seed)]
    return kfold_splits(dataset.train_classes, folds=cfg.folds, seed=cfg.split_seed)


def fold_fitter(cfg: TrialConfig, dataset: Dataset, split: Split, repeat: int = 0, *,
                keep_best: bool = True) -> Fitter:
    """The fit of one split, seeded per fold so fold models differ (they are ensembled on test).

    The search's trials and the fold-ensemble evaluation (:mod:`trainables.retrain`) both build
    fold models here, so the same configuration gives the same fold models in both.
    ``keep_best``: end with the best epoch's weights (the ensemble needs them).
    """
    train = dataset.images.select_classes(split.train_classes)
    val = dataset.images.select_classes(split.val_classes)
    return Fitter(cfg, train, val, seed=cfg.seed + 1000 * split.fold + 100_003 * repeat,
                  keep_best=keep_best)


def run_trial(
    cfg: TrialConfig,
    *,
    dataset: Dataset | None = None,
    on_progress: ProgressCallback | None = None,
    state: dict[str, Any] | None = None,
    artifacts: Path | None = None,
) -> TrialResult:
    """Run the trial's fits (resuming from ``state``); report through ``on_progress``.

    For a loss with a learned distance (``e2e``), the best model of each fit is diagnosed as a
    distance (:mod:`trainables.diagnostics`) and, when ``artifacts`` is a folder, the histograms
    are written to ``artifacts/distance_diagnostics/fit<i>/``.
    """
    dataset = load_for(cfg) if dataset is None else dataset
    splits = splits_for(cfg, dataset)
    state = state or {}
    done: list[dict[str, Any]] = list(state.get("folds_done", []))
    epochs_before = sum(d["epochs_run"] for d in done)
    units = [(repeat, split) for repeat in range(cfg.repeats) for split in splits]
    for unit, (repeat, split) in enumerate(units):
        if unit < len(done):
            continue
        # A trial's score is its best validation metric; its best weights are used afterwards
        # only by a learned distance's diagnostics, so only then kept (and checkpointed).
        fitter = fold_fitter(cfg, dataset, split, repeat, keep_best=_scores_pairs(cfg))
        if state.get("fit") is not None and state.get("fold") == unit:
            fitter.load_state_dict(state["fit"])

        def report(ep: EpochReport, fit_state: Callable[[], dict[str, Any]],
                   fold: int = split.fold, unit: int = unit,
                   offset: int = epochs_before) -> None:
            if on_progress is None:
                return
            bests = [d["best_value"] for d in done]
            best_epochs = [d["best_epoch"] for d in done]
            if ep.best_value is not None:
                bests.append(ep.best_value)
                best_epochs.append(ep.best_epoch)
            progress = TrialProgress(
                iteration=offset + ep.epoch, fold=fold, epoch=ep.epoch,
                train_loss=ep.train_loss, metrics=ep.metrics,
                score=float(np.mean(bests)) if bests else None,
                score_std=float(np.std(bests)) if bests else None,
                fold_values=[float(b) for b in bests], folds_done=len(done),
                best_epoch=int(round(float(np.mean(best_epochs)))) if best_epochs else None,
                last=ep.last and unit == len(units) - 1,
            )
            on_progress(progress, lambda: {"fold": unit, "folds_done": list(done),
                                           "fit": fit_state()})

        result = fitter.run(report)
        diagnostics = _diagnose(fitter, result.model, artifacts, unit)
        done.append({
            "diagnostics": diagnostics,
            "fold": split.fold, "repeat": repeat, "best_value": result.best_value,
            "best_epoch": result.best_epoch, "best_metrics": result.best_metrics,
            "epochs_run": result.epochs_run,
        })
        epochs_before += result.epochs_run
    values = [float(d["best_value"]) for d in done]
    keys = set.intersection(*(set(d["best_metrics"]) for d in done))
    return TrialResult(
        score=float(np.mean(values)),
        score_std=float(np.std(values)),
        fold_values=values,
        fold_best_epochs=[int(d["best_epoch"]) for d in done],
        best_metrics={k: float(np.mean([d["best_metrics"][k] for d in done])) for k in keys},
        epochs_run=epochs_before,
        diagnostics=_mean_of([d.get("diagnostics") or {} for d in done]),
    )


def _scores_pairs(cfg: TrialConfig) -> bool:
    """Whether the trial's loss has a learned distance, whose diagnostics use the best model."""
    from dmlsearch.trainables.losses import LOSSES

    return LOSSES.get(cfg.loss).learned_distance


DIAGNOSTICS_DIR = "distance_diagnostics"  # the search logs the histograms from there
DIAGNOSTIC_SAMPLE = 200_000
"""Pairs and triplets behind the histograms saved at the end of a learned-distance fit."""


def _diagnose(fitter: Fitter, model: Any, artifacts: Path | None, unit: int) -> dict[str, float]:
    scorer = fitter.eval_options.get("scorer")
    if scorer is None or fitter.val is None:
        return {}
    from dmlsearch.trainables.metrics.diagnostics import diagnostic_values
    from dmlsearch.trainables.metrics.diagnostics import e2e_pseudo_distance
    from dmlsearch.trainables.metrics.diagnostics import plot_distance_diagnostics
    from dmlsearch.trainables.metrics.diagnostics import summarize_diagnostics
    from dmlsearch.trainables.metrics.evaluate import embed

    emb = embed(model, fitter.val, device=fitter.device, workers=fitter.cfg.workers)
    values = diagnostic_values(e2e_pseudo_distance(scorer), emb, device=fitter.device,
                               pairs=DIAGNOSTIC_SAMPLE, triplets=DIAGNOSTIC_SAMPLE)
    if artifacts is not None:
        plot_distance_diagnostics(values, Path(artifacts) / DIAGNOSTICS_DIR / f"fit{unit}")
    return summarize_diagnostics(values)


def _mean_of(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = set.intersection(*(set(r) for r in rows)) if rows else set()
    return {k: float(np.mean([r[k] for r in rows])) for k in sorted(keys)}


def check_parts(cfg: TrialConfig) -> None:
    """The parts ``cfg`` names by registry (batch sampler, backbone, optimizer, lr schedule) exist; an
    unknown name is a user error that lists the valid ones. Needs no data."""
    BATCH_SAMPLERS.get(cfg.batch_sampler)
    BACKBONES.get(cfg.backbone)
    OPTIMIZERS.get(cfg.optimizer)
    LR_SCHEDULES.get(cfg.lr_schedule)


def _check_input_kind(cfg: TrialConfig, kind: str, name: str) -> None:
    """The backbone takes what dataset ``name`` holds (``kind``: a name of
    :mod:`trainables.input_kinds`), and the settings of that kind go together."""
    takes = BACKBONES.get(cfg.backbone).input_kind
    if takes != kind:
        fitting = [n for n in BACKBONES.names() if BACKBONES.get(n).input_kind == kind]
        raise UserError(
            f"backbone {cfg.backbone} takes {takes} input, but dataset {name} is "
            f"{kind}; use backbone={' or '.join(fitting)} (or another dataset)")
    input_kind(kind).check(cfg)


def _check_values(cfg: TrialConfig) -> None:
    """The parts' names, the device and precision, the metric."""
    check_parts(cfg)
    device = resolve_device(cfg.device)
    if cfg.precision == "fp16" and device.type != "cuda":
        raise UserError(
            f"precision fp16 needs a GPU (device resolves to {device.type}); use precision=bf16 "
            "(runs on CPU too) or fp32"
        )
    ks_for_metric(cfg.metric)


def check_settings(cfg: TrialConfig) -> None:
    """The user errors of ``cfg``'s settings alone, before any data is read: what
    :func:`preflight` checks but the data (the dataset's input kind is its registry entry's)."""
    _check_values(cfg)
    _check_input_kind(cfg, dataset_info(cfg.dataset).input_kind, cfg.dataset)


def preflight(cfg: TrialConfig, dataset: Dataset) -> None:
    """Raise the user errors a trial would hit, before any training starts.

    Checks the names of the parts, the device, the metric, the backbone's input kind, the
    protocol's splits and that every training split can fill a batch.
    """
    _check_values(cfg)
    _check_input_kind(cfg, dataset.input_kind, dataset.name)
    from dmlsearch.trainables.plugin_checks import check_plugin_loss

    check_plugin_loss(cfg, num_classes=len(dataset.train_classes))
    recall_k = int(cfg.metric.split("@", 1)[1]) if cfg.metric.startswith("recall@") else 0
    for split in splits_for(cfg, dataset):
        labels = dataset.images.select_classes(split.train_classes).labels
        if cfg.batch_sampler == "m_per_class" and len(labels):
            largest = int(np.unique(labels, return_counts=True)[1].max())
            if cfg.m_per_class > largest:
                raise UserError(
                    f"m_per_class {cfg.m_per_class} asks for more images of a class than any "
                    f"class of a training split of {dataset.name} has (at most {largest}); set "
                    f"m_per_class to {largest} or less (batch_size a multiple of it)"
                )
        val_images = len(dataset.images.select_classes(split.val_classes).labels)
        if recall_k >= val_images:
            raise UserError(
                f"metric {cfg.metric} ranks {recall_k} neighbours of each validation image, but "
                f"a validation split of {dataset.name} has only {val_images} images; use a "
                "smaller k (e.g. recall@1) or a larger val_ratio"
            )
        needed = cfg.batch_size // cfg.m_per_class if cfg.batch_sampler == "m_per_class" else 1
        if len(split.train_classes) < needed or len(labels) < cfg.batch_size:
            raise UserError(
                f"batch_size {cfg.batch_size} (m_per_class {cfg.m_per_class}) needs {needed} "
                f"classes and {cfg.batch_size} images, but a training split of {dataset.name} "
                f"has {len(split.train_classes)} classes and {len(labels)} images; "
                "lower batch_size"
            )
