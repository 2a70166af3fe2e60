"""The sections of a recipe card, each read from where the code keeps its facts.

A fixed setting is the value a trial gets: :class:`~trainables.config.TrialConfig` built from the
space (its base and a representative value of each searched param), so defaults and old spellings
resolve as in a trial; a searched one reads "(searched: ...)" and one set per branch names its
branches (:mod:`spaces._recipe_values`). The backbone's input convention is its registry entry's
:class:`~trainables.models.InputSpec`; frozen BatchNorm and the head-only warm-up are what
:mod:`trainables.recipe` says a trial does (``effective_*``, ``FREEZE_BN_MEANINGS``); the
parameter groups are those :func:`trainables.optim.param_groups` builds for the space's loss; the
crops are the datasets' :class:`~trainables.data.TransformSpec`; a loss's parameters and citation
are its registry entry's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from torch import nn

from dmlsearch.spaces._recipe_values import Case
from dmlsearch.spaces._recipe_values import Values
from dmlsearch.spaces._recipe_values import cases
from dmlsearch.spaces._recipe_values import grouped
from dmlsearch.spaces._recipe_values import number
from dmlsearch.spaces._space import Space
from dmlsearch.trainables.config import LOSS_PREFIX
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import TransformSpec
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.data._transforms import _RRC_LOG_RATIO
from dmlsearch.trainables.data._transforms import _RRC_SCALE
from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.input_kinds import resolve
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import LossBundle
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.models import IMAGENET
from dmlsearch.trainables.models import BackboneInfo
from dmlsearch.trainables.optim import LR_SCHEDULES
from dmlsearch.trainables.optim import param_groups
from dmlsearch.trainables.recipe import FREEZE_BN_MEANINGS
from dmlsearch.trainables.recipe import effective_freeze_bn
from dmlsearch.trainables.recipe import effective_head_warmup

__all__ = ["DATASET_PIXELS", "Section", "card_sections"]

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrialConfig)
                             if f.default is not dataclasses.MISSING}

#: How each image dataset's builder (trainables/data/_<name>.py) prepares training pixels for a
#: crop size: the TransformSpec of a file-backed set, or None for a set held in memory at its
#: final size (no crops, no flips); ``folder`` is held in memory when it fits, else file-backed.
#: tests/spaces/test_recipe_cards.py checks that every registered image dataset is listed.
DATASET_PIXELS: dict[str, Callable[[int], TransformSpec | None]] = {
    "cub200": TransformSpec.for_size,
    "cars196": TransformSpec.for_size,
    "sop": TransformSpec.for_size,
    "folder": TransformSpec.for_size,
    "table": TransformSpec.for_size,  # held in memory when it fits, as folder
    "mini_imagenet": lambda size: TransformSpec(size=size, resize=size, train_mode="rrc"),
    "glyphs": lambda size: None,
    "glyphs_b": lambda size: None,
    "cifar10": lambda size: None,
    "omniglot": lambda size: None,
}

_POOLING = {"gap": "global average pooling", "gmp": "global max pooling",
            "gap+gmp": "global average + max pooling, summed"}

#: The setting that gives a warm-up schedule's length, and its unit.
_LR_WARMUP = {"warmup_step": ("warmup_epochs", "epochs"),
              "warmup_invsqrt": ("warmup_epochs", "epochs"),
              "warmup_invsqrt_steps": ("warmup_steps", "optimisation steps")}

_BN_HEADLINES = {"stats": "statistics frozen", "all": "frozen, affine weight and bias too"}


@dataclasses.dataclass(frozen=True)
class Section:
    """One part of a card: its title and its paragraphs (wrapped when rendered)."""

    title: str
    lines: tuple[str, ...]


# -- reading a space ------------------------------------------------------------------------------


def _default(key: str, fixed: dict[str, Any]) -> Any:
    if key.startswith(LOSS_PREFIX):
        loss = fixed.get("loss", _DEFAULTS["loss"])
        return LOSSES.get(loss).defaults[key[len(LOSS_PREFIX):]]
    return _DEFAULTS[key]


def _values(space: Space) -> Values:
    return Values(space, _default)


def _trial(space: Space) -> TrialConfig:
    """A trial of ``space`` (its representative config): the typed value of every fixed key."""
    return TrialConfig.from_flat(space.default_config())


def _typed(cfg: TrialConfig, key: str) -> Any:
    if key.startswith(LOSS_PREFIX):
        return cfg.loss_params[key[len(LOSS_PREFIX):]]
    return getattr(cfg, key)


def _setting(values: Values, cfg: TrialConfig, key: str, phrase: Callable[[Any], str] = number,
             label: str = "", fmt: Callable[[Any], str] = number) -> str:
    """``phrase(value)`` for a fixed key; else ``label (searched: ...)`` or its branches, each
    value put through ``fmt``."""
    if values.is_fixed(key):
        return phrase(_typed(cfg, key))
    return f"{label} ({values.text(key, fmt)})".strip()


def _per_case(space: Space, keys: tuple[str, ...], render: Callable[[Values, TrialConfig], str],
              branches_of: tuple[str, ...] = ()) -> list[str]:
    """``render`` of each branch of ``space`` that ``keys`` and ``branches_of`` split it into
    (:func:`cases`), alike branches merged. ``render`` may take each of ``keys`` as fixed: a
    branch where one is still searched (a range, or too many branches to split) names what is
    searched instead."""

    def one(case: Case) -> str:
        values = _values(case.space)
        searched = [key for key in keys if not values.is_fixed(key)]
        if searched:
            return "; ".join(f"{key} ({values.text(key)})" for key in searched)
        return render(values, _trial(case.space))

    return grouped(cases(space, keys, branches_of), one)


def _percent(value: Any) -> str:
    return f"{number(round(float(value) * 100, 6))}%"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


# -- data and model -------------------------------------------------------------------------------


def _data(space: Space) -> Section:
    def dataset(values: Values, cfg: TrialConfig) -> str:
        info = dataset_info(cfg.dataset)
        report = "/".join(str(k) for k in info.recall_ks)
        reports = input_kind(info.input_kind).reports_recall
        recall = f"; retrains report Recall@{report}" if reports else ""
        return f"{cfg.dataset}: {info.description}{recall}"

    def protocol(values: Values, cfg: TrialConfig) -> str:
        seed = _setting(values, cfg, "split_seed")
        if cfg.protocol == "kfold":
            folds = _setting(values, cfg, "folds", lambda k: f"{k}-fold", "k-fold")
            text = f"class-disjoint {folds} cross-validation (split seed {seed})"
        else:
            held = _setting(values, cfg, "val_ratio", _percent, "a share", _percent)
            text = (f"fixed class-disjoint validation split: {held} of the training classes "
                    f"validate (split seed {seed})")
        repeats = _setting(values, cfg, "repeats", lambda r: "" if r == 1 else
                           f"; {r} fits per split (seeds), scores averaged", "; fits per split")
        return f"{text}{repeats}; selected on validation {_setting(values, cfg, 'metric')}"

    return Section("Data & protocol", (*_per_case(space, ("dataset",), dataset),
                                       *_per_case(space, ("protocol",), protocol)))


def _backbone(space: Space) -> Section:
    named = _values(space).is_fixed("backbone")  # else each line is labelled by its backbone

    def trunk(values: Values, cfg: TrialConfig) -> str:
        info = BACKBONES.get(cfg.backbone)
        weights = _setting(values, cfg, "pretrained", _weights_text, "pretrained")
        name = f"{cfg.backbone} ({info.description})" if named else info.description
        return f"{name}; {weights}; input {_input_text(info, cfg)}"

    def head(values: Values, cfg: TrialConfig) -> str:
        pooling = _setting(values, cfg, "pooling", lambda p: _POOLING.get(p, p), "pooling")
        size = _setting(values, cfg, "embedding_size", lambda d: f"a {d}-d embedding",
                        "an embedding of size")
        return f"head: {pooling}, then a linear layer to {size}, L2-normalised"

    return Section("Backbone", (*_per_case(space, ("backbone", "pretrained"), trunk),
                                *_per_case(space, (), head, ("pooling", "embedding_size"))))


def _weights_text(pretrained: str) -> str:
    if pretrained == "none":
        return "trained from scratch (no pretrained weights)"
    if pretrained == "imagenet":
        return "ImageNet weights (from the local torch cache, never downloaded)"
    return f"weights from {pretrained}"


def _input_text(info: BackboneInfo, cfg: TrialConfig) -> str:
    kind = input_kind(info.input_kind)
    if kind.describe_input:  # the kind's own words (audio: its features)
        return str(resolve(kind.describe_input)(cfg))
    spec = info.input
    top = 255.0 if spec.scale_255 else 1.0
    if len(spec.mean) == 1:
        low, high = (0 - spec.mean[0]) / spec.std[0], (top - spec.mean[0]) / spec.std[0]
        return f"pixels scaled to [{number(low)}, {number(high)}], any number of channels"
    order = "BGR" if spec.bgr else "RGB"
    text = f"{order} 0-{number(top)}, mean {'/'.join(number(m) for m in spec.mean)}"
    if all(s == 1.0 for s in spec.std):
        text += f" ({'/'.join(order)}) subtracted, std 1"
    else:
        text += f", std {'/'.join(number(s) for s in spec.std)}"
    return text + (" (ImageNet's)" if spec == IMAGENET else "")


def _batchnorm(space: Space) -> Section:
    def render(values: Values, cfg: TrialConfig) -> str:
        effective = effective_freeze_bn(cfg)
        if effective_freeze_bn(cfg.replace(freeze_bn="stats")) == "off":  # trunk from scratch
            ignored = f"; freeze_bn {cfg.freeze_bn} does nothing here" \
                if cfg.freeze_bn != "off" else ""
            return ("trains normally (trunk from scratch: frozen statistics would be "
                    f"random){ignored}")
        headline = _BN_HEADLINES.get(effective)
        lead = f"{headline} (freeze_bn {effective}); " if headline else \
            f"freeze_bn {effective}: "
        return lead + FREEZE_BN_MEANINGS.get(effective, effective)

    return Section("BatchNorm", tuple(_per_case(space, ("pretrained", "freeze_bn"), render)))


def _warmup(space: Space) -> Section:
    def head(values: Values, cfg: TrialConfig) -> str:
        epochs = effective_head_warmup(cfg)
        if epochs:
            first = "the first epoch" if epochs == 1 else f"the first {epochs} epochs"
            return (f"head only in {first}: the embedding layer "
                    f"and the loss's parameters train, every other parameter is frozen; all "
                    f"train from epoch {epochs + 1}")
        if cfg.head_warmup_epochs:
            return (f"no head-only warm-up: a trunk from scratch trains from epoch 1 "
                    f"(head_warmup_epochs {cfg.head_warmup_epochs} does nothing here)")
        return "no head-only warm-up: every parameter trains from epoch 1"

    def lr(values: Values, cfg: TrialConfig) -> str:
        if cfg.lr_schedule not in _LR_WARMUP:
            return "no learning-rate warm-up"
        key, unit = _LR_WARMUP[cfg.lr_schedule]
        if values.is_fixed(key) and not _typed(cfg, key):
            return "no learning-rate warm-up"
        length = _setting(values, cfg, key, lambda n: f"the first {number(n)}", "the first")
        return f"learning rate ramps up linearly over {length} {unit}"

    return Section("Warm-up", (*_per_case(space, ("pretrained", "head_warmup_epochs"), head),
                               *_per_case(space, ("lr_schedule",), lr, ("warmup_epochs",
                                                                        "warmup_steps"))))


def _crops(space: Space) -> Section:
    def render(values: Values, cfg: TrialConfig) -> str:
        info = dataset_info(cfg.dataset)
        kind = input_kind(info.input_kind)
        if kind.describe_crops:  # the kind's own words (audio: its crops of utterances)
            return str(resolve(kind.describe_crops)(lambda key: _setting(values, cfg, key)))
        size = cfg.image_size or info.image_size
        pixels = DATASET_PIXELS.get(cfg.dataset)
        if pixels is None:
            return f"as the {cfg.dataset} dataset prepares them ({size} px)"
        spec = pixels(size)
        memory = f"none: images held in memory at {size} x {size} px, the same pixels every epoch"
        if spec is None:
            return memory
        text = _transform_text(spec, cache=cfg.cache, train_crops=cfg.train_crops)
        small = {"folder": "small folders", "table": "small tables"}.get(cfg.dataset)
        return f"{text} ({small}: {memory})" if small else text

    return Section("Crops", tuple(_per_case(space, ("dataset", "image_size", "cache",
                                                    "train_crops"), render)))


def _transform_text(spec: TransformSpec, *, cache: str, train_crops: str) -> str:
    size, resize = spec.size, spec.resize
    scale = "-".join(number(s) for s in _RRC_SCALE)
    ratio = "-".join(str(Fraction(math.exp(r)).limit_denominator(16)) for r in _RRC_LOG_RATIO)
    train = {
        "rrc": f"RandomResizedCrop {size} (scale {scale}, aspect ratio {ratio}) + horizontal "
               "flip",
        "resize_crop": f"Resize {resize} + RandomCrop {size} + horizontal flip",
        "none": "the evaluation transform (no augmentation)",
    }[spec.train_mode]
    if train_crops == "original":
        source = ("cut from the full-size photo (train_crops original, as the Proxy-Anchor, "
                  "thesis and MemVir code)")
    else:
        source = (f"cut from the photo resized to shorter side {resize} (train_crops resized, "
                  "as the MS loss code)")
    source += (", decoded every epoch (cache off)" if cache == "off" else
               ", decoded once into the node's store")
    evaluation = f"Resize {resize} + CentreCrop {size}" if resize != size else \
        f"Resize {size} + CentreCrop {size} (the whole image)"
    return f"training: {train}, {source}; evaluation: {evaluation}"


# -- training -------------------------------------------------------------------------------------


def _optimiser(space: Space) -> Section:
    def optimizer(values: Values, cfg: TrialConfig) -> str:
        decay = _setting(values, cfg, "weight_decay")
        eps = _setting(values, cfg, "adam_eps")
        momentum = _setting(values, cfg, "momentum")
        nesterov = _setting(values, cfg, "nesterov", lambda n: " (Nesterov)" if n else "",
                            " Nesterov")
        text = {
            "adamw": f"AdamW (eps {eps}), decoupled weight decay {decay}",
            "adam": f"Adam (eps {eps}), weight decay {decay} added to the gradient (L2)",
            "sgd": f"SGD, momentum {momentum}{nesterov}, weight decay {decay}",
            "rmsprop": f"RMSprop, momentum {momentum}, weight decay {decay}",
        }.get(cfg.optimizer, f"{cfg.optimizer}, weight decay {decay}")
        clip = _setting(values, cfg, "grad_clip", lambda c: f"; gradient values clipped to "
                        f"±{number(c)}" if c else "", "; gradient values clipped to ±")
        norm = _setting(values, cfg, "grad_clip_norm", lambda c: f"; gradient norm clipped "
                        f"to {number(c)}" if c else "", "; gradient norm clipped to")
        return text + clip + norm

    def model(values: Values, cfg: TrialConfig) -> str:
        _, groups = _param_groups(cfg)
        lr = _setting(values, cfg, "lr", lambda v: f"lr {number(v)}", "lr")
        mult = _setting(values, cfg, "embedding_lr_mult")
        value = f" = {number(groups['embedding']['lr'])}" if values.is_fixed("lr") and \
            values.is_fixed("embedding_lr_mult") else ""
        return f"groups: trunk at {lr}; embedding layer at lr x {mult}{value}"

    return Section("Optimiser & groups", (
        *_per_case(space, ("optimizer",), optimizer),
        *_per_case(space, (), model, ("lr", "embedding_lr_mult")),
        *_per_case(space, ("loss",), _loss_group)))


class _Model(nn.Module):
    """The two parts of a model that :func:`param_groups` tells apart (``embedding`` and the
    rest), one tiny layer each: enough to read the groups it builds."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(1, 1)
        self.embedding = nn.Linear(1, 1)


