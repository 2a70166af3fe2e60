"""Any space, previewed: the same search on built-in data (``glyphs``; ``speakers`` for audio),
sized for a CPU.

The published-grid spaces (``spaces/files``) are written for CUB200, CARS196, SOP, Cifar-10 or
Mini-ImageNet on a GPU: BN-Inception at 224 px, batches of 180, 2,000 epochs. :func:`preview`
turns one into a search that runs in minutes on a laptop and still shows what the space is about:
its SEARCHED parameters stay searched, with the same branches and (where the preview data allow)
the same number of choices; only sizes change. Each rule below applies to a setting's fixed value
and to every value a searched parameter of it can take (choices, range bounds, the values
``when`` clauses test, warm starts; :meth:`Space.with_converted_values`), so the branches a
sample takes stay the same. A setting the user fixed (``--set``, ``--protocol``, the space's
overrides) is the user's and is never changed.

- data: ``dataset`` glyphs (built in: 120 classes of 20 grayscale 32x32 images; the first 60
  classes train), no ``data_root``, ``image_size`` the dataset's own (unset);
- model: ``backbone`` smallcnn (a searched backbone keeps one choice per family: ResNets become
  resnet18, the others smallcnn), ``pretrained`` none (so ``freeze_bn`` and
  ``head_warmup_epochs`` stay as the space says and do nothing: a trunk from scratch learns its
  BatchNorm statistics and trains from the first epoch; trainables/recipe.py),
  ``embedding_size`` divided by the power of two that brings the largest to at most 128 (at
  least 8);
- machine: ``device`` cpu, ``precision`` fp32, ``channels_last`` false, ``workers`` 0;
- time: ``epochs`` at most 3 (a searched ``epochs`` scaled with it); the settings counted in
  epochs (``lr_step_size``, ``warmup_epochs``, ``memvir_warmup_epochs``), where the space sets
  or searches them, scaled by the same factor, rounded up, 0 kept, and at most ``epochs - 1`` so
  they act within the preview;
  ``eval_every`` 1; ``repeats`` 1;
- protocol: kept (a k-fold space previews as k-fold, its reports and fold ensemble included)
  with ``folds`` at most 2; ``val_ratio`` at least 0.05 (3 of the 60 glyph training classes);
- batches: ``m_per_class`` at most 10 (half a glyph class); ``batch_size`` divided by the power
  of two that brings the largest to at most 64 (and to what the smallest training split can
  fill), a multiple of ``m_per_class`` where batches are balanced, at least 8 (two classes of a
  balanced batch); equal sizes merge;
- ``metric`` kept, except a ``recall@k`` whose k reaches the smallest validation split, which
  becomes ``recall@1``.

A space on audio (an audio dataset or an audio backbone: speaker verification) previews on the
built-in ``speakers`` instead (160 espeak-ng voices of 9 utterances; the first 80 train), with
the same rules but these: ``backbone`` tdnn_small (the TDNN at a quarter of its width);
``threads`` 1 (evaluation embeds whole utterances one length at a time: small tensors, which a
second torch thread only slows down); ``val_ratio`` at least 0.2 (16 of the 80 training
speakers); ``m_per_class`` at most 5 (the
source's 5 utterances per speaker); ``max_frames`` divided by the power of two that brings the
largest to at most 400 (4 s); ``warmup_steps`` (counted in optimisation steps) at most 5, so the
warm-up ends within the first preview epoch.

:func:`preview` returns the new space and every change as ``(setting, old, new)``: a fixed
setting's values, or a searched parameter's Optuna name and its domains as text.
:func:`preview_text` is what a command prints. Nothing here imports torch or Ray: the glyphs'
sizes are constants (a test checks them against ``trainables.data``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import same_value
from dmlsearch.spaces._space import Space
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import kind_of_names

__all__ = ["PREVIEW_AUDIO_DATASET", "PREVIEW_DATASET", "PreviewChange", "preview",
           "preview_text"]

PREVIEW_DATASET = "glyphs"
#: The glyphs' size (``trainables.data._glyphs``: ``len(GLYPH_CHARS)``, ``IMAGES_PER_CLASS``);
#: the standard split trains on the first half of the classes.
GLYPH_CLASSES = 120
GLYPH_IMAGES_PER_CLASS = 20
GLYPH_TRAIN_CLASSES = GLYPH_CLASSES // 2
PREVIEW_AUDIO_DATASET = "speakers"
#: The built-in speakers' size (``trainables.audio.speakers``: ``SPEAKERS``, ``SESSIONS`` x
#: ``UTTERANCES_PER_SESSION``); its trial list tests the second half.
SPEAKER_CLASSES = 160
SPEAKER_UTTERANCES = 9
SPEAKER_TRAIN_CLASSES = SPEAKER_CLASSES // 2
AUDIO_MIN_VAL_RATIO = 0.2
AUDIO_MAX_M_PER_CLASS = 5
MAX_FRAMES = 400
PREVIEW_WARMUP_STEPS = 5


@dataclasses.dataclass(frozen=True)
class _Data:
    """The built-in data a preview runs on, and the sizes its rules depend on."""

    name: str
    train_classes: int  # classes of the standard split's training half
    per_class: int  # items per class
    min_val_ratio: float
    max_m_per_class: int
    audio: bool


_GLYPHS = _Data(PREVIEW_DATASET, GLYPH_TRAIN_CLASSES, GLYPH_IMAGES_PER_CLASS, 0.05,
                GLYPH_IMAGES_PER_CLASS // 2, audio=False)
_SPEAKERS = _Data(PREVIEW_AUDIO_DATASET, SPEAKER_TRAIN_CLASSES, SPEAKER_UTTERANCES,
                  AUDIO_MIN_VAL_RATIO, AUDIO_MAX_M_PER_CLASS, audio=True)
#: The preview data by name: a space is previewed on its input kind's ``preview_dataset``.
_PREVIEW_DATA = {data.name: data for data in (_GLYPHS, _SPEAKERS)}

PREVIEW_EPOCHS = 3
PREVIEW_FOLDS = 2
MAX_BATCH = 64
MIN_BATCH = 8
MAX_EMBEDDING = 128
MIN_EMBEDDING = 8
#: Settings counted in epochs: they shrink with ``epochs``.
EPOCH_COUNTED = ("lr_step_size", "warmup_epochs", "memvir_warmup_epochs")
#: The machine: a CPU, full precision, data loaded in the trial's own process (glyphs live in
#: memory). ``workers`` is pinned even when the space leaves it unset, since the search would
#: otherwise size it from ``--cpus-per-trial``.
_CPU: dict[str, Any] = {"device": "cpu", "precision": "fp32", "channels_last": False,
                        "workers": 0}
_PINNED = ("workers",)

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrialConfig)
                             if f.default is not dataclasses.MISSING}


class PreviewChange(NamedTuple):
    """One change of :func:`preview`: a fixed setting's old and new value, or a searched
    parameter's Optuna name and its old and new domain as text (``{40, 0}``, ``[1, 50]``)."""

    setting: str
    old: Any
    new: Any


