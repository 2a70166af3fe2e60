"""The retrain: chosen configurations trained on all training classes and tested once, logged to
MLflow; shared by the search's finish and ``dmlsearch train``.

Both call :func:`dmlsearch.trainables.retrain.retrain` on the same flat config, so an exported
configuration reproduces the search's retrain (same seed, same machine → same numbers).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from dmlsearch.search.results import EnsembleSummary
from dmlsearch.search.results import RetrainSummary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import mean_ci95
from dmlsearch.search.results import scores_only
from dmlsearch.search.study_dir import EMBEDDINGS_PNG
from dmlsearch.search.study_dir import HARD_PAIRS_PNG
from dmlsearch.search.study_dir import HARD_TRIALS_PNG
from dmlsearch.search.study_dir import RETRIEVALS_PNG
from dmlsearch.search.study_dir import RETRIEVALS_TOP_PNG
from dmlsearch.search.study_dir import TRIALS_PNG
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.input_kinds import InputKind
from dmlsearch.trainables.input_kinds import input_kind

if TYPE_CHECKING:  # MLflow, matplotlib, torch: export and report start without them
    from dmlsearch.search.finish.gallery import TopGallery
    from dmlsearch.search.tracking import Tracker
    from dmlsearch.trainables.retrain import RetrainResult

__all__ = ["PICTURES", "EnsembleOutcome", "RetrainOutcome", "SeedsOutcome", "ensemble_and_log",
           "retrain_config", "retrain_seeds", "retrain_top", "train_and_log"]

log = logging.getLogger(__name__)

GALLERY_ARTIFACTS = "retrievals"
"""The MLflow artifact folder of the retrieval galleries (a retrain's run, the study's run)."""


@dataclasses.dataclass(frozen=True)
class RetrainOutcome:
    """One retrain: its configuration, test metrics and MLflow run."""

    config: dict[str, Any]
    test_metrics: dict[str, float]
    seconds: float
    run_id: str | None
    registered: str | None = None  # "name/version" in the MLflow Model Registry


def retrain_config(record: TrialRecord) -> dict[str, Any]:
    """A trial's configuration to train on all training classes: no validation classes remain,
    so it trains as long as validation chose (the trial's best epoch; its epochs without one)."""
    epochs = int(record.best_epoch or record.config.get("epochs") or TrialConfig().epochs)
    return {**record.config, "epochs": max(1, epochs)}


def train_and_log(
    flat: Mapping[str, Any], *, tracker: Tracker | None, run_name: str,
    tags: Mapping[str, str] | None = None, register_as: str | None = None,
    views: Path | None = None, top: TopGallery | None = None, top_title: str = "",
) -> RetrainOutcome:
    """Train ``flat`` on all training classes, test once, log a retrain run.

    With ``views`` (a folder), the 2-D view of the test embeddings (``embeddings/``) and the
    pictures its input kind names (``retrain_pictures``, :data:`PICTURES`; images: the retrieval
    gallery, ``retrievals.png``, and ``hard_pairs.png`` for a learned distance; speakers: the
    test trials) are drawn there and logged to the run (``retrievals/``); with ``top``, this
    model's retrievals of the best configuration's queries join the side-by-side gallery under
    ``top_title`` (the first model added chooses the queries; images only); with
    ``register_as``, the model is logged and registered under that name, its input as its
    kind's :class:`~dmlsearch.trainables.input_kinds.ModelInput` says.
    """
    from dmlsearch.trainables.data import dataset_info  # torch: only when training
    from dmlsearch.trainables.retrain import retrain

    cfg = TrialConfig.from_flat(flat)
    log.info("retrain: %d epochs on all training classes of %s", cfg.epochs, cfg.dataset)
    result = retrain(cfg)
    # The thread count it computed with (threads 0: the process's): what the export records
    # and `dmlsearch train` applies, so the numbers do not depend on who retrains it.
    config = cfg.replace(threads=result.threads or cfg.threads).to_flat()
    run_id = registered = None
    if tracker is not None:
        run_id = tracker.log_retrain(name=run_name, config=config,
                                     test_metrics=result.test_metrics, history=result.history,
                                     tags=dict(tags or {}))
    # The picture and the registry entry come after the training and the test that matter: a
    # failure of either is a warning (the summary and the export still follow), never a
    # failed study.
    if views is not None and result.test_embeddings is not None:
        from dmlsearch.search.finish.views import embedding_view

        try:
            view = embedding_view(result.test_embeddings, result.test_labels,
                                  views / EMBEDDINGS_PNG, seed=cfg.seed, title=run_name)
            if tracker is not None and run_id is not None:
                tracker.log_artifact(view, run_id=run_id, artifact_path="embeddings")
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("could not draw the test embeddings of %s: %s", run_name, exc)
    kind = input_kind(dataset_info(cfg.dataset).input_kind)  # what its dataset's items are
    if (views is not None or top is not None) and result.test_embeddings is not None:
        for picture in kind.retrain_pictures:
            PICTURES[picture](result, cfg, views=views, top=top, top_title=top_title or run_name,
                              tracker=tracker, run_id=run_id, run_name=run_name)
    if tracker is not None and run_id is not None and register_as:
        try:
            channels, size = result.input_channels, result.input_size
            version = tracker.register_model(
                run_id, result.model, name=register_as, kind=kind.name, channels=channels,
                size=size, description=f"{cfg.loss} on {cfg.dataset}, {cfg.backbone} "
                f"{cfg.embedding_size}-d; input: {_model_input(kind, result, cfg)}")
            registered = f"{register_as}/{version}"
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("could not register the model of %s in MLflow: %s", run_name, exc)
    return RetrainOutcome(config=config, test_metrics=dict(result.test_metrics),
                          seconds=result.seconds, run_id=run_id, registered=registered)


def _model_input(kind: InputKind, result: RetrainResult, cfg: TrialConfig) -> str:
    """What the registered model takes, in words (its description)."""
    channels, size = result.input_channels, result.input_size
    return kind.describe_model(cfg, channels=channels, size=size)


def _galleries(result: RetrainResult, cfg: TrialConfig, *, views: Path | None,
               top: TopGallery | None, top_title: str, tracker: Tracker | None,
               run_id: str | None, run_name: str) -> None:
    """The retrieval galleries of a retrained model (each a warning when it cannot be drawn):
    into ``views`` and its run (``retrievals/``), and its retrievals into ``top``."""
    from dmlsearch.search.finish import gallery

    images = result.test_images
    if images is None:
        log.warning("could not draw the retrievals of %s: the retrain kept no test images",
                    run_name)
        return
    drawn: list[Path] = []
    if views is not None:
        try:
            model = gallery.retrieval_gallery(result.test_embeddings, result.test_labels, images,
                                              views / RETRIEVALS_PNG, seed=cfg.seed,
                                              title=run_name)
            drawn.append(views / RETRIEVALS_PNG)
            if top is not None and top.queries is None:
                top.add(model.with_title(top_title), images)
        except Exception as exc:  # noqa: BLE001 - a picture is never a failed retrain
            log.warning("could not draw the retrievals of %s: %s", run_name, exc)
        if result.pair_scorer is not None:
            try:
                gallery.hard_pairs_gallery(result.test_embeddings, result.test_labels, images,
                                           result.pair_scorer, views / HARD_PAIRS_PNG,
                                           max_pairs=cfg.verify_pairs, title=run_name)
                drawn.append(views / HARD_PAIRS_PNG)
            except Exception as exc:  # noqa: BLE001 - see above
                log.warning("could not draw the hardest pairs of %s: %s", run_name, exc)
    if top is not None and top_title not in top.titles:
        try:
            top.retrieve(result.test_embeddings, result.test_labels, images, title=top_title,
                         seed=cfg.seed)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("could not retrieve the best configuration's queries with %s: %s",
                        run_name, exc)
    _log_pictures(drawn, tracker=tracker, run_id=run_id, run_name=run_name)


def _trial_views(result: RetrainResult, cfg: TrialConfig, *, views: Path | None,
                 top: TopGallery | None, top_title: str, tracker: Tracker | None,
                 run_id: str | None, run_name: str) -> None:
    """A verification model's test trials (speakers): their scores and DET curves, and the
    hardest ones drawn (each a warning when it cannot be), into ``views`` and its run
    (``retrievals/``); nothing joins ``top``, whose galleries draw images."""
    from dmlsearch.search.finish import audio_views

    if views is None:
        return
    try:
        trials = audio_views.score_trials(result.test_embeddings, result.test_labels,
                                          result.test_images, result.pair_scorer,
                                          max_pairs=cfg.verify_pairs)
    except Exception as exc:  # noqa: BLE001 - a picture is never a failed retrain
        log.warning("could not score the test trials of %s for its pictures: %s", run_name, exc)
        return
    drawn: list[Path] = []
    for name, draw in ((TRIALS_PNG, lambda p: audio_views.trial_scores_view(
                            trials, p, title=run_name)),
                       (HARD_TRIALS_PNG, lambda p: audio_views.hard_trials_view(
                            trials, result.test_images, p, title=run_name))):
        try:
            drawn.append(draw(views / name))
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("could not draw %s of %s: %s", name, run_name, exc)
    _log_pictures(drawn, tracker=tracker, run_id=run_id, run_name=run_name)


#: The pictures of a retrained model besides its embedding map, by the name an input kind gives
#: in ``retrain_pictures`` (:mod:`dmlsearch.trainables.input_kinds`); each draws into the views
#: folder and logs to the retrain's run, a failure a warning.
PICTURES: dict[str, Callable[..., None]] = {"retrievals": _galleries, "trials": _trial_views}


def _log_pictures(drawn: list[Path], *, tracker: Tracker | None, run_id: str | None,
                  run_name: str) -> None:
    """Log a retrain's pictures to its MLflow run's ``retrievals/`` (a warning when one cannot
    be: a picture is never a failed retrain)."""
    if tracker is None or run_id is None:
        return
    for path in drawn:
        try:
            tracker.log_artifact(path, run_id=run_id, artifact_path=GALLERY_ARTIFACTS)
        except Exception as exc:  # noqa: BLE001 - a picture is never a failed retrain
            log.warning("could not log %s of %s to MLflow: %s", path.name, run_name, exc)


@dataclasses.dataclass(frozen=True)
class SeedsOutcome:
    """One configuration retrained with several seeds: each seed's test metrics and their
    mean ± the half-width of a 95% Student-t confidence interval."""

    trial_id: str
    rank: int  # 1 = the search's best
    seeds: list[int]
    runs: list[RetrainOutcome]
    mean: dict[str, float]
    ci95: dict[str, float]  # 0 with one seed (no interval: null in its RetrainSummary)

    def to_summary(self) -> RetrainSummary:
        return RetrainSummary(trial_id=self.trial_id, rank=self.rank, seeds=list(self.seeds),
                              test_metrics=[r.test_metrics for r in self.runs],
                              mean=dict(self.mean), ci95=dict(self.ci95),
                              epochs=int(self.runs[0].config["epochs"]),
                              seconds=sum(r.seconds for r in self.runs))


def retrain_seeds(
    flat: Mapping[str, Any], *, seeds: int, trial_id: str, rank: int, tracker: Tracker | None,
    register_as: str | None = None, views: Path | None = None, run_name: str = "retrain",
    tags: Mapping[str, str] | None = None, top: TopGallery | None = None,
) -> SeedsOutcome:
    """Retrain ``flat`` with its own seed and the ``seeds - 1`` next ones; the first run is the
    one exported, drawn and registered (``dmlsearch train`` of the export reproduces it), and
    the one whose retrievals join ``top`` (titled by ``rank`` and ``trial_id``)."""
    base_seed = int(flat.get("seed", 0))
    seed_list = [base_seed + i for i in range(seeds)]
    runs = []
    for i, seed in enumerate(seed_list):
        runs.append(train_and_log(
            {**flat, "seed": seed}, tracker=tracker,
            run_name=f"{run_name} {trial_id}" + (f" seed {seed}" if seeds > 1 else ""),
            tags={"dmlsearch.trial_id": trial_id, "dmlsearch.rank": str(rank),
                  "dmlsearch.seed": str(seed), **dict(tags or {})},
            register_as=register_as if i == 0 else None,
            views=views if i == 0 else None, top=top if i == 0 else None,
            top_title=f"#{rank} trial {trial_id}"))
    keys = [k for k in scores_only(runs[0].test_metrics)  # a count is no score to average
            if all(k in r.test_metrics for r in runs)]
    stats = {k: mean_ci95([r.test_metrics[k] for r in runs]) for k in keys}
    return SeedsOutcome(trial_id=trial_id, rank=rank, seeds=seed_list, runs=runs,
                        mean={k: m for k, (m, _) in stats.items()},
                        ci95={k: c for k, (_, c) in stats.items()})


def retrain_top(ranked: Sequence[TrialRecord], *, top: int, seeds: int, tracker: Tracker,
                register_as: str | None, views: Path,
                threads: int | None = None) -> list[SeedsOutcome]:
    """The ``top`` best configurations, each with ``seeds`` seeds; the best one's first run has
    its test embeddings and retrievals drawn and its model registered (``register_as``). With
    two or more, ``retrievals_top.png`` shows the best one's queries as each configuration's
    first run retrieves them, logged to the study's run (``retrievals/``). ``threads``: the CPU
    threads the retrains compute with instead of the trials' (recorded in the export, so
    ``dmlsearch train`` computes with the same count)."""
    from dmlsearch.search.finish.gallery import TopGallery

    side_by_side = TopGallery() if min(top, len(ranked)) >= 2 else None
    extra = {"threads": threads} if threads else {}
    outcomes = [retrain_seeds({**retrain_config(record), **extra},
                              seeds=seeds, trial_id=record.trial_id,
                              rank=rank, tracker=tracker,
                              register_as=register_as if rank == 1 else None,
                              views=views if rank == 1 else None, top=side_by_side)
                for rank, record in enumerate(ranked[:top], start=1)]
    if side_by_side is not None and len(side_by_side.models) >= 2:
        try:
            path = side_by_side.draw(views / RETRIEVALS_TOP_PNG)
            tracker.log_artifact(path, artifact_path=GALLERY_ARTIFACTS)
        except Exception as exc:  # noqa: BLE001 - a picture is never a failed study
            log.warning("could not draw the retrievals of the top configurations: %s", exc)
    return outcomes


@dataclasses.dataclass(frozen=True)
class EnsembleOutcome:
    """The k-fold study's test evaluation of its fold models (MLRC protocol)."""

    metrics: dict[str, float]  # ensemble_*, folds_mean_*, folds_std_*
    fold_test_metrics: list[dict[str, float]]
    fold_best_epochs: list[int]
    seconds: float
    run_id: str | None

    def to_summary(self) -> EnsembleSummary:
        return EnsembleSummary(metrics=dict(self.metrics),
                               fold_test_metrics=list(self.fold_test_metrics),
                               fold_best_epochs=list(self.fold_best_epochs), seconds=self.seconds)


def ensemble_and_log(
    flat: Mapping[str, Any], *, tracker: Tracker | None, run_name: str,
    tags: Mapping[str, str] | None = None,
) -> EnsembleOutcome:
    """Train the fold models of a k-fold configuration, evaluate each and their ensemble on
    test."""
    from dmlsearch.trainables.retrain import train_fold_ensemble  # torch: only when training

    cfg = TrialConfig.from_flat(flat)
    log.info("fold ensemble: %d fold models of %d epochs at most", cfg.folds, cfg.epochs)
    result = train_fold_ensemble(cfg)
    metrics = result.flat_metrics()
    for i, fold in enumerate(result.fold_test_metrics):
        metrics.update({f"fold{i}_{k}": v for k, v in fold.items()})
    run_id = None
    if tracker is not None:
        run_id = tracker.log_retrain(
            name=run_name, config=cfg.to_flat(), test_metrics=metrics, history=[],
            tags={"dmlsearch.kind": "fold-ensemble", **dict(tags or {})})
    return EnsembleOutcome(metrics=result.flat_metrics(),
                           fold_test_metrics=result.fold_test_metrics,
                           fold_best_epochs=result.fold_best_epochs, seconds=result.seconds,
                           run_id=run_id)