def _param_groups(cfg: TrialConfig) -> tuple[LossBundle, dict[str, dict[str, Any]]]:
    """The loss of a trial of ``cfg`` (built as a trial builds it, for 2 classes) and the
    optimizer's groups :func:`param_groups` makes of it and the model, by name."""
    bundle = build_loss(cfg.loss, cfg.loss_params, num_classes=2, embedding_size=4)
    groups = param_groups(_Model(), bundle.parameters(), bundle.lr_for(cfg.lr), cfg)
    return bundle, {g["name"]: g for g in groups}


def _loss_group(values: Values, cfg: TrialConfig) -> str:
    """The loss's own group: its lr (a multiple of lr, or its own) and weight decay."""
    bundle, groups = _param_groups(cfg)
    if "loss" not in groups:
        return "the loss has no parameters of its own"
    group = groups["loss"]
    owner = "proxies" if LOSSES.get(cfg.loss).uses_proxies else "the loss's parameters"
    if bundle.param_lr_mult is not None:
        mult = _setting(values, cfg, "loss.lr_mult", label="loss.lr_mult")
        known = values.is_fixed("lr") and values.is_fixed("loss.lr_mult")
        lr = f"lr x {mult}" + (f" = {number(group['lr'])}" if known else "")
    elif bundle.param_lr is not None:
        lr = _setting(values, cfg, "loss.lr", lambda v: f"{number(v)} (loss.lr)", "loss.lr")
    else:
        lr = "lr (the loss has no lr of its own)"
    decay = group.get("weight_decay", cfg.weight_decay)
    same = decay == groups["backbone"].get("weight_decay", cfg.weight_decay)
    if same and not values.is_fixed("weight_decay"):
        return f"{owner} at {lr}, with the same weight decay"
    return f"{owner} at {lr}, with weight decay {number(decay)}"


