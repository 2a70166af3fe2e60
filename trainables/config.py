"""The validated, typed configuration of one trial.

Data flows one way (docs/design.md): space file + CLI overrides → a *flat* dict (what Ray Tune
hands a trial, and what ``dmlsearch export`` writes) → :class:`TrialConfig` (validated, typed) →
protocol → fit. Flat keys are the field names below, plus ``loss.<param>`` for the chosen loss's
own hyperparameters (names as Psomas 2020 Table 4 uses them, e.g. ``loss.margin``, ``loss.alpha``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from dmlsearch.trainables.errors import UserError

__all__ = ["LOSS_PREFIX", "RENAMED", "TrialConfig", "setting_choices", "setting_help",
           "setting_names"]

LOSS_PREFIX = "loss."

# Settings renamed so that no trial setting shares a name with a search option (``--sampler`` is
# Optuna's, ``--scheduler`` Ray's): an old name is an error that gives the new one.
RENAMED: dict[str, str] = {"sampler": "batch_sampler", "scheduler": "lr_schedule"}

_CHOICES: dict[str, tuple[str, ...]] = {
    "protocol": ("fixed", "kfold"),
    "pooling": ("gap", "gmp", "gap+gmp"),
    "device": ("auto", "cpu", "cuda"),
    "precision": ("auto", "fp32", "bf16", "fp16"),
    "audio_features": ("mfcc", "fbank"),
    "freeze_bn": ("off", "stats", "all"),
    "train_crops": ("original", "resized"),
}

# Settings whose values were once booleans: the old words still read as what they meant then.
_LEGACY_VALUES: dict[str, dict[object, str]] = {
    "freeze_bn": {True: "all", False: "off", "true": "all", "false": "off", "yes": "all",
                  "no": "off", "on": "all"},
}

_HELP: dict[str, str] = {
    "dataset": "dataset name (see `dmlsearch datasets`)",
    "data_root": "folder (or .zip) with the dataset in its official layout",
    "image_size": "square input size (crop size for photo datasets); default: the dataset's own",
    "workers": "data-loading worker processes per trial (0: load in the trial's process)",
    "protocol": "fixed: one class-disjoint validation split; kfold: class-disjoint k-fold",
    "val_ratio": "fraction of training classes held out for validation (fixed protocol)",
    "folds": "number of class-disjoint folds (kfold protocol)",
    "repeats": "fits per split with different seeds; the trial's score is the mean of all",
    "split_seed": "seed of the class split (fixed across trials so they compare fairly)",
    "seed": "seed of model initialisation and sampling",
    "backbone": "backbone network",
    "pretrained": "none, imagenet (from the local torch cache, never downloaded) or a weights file",
    "embedding_size": "dimension of the L2-normalised embedding",
    "pooling": "global pooling before the embedding layer",
    "freeze_bn": "BatchNorm of a pretrained trunk: off (trains as usual), stats (eval mode: "
                 "running statistics frozen, affine trained; the sources' code) or all (affine "
                 "frozen too); a trunk from scratch (pretrained none) always trains its BN",
    "head_warmup_epochs": "first epochs in which only the embedding layer and the loss's "
                          "parameters train (the sources' --warm); a pretrained trunk only",
    "embedding_lr_mult": "learning-rate multiplier of the embedding layer",
    "loss": "metric-learning loss: one of those listed with their loss.<param> settings below",
    "memvir_n": "MemVir N: past steps used as virtual classes (0: MemVir off; class-weight and "
                "proxy losses only)",
    "memvir_m": "MemVir M: steps skipped between two steps used as virtual classes",
    "memvir_warmup_epochs": "MemVir warm-up: epochs trained with the plain loss before the "
                            "queue starts",
    "memvir_step_pacing": "MemVir adds virtual classes one at a time every M+1 steps (false: "
                          "all N at once when the queue is full; the paper's ablation)",
    "batch_sampler": "how batches are drawn: m_per_class (balanced) or random",
    "m_per_class": "images per class in a batch (batch_sampler m_per_class)",
    "batch_size": "images per batch",
    "optimizer": "optimizer",
    "lr": "learning rate of backbone and embedding",
    "weight_decay": "weight decay",
    "adam_eps": "eps of adam / adamw (MemVir's code: 0.01; torch's default 1e-8)",
    "momentum": "momentum (SGD, RMSprop)",
    "nesterov": "Nesterov momentum (SGD)",
    "lr_schedule": "learning-rate schedule, stepped after each epoch (warmup_invsqrt_steps: "
                   "after each optimisation step)",
    "lr_step_size": "StepLR: epochs between decays",
    "lr_gamma": "StepLR / exponential: decay factor",
    "lr_patience": "ReduceLROnPlateau: evaluations without improvement before a decay",
    "warmup_epochs": "linear learning-rate warm-up epochs (warm-up schedules)",
    "epochs": "training epochs",
    "eval_every": "validate every n epochs",
    "patience": "stop after this many evaluations without improvement (0: never)",
    "metric": "validation metric: recall@1, map@r, auc_cosine, ... (maximised) or eer, "
              "eer_cosine, eer_e2e, eer_fusion, mindcf01_cosine, ... (minimised)",
    "verify_pairs": "verification trials evaluated: all pairs i<j, or a fixed-seed random "
                    "sample of this many when there are more (0: always all)",
    "device": "auto (GPU when visible), cpu or cuda",
    "precision": "auto (bf16 mixed precision on a GPU, fp32 on a CPU), fp32, or mixed precision "
                 "bf16 / fp16 (fp16 on a GPU only)",
    "channels_last": "channels-last memory format (unset: on when the trial runs on a GPU)",
    "cache": "decoded-image store of photo datasets, shared by a node's trials: auto (the cache "
             "folder), shm (/dev/shm), a folder, or off (decode the JPEGs every epoch)",
    "train_crops": "photo datasets' training crops are cut from: original (the full-size photo, "
                   "as the Proxy-Anchor, thesis and MemVir code; with the store, a second, "
                   "full-size store of the training classes) or resized (the photo resized to "
                   "the evaluation short side, 256 for 224 crops, as the MS loss code)",
    "cache_limit_gb": "most GiB the stores in the cache folder may hold; the least recently used "
                      "are removed to make room (0: no limit but the free space)",
    "checkpoint_every": "save a resumable checkpoint every n epochs (and at the end, and where a "
                        "pausing scheduler pauses); a lost trial retrains at most n (+1) epochs",
    "compile": "torch.compile the model for training (pays only for long trials; see "
               "docs/benchmarks.md)",
    "threads": "torch CPU threads (0: torch's default)",
    "grad_clip": "clip gradient values to +/- this (0: off)",
    "grad_clip_norm": "clip the gradients' total L2 norm to this (0: off; the E2E source's "
                      "max_gnorm)",
    "warmup_steps": "warmup_invsqrt_steps: optimisation steps of linear warm-up",
    # audio datasets (trainables.audio); image datasets ignore them
    "audio_features": "audio: mfcc (Kaldi-style cepstra, C0 = log energy) or fbank (log mel)",
    "n_features": "audio: MFCCs kept, or mel bins of fbank",
    "vad": "audio: keep only the frames an energy VAD calls voiced (Kaldi's compute-vad)",
    "cmn_window": "audio: frames of the sliding mean normalisation (0: none)",
    "max_frames": "audio: longest training crop in frames (10 ms each); each batch is cut to a "
                  "random length in [max_frames/4, max_frames)",
    "trial_list": "audio: a trial list file ('label enrol test' lines, VoxCeleb format) scored on"
                  " test instead of the dataset's own (none: the dataset's)",
}


@dataclasses.dataclass(frozen=True)
class TrialConfig:
    """Every setting of one trial. Build with :meth:`from_flat`; export with :meth:`to_flat`."""

    dataset: str = "glyphs"
    data_root: str | None = None
    image_size: int | None = None
    protocol: str = "fixed"
    val_ratio: float = 0.2
    folds: int = 4
    repeats: int = 1
    split_seed: int = 0
    seed: int = 0
    backbone: str = "smallcnn"
    pretrained: str = "none"
    embedding_size: int = 64
    pooling: str = "gap"
    freeze_bn: str = "off"
    head_warmup_epochs: int = 0
    embedding_lr_mult: float = 1.0
    loss: str = "multi_similarity"
    loss_params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    memvir_n: int = 0
    memvir_m: int = 0
    memvir_warmup_epochs: int = 0
    memvir_step_pacing: bool = True
    batch_sampler: str = "m_per_class"
    m_per_class: int = 4
    batch_size: int = 64
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 1e-4
    adam_eps: float = 1e-8
    momentum: float = 0.9
    nesterov: bool = False
    lr_schedule: str = "step"
    lr_step_size: int = 4
    lr_gamma: float = 0.5
    lr_patience: int = 10
    warmup_epochs: int = 0
    epochs: int = 8
    eval_every: int = 1
    patience: int = 0
    metric: str = "recall@1"
    verify_pairs: int = 1_000_000
    device: str = "auto"
    precision: str = "auto"
    channels_last: bool | None = None
    threads: int = 0
    workers: int = 0
    grad_clip: float = 0.0
    cache: str = "auto"
    cache_limit_gb: float = 0.0
    train_crops: str = "original"
    checkpoint_every: int = 10
    compile: bool = False
    grad_clip_norm: float = 0.0
    warmup_steps: int = 4000
    audio_features: str = "mfcc"
    n_features: int = 30
    vad: bool = True
    cmn_window: int = 300
    max_frames: int = 300
    trial_list: str | None = None

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any]) -> TrialConfig:
        """Validate a flat dict (space base + sampled params + overrides) into a config.

        Unknown keys, wrong types and impossible values raise :class:`UserError`.
        """
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "loss_params"}
        kwargs: dict[str, Any] = {}
        loss_params: dict[str, Any] = {}
        for key, value in flat.items():
            if key.startswith(LOSS_PREFIX):
                loss_params[key[len(LOSS_PREFIX) :]] = value
            elif key in fields:
                kwargs[key] = _coerce(key, _legacy(key, value), fields[key].type)
            elif key in RENAMED:
                raise UserError(
                    f"setting {key!r} is now called {RENAMED[key]!r} ({key} alone names the "
                    f"search's --{key} option); write {RENAMED[key]}: {value} in the space "
                    "file, config or --set"
                )
            else:
                raise UserError(
                    f"unknown setting {key!r}; expected one of: {', '.join(setting_names())} "
                    f"or loss.<param> (fix the key in the space file, config or --set)"
                )
        cfg = cls(**kwargs)
        from dmlsearch.trainables.losses import (
            resolve_loss_params,  # torch: only when a config is built
        )

        cfg = dataclasses.replace(cfg, loss_params=resolve_loss_params(cfg.loss, loss_params))
        cfg._check()
        return cfg

    def to_flat(self) -> dict[str, Any]:
        """The flat dict this config came from, with every default filled in."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del flat["loss_params"]
        flat.update({LOSS_PREFIX + k: v for k, v in sorted(self.loss_params.items())})
        return flat

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    def _check(self) -> None:
        for key, choices in _CHOICES.items():
            if getattr(self, key) not in choices:
                _bad(key, getattr(self, key), f"one of {', '.join(choices)}")
        if self.image_size is not None and self.image_size < 8:
            _bad("image_size", self.image_size, "an integer >= 8 (or leave it unset)")
        for key in ("embedding_size", "batch_size", "epochs", "eval_every",
                    "m_per_class", "lr_step_size", "checkpoint_every"):
            if getattr(self, key) < 1:
                _bad(key, getattr(self, key), "an integer >= 1")
        for key in ("lr", "embedding_lr_mult", "lr_gamma", "adam_eps"):
            if not getattr(self, key) > 0:
                _bad(key, getattr(self, key), "a number > 0")
        for key in ("weight_decay", "grad_clip", "patience", "threads", "momentum",
                    "warmup_epochs", "lr_patience", "head_warmup_epochs", "workers",
                    "verify_pairs",
                    "cache_limit_gb", "grad_clip_norm", "warmup_steps", "cmn_window"):
            if getattr(self, key) < 0:
                _bad(key, getattr(self, key), "a number >= 0")
        if not self.cache.strip():
            _bad("cache", self.cache, "auto, shm, off or a folder")
        if not 1 <= self.n_features <= 256:
            _bad("n_features", self.n_features, "an integer in 1..256 (30 MFCCs: the source's)")
        if self.max_frames < 16:
            _bad("max_frames", self.max_frames, "an integer >= 16 (frames of 10 ms)")
        if not 0.0 < self.val_ratio < 1.0:
            _bad("val_ratio", self.val_ratio, "a fraction strictly between 0 and 1, e.g. 0.1")
        if self.repeats < 1:
            _bad("repeats", self.repeats, "an integer >= 1")
        if self.folds < 2:
            _bad("folds", self.folds, "an integer >= 2")
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
        self._check_memvir()
        if self.batch_sampler == "m_per_class" and self.batch_size % self.m_per_class:
            raise UserError(
                f"batch_size must be a multiple of m_per_class ({self.m_per_class}), got "
                f"{self.batch_size}; set batch_size to e.g. "
                f"{max(1, self.batch_size // self.m_per_class) * self.m_per_class}"
            )

    def _check_memvir(self) -> None:
        for key in ("memvir_n", "memvir_m", "memvir_warmup_epochs"):
            if getattr(self, key) < 0:
                _bad(key, getattr(self, key), "an integer >= 0")
        if self.memvir_n:
            from dmlsearch.trainables.losses import LOSSES  # torch: only when a config is checked

            if self.loss in LOSSES and not LOSSES.get(self.loss).supports_memvir:
                able = ", ".join(n for n in LOSSES.names() if LOSSES.get(n).supports_memvir)
                raise UserError(
                    f"memvir_n > 0 needs a loss with class weights/proxies, got loss="
                    f"{self.loss!r}; use one of: {able} (or set memvir_n=0)"
                )