def preview(space: Space) -> tuple[Space, list[PreviewChange]]:
    """``space`` on the built-in glyphs data, sized for a CPU (rules in the module docstring),
    and the changes made, in the order of the rules. Its searched parameters stay searched."""
    plan = _Plan(space)
    new = space
    for key, convert in plan.converters.items():
        if key in new.base or any(p.key == key for p in new.params):
            new = new.with_converted_values(key, convert)
        else:  # unset: the setting's default is the value to convert
            value = convert(_DEFAULTS[key])
            if key in _PINNED or not same_value(value, _DEFAULTS[key]):
                new = new.with_overrides({key: value})
    changes = [PreviewChange(key, space.base.get(key, _DEFAULTS.get(key)), new.base[key])
               for key in plan.converters
               if key in new.base and not same_value(space.base.get(key, _DEFAULTS.get(key)),
                                                     new.base[key])]
    assert len(space.params) == len(new.params), "a conversion dropped a searched parameter"
    changes += [PreviewChange(before.optuna_name, _domain(before), _domain(after))
                for before, after in zip(space.params, new.params)
                if _domain(before) != _domain(after)]
    return new, changes


def preview_text(space: Space, changes: Sequence[PreviewChange]) -> str:
    """What a command prints about a preview: the data and machine, then one line per change."""
    data = space.base.get("dataset", PREVIEW_DATASET)
    head = (f"preview: {space.name} on the built-in {data} data, sized for a CPU; "
            "searched parameters kept")
    lines = [head]
    width = max((len(c.setting) for c in changes), default=0)
    for change in changes:
        lines.append(f"  {change.setting.ljust(width)}  {_text(change.old)} -> "
                     f"{_text(change.new)}")
    if not changes:
        lines.append("  nothing: the space already runs on the built-in data on a CPU")
    return "\n".join(lines)


