"""Every check of the user's input, before anything is written or started.

:func:`prepare` turns the options into a :class:`Prepared` search: the space with its overrides
(``--set``, ``--dataset``...), the base configuration, how many trials and how long each may
train, and the points evaluated first. On the way it checks the options, the space, the base
configuration and, for every categorical choice of the space, its configuration, its parts
(registries) and its data (splits, batches, ``m_per_class``, ``recall@k``), and the GPUs.

The cheap checks come first: every setting of every choice (names, device, precision, metric,
the backbone's input kind, audio features), then the data's checks on the datasets as listed
(splits, batches); only then are the decoded-image stores built and every file checked (images
decoded, audio headers read), the only side effects with the built-in dataset's cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import data_workers
from dmlsearch.search.replay import check_space
from dmlsearch.search.replay import load_table
from dmlsearch.search.results import EvalSet
from dmlsearch.search.transfer import TO_END
from dmlsearch.search.transfer import Transfer
from dmlsearch.search.transfer import plan_transfer
from dmlsearch.search.transfer import read_source
from dmlsearch.search.transfer import transfer_count
from dmlsearch.search.trust import default_trials
from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.spaces import load_space
from dmlsearch.spaces import preview
from dmlsearch.spaces import preview_text
from dmlsearch.trainables.config import LOSS_PREFIX
from dmlsearch.trainables.config import MINER_PREFIX
from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.data import dataset_names
from dmlsearch.trainables.data import size_text
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics import metric_mode
from dmlsearch.trainables.protocol import fixed_split
from dmlsearch.trainables.protocol import kfold_splits
from dmlsearch.trainables.setting_kinds import absolute_paths
from dmlsearch.trainables.setting_kinds import refuse_other_kind
from dmlsearch.trainables.trial import check_settings
from dmlsearch.trainables.trial import open_dataset
from dmlsearch.trainables.trial import preflight
from dmlsearch.trainables.trial import read_dataset

__all__ = ["DataInfo", "Prepared", "check_kinds", "gpus_per_trial", "prepare"]


@dataclasses.dataclass(frozen=True)
class DataInfo:
    """The search's dataset as MLflow shows it with each run: its classes, and which of them a
    configuration trains, validates and tests on (``inputs``)."""

    name: str
    source: str  # the data folder or file, or "built in"
    class_names: tuple[str, ...]
    train_ids: tuple[int, ...]
    test_ids: tuple[int, ...]
    class_images: tuple[int, ...] = ()  # images of each class (by id)

    def eval_sets(self, config: dict[str, Any]) -> tuple[EvalSet, EvalSet]:
        """The sizes of the validation classes a configuration is scored on (k-fold: all its
        folds) and of the test classes, for the reports to print beside their scores."""
        train, seed = np.asarray(self.train_ids), int(config.get("split_seed", 0))
        if config.get("protocol", "fixed") == "kfold":
            folds = kfold_splits(train, folds=int(config.get("folds", 4)), seed=seed)
            val = EvalSet.of(self.class_images, (c for s in folds for c in s.val_classes),
                             folds=len(folds))
        else:
            split = fixed_split(train, val_ratio=float(config.get("val_ratio", 0.2)), seed=seed)
            val = EvalSet.of(self.class_images, split.val_classes)
        return val, EvalSet.of(self.class_images, self.test_ids)

    def inputs(self, config: dict[str, Any], *, retrain: bool = False
               ) -> list[tuple[str, str, list[str]]]:
        """(context, description, class names) of the class sets a configuration uses: for a
        trial its training and validation classes (k-fold: each fold's), for a retrain all
        training classes and the test classes."""
        names = self.class_names
        train = np.asarray(self.train_ids)
        if retrain:
            return [("training", "all training classes", [names[i] for i in train]),
                    ("test", "test classes", [names[i] for i in self.test_ids])]
        seed = int(config.get("split_seed", 0))
        if config.get("protocol", "fixed") == "kfold":
            folds = kfold_splits(train, folds=int(config.get("folds", 4)), seed=seed)
            groups = [f"[fold {s.fold}] " + n for s in folds for n in
                      (names[i] for i in s.val_classes)]
            return [("training", f"training classes, {len(folds)} folds",
                     [names[i] for i in train]),
                    ("validation", f"{len(folds)} class-disjoint validation folds", groups)]
        split = fixed_split(train, val_ratio=float(config.get("val_ratio", 0.2)), seed=seed)
        return [("training", "training classes minus validation",
                 [names[i] for i in split.train_classes]),
                ("validation", "validation classes", [names[i] for i in split.val_classes])]


@dataclasses.dataclass(frozen=True)
class Prepared:
    space: Space
    base: TrialConfig
    max_iterations: int  # epochs × folds × repeats: the longest a trial trains
    trials: int  # how many trials to run (--trials, or the grid's size)
    points: list[dict[str, Any]]  # evaluated first: the warm starts, or the grid's points
    grid_size: int | None = None  # a grid study: how many points the whole grid has
    data: DataInfo | None = None  # the base configuration's dataset (not in a replay)
    preview: str | None = None  # with --preview: what it changed (``spaces.preview_text``)
    notes: tuple[str, ...] = ()  # what preparing did that a person should know (a store built)
    # threads was fixed by the search (a CPU search's trials compute with their CPUs' count),
    # not by the user: the retrain in the driver may use the driver's CPUs (lifecycle.py)
    auto_threads: bool = False
    transfer: Transfer | None = None  # with --prior-from: what came from which search

    @property
    def mode(self) -> str:
        """``max`` or ``min``: the direction of the search's metric."""
        return metric_mode(self.base.metric)

    @property
    def searched(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.key for p in self.space.params))


