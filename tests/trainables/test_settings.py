"""Every trial setting declared once (``trainables.settings``, the fields of ``TrialConfig``):
its default, help, type, range or choices, whether it holds a path and its input kind; the
checks, ``dmlsearch settings``, path resolution and the kind rules derive from it."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from dmlsearch.search.cli import main
from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_choices
from dmlsearch.trainables.config import setting_help
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.setting_kinds import absolute_paths
from dmlsearch.trainables.setting_kinds import of_kind
from dmlsearch.trainables.setting_kinds import refuse_other_kind
from dmlsearch.trainables.setting_kinds import settings_of_kind
from dmlsearch.trainables.settings import KINDS

AUDIO = ("audio_features", "n_features", "vad", "cmn_window", "max_frames", "trial_list")
IMAGE = ("image_size", "cache", "cache_limit_gb", "train_crops")


def test_every_field_is_a_declared_setting_with_its_default_help_and_kind() -> None:
    fields = [f for f in dataclasses.fields(TrialConfig)
              if f.name not in ("loss_params", "miner_params")]
    assert list(SETTINGS) == [f.name for f in fields] == setting_names()
    hints = typing.get_type_hints(TrialConfig)
    for field in fields:
        setting = SETTINGS[field.name]
        assert setting.default == field.default == getattr(TrialConfig(), field.name)
        assert setting.help and setting.help == setting_help(field.name)
        assert setting.kind in KINDS
        optional = type(None) in typing.get_args(hints[field.name])
        assert setting.rule.optional is optional, field.name
        # the declared default passes the declared checks
        assert setting.check(setting.default) == setting.default, field.name


def test_the_input_kinds_settings_are_declared_with_them() -> None:
    assert [n for n, s in SETTINGS.items() if s.kind == "audio"] == list(AUDIO)
    assert [n for n, s in SETTINGS.items() if s.kind == "image"] == list(IMAGE)
    assert not set(AUDIO) & set(settings_of_kind("image"))
    assert not set(IMAGE) & set(settings_of_kind("audio"))


def test_the_path_settings_are_declared_and_resolved_from_the_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert [n for n, s in SETTINGS.items() if s.path] == ["data_root", "pretrained", "cache",
                                                          "trial_list"]
    monkeypatch.chdir(tmp_path)
    flat = {"data_root": "data", "pretrained": "imagenet", "cache": "./store",
            "trial_list": None, "dataset": "glyphs"}
    assert absolute_paths(flat) == {"data_root": str(tmp_path / "data"),
                                    "cache": str(tmp_path / "store")}
    # the words of a path setting are no paths
    assert absolute_paths({"cache": "shm", "pretrained": "none"}) == {}


def test_a_mistyped_cache_word_is_an_error_not_a_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``cache=shmm`` once became the folder ./shmm; a folder is written as a path."""
    monkeypatch.chdir(tmp_path)
    for check in (lambda: TrialConfig.from_flat({"cache": "shmm"}),
                  lambda: absolute_paths({"cache": "shmm"})):
        with pytest.raises(UserError, match=r"cache must be auto, shm, off or a folder, got "
                                            r"'shmm'.*write a folder as a path \(\./shmm"):
            check()
    assert list(tmp_path.iterdir()) == []
    assert TrialConfig.from_flat({"cache": "./shmm"}).cache == "./shmm"


@pytest.mark.parametrize(("given", "config", "needle"), [
    ({"max_frames": 300}, {"dataset": "glyphs"},
     "max_frames is a setting of audio datasets, but dataset glyphs is image data"),
    ({"cache": "off"}, {"dataset": "speakers"},
     "cache is a setting of image datasets, but dataset speakers is audio data"),
    ({"image_size": 32}, {"dataset": "speakers", "backbone": "smallcnn"},
     "image_size is a setting of image datasets, but dataset speakers is audio data"),
])
def test_a_setting_of_the_other_input_kind_is_refused(given: dict, config: dict,
                                                      needle: str) -> None:
    with pytest.raises(UserError, match=needle) as caught:
        refuse_other_kind(given, {**config, **given}, where="--set")
    assert "remove" in str(caught.value) and "\n" not in str(caught.value)


def test_a_pair_of_kinds_that_disagree_is_left_to_the_driver_s_own_error() -> None:
    """An image dataset with an audio backbone: the pair is refused (``backbone tdnn_small
    takes audio input, but dataset cub200 is image``), not a setting of either kind."""
    refuse_other_kind({"image_size": 32, "max_frames": 200},
                      {"dataset": "cub200", "backbone": "tdnn_small"}, where="--set")


def test_an_old_export_s_other_kind_settings_at_their_defaults_pass() -> None:
    """Exports once held every setting: those at their defaults pass (and are left out)."""
    old = TrialConfig().to_flat()
    refuse_other_kind(old, old, where="best_config.yaml", defaults_pass=True)
    with pytest.raises(UserError, match="max_frames is a setting of audio datasets"):
        refuse_other_kind({**old, "max_frames": 200}, old, where="x", defaults_pass=True)
    kept = of_kind(old)
    assert not set(AUDIO) & set(kept) and set(IMAGE) <= set(kept)
    audio = of_kind({**old, "dataset": "speakers", "backbone": "tdnn_small"})
    assert not set(IMAGE) & set(audio) and set(AUDIO) <= set(audio)


def test_the_fixed_words_are_the_declared_choices() -> None:
    assert setting_choices("protocol") == ("fixed", "kfold")
    assert setting_choices("cache") == ("auto", "shm", "off")
    assert setting_choices("lr") == ()


def test_settings_lists_each_kinds_settings_under_its_heading(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    audio, image = out.index("audio datasets only"), out.index("image datasets only")
    for name in AUDIO:
        assert out.index(f"\n{name} ") > audio
    for name in IMAGE:
        assert image < out.index(f"\n{name} ") < audio
    assert out.index("\nepochs ") < image


def test_the_kinds_a_setting_may_belong_to_are_the_registry_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Derived from the input-kind registry, not repeated: a kind registered later is one too."""
    from dmlsearch.trainables import input_kinds
    from dmlsearch.trainables import settings
    from dmlsearch.trainables.input_kinds import INPUT_KINDS

    assert settings.KINDS == KINDS == ("common", *INPUT_KINDS.names())
    assert {"image", "audio"} <= set(KINDS)
    registry = INPUT_KINDS.copy()
    registry.add("vectors", input_kinds.input_kind("image"))
    monkeypatch.setattr(settings, "INPUT_KINDS", registry)
    assert "vectors" in settings.kinds() and "vectors" in settings.KINDS
    assert settings.setting(0, "a vectors setting", kind="vectors") is not None