# -- the rules ------------------------------------------------------------------------------------


class _Plan:
    """Which settings the preview converts, and how: ``converters`` maps each setting (in the
    order of the rules) to a function from a source value to its preview value."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self.user = set(space.overrides)
        self.converters: dict[str, Callable[[Any], Any]] = {}
        self.data = self._data()
        self._check_user_data()
        self._data_and_model()
        for key, value in _CPU.items():
            self.set(key, _const(value))
        self._time()
        self._protocol()
        self._batches()
        self._frames()
        self._embedding()
        self._metric()

    # -- helpers ----------------------------------------------------------------------------------

    def set(self, key: str, convert: Callable[[Any], Any]) -> None:
        """Convert ``key`` unless the user fixed it."""
        if key not in self.user:
            self.converters[key] = convert

    def source(self, key: str) -> list[Any]:
        """Every value ``key`` takes in the space: its fixed value, every choice or range bound
        of the params that search it, or (neither) the setting's default."""
        if key in self.space.base:
            return [self.space.base[key]]
        params = [p for p in self.space.params if p.key == key]
        if not params:
            return [_DEFAULTS[key]]
        return [v for p in params for v in (p.choices if p.kind == "categorical"
                                            else (p.low, p.high))]

    def values(self, key: str) -> list[Any]:
        """The values ``key`` takes in the preview (after its conversion, if any)."""
        convert = self.converters.get(key, _same)
        return [convert(v) for v in self.source(key)]

    def searched(self, key: str) -> bool:
        return any(p.key == key for p in self.space.params)

    def _data(self) -> _Data:
        """The built-in data of the space's input kind (that of any dataset or backbone in it)."""
        kind = kind_of_names(self.source("dataset"), self.source("backbone"))
        if kind.preview_dataset not in _PREVIEW_DATA:
            raise UserError(f"a space on {kind.name} input has no preview: expected its "
                            f"preview dataset {kind.preview_dataset!r} to be one of "
                            f"{', '.join(_PREVIEW_DATA)}; run the space without --preview")
        return _PREVIEW_DATA[kind.preview_dataset]

    # -- rules ------------------------------------------------------------------------------------

    def _check_user_data(self) -> None:
        dataset, name = self.space.base.get("dataset"), self.data.name
        if "dataset" in self.user and dataset != name:
            raise UserError(
                f"a preview runs on the built-in {name} data, but dataset "
                f"{dataset!r} was asked for (--dataset or --set); expected no dataset or "
                f"dataset={name}; leave it out, or leave out --preview"
            )
        if "data_root" in self.user and self.space.base.get("data_root") is not None:
            raise UserError(
                f"a preview runs on the built-in {name} data, which needs no files, "
                f"but a data root was given ({self.space.base['data_root']}); expected no "
                "--data-root; leave it out, or leave out --preview"
            )

    def _data_and_model(self) -> None:
        self.set("dataset", _const(self.data.name))
        self.set("data_root", _const(None))
        self.set("image_size", _const(None))
        if self.data.audio:
            self.set("backbone", _const("tdnn_small"))
        else:
            self.set("backbone",
                     _cpu_backbone if self.searched("backbone") else _const("smallcnn"))
        self.set("pretrained", _const("none"))
        if self.data.audio:
            self.set("trial_list", _const(None))
            # Evaluation embeds whole utterances one length at a time: tensors so small that a
            # second torch thread only waits (measured 5-20x slower on a busy 2-core machine).
            self.set("threads", _const(1))

    def _time(self) -> None:
        epochs = [int(v) for v in self.source("epochs")]
        longest = max(epochs)
        target = longest if "epochs" in self.user else min(longest, PREVIEW_EPOCHS)
        last = max(1, target - 1)

        def scaled(value: Any) -> int:
            return max(1, math.ceil(int(value) * target / longest))

        def counted(value: Any) -> int:
            return 0 if int(value) == 0 else min(scaled(value), last)

        self.set("epochs", scaled)
        for key in EPOCH_COUNTED:  # a default (unset) is counted in no space's epochs: kept
            if key in self.space.base or self.searched(key):
                self.set(key, counted)
        if self.data.audio and (("warmup_steps" in self.space.base) or self.searched(
                "warmup_steps")):
            self.set("warmup_steps", lambda steps: min(int(steps), PREVIEW_WARMUP_STEPS))
        self.set("eval_every", _const(1))
        self.set("repeats", _const(1))

    def _protocol(self) -> None:
        if "kfold" in self.values("protocol"):
            self.set("folds", lambda folds: min(int(folds), PREVIEW_FOLDS))
        self.set("val_ratio", lambda ratio: max(float(ratio), self.data.min_val_ratio))

    def _splits(self) -> tuple[int, int]:
        """The fewest training classes and validation images of any split the preview makes."""
        train: list[int] = []
        val: list[int] = []
        classes, per_class = self.data.train_classes, self.data.per_class
        protocols = self.values("protocol")
        if "fixed" in protocols:
            for ratio in self.values("val_ratio"):  # as trainables.protocol.fixed_split
                held_out = round(float(ratio) * classes)
                train.append(classes - held_out)
                val.append(held_out * per_class)
        if "kfold" in protocols:
            for folds in self.values("folds"):  # as trainables.protocol.kfold_splits
                train.append(classes - math.ceil(classes / int(folds)))
                val.append(classes // int(folds) * per_class)
        return min(train), min(val)

    def _batches(self) -> None:
        self.set("m_per_class", lambda m: min(int(m), self.data.max_m_per_class))
        per_class = [int(m) for m in self.values("m_per_class")]
        balanced = "m_per_class" in self.values("batch_sampler")
        unit = math.lcm(*per_class) if balanced else 1
        classes, _ = self._splits()
        cap = min(MAX_BATCH, classes * self.data.per_class)
        if balanced:  # a balanced batch takes batch_size / m_per_class classes
            cap = min(cap, min(per_class) * classes)
        cap = max(unit, cap // unit * unit)
        floor = max(MIN_BATCH, 2 * max(per_class)) if balanced else MIN_BATCH
        floor = min(cap, math.ceil(floor / unit) * unit)
        divisor = _halvings([int(v) for v in self.source("batch_size")], cap)

        def sized(value: Any) -> int:
            multiple = math.floor(int(value) / divisor / unit + 0.5) * unit
            return min(cap, max(floor, multiple))

        self.set("batch_size", sized)

    def _frames(self) -> None:
        if not self.data.audio or not ("max_frames" in self.space.base
                                       or self.searched("max_frames")):
            return
        divisor = _halvings([int(v) for v in self.source("max_frames")], MAX_FRAMES)
        if divisor > 1:
            self.set("max_frames", lambda frames: max(16, round(int(frames) / divisor)))

    def _embedding(self) -> None:
        divisor = _halvings([int(v) for v in self.source("embedding_size")], MAX_EMBEDDING)
        if divisor > 1:
            self.set("embedding_size",
                     lambda size: max(MIN_EMBEDDING, round(int(size) / divisor)))

    def _metric(self) -> None:
        _, val_images = self._splits()

        def runnable(metric: Any) -> Any:
            name = str(metric)
            if name.startswith("recall@") and name[len("recall@"):].isdigit() \
                    and int(name[len("recall@"):]) >= val_images:
                return "recall@1"
            return metric

        self.set("metric", runnable)


def _same(value: Any) -> Any:
    return value


def _const(value: Any) -> Callable[[Any], Any]:
    return lambda _: value


def _cpu_backbone(name: Any) -> str:
    """A searched backbone at CPU size, one choice per family (ResNets keep a ResNet)."""
    return "resnet18" if str(name).startswith("resnet") else "smallcnn"


def _halvings(values: Sequence[int], cap: int) -> int:
    """The smallest power of two that brings the largest value to at most ``cap``."""
    divisor = 1
    while max(values) / divisor > cap:
        divisor *= 2
    return divisor


def _domain(p: Param) -> str:
    scale = p.scale_text()
    return p.domain_text() + (f" {scale}" if scale else "")


def _text(value: Any) -> str:
    return "unset" if value is None else format_value(value)