def _schedule(space: Space) -> Section:
    def schedule(values: Values, cfg: TrialConfig) -> str:
        def get(key: str) -> str:
            return _setting(values, cfg, key)

        steps = _setting(values, cfg, "lr_step_size", lambda n: _plural(n, "epoch"), "epochs")
        text = {
            "step": f"StepLR: lr x {get('lr_gamma')} every {steps}",
            "none": "constant learning rate",
            "exponential": f"lr x {get('lr_gamma')} every epoch",
            "plateau": f"reduce on plateau: lr x {get('lr_gamma')} once {get('metric')} has "
                       f"not improved for lr_patience + 1 evaluations, "
                       f"{_setting(values, cfg, 'lr_patience', lambda v: f'lr_patience {v}', 'lr_patience')}",
            "warmup_invsqrt": f"linear warm-up over W = {get('warmup_epochs')} epochs, then "
                              "lr x sqrt(W / epoch)",
            "warmup_invsqrt_steps": f"per step: linear warm-up over W = {get('warmup_steps')} "
                                    "steps, then lr x sqrt(W / step)",
            "warmup_step": f"linear warm-up over {get('warmup_epochs')} epochs, then lr x "
                           f"{get('lr_gamma')} every {steps}",
        }.get(cfg.lr_schedule)
        if text is None:  # a schedule registered later: its builder's first sentence
            doc = LR_SCHEDULES.get(cfg.lr_schedule).build.__doc__ or cfg.lr_schedule
            text = f"{cfg.lr_schedule}: {' '.join(doc.split()).split('. ')[0]}"
        return f"{text} (every group alike)"

    def length(values: Values, cfg: TrialConfig) -> str:
        epochs = _setting(values, cfg, "epochs", lambda e: _plural(e, "epoch"), "epochs")
        every = _setting(values, cfg, "eval_every", lambda e: "validated every epoch" if e == 1
                         else f"validated every {e} epochs", "validated every (epochs)")
        stop = _setting(values, cfg, "patience", lambda p: "" if not p else
                        f", stopped after {_plural(p, 'evaluation')} without improvement",
                        ", patience")
        return f"{epochs}, {every}{stop}"

    return Section("Schedule", (
        *_per_case(space, ("lr_schedule",), schedule,
                   ("lr_gamma", "lr_step_size", "warmup_epochs", "warmup_steps")),
        *_per_case(space, (), length, ("epochs",))))


