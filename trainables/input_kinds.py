"""The input kinds (what a dataset's items are: images, utterances, ...) and everything that
differs per kind, in one registry that imports nothing heavy.

A dataset is registered with the kind of its items and a backbone with the kind it takes
(``input_kind``: a name here). Whatever the fit loop, the protocols, retrain, the checks, the
recipe cards, the preview and the reports do differently for a kind, they ask its
:class:`InputKind` entry, never the kind's name: an entry states its differences as data (what a
model takes, whether the items are pixels) and names its heavy parts (torch, the readers) by
dotted path (``"package.module:function"``), imported only when called, so the driver, the
preview and the reports read this registry without importing torch. A new kind is its own folder
(its items, readers, loader, input transform) plus one :func:`register_input_kind` entry.

``datasets`` and ``backbones`` list, by name, what the registries of ``trainables.data`` and
``trainables.models`` register with the kind (the torch-free answer to "which kind is this
configuration"); a test checks them against those registries. A configuration naming none of a
kind's is of the kind :data:`DEFAULT_KIND`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry

__all__ = ["DEFAULT_KIND", "INPUT_KINDS", "InputKind", "ModelInput", "input_kind", "kind_of",
           "kind_of_names", "model_input_text", "register_input_kind", "resolve"]

#: The kind of a configuration that names no dataset or backbone of another kind.
DEFAULT_KIND = "image"


def resolve(path: str) -> Callable[..., Any]:
    """The object a dotted path ``"package.module:name"`` names (its module imported now)."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"expected a dotted path 'package.module:name', got {path!r}")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ModelInput:
    """What a model of a kind takes, and so its registered MLflow model: one tensor
    ``[N, *axes]`` (its signature, input example and description derive from this).

    Attributes:
        dtype: the tensor's NumPy dtype, by name (``uint8``, ``float32``).
        items: what it holds, in words (``images``, ``audio features``).
        axes: each axis after the batch's, as ``(label, length)``: the label its words use
            (``C``, ``frames``); the length ``channels`` (the items' channels: an image's
            colours, an utterance's features, a vector's dimension), ``size`` (the image size)
            or ``""`` (any length: ``-1`` in the signature).
        free_length: an axis of any length in the input example (200 frames).
        random_example: the input example is standard-normal noise, not zeros (statistics
            pooling of a constant input is flat).
        describe: ``(cfg, size) -> str``: how the model's inputs are prepared, in words, after
            its tensor's (``size``: the image size, or ``None``); ``""``: the kind's
            ``describe_input``, else nothing.
    """

    dtype: str
    items: str
    axes: tuple[tuple[str, str], ...]
    free_length: int = 200
    random_example: bool = False
    describe: str = ""

    def text(self, channels: int | None = None, size: int | None = None) -> str:
        """``uint8 images [N, C, H, W]``; with the lengths known, ``[N, 3, 224, 224]``."""
        lengths = {"channels": channels, "size": size}
        dims = [label if lengths.get(length) is None else str(lengths[length])
                for label, length in self.axes]
        return f"{self.dtype} {self.items} [{', '.join(['N', *dims])}]"

    def shape(self, channels: int, size: int | None = None) -> tuple[int, ...]:
        """The signature's shape: ``-1`` for the batch and for an axis of any length."""
        return (-1, *(self._length(length, channels, size, -1) for _, length in self.axes))

    def example_shape(self, channels: int, size: int | None = None,
                      batch: int = 2) -> tuple[int, ...]:
        """An input example's shape (``batch`` > 1: the batch axis stays dynamic)."""
        return (batch, *(self._length(length, channels, size, self.free_length)
                         for _, length in self.axes))

    @staticmethod
    def _length(length: str, channels: int, size: int | None, free: int) -> int:
        if length == "channels":
            return int(channels)
        if length == "size":
            if size is None:
                raise ValueError("this model input has an image size: give size")
            return int(size)
        return free


