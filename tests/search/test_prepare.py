"""``prepare``: every check of the user's input, before anything is written; what it returns
(the budget of a grid study, the horizon of the scheduler, the points evaluated first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import prepare
from dmlsearch.trainables.errors import UserError


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


def _space(tmp_path: Path, params: str, base: str = "{dataset: glyphs}") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nsource: test\nbase: {base}\nparams:\n{params}")
    return path


def test_prepare_checks_each_choice_within_its_branch_and_reads_categorical_epochs(
        tmp_path: Path) -> None:
    space = _space(tmp_path,
                   "  - loss: {type: categorical, choices: [multi_similarity, thesis_proxy]}\n"
                   # only thesis_proxy has a variant: checked with loss=thesis_proxy
                   "  - loss.variant: {type: categorical, choices: [1, 2], "
                   "when: {loss: thesis_proxy}}\n"
                   "  - epochs: {type: categorical, choices: [2, 5]}\n")
    prepared = prepare(SearchOptions(space=str(space), sampler="grid"))
    assert prepared.max_iterations == 5  # the scheduler's horizon is the longest choice
    assert prepared.trials == len(prepared.points) == 2 * 2 + 2
    assert prepared.searched == ("loss", "loss.variant", "epochs")
    capped = prepare(SearchOptions(space=str(space), sampler="grid", trials=3))
    assert capped.trials == 3


def test_kfold_and_repeats_multiply_the_horizon(tmp_path: Path) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n",
                   base="{dataset: glyphs, epochs: 3, protocol: kfold, folds: 2, repeats: 2}")
    prepared = prepare(SearchOptions(space=str(space)))
    assert prepared.max_iterations == 3 * 2 * 2 and prepared.mode == "max"


def test_relative_paths_become_absolute_and_workers_follow_the_cpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    monkeypatch.chdir(tmp_path)
    prepared = prepare(SearchOptions(space=str(space), cpus_per_trial=3,
                                     sets=(("pretrained", "none"),)))
    assert prepared.base.workers == 2  # one CPU trains, the others load data
    assert prepared.space.base["pretrained"] == "none"  # a keyword, not a path


def test_a_bad_choice_names_the_space_file_and_line(tmp_path: Path) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
                   "  backbone: {type: categorical, choices: [smallcnn, vgg99]}\n")
    with pytest.raises(UserError, match=rf"{space}:6: unknown backbone 'vgg99'"):
        prepare(SearchOptions(space=str(space)))