def prepare(opts: SearchOptions, *, space: Space | None = None) -> Prepared:
    """Every user-input check, with no side effect but the built-in dataset's cache and the
    decoded-image stores (made once every check passed). ``space``:
    search this space instead of loading ``opts.space`` (a comparison's method)."""
    opts.check()
    space = with_plugins((space or load_space(opts.space)).with_overrides(opts.overrides()),
                         opts.plugins)
    check_kinds(space)
    shown = None
    if opts.preview:  # after the user's settings: those are kept
        space, changes = preview(space)
        shown = preview_text(space, changes)
    space = space.with_overrides(absolute_paths(space.default_config()))
    if "workers" not in space.default_config() and data_workers(opts.cpus_per_trial):
        # data loading sized from the trial's CPUs, unless the space or --set says otherwise
        space = space.with_overrides({"workers": data_workers(opts.cpus_per_trial)})
    fixed = _fixed_threads(space, opts)
    auto_threads, space = fixed is not space, fixed
    for param in space.params:  # a searched key must be a setting: say where it is declared
        if param.key not in setting_names() and not param.key.startswith((LOSS_PREFIX,
                                                                          MINER_PREFIX)):
            with _declared_at(space, param):
                TrialConfig.from_flat({param.key: None})
    base = TrialConfig.from_flat(space.default_config())
    transfer = _transfer(opts, space)  # the sources read before any data is
    if opts.intensify and opts.trials is None:  # a given --trials: checked with the options
        default = default_trials(len({p.key for p in space.params}))
        if opts.intensify >= default:
            raise UserError(f"--intensify {opts.intensify} keeps {opts.intensify} trainings' "
                            f"worth of the budget, but the search's default budget is "
                            f"{default}; give --trials above {opts.intensify}")
    if opts.replay is not None:  # nothing trains: the table answers, not the data
        return _replayed(opts, space, base, transfer)
    _check_gpus(opts)
    configs = _configurations(space, base)  # every setting of every choice: no data read yet
    read: dict[tuple[Any, ...], Any] = {}
    for param, cfg in configs:  # the data's checks (splits, batches): nothing decoded yet
        with _declared_at(space, param):
            data_key = _data_key(cfg)
            if data_key not in read:
                read[data_key] = read_dataset(cfg)
            preflight(cfg, read[data_key])
    notes: list[str] = []
    opened: dict[tuple[Any, ...], Any] = {}
    for param, cfg in configs:  # every check passed: now the stores, and every file checked
        data_key = _data_key(cfg)
        if data_key not in opened:
            with _declared_at(space, param):
                opened[data_key], stored = open_dataset(cfg, dataset=read[data_key])
            notes += [_store_note(cfg.dataset, stored)] if stored is not None else []
    dataset = opened[_data_key(base)]
    epochs = max([base.epochs]
                 + [int(p.high) for p in space.params if p.key == "epochs" and p.high is not None]
                 + [int(c) for p in space.params if p.key == "epochs" for c in p.choices])
    folds = base.folds if base.protocol == "kfold" else 1
    planned = _planned(opts, space, base, max_iterations=epochs * folds * base.repeats,
                       transfer=transfer)
    return dataclasses.replace(
        planned, data=_data_info(base, dataset), preview=shown,
        notes=(*notes, *planned.notes),
        auto_threads=auto_threads)