def _sampler(space: Space) -> Section:
    """How batches are drawn, and their size: in one line where the size is one number, else
    the size in lines of its own (it is often set per backbone, the sampler per loss)."""
    one_size = _values(space).is_fixed("batch_size")

    def sampler(values: Values, cfg: TrialConfig) -> str:
        batch = f", batch size {cfg.batch_size}" if one_size else ""
        if cfg.batch_sampler == "random":
            return f"random (shuffled){batch}"
        if cfg.batch_sampler == "m_per_class":
            m = _setting(values, cfg, "m_per_class")
            classes = (f" ({cfg.batch_size // cfg.m_per_class} classes)"
                       if one_size and values.is_fixed("m_per_class") else "")
            return f"m per class ({m} images of each class){batch}{classes}"
        return f"{cfg.batch_sampler}{batch}"

    def size(values: Values, cfg: TrialConfig) -> str:
        return f"batch size {_setting(values, cfg, 'batch_size')}"

    sizes = [] if one_size else _per_case(space, (), size, ("batch_size",))
    return Section("Sampler", (*_per_case(space, ("batch_sampler",), sampler, ("m_per_class",)),
                               *sizes))


def _loss(space: Space) -> Section:
    named = _values(space).is_fixed("loss")

    def render(values: Values, cfg: TrialConfig) -> str:
        info = LOSSES.get(cfg.loss)
        def param(name: str) -> str:
            return _setting(values, cfg, LOSS_PREFIX + name, lambda v: f"{name} {number(v)}",
                            name)

        params = ", ".join(param(name) for name in info.defaults) or "no parameters"
        text = f"{params} [{info.source}]"
        return f"{cfg.loss}: {text}" if named else text

    return Section("Loss", tuple(_per_case(space, ("loss",), render)))