@dataclass(frozen=True)
class InputKind:
    """One input kind: what differs for it, as data and as dotted paths (called with keywords
    where noted; ``""``: nothing to do for this kind).

    Attributes:
        name: the name datasets and backbones give as ``input_kind``.
        items: what one item is, in a word or two (``images``, ``utterances``), for messages.
        model_input: what a model of this kind (and its registered MLflow model) takes.
        batch: what a batch of its items is, for messages (``uint8 images [B, C, H, W]``).
        datasets: the registered datasets of this kind, by name (see the module's notes).
        backbones: the registered backbones that take this kind, by name.
        preview_dataset: the built-in dataset a space of this kind is previewed on.
        pixels: the items are uint8 pixels ``[B, C, H, W]``: an image size applies, the
            backbone's pixel convention prepares them, channels-last may store them, and a
            retrained model records its image shape (else its feature dimension, ``channels``).
        reports_recall: a retrain reports the dataset's Recall@k cut-offs.
        input_transform: ``(spec: InputSpec) -> transform``: a model's input transform, given
            its backbone's pixel convention (``trainables.models``).
        prepare: ``(dataset, cfg) -> Dataset``: a loaded dataset with a trial's settings of the
            kind applied (audio: features, crops, trial list).
        open: ``(dataset, cfg, *, check_files) -> (Dataset, StoreStats | None)``: the dataset as
            trials read it (images: from their decoded store), every file checked first with
            ``check_files`` (the driver, before a search).
        check_settings: ``(cfg) -> None``: the user errors of a configuration's settings of the
            kind, together, before any file is read.
        describe_input: ``(cfg) -> str``: a recipe card's words for a model's input; ``""``:
            the backbone's pixel convention.
        describe_crops: ``(setting) -> str``: a recipe card's words for what a trial's items
            are cut to, ``setting(key)`` giving the card's words for one setting; ``""``: the
            dataset's image transforms.
        compare_space: the shipped space whose setting a comparison on a dataset of this kind
            shares (``dmlsearch compare``); ``""``: the settings' defaults with that dataset.
        compare_metric: the metric of such a comparison.
        retrain_pictures: what a retrained model of this kind draws besides the map of its
            test embeddings, by name (``search.finish.retrain_runs.PICTURES``): ``retrievals``,
            the retrieval galleries (its items drawn as pictures); ``trials``, a verification
            model's test trials (scores, DET curves, the hardest ones); ``()``: none.
    """

    name: str
    items: str
    model_input: ModelInput
    batch: str
    preview_dataset: str
    input_transform: str
    open: str
    datasets: tuple[str, ...] = ()
    backbones: tuple[str, ...] = ()
    pixels: bool = False
    reports_recall: bool = False
    prepare: str = ""
    check_settings: str = ""
    describe_input: str = ""
    describe_crops: str = ""
    compare_space: str = ""
    compare_metric: str = ""
    retrain_pictures: tuple[str, ...] = ()

    def transform_for(self, spec: Any) -> Callable[[Any], Any]:
        """A model's input transform for a backbone whose pixel convention is ``spec``."""
        return resolve(self.input_transform)(spec)

    def prepared(self, dataset: Any, cfg: Any) -> Any:
        """``dataset`` with ``cfg``'s settings of this kind applied."""
        return resolve(self.prepare)(dataset, cfg) if self.prepare else dataset

    def opened(self, dataset: Any, cfg: Any, *, check_files: bool) -> tuple[Any, Any]:
        """``dataset`` as trials read it, and what opening its store cost (``None``: none)."""
        return resolve(self.open)(dataset, cfg, check_files=check_files)

    def check(self, cfg: Any) -> None:
        """The user errors of ``cfg``'s settings for a model of this kind."""
        if cfg.channels_last and not self.pixels:
            raise UserError(f"channels_last is a memory format of images [B, C, H, W]; {self.name} "
                            f"inputs are {self.batch}: set channels_last=false")
        if self.check_settings:
            resolve(self.check_settings)(cfg)

    def describe_model(self, cfg: Any, *, channels: int, size: int | None = None) -> str:
        """What a retrained model of this kind takes, in words (its registered version's
        description): its tensor with the lengths known, then how its inputs are prepared."""
        tensor = self.model_input.text(channels, size)
        if self.model_input.describe:
            words = resolve(self.model_input.describe)(cfg, size)
        elif self.describe_input:
            words = resolve(self.describe_input)(cfg)
        else:
            words = ""
        return f"{tensor}: {words}" if words else tensor