def with_plugins(space: Space, plugins: tuple[str, ...]) -> Space:
    """``space`` with ``plugins`` (``--plugin``, checked and loaded) added to its own."""
    if not plugins:
        return space
    given = space.default_config().get("plugins") or []
    given = [given] if isinstance(given, str) else list(given)
    return space.with_overrides({"plugins": list(dict.fromkeys([*given, *plugins]))})


def check_kinds(space: Space) -> None:
    """What the user gave (the space file, ``--set``, ``--dataset``: the space's base and its
    searched keys) holds no setting of another input kind than the space's: refused, never
    ignored (``max_frames`` on images, ``cache`` on audio)."""
    config = space.default_config()
    if str(config.get("dataset", SETTINGS["dataset"].default)) not in dataset_names():
        return  # the dataset registry's error, listing the datasets, says more
    refuse_other_kind(space.base, config, where="--set or the space file")
    refuse_other_kind({p.key: None for p in space.params}, config,
                      where="the space file's params")


def _configurations(space: Space, base: TrialConfig) -> list[tuple[Param | None, TrialConfig]]:
    """The base configuration and one for every categorical choice of the space (within its
    own branch), each with the parameter it comes from, checked as far as settings alone go
    (names, device, precision, metric, input kind, audio features): nothing read or written."""
    check_settings(base)
    configs: list[tuple[Param | None, TrialConfig]] = [(None, base)]
    for param in space.params:
        branch = {key: allowed[0] for key, allowed in param.when}
        for choice in param.choices or ():
            with _declared_at(space, param):
                cfg = TrialConfig.from_flat(
                    space.with_overrides({**branch, param.key: choice}).default_config())
                check_settings(cfg)
            configs.append((param, cfg))
    return configs


def _data_key(cfg: TrialConfig) -> tuple[Any, ...]:
    """What opening a trial's dataset depends on: a setting that changes it opens another."""
    return (cfg.dataset, cfg.data_root, cfg.image_size, cfg.train_crops, cfg.cache,
            cfg.trial_list)

def _store_note(dataset: str, stored: Any) -> str:
    """What opening a dataset's decoded-image store did, for the terminal."""
    size = size_text(stored.bytes)
    if stored.built:
        return (f"{dataset}: decoded {stored.decoded:,} images once ({size}, "
                f"{stored.seconds:.0f} s); the trials on this machine read them from the "
                f"decoded-image cache (setting cache)")
    return f"{dataset}: images read from the decoded-image cache ({size}; nothing to decode)"


def _data_info(base: TrialConfig, dataset: Any) -> DataInfo:
    names = tuple(str(n) for n in dataset.images.class_names)
    return DataInfo(name=dataset.name, source=base.data_root or "built in", class_names=names,
                    train_ids=tuple(int(i) for i in dataset.train_classes),
                    test_ids=tuple(int(i) for i in dataset.test_classes),
                    class_images=tuple(int(n) for n in np.bincount(
                        np.asarray(dataset.images.labels, dtype=np.int64),
                        minlength=len(names))))


