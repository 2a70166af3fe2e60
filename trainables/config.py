"""The validated, typed configuration of one trial, and every trial setting's declaration.

Data flows one way (docs/design.md): space file + CLI overrides → a *flat* dict (what Ray Tune
hands a trial, and what ``dmlsearch export`` writes) → :class:`TrialConfig` (validated, typed) →
protocol → fit. Flat keys are the field names below, plus ``loss.<param>`` for the chosen loss's
own hyperparameters (names as Psomas 2020 Table 4 uses them, e.g. ``loss.margin``, ``loss.alpha``).

Each field is a setting's one declaration (:func:`~.settings.setting`): type, default, help,
choices or range, whether it holds a path, and its input kind. :data:`SETTINGS` reads them; each
value is checked alone when it is read (:meth:`TrialConfig.from_flat`), and the settings that
must agree are checked together after (:meth:`TrialConfig._check`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.settings import Setting
from dmlsearch.trainables.settings import setting
from dmlsearch.trainables.settings import settings_of

__all__ = ["LOSS_PREFIX", "MINER_PREFIX", "RENAMED", "SETTINGS", "TrialConfig", "setting_choices",
           "setting_help", "setting_names"]

LOSS_PREFIX = "loss."
MINER_PREFIX = "miner."

# Settings renamed so that no trial setting shares a name with a search option (``--sampler`` is
# Optuna's, ``--scheduler`` Ray's): an old name is an error that gives the new one.
RENAMED: dict[str, str] = {"sampler": "batch_sampler", "scheduler": "lr_schedule"}

_IMAGE, _AUDIO = "image", "audio"


@dataclasses.dataclass(frozen=True)
class TrialConfig:
    """Every setting of one trial. Build with :meth:`from_flat`; export with :meth:`to_flat`."""

    # -- data and protocol ---------------------------------------------------------------------
    dataset: str = setting("glyphs", "dataset name (see `dmlsearch datasets`)")
    data_root: str | None = setting(
        None, "folder (or .zip) with the dataset in its official layout; the table file of "
        "dataset table", paths="file")
    image_size: int | None = setting(
        None, "square input size (crop size for photo datasets); default: the dataset's own",
        kind=_IMAGE, at_least=8, what="or leave it unset")
    protocol: str = setting("fixed", "fixed: one class-disjoint validation split; kfold: "
                            "class-disjoint k-fold", choices=("fixed", "kfold"))
    val_ratio: float = setting(
        0.2, "fraction of training classes held out for validation (fixed protocol)",
        above=0, below=1, words="a fraction strictly between 0 and 1, e.g. 0.1")
    folds: int = setting(4, "number of class-disjoint folds (kfold protocol)", at_least=2)
    repeats: int = setting(1, "fits per split with different seeds; the trial's score is the "
                           "mean of all", at_least=1)
    split_seed: int = setting(0, "seed of the class split (fixed across trials so they compare "
                              "fairly)")
    seed: int = setting(0, "seed of model initialisation and sampling")
    # -- model ---------------------------------------------------------------------------------
    backbone: str = setting("smallcnn", "backbone network")
    pretrained: str = setting(
        "none", "none, imagenet (from the local torch cache, never downloaded) or a weights file",
        choices=("none", "imagenet"), paths="file", words="none, imagenet or a weights file")
    embedding_size: int = setting(64, "dimension of the L2-normalised embedding", at_least=1)
    pooling: str = setting("gap", "global pooling before the embedding layer",
                           choices=("gap", "gmp", "gap+gmp"))
    freeze_bn: str = setting(
        "off", "BatchNorm of a pretrained trunk: off (trains as usual), stats (eval mode: "
        "running statistics frozen, affine trained; the sources' code) or all (affine frozen "
        "too); a trunk from scratch (pretrained none) always trains its BN",
        choices=("off", "stats", "all"),
        # once a boolean: the old words still read as what they meant then
        legacy={True: "all", False: "off", "true": "all", "false": "off", "yes": "all",
                "no": "off", "on": "all"})
    head_warmup_epochs: int = setting(
        0, "first epochs in which only the embedding layer and the loss's parameters train (the "
        "sources' --warm); a pretrained trunk only", at_least=0)
    embedding_lr_mult: float = setting(1.0, "learning-rate multiplier of the embedding layer",
                                       above=0)
    # -- loss ----------------------------------------------------------------------------------
    loss: str = setting("multi_similarity", "metric-learning loss: one of those listed with "
                        "their loss.<param> settings below")
    loss_params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    miner: str = setting(
        "default", "pair/triplet miner: default (the loss's own, e.g. multi_similarity's MS "
        "miner; none for most), none, or a registered miner (pml:<ClassName>, a plug-in's) with "
        "its miner.<param> settings")
    miner_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    memvir_n: int = setting(0, "MemVir N: past steps used as virtual classes (0: MemVir off; "
                            "class-weight and proxy losses only)", at_least=0)
    memvir_m: int = setting(0, "MemVir M: steps skipped between two steps used as virtual "
                            "classes", at_least=0)
    memvir_warmup_epochs: int = setting(0, "MemVir warm-up: epochs trained with the plain loss "
                                        "before the queue starts", at_least=0)
    memvir_step_pacing: bool = setting(
        True, "MemVir adds virtual classes one at a time every M+1 steps (false: all N at once "
        "when the queue is full; the paper's ablation)")
    # -- batches and optimisation --------------------------------------------------------------
    batch_sampler: str = setting("m_per_class", "how batches are drawn: m_per_class (balanced) "
                                 "or random")
    m_per_class: int = setting(4, "images per class in a batch (batch_sampler m_per_class)",
                               at_least=1)
    batch_size: int = setting(64, "images per batch", at_least=1)
    optimizer: str = setting("adamw", "optimizer")
    lr: float = setting(1e-3, "learning rate of backbone and embedding", above=0)
    weight_decay: float = setting(1e-4, "weight decay", at_least=0)
    adam_eps: float = setting(1e-8, "eps of adam / adamw (MemVir's code: 0.01; torch's default "
                              "1e-8)", above=0)
    momentum: float = setting(0.9, "momentum (SGD, RMSprop)", at_least=0)
    nesterov: bool = setting(False, "Nesterov momentum (SGD)")
    lr_schedule: str = setting("step", "learning-rate schedule, stepped after each epoch "
                               "(warmup_invsqrt_steps: after each optimisation step)")
    lr_step_size: int = setting(4, "StepLR: epochs between decays", at_least=1)
    lr_gamma: float = setting(0.5, "StepLR / exponential: decay factor", above=0)
    lr_patience: int = setting(10, "ReduceLROnPlateau: evaluations without improvement before "
                               "a decay", at_least=0)
    warmup_epochs: int = setting(0, "linear learning-rate warm-up epochs (warm-up schedules)",
                                 at_least=0)
    # -- training length and validation --------------------------------------------------------
    epochs: int = setting(8, "training epochs", at_least=1)
    eval_every: int = setting(1, "validate every n epochs", at_least=1)
    patience: int = setting(0, "stop after this many evaluations without improvement (0: "
                            "never)", at_least=0)
    metric: str = setting("recall@1", "validation metric: recall@1, map@r, auc_cosine, ... "
                          "(maximised) or eer, eer_cosine, eer_e2e, eer_fusion, "
                          "mindcf01_cosine, ... (minimised)")
    verify_pairs: int = setting(
        1_000_000, "verification trials evaluated: all pairs i<j, or a fixed-seed random sample "
        "of this many when there are more (0: always all)", at_least=0)
    # -- the machine ---------------------------------------------------------------------------
    device: str = setting("auto", "auto (GPU when visible), cpu or cuda",
                          choices=("auto", "cpu", "cuda"))
    precision: str = setting(
        "auto", "auto (bf16 mixed precision on a GPU, fp32 on a CPU), fp32, or mixed precision "
        "bf16 / fp16 (fp16 on a GPU only)", choices=("auto", "fp32", "bf16", "fp16"))
    channels_last: bool | None = setting(
        None, "channels-last memory format (unset: on when the trial runs on a GPU)")
    threads: int = setting(0, "torch CPU threads (0: torch's default)", at_least=0)
    workers: int = setting(0, "data-loading worker processes per trial (0: load in the trial's "
                           "process)", at_least=0)
    grad_clip: float = setting(0.0, "clip gradient values to +/- this (0: off)", at_least=0)
    cache: str = setting(
        "auto", "decoded-image store of photo datasets, shared by a node's trials: auto (the "
        "cache folder), shm (/dev/shm), a folder, or off (decode the JPEGs every epoch)",
        kind=_IMAGE, choices=("auto", "shm", "off"), paths="folder")
    cache_limit_gb: float = setting(
        0.0, "most GiB the stores in the cache folder may hold; the least recently used are "
        "removed to make room (0: no limit but the free space)", kind=_IMAGE, at_least=0)
    train_crops: str = setting(
        "original", "photo datasets' training crops are cut from: original (the full-size "
        "photo, as the Proxy-Anchor, thesis and MemVir code; with the store, a second, "
        "full-size store of the training classes) or resized (the photo resized to the "
        "evaluation short side, 256 for 224 crops, as the MS loss code)", kind=_IMAGE,
        choices=("original", "resized"))
    checkpoint_every: int = setting(
        10, "save a resumable checkpoint every n epochs (and at the end, and where a pausing "
        "scheduler pauses); a lost trial retrains at most n (+1) epochs", at_least=1)
    compile: bool = setting(False, "torch.compile the model for training (pays only for long "
                            "trials; see docs/benchmarks.md)")
    grad_clip_norm: float = setting(0.0, "clip the gradients' total L2 norm to this (0: off; "
                                    "the E2E source's max_gnorm)", at_least=0)
    warmup_steps: int = setting(4000, "warmup_invsqrt_steps: optimisation steps of linear "
                                "warm-up", at_least=0)
    # -- the user's code -----------------------------------------------------------------------
    plugins: tuple[str, ...] = setting(
        (), "the user's plug-ins (a .py file or an importable module each; --plugin, a space's "
        "plugins:), imported before anything is looked up by name (trainables/plugins.py)",
        words="a list of .py files or module names")
    # -- audio datasets (trainables.audio) -----------------------------------------------------
    audio_features: str = setting("mfcc", "mfcc (Kaldi-style cepstra, C0 = log energy) or "
                                  "fbank (log mel)", kind=_AUDIO, choices=("mfcc", "fbank"))
    n_features: int = setting(30, "MFCCs kept, or mel bins of fbank", kind=_AUDIO, at_least=1,
                              at_most=256, what="30 MFCCs: the source's")
    vad: bool = setting(True, "keep only the frames an energy VAD calls voiced (Kaldi's "
                        "compute-vad)", kind=_AUDIO)
    cmn_window: int = setting(300, "frames of the sliding mean normalisation (0: none)",
                              kind=_AUDIO, at_least=0)
    max_frames: int = setting(300, "longest training crop in frames (10 ms each); each batch is "
                              "cut to a random length in [max_frames/4, max_frames)",
                              kind=_AUDIO, at_least=16, what="frames of 10 ms")
    trial_list: str | None = setting(
        None, "a trial list file ('label enrol test' lines, VoxCeleb format) scored on test "
        "instead of the dataset's own (none: the dataset's)", kind=_AUDIO, paths="file")

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any]) -> TrialConfig:
        """Validate a flat dict (space base + sampled params + overrides) into a config.

        Unknown keys, wrong types and impossible values raise :class:`UserError`.
        """
        kwargs: dict[str, Any] = {}
        loss_params: dict[str, Any] = {}
        miner_params: dict[str, Any] = {}
        for key, value in flat.items():
            if key.startswith(LOSS_PREFIX):
                loss_params[key[len(LOSS_PREFIX) :]] = value
            elif key.startswith(MINER_PREFIX):
                miner_params[key[len(MINER_PREFIX) :]] = value
            elif key in SETTINGS:
                kwargs[key] = SETTINGS[key].check(value)
            elif key in RENAMED:
                raise UserError(
                    f"setting {key!r} is now called {RENAMED[key]!r} ({key} alone names the "
                    f"search's --{key} option); write {RENAMED[key]}: {value} in the space "
                    "file, config or --set"
                )
            else:
                raise UserError(
                    f"unknown setting {key!r}; expected one of: {', '.join(setting_names())} "
                    f"or loss.<param>, miner.<param> (fix the key in the space file, config or --set)"
                )
        cfg = cls(**kwargs)
        from dmlsearch.trainables.losses import (  # torch: only when a config is built
            resolve_loss_params,
            resolve_miner_params,
        )
        from dmlsearch.trainables.plugins import load_plugins

        load_plugins(cfg.plugins)  # before the names they register are looked up
        cfg = dataclasses.replace(
            cfg, loss_params=resolve_loss_params(cfg.loss, loss_params),
            miner_params=resolve_miner_params(cfg.miner, miner_params))
        cfg._check()
        return cfg

    def to_flat(self) -> dict[str, Any]:
        """The flat dict this config came from, with every default filled in."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del flat["loss_params"], flat["miner_params"]
        flat["plugins"] = list(self.plugins)  # a list in YAML, JSON and Ray's configs
        flat.update({LOSS_PREFIX + k: v for k, v in sorted(self.loss_params.items())})
        flat.update({MINER_PREFIX + k: v for k, v in sorted(self.miner_params.items())})
        return flat

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    def _check(self) -> None:
        """The settings that must agree (each alone was checked as it was read)."""
        from dmlsearch.trainables.metrics.names import NEED_SCORER  # imports nothing heavy

        if self.metric in NEED_SCORER and self.loss != "e2e":
            raise UserError(
                f"metric {self.metric} scores pairs with the learned distance of loss e2e, but "
                f"loss is {self.loss!r}; set loss=e2e or metric=eer_cosine"
            )
        if self.nesterov and self.momentum <= 0:
            raise UserError(
                f"nesterov needs momentum > 0, got momentum={self.momentum}; set momentum "
                "(e.g. 0.9) or nesterov=false"
            )
        if self.memvir_n:
            from dmlsearch.trainables.losses import LOSSES  # torch: only when a config is checked

            if self.loss in LOSSES and not LOSSES.get(self.loss).supports_memvir:
                able = ", ".join(n for n in LOSSES.names() if LOSSES.get(n).supports_memvir)
                raise UserError(
                    f"memvir_n > 0 needs a loss with class weights/proxies, got loss="
                    f"{self.loss!r}; use one of: {able} (or set memvir_n=0)"
                )
        if self.batch_sampler == "m_per_class" and self.batch_size % self.m_per_class:
            raise UserError(
                f"batch_size must be a multiple of m_per_class ({self.m_per_class}), got "
                f"{self.batch_size}; set batch_size to e.g. "
                f"{max(1, self.batch_size // self.m_per_class) * self.m_per_class}"
            )


#: Every trial setting, declared once above, by name in declaration order.
SETTINGS: dict[str, Setting] = settings_of(TrialConfig, typing.get_type_hints(TrialConfig))


def setting_names() -> list[str]:
    """Every flat key a trial accepts (besides ``loss.<param>``)."""
    return list(SETTINGS)


def setting_help(name: str) -> str:
    return SETTINGS[name].help if name in SETTINGS else ""


def setting_choices(name: str) -> tuple[str, ...]:
    """The fixed choices of a setting that takes one of a few words (``()`` for the others; the
    settings that name a registry entry, such as ``optimizer``, take the registry's names)."""
    return SETTINGS[name].choices if name in SETTINGS else ()
