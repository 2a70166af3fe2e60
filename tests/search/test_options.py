"""Search options: samplers, schedulers, multi-objective and time budget are checked before
anything runs, and each name builds the Optuna sampler / Ray scheduler it promises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from dmlsearch.search import ray_backend
from dmlsearch.search.options import SAMPLERS
from dmlsearch.search.options import SCHEDULERS
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import parse_duration
from dmlsearch.trainables.errors import UserError


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800),
                                               ("2h", 7200), ("1.5d", 129600), (" 2H ", 7200)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "two hours", "-5m", "0"])
def test_bad_durations_are_user_errors(text: str) -> None:
    with pytest.raises(UserError, match="--time-budget"):
        parse_duration(text)


@pytest.mark.parametrize(("changes", "message"), [
    ({"sampler": "bayes"}, "--sampler must be one of tpe, random, grid, cmaes, gp, nsga2"),
    ({"scheduler": "pbt"}, "--scheduler must be one of asha, hyperband, median, none"),
    ({"pareto": "latency"}, "--pareto must be one of embedding_size, parameters"),
    ({"pareto": "embedding_size", "sampler": "cmaes"}, "optimises one objective"),
    ({"sampler": "nsga2"}, "add --pareto"),
    ({"trials": 0}, "--trials must be >= 1"),
    ({"time_budget_s": -1.0}, "--time-budget must be > 0"),
])
def test_impossible_options_are_one_line_user_errors(changes: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as caught:
        dataclasses.replace(SearchOptions(), **changes).check()
    assert "\n" not in str(caught.value)


def _settings(**kw: object) -> ray_backend.TuneSettings:
    base = dict(name="t", storage_path=Path("."), num_samples=1, concurrency=1,
                max_iterations=8, grace_period=1, reduction_factor=2, cpus_per_trial=1,
                gpus_per_trial=0, seed=0, optuna_storage="sqlite://", study_name="s")
    return ray_backend.TuneSettings(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "kind"), [
    ("tpe", optuna.samplers.TPESampler), ("random", optuna.samplers.RandomSampler),
    ("grid", optuna.samplers.RandomSampler), ("cmaes", optuna.samplers.CmaEsSampler),
    ("gp", optuna.samplers.GPSampler), ("nsga2", optuna.samplers.NSGAIISampler),
])
def test_every_sampler_name_builds_its_optuna_sampler(name: str, kind: type) -> None:
    assert set(SAMPLERS) >= {name}
    assert isinstance(ray_backend.make_sampler(_settings(sampler=name)), kind)


@pytest.mark.parametrize(("name", "kind"), [
    ("asha", "AsyncHyperBandScheduler"), ("hyperband", "HyperBandScheduler"),
    ("median", "MedianStoppingRule"), ("none", "FIFOScheduler"),
])
def test_every_scheduler_name_builds_its_ray_scheduler(name: str, kind: str) -> None:
    assert set(SCHEDULERS) >= {name}
    assert type(ray_backend.make_scheduler(_settings(scheduler=name))).__name__ == kind


def test_prepare_checks_each_choice_within_its_branch_and_reads_categorical_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dmlsearch.search.driver import prepare

    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    space = tmp_path / "s.yaml"
    space.write_text(
        "name: s\nsource: test\nbase: {dataset: glyphs}\nparams:\n"
        "  - loss: {type: categorical, choices: [multi_similarity, thesis_proxy]}\n"
        # only thesis_proxy has a variant: checked with loss=thesis_proxy, not the first loss
        "  - loss.variant: {type: categorical, choices: [1, 2], when: {loss: thesis_proxy}}\n"
        "  - epochs: {type: categorical, choices: [2, 5]}\n")
    prepared = prepare(SearchOptions(space=str(space), sampler="grid"))
    assert prepared.max_iterations == 5  # ASHA's horizon is the longest choice
    assert prepared.trials == len(prepared.points) == 2 * 2 + 2
    capped = prepare(SearchOptions(space=str(space), sampler="grid", trials=3))
    assert capped.trials == 3