def _transfer(opts: SearchOptions, space: Space) -> Transfer | None:
    """With ``--prior-from``: what the search takes from the finished searches
    (:mod:`dmlsearch.search.transfer`; the count of points planned again in :func:`_planned`)."""
    if not opts.prior_from:
        return None
    return plan_transfer(space, [read_source(folder) for folder in opts.prior_from])


def _planned(opts: SearchOptions, space: Space, base: TrialConfig, *,
             max_iterations: int, transfer: Transfer | None = None) -> Prepared:
    """How many trials, and the points evaluated first: the warm starts (with ``--prior-from``,
    the transferred points instead); for a grid study the whole grid, or (``--trials`` below its
    size) a seeded subset covering every value evenly."""
    if opts.sampler != "grid":
        trials = opts.trials or default_trials(len({p.key for p in space.params}))
        if transfer is not None:  # the best trains to its end where the scheduler can keep it
            transfer = plan_transfer(space, transfer.sources, count=transfer_count(trials),
                                     to_end=TO_END if SCHEDULERS.get(opts.scheduler).keeps
                                     else 0)
        return Prepared(space=space, base=base, max_iterations=max_iterations, trials=trials,
                        points=(space.warm_starts() if transfer is None
                                else [dict(p) for p in transfer.named]),
                        transfer=transfer,
                        notes=() if transfer is None else tuple(transfer.lines()))
    grid_size = len(space.grid_points())
    trials = grid_size if opts.trials is None else min(opts.trials, grid_size)
    return Prepared(space=space, base=base, max_iterations=max_iterations, trials=trials,
                    points=space.grid_sample(trials, seed=opts.seed), grid_size=grid_size)


def _replayed(opts: SearchOptions, space: Space, base: TrialConfig,
              transfer: Transfer | None) -> Prepared:
    """A search replayed from a learning-curve table: the space must be one the table answers
    (its fixed settings the table's, its searched settings ones the table varies)."""
    table = load_table(opts.replay or "")
    check_space(table, space)
    return _planned(opts, space, base, max_iterations=table.epochs, transfer=transfer)


def _fixed_threads(space: Space, opts: SearchOptions) -> Space:
    """A CPU search computes with one recorded thread count, not with what each process has:
    ``threads`` unset (or 0) becomes the CPUs a trial reserves (what Ray's ``OMP_NUM_THREADS``
    gave its trials), so its trials, its retrain in this process, its export and ``dmlsearch
    train`` of it use the same team (trainables/threads.py). GPU trials keep torch's default."""
    config = space.default_config()
    searched = {p.key for p in space.params}
    if config.get("threads") or "threads" in searched or opts.replay is not None:
        return space
    if config.get("device", "auto") != "cpu" and gpus_per_trial(opts) > 0:
        return space
    return space.with_overrides({"threads": max(1, int(opts.cpus_per_trial))})


def gpus_per_trial(opts: SearchOptions) -> float:
    """``--gpus-per-trial``, or 1 when torch sees a GPU here and 0 when not (0 in a replay)."""
    if opts.gpus_per_trial is not None:
        return opts.gpus_per_trial
    if opts.replay is not None:
        return 0.0
    return 1.0 if torch.cuda.is_available() else 0.0


@contextlib.contextmanager
def _declared_at(space: Space, param: Param | None) -> Iterator[None]:
    """A user error about ``param`` names the space file and line that declare it (``None``:
    the base configuration, which names no line)."""
    try:
        yield
    except UserError as exc:
        if space.path is None or param is None or not param.line:
            raise
        raise UserError(f"{space.path}:{param.line}: {exc}") from None


def _check_gpus(opts: SearchOptions) -> None:
    """A trial asking for GPUs this machine does not have would wait for them forever."""
    if not opts.gpus_per_trial or os.environ.get("RAY_ADDRESS"):  # a cluster: Ray knows
        return
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if opts.gpus_per_trial > visible:
        raise UserError(
            f"--gpus-per-trial {opts.gpus_per_trial:g} asks for GPUs, but this machine has "
            f"{visible} that torch can see; leave --gpus-per-trial out (trials use a GPU when "
            "there is one) or run on a machine or Ray cluster with GPUs"
        )