def setting_names() -> list[str]:
    """Every flat key a trial accepts (besides ``loss.<param>``)."""
    return [f.name for f in dataclasses.fields(TrialConfig) if f.name != "loss_params"]


def setting_help(name: str) -> str:
    return _HELP.get(name, "")


def setting_choices(name: str) -> tuple[str, ...]:
    """The fixed choices of a setting that takes one of a few words (``()`` for the others; the
    settings that name a registry entry, such as ``optimizer``, take the registry's names)."""
    return _CHOICES.get(name, ())


def _legacy(key: str, value: Any) -> Any:
    """An old spelling of ``key``'s value (``freeze_bn: true``) as the value it meant then."""
    meanings = _LEGACY_VALUES.get(key)
    if meanings is None:
        return value
    word = value.lower() if isinstance(value, str) else value
    return meanings.get(word, value) if isinstance(word, (bool, str)) else value


def _bad(key: str, value: Any, expected: str) -> None:
    raise UserError(f"{key} must be {expected}, got {value!r}; fix it in the space file or --set")


#: What a setting takes, in words, where its type alone does not say (an empty value's error).
_EXPECTED: dict[str, str] = {
    "cache": "auto, shm, off or a folder",
    "pretrained": "none, imagenet or a weights file",
}


def _expected(key: str, kind: str) -> str:
    """What ``key`` (of type ``kind``) takes, in words."""
    if key in _EXPECTED:
        return _EXPECTED[key]
    if key in _CHOICES:
        return f"one of {', '.join(_CHOICES[key])}"
    return {"bool": "true or false", "int": "an integer", "float": "a number"}.get(
        kind, "a name")


def _coerce(key: str, value: Any, annotation: object) -> Any:
    """Coerce YAML/CLI scalars to the field's type; reject what cannot be meant."""
    kind = str(annotation)
    if kind.endswith(" | None"):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        kind = kind[: -len(" | None")]
    if value is None:  # `--set cache=` or `cache:` with nothing after it
        raise UserError(f"{key} must be {_expected(key, kind)}, got an empty value; fix it in "
                        "the space file or --set (`dmlsearch settings` lists the settings)")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off",
                                                        "1", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        _bad(key, value, "true or false")
    if kind == "int":
        if isinstance(value, bool):
            _bad(key, value, "an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        _bad(key, value, "an integer")
    if kind == "float":
        if isinstance(value, bool):
            _bad(key, value, "a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            _bad(key, value, "a number")
        if not math.isfinite(number):
            _bad(key, value, "a finite number")
        return number
    if kind.startswith("str"):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        _bad(key, value, "a string")
    raise AssertionError(f"unhandled field type {kind} for {key}")
