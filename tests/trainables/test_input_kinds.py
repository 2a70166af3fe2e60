"""The input-kind registry (``trainables/input_kinds.py``): its torch-free names are the data and
model registries', each kind's parts resolve, and a configuration's kind follows its names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.data import dataset_names
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import DEFAULT_KIND
from dmlsearch.trainables.input_kinds import INPUT_KINDS
from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.input_kinds import kind_of
from dmlsearch.trainables.input_kinds import kind_of_names
from dmlsearch.trainables.input_kinds import model_input_text
from dmlsearch.trainables.input_kinds import resolve
from dmlsearch.trainables.models import BACKBONES

_PARTS = ("input_transform", "open", "prepare", "check_settings", "describe_input",
          "describe_crops")


@pytest.mark.parametrize("name", INPUT_KINDS.names())
def test_a_kind_s_torch_free_names_are_the_registries(name: str) -> None:
    kind = input_kind(name)
    if name == DEFAULT_KIND:  # what names no other kind's is the default kind's
        assert kind.datasets == () and kind.backbones == ()
        return
    assert set(kind.datasets) == {n for n in dataset_names()
                                  if dataset_info(n).input_kind == name}
    assert set(kind.backbones) == {n for n in BACKBONES.names()
                                   if BACKBONES.get(n).input_kind == name}


@pytest.mark.parametrize("name", INPUT_KINDS.names())
def test_every_part_a_kind_names_resolves(name: str) -> None:
    kind = input_kind(name)
    assert kind.input_transform and kind.open  # what every kind must say
    for part in _PARTS:
        path = getattr(kind, part)
        assert path == "" or callable(resolve(path)), (name, part, path)
    assert kind.preview_dataset in dataset_names()
    assert dataset_info(kind.preview_dataset).input_kind == name


def test_a_configuration_s_kind_follows_its_dataset_or_backbone() -> None:
    assert kind_of({"dataset": "speakers"}).name == input_kind("audio").name
    assert kind_of({"backbone": "tdnn_small"}) is input_kind("audio")
    assert kind_of({"dataset": "glyphs", "backbone": "smallcnn"}) is input_kind("image")
    assert kind_of({}) is input_kind(DEFAULT_KIND)
    assert kind_of_names(["glyphs", "voxceleb1"]) is input_kind("audio")  # a space's values
    assert model_input_text({"dataset": "cub200"}) == "uint8 images [N, C, H, W]"
    assert model_input_text({"dataset": "voxceleb2"}).startswith("float32 audio features")


def test_an_unknown_kind_is_a_user_error_naming_the_kinds() -> None:
    with pytest.raises(UserError, match=r"unknown input kind 'video'.*audio, image"):
        input_kind("video")
    with pytest.raises(ValueError, match="'package.module:name'"):
        resolve("no_colon")


def test_the_registry_imports_no_torch() -> None:
    code = ("import sys; from dmlsearch.trainables import input_kinds; "
            "input_kinds.kind_of({'dataset': 'speakers'}); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'ray')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", INPUT_KINDS.names())
def test_a_kind_s_retrain_pictures_are_ones_the_retrain_draws(name: str) -> None:
    from dmlsearch.search.finish.retrain_runs import PICTURES

    assert set(input_kind(name).retrain_pictures) <= set(PICTURES), name
    describe = input_kind(name).model_input.describe
    assert describe == "" or callable(resolve(describe))


def test_a_kind_s_model_input_gives_the_registered_model_s_signature() -> None:
    from dmlsearch.trainables.config import TrialConfig

    image, audio = input_kind("image").model_input, input_kind("audio").model_input
    assert image.shape(3, 224) == (-1, 3, 224, 224)
    assert image.example_shape(3, 224) == (2, 3, 224, 224) and image.dtype == "uint8"
    assert audio.shape(30) == (-1, 30, -1) and audio.example_shape(30) == (2, 30, 200)
    assert audio.dtype == "float32" and audio.random_example and not image.random_example
    assert audio.text() == "float32 audio features [N, n_features, frames]"
    assert image.text(1, 28) == "uint8 images [N, 1, 28, 28]"
    with pytest.raises(ValueError, match="image size"):
        image.shape(3)
    cfg = TrialConfig()
    assert input_kind("image").describe_model(cfg, channels=3, size=224) == (
        "uint8 images [N, 3, 224, 224]: the shorter side resized to 256 px, then "
        "centre-cropped to 224 px (the model does not resize)")
    words = input_kind("audio").describe_model(cfg, channels=30)
    assert words.startswith("float32 audio features [N, 30, frames]: ") and "per 10 ms" in words
