"""Search options: names, multi-objective combinations, durations and the time budget are
checked before anything runs; the options round-trip through search.yaml for ``resume``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import parse_duration
from dmlsearch.search.options import parse_sets
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
    ({"sampler": "bayes"}, "unknown sampler 'bayes' for --sampler; expected one of: cmaes, gp, "
                           "grid, nsga2, random, tpe"),
    ({"scheduler": "pbt"}, "unknown scheduler 'pbt' for --scheduler; expected one of: asha, "
                           "hyperband, median, none"),
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


def test_sets_are_typed_yaml_scalars() -> None:
    assert parse_sets(["epochs=3", "loss=proxy_anchor", "lr=1e-3", "freeze_bn=true"]) == (
        ("epochs", 3), ("loss", "proxy_anchor"), ("lr", 1e-3), ("freeze_bn", True))
    for bad in ("epochs", "=3", "a=[1, 2]"):
        with pytest.raises(UserError, match="--set"):
            parse_sets([bad])


def test_options_round_trip_through_search_yaml(tmp_path: Path) -> None:
    opts = SearchOptions(space="quickstart", trials=7, sets=(("epochs", 3),), seed=5,
                         time_budget_s=90.0, out=tmp_path)
    body = opts.to_json()
    assert body["sets"] == {"epochs": 3} and body["out"] == str(tmp_path)
    assert SearchOptions.from_json({**body, "unknown": 1}, out=tmp_path) == opts