INPUT_KINDS: Registry[InputKind] = Registry(
    "input kind", option="input_kind",
    fix="register the kind with dmlsearch.trainables.input_kinds.register_input_kind first")


def register_input_kind(kind: InputKind) -> InputKind:
    """Add ``kind`` to the registry (each name once); returns it."""
    return INPUT_KINDS.add(kind.name, kind)


def input_kind(name: str) -> InputKind:
    """The registry entry of the kind ``name``; an unknown name is a user error listing all."""
    return INPUT_KINDS.get(name)


def kind_of_names(datasets: Iterable[Any] = (), backbones: Iterable[Any] = ()) -> InputKind:
    """The kind that any of these dataset or backbone names belongs to (a space's values), else
    the default kind."""
    datasets, backbones = {str(d) for d in datasets}, {str(b) for b in backbones}
    for name in INPUT_KINDS.names():
        kind = INPUT_KINDS.get(name)
        if datasets & set(kind.datasets) or backbones & set(kind.backbones):
            return kind
    return INPUT_KINDS.get(DEFAULT_KIND)


def kind_of(config: Mapping[str, Any]) -> InputKind:
    """The kind of a flat configuration: its dataset's, or its backbone's."""
    return kind_of_names((config.get("dataset"),), (config.get("backbone"),))


def model_input_text(config: Mapping[str, Any]) -> str:
    """What a registered model of ``config`` takes, in a few words."""
    return kind_of(config).model_input.text()


def image_preparation(cfg: Any, size: int | None) -> str:
    """How a registered image model's inputs are prepared (``ModelInput.describe``)."""
    eval_resize = resolve("dmlsearch.trainables.data:eval_resize")  # torch: when registering
    size = int(cfg.image_size if size is None else size)
    return (f"the shorter side resized to {eval_resize(size)} px, then centre-cropped to "
            f"{size} px (the model does not resize)")


register_input_kind(InputKind(
    name="image", items="images",
    model_input=ModelInput("uint8", "images", (("C", "channels"), ("H", "size"), ("W", "size")),
                           describe=f"{__name__}:image_preparation"),
    batch="uint8 images [B, C, H, W]", preview_dataset="glyphs", pixels=True,
    reports_recall=True, retrain_pictures=("retrievals",),
    input_transform="dmlsearch.trainables.models._normalize:InputTransform",
    open="dmlsearch.trainables.data._store_attach:open_images",
))

register_input_kind(InputKind(
    name="audio", items="utterances",
    model_input=ModelInput("float32", "audio features", (("n_features", "channels"),
                                                         ("frames", "")), random_example=True),
    batch="features [B, F, T]", preview_dataset="speakers", retrain_pictures=("trials",),
    datasets=("speaker_folder", "speakers", "voxceleb1", "voxceleb2"),
    backbones=("tdnn", "tdnn_small"),
    input_transform="dmlsearch.trainables.models._tdnn:feature_input",
    prepare="dmlsearch.trainables.audio:configure",
    open="dmlsearch.trainables.audio.checks:open_utterances",
    check_settings="dmlsearch.trainables.audio.checks:check_audio_settings",
    describe_input="dmlsearch.trainables.audio.describe:input_text",
    describe_crops="dmlsearch.trainables.audio.describe:crops_text",
    compare_space="e2e_voxceleb", compare_metric="eer",
))