def _memvir(space: Space) -> Section | None:
    values, cfg = _values(space), _trial(space)
    if values.is_fixed("memvir_n") and not cfg.memvir_n:
        return None
    n = _setting(values, cfg, "memvir_n")
    m = _setting(values, cfg, "memvir_m")
    warmup = _setting(values, cfg, "memvir_warmup_epochs", lambda w: _plural(w, "epoch"),
                      "memvir_warmup_epochs")
    pacing = _setting(values, cfg, "memvir_step_pacing",
                      lambda p: "one virtual step added every M+1 steps (step-pacing)" if p
                      else "all N at once when the queue is full (no step-pacing)",
                      "step-pacing")
    text = (f"N {n} past steps used as virtual classes (N 0: MemVir off), M {m} steps skipped "
            f"between two; warm-up: the plain loss for {warmup}; {pacing}")
    return Section("MemVir", (text,))


def _differences(space: Space) -> Section:
    lines = tuple(f"- {d.what.rstrip('.')}. Why: {d.why}" for d in space.differences)
    return Section("Differences", lines or ("none recorded",))


def card_sections(space: Space) -> list[Section]:
    """The card's sections of ``space``, in order (MemVir only where the space can turn it on)."""
    found = [_data(space), _backbone(space), _batchnorm(space), _warmup(space),
             _optimiser(space), _schedule(space), _crops(space), _sampler(space), _loss(space)]
    memvir = _memvir(space)
    return [*found, *([memvir] if memvir is not None else []), _differences(space)]
