"""``spaces.preview``: every shipped space, previewed, keeps its search (same keys, same choices
except those a rule resized, listed), runs on the built-in data on a CPU and passes every check of
``prepare`` (each categorical choice's configuration, parts and data); the user's own settings
are kept; ``Space.with_converted_values`` rewrites a key's values without changing the branches.
No training here (the end-to-end preview search is in tests/e2e/test_kfold_preview.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import prepare
from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.spaces import load_space
from dmlsearch.spaces import preview
from dmlsearch.spaces import preview_text
from dmlsearch.spaces import space_names
from dmlsearch.spaces._preview import GLYPH_CLASSES
from dmlsearch.spaces._preview import GLYPH_IMAGES_PER_CLASS
from dmlsearch.spaces._preview import GLYPH_TRAIN_CLASSES
from dmlsearch.spaces._preview import PREVIEW_EPOCHS
from dmlsearch.trainables.errors import UserError


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


def space_file(space: Space) -> str:
    """``space`` (its resolved base, params and warm starts) as a space file the loader reads:
    how a test hands a previewed space to ``prepare`` and ``run_search`` by path."""
    params: list[dict[str, Any]] = []
    for p in space.params:
        spec: dict[str, Any] = {"name": p.key, "type": p.kind}
        if p.kind == "categorical":
            spec["choices"] = list(p.choices)
        else:
            spec.update(low=p.low, high=p.high)
            if p.step is not None:
                spec["step"] = p.step
            if p.log:
                spec["log"] = True
        if p.when:
            spec["when"] = {key: list(allowed) for key, allowed in p.when}
        params.append(spec)
    body = {"name": space.name, "description": space.description, "source": space.source,
            "base": space.base, "params": params,
            "warm_start": [config_from_sample(point) for point in space.warm_starts()]}
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def _domains(space: Space) -> list[tuple[str, str, tuple[Any, ...]]]:
    return [(p.key, p.kind, p.choices) for p in space.params]


def test_the_glyph_sizes_the_preview_assumes_are_the_dataset_s() -> None:
    from dmlsearch.trainables.data import standard_split
    from dmlsearch.trainables.data._glyph_fonts import GLYPH_CHARS
    from dmlsearch.trainables.data._glyphs import IMAGES_PER_CLASS

    assert GLYPH_CLASSES == len(GLYPH_CHARS) and GLYPH_IMAGES_PER_CLASS == IMAGES_PER_CLASS
    assert len(standard_split(GLYPH_CLASSES)[0]) == GLYPH_TRAIN_CLASSES


AUDIO_SPACES = ("e2e_voxceleb",)


@pytest.mark.parametrize("name", space_names())
def test_every_shipped_space_previews_on_the_built_in_data_and_passes_prepare(
        name: str, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    audio = name in AUDIO_SPACES
    if audio:  # the built-in speakers, synthesised once per session (needs espeak-ng)
        monkeypatch.setenv("DMLSEARCH_CACHE", str(request.getfixturevalue("speakers_cache")))
    source = load_space(name)
    space, changes = preview(source)
    # The search is kept: the same keys in the same order, the same branches, and the same
    # choices except where a listed change resized them.
    assert [p.key for p in space.params] == [p.key for p in source.params]
    assert [len(p.when) for p in space.params] == [len(p.when) for p in source.params]
    resized = {c.setting for c in changes}
    for before, after in zip(source.params, space.params):
        if before.optuna_name in resized:
            assert 1 <= len(after.choices) <= len(before.choices) or after.kind != "categorical"
        else:
            assert (after.kind, after.choices, after.low, after.high, after.step) == (
                before.kind, before.choices, before.low, before.high, before.step)
    assert len(space.warm_starts()) == len(source.warm_starts())
    # Every change is listed, each once, and lists what the space now holds.
    assert len(resized) == len(changes)
    for change in changes:
        if change.setting in space.base:
            assert change.new == space.base[change.setting] != change.old
        else:
            assert change.setting in {p.optuna_name for p in source.params}
            assert change.old != change.new
    text = preview_text(space, changes)
    assert all(c.setting in text for c in changes)
    # Built-in data, a CPU, a few epochs.
    config = space.default_config()
    data = "speakers" if audio else "glyphs"
    assert config["dataset"] == data and config.get("data_root") is None
    assert config.get("image_size") is None and config["device"] == "cpu"
    assert config.get("pretrained", "none") == "none" and config["workers"] == 0
    assert config.get("epochs", 8) <= PREVIEW_EPOCHS
    backbones = {config.get("backbone", "smallcnn")} | {
        c for p in space.params if p.key == "backbone" for c in p.choices}
    assert backbones <= ({"tdnn_small"} if audio else {"smallcnn", "resnet18"})
    # Every check of the search passes (each categorical choice: its config, parts and data).
    path = tmp_path / f"{name}_preview.yaml"
    path.write_text(space_file(space))
    assert _domains(load_space(path)) == _domains(space)
    prepared = prepare(SearchOptions(space=str(path)))
    assert prepared.base.dataset == data and prepared.base.device == "cpu"
    assert prepared.max_iterations <= PREVIEW_EPOCHS * 2  # at most 2 folds


@pytest.mark.parametrize("name", space_names())
def test_a_preview_of_a_preview_changes_nothing(name: str, tmp_path: Path) -> None:
    space, _ = preview(load_space(name))
    path = tmp_path / "preview.yaml"
    path.write_text(space_file(space))  # the previewed space as a file of its own
    again, changes = preview(load_space(path))
    assert changes == [] and again.base == space.base
    assert _domains(again) == _domains(space)


def test_the_voxceleb_search_previews_on_the_built_in_speakers() -> None:
    space, changes = preview(load_space("e2e_voxceleb"))
    by_setting = {c.setting: (c.old, c.new) for c in changes}
    assert by_setting["dataset"] == ("voxceleb2", "speakers")
    assert by_setting["backbone"] == ("tdnn", "tdnn_small")
    assert by_setting["warmup_steps"] == (4000, 5) and by_setting["val_ratio"] == (0.02, 0.2)
    assert by_setting["batch_size"] == (120, 60)  # 12 speakers x the source's 5 utterances
    assert by_setting["max_frames"] == ("{300, 500, 800}", "{150, 250, 400}")
    assert by_setting["embedding_size"] == ("{128, 256, 512}", "{32, 64, 128}")
    assert space.base["m_per_class"] == 5 and space.base["lr_schedule"] == "warmup_invsqrt_steps"
    (point,) = space.warm_starts()  # the source's chosen configuration, resized
    assert (point["max_frames"], point["embedding_size"], point["lr"]) == (400, 64, 0.023717)
    assert "preview: e2e_voxceleb on the built-in speakers data" in preview_text(space, changes)
    with pytest.raises(UserError, match="dataset 'voxceleb1' was asked for"):
        preview(load_space("e2e_voxceleb").with_overrides({"dataset": "voxceleb1"}))


def test_memvir_search_previews_as_k_fold_with_its_warm_up_inside_the_epochs() -> None:
    space, changes = preview(load_space("memvir_search"))
    by_setting = {c.setting: (c.old, c.new) for c in changes}
    assert by_setting["dataset"] == ("cars196", "glyphs")
    assert by_setting["folds"] == (4, 2) and space.base["protocol"] == "kfold"
    assert by_setting["epochs"] == (2000, 3)
    assert by_setting["memvir_warmup_epochs"] == ("{40, 0}", "{1, 0}")
    # The published recipes stay the warm starts, their warm-up scaled with the epochs.
    assert [p["memvir_warmup_epochs"] for p in space.warm_starts()] == [1, 1]
    assert [p["memvir_n"] for p in space.warm_starts()] == [45, 20]


def test_the_benchmark_keeps_a_backbone_per_family_and_its_branches() -> None:
    space, _ = preview(load_space("thesis_benchmark_cub200"))
    params = {p.optuna_name: p for p in space.params}
    assert params["backbone"].choices == ("smallcnn", "resnet18")
    assert params["batch_size[smallcnn]"].choices == (45,)  # 180 / 4: BN-Inception, GoogLeNet
    assert params["batch_size[resnet18]"].choices == (25,)  # 100 / 4: ResNet50
    assert params["embedding_size"].choices == (8, 16, 64, 128)  # 64 ... 1024, / 8
    assert len(space.grid_points()) == 10 * 2 * 4


def test_memvir_batch_size_merges_the_sizes_beyond_the_glyphs() -> None:
    space, changes = preview(load_space("memvir_batch_size"))
    (batch,) = [p for p in space.params if p.key == "batch_size"]
    assert batch.choices == (8, 16, 32, 64)  # 8 ... 1024, / 16, at least 8
    assert ("batch_size", "{8, 16, 32, 64, 128, 256, 512, 1024}", "{8, 16, 32, 64}") in changes


def test_the_user_s_own_settings_are_kept() -> None:
    source = load_space("memvir_search").with_overrides(
        {"epochs": 5, "batch_size": 32, "seed": 3, "dataset": "glyphs"})
    space, changes = preview(source)
    assert space.base["epochs"] == 5 and space.base["batch_size"] == 32
    assert space.base["seed"] == 3
    assert not {"epochs", "batch_size", "dataset", "seed"} & {c.setting for c in changes}
    (warmup,) = [p for p in space.params if p.key == "memvir_warmup_epochs"]
    assert warmup.choices == (4, 0)  # within the user's 5 epochs


@pytest.mark.parametrize(("override", "match"), [
    ({"dataset": "cub200"}, "dataset 'cub200' was asked for"),
    ({"data_root": "/data/cub"}, "no --data-root"),
])
def test_data_of_the_user_s_own_is_no_preview(override: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        preview(load_space("thesis_search_proxy_anchor").with_overrides(override))


def test_spaces_still_imports_no_torch_or_ray() -> None:
    code = ("import sys; from dmlsearch import spaces; "
            "s, c = spaces.preview(spaces.load_space('thesis_benchmark_sop')); "
            "spaces.preview_text(s, c); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'ray')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent)


# -- Space.with_converted_values ------------------------------------------------------------------


def _space(tmp_path: Path, text: str) -> Space:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nsource: test\n{text}")
    return load_space(path)


def test_converting_a_range_keeps_its_steps_and_a_closed_range_becomes_a_choice(
        tmp_path: Path) -> None:
    space = _space(tmp_path, "params:\n"
                             "  batch_size: {type: int, low: 32, high: 128, step: 16}\n"
                             "  epochs: {type: int, low: 10, high: 12}\n"
                             "warm_start:\n  - {batch_size: 64, epochs: 11}\n")
    halved = space.with_converted_values("batch_size", lambda v: v // 2)
    (batch, _) = halved.params
    assert (batch.low, batch.high, batch.step) == (16, 64, 8)
    assert halved.warm_starts() == [{"batch_size": 32, "epochs": 11}]
    closed = space.with_converted_values("epochs", lambda v: 1)
    assert closed.params[1].kind == "categorical" and closed.params[1].choices == (1,)


def test_converting_a_selector_renames_its_branches_and_keeps_them_apart(tmp_path: Path) -> None:
    space = _space(tmp_path, "params:\n"
                             "  - backbone: {type: categorical, choices: [a, b, c]}\n"
                             "  - lr: {type: categorical, choices: [1, 2],"
                             " when: {backbone: [a, b]}}\n"
                             "  - lr: {type: categorical, choices: [3], when: {backbone: c}}\n")
    renamed = space.with_converted_values("backbone", lambda v: "ab" if v in "ab" else "c2")
    assert [p.optuna_name for p in renamed.params] == ["backbone", "lr[ab]", "lr[c2]"]
    assert renamed.params[0].choices == ("ab", "c2")
    with pytest.raises(UserError, match="conditions that now hold together"):
        space.with_converted_values("backbone", lambda v: "one")


def test_converting_a_fixed_selector_keeps_the_branch_it_chose(tmp_path: Path) -> None:
    space = _space(tmp_path, "base: {backbone: a}\n"
                             "params:\n"
                             "  - lr: {type: categorical, choices: [1, 2], when: {backbone: a}}\n"
                             "  - lr: {type: categorical, choices: [3],"
                             " when: {backbone: small}}\n")
    assert [p.choices for p in space.params] == [(1, 2)]
    converted = space.with_converted_values("backbone", lambda v: "small")
    assert converted.base["backbone"] == "small" and converted.overrides == {"backbone": "small"}
    assert [p.choices for p in converted.params] == [(1, 2)]  # not the dead branch's (3,)
