"""``benchmarks/seed_noise.py``: the groups it reads, tables cut to their first seeds, a bootstrap
sample as a table, and the later seeds' paired difference by hand on a small table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.seed_noise import later_seeds
from benchmarks.seed_noise import repeated
from benchmarks.seed_noise import resampled
from benchmarks.seed_noise import same_seeds
from benchmarks.seed_noise import with_seeds_below
from dmlsearch.search.replay import fit_noise
from dmlsearch.search.replay import load_table

EPOCHS = 3


def _run(lr: float, seed: int, vals: list[float], tests: list[float]) -> dict:
    config = {"lr": lr}
    return {"kind": "run", "key": json.dumps(config, sort_keys=True), "config": config,
            "seed": seed, "status": "ok", "reason": None,
            "epochs": [{"epoch": e + 1, "val": {"map@r": v}, "test": {"map@r": t}}
                       for e, (v, t) in enumerate(zip(vals, tests))]}


def _table(tmp_path: Path, runs: list[dict]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    header = {"kind": "header", "format": 1, "space_name": "s", "base": {"epochs": EPOCHS},
              "metric": "map@r", "design": {"kind": "grid"}}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [header, *runs]) + "\n")
    return path


def _rising(top: float) -> list[float]:
    return [top - 0.2, top - 0.1, top]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return _table(tmp_path, [
        _run(0.1, 0, _rising(0.50), _rising(0.40)), _run(0.1, 1, _rising(0.54), _rising(0.42)),
        _run(0.1, 2, _rising(0.40), _rising(0.30)), _run(0.1, 3, _rising(0.44), _rising(0.36)),
        _run(0.2, 0, _rising(0.60), _rising(0.50)), _run(0.2, 1, _rising(0.62), _rising(0.50)),
        _run(0.2, 2, _rising(0.58), _rising(0.49)),
        _run(0.3, 0, _rising(0.70), _rising(0.60)),  # one seed: in no group
    ])


def test_groups_first_seeds_and_a_bootstrap_sample(small: Path) -> None:
    table = load_table(small)
    groups = repeated(table)
    assert [len(g) for g in groups.values()] == [4, 3]
    pairs = with_seeds_below(table, 2)
    assert sorted({s for _, s in pairs.curves}) == [0, 1] and len(repeated(pairs)) == 2
    # a sample holding the first configuration twice fits as two configurations alike
    twice = resampled(table, groups, [0, 0])
    assert len(repeated(twice)) == 2 and fit_noise(twice).groups == 2
    assert fit_noise(twice).sigma_val == pytest.approx(
        fit_noise(resampled(table, groups, [0])).sigma_val)


def test_later_seeds_against_the_first_two_by_hand(small: Path) -> None:
    result = later_seeds(load_table(small), resamples=200)
    assert result is not None and result["configurations"] == 2
    # lr 0.1: (0.40 + 0.44) / 2 - (0.50 + 0.54) / 2 = -0.10; lr 0.2: 0.58 - 0.61 = -0.03
    assert result["val"]["mean"] == pytest.approx((-0.10 - 0.03) / 2)
    # tests: (0.30 + 0.36) / 2 - 0.41 = -0.08; 0.49 - 0.50 = -0.01
    assert result["test"]["mean"] == pytest.approx((-0.08 - 0.01) / 2)
    assert result["val"]["low"] == pytest.approx(-0.10) and result["val"]["high"] == (
        pytest.approx(-0.03))  # two configurations: the bootstrap means lie between them
    assert later_seeds(with_seeds_below(load_table(small), 2), resamples=10) is None


def test_the_same_seeds_trained_again_by_hand(small: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    again.mkdir()
    here = {"recorded_on": {"device": "cpu", "cpu": "EPYC"}}
    path = _table(again, [
        {**_run(0.1, 0, _rising(0.46), _rising(0.40)), **here},
        {**_run(0.1, 1, _rising(0.52), _rising(0.40)), **here},
        {**_run(0.2, 0, _rising(0.61), _rising(0.52)), **here},
        _run(0.2, 1, _rising(0.62), _rising(0.50)),  # copied from the table: left out
        {**_run(0.4, 0, _rising(0.90), _rising(0.90)), **here},  # not in the table: left out
    ])
    result = same_seeds(load_table(small), load_table(path), resamples=100)
    # lr 0.1: (-0.04 + -0.02) / 2 = -0.03; lr 0.2: +0.01; paired by seed, then by configuration
    assert result is not None and result["configurations"] == 2 and result["trainings"] == 3
    assert result["val"]["mean"] == pytest.approx((-0.03 + 0.01) / 2)
    assert result["test"]["mean"] == pytest.approx((0.0 - 0.01 + 0.02) / 2)
    assert same_seeds(load_table(small), load_table(_table(tmp_path / "x", [
        _run(0.9, 0, _rising(0.5), _rising(0.5))])), resamples=10) is None
