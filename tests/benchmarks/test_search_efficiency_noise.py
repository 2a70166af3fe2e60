"""The search benchmark with training noise (``benchmarks/search_efficiency.py --noise``, issue
36): a noisy simulated search is the same twice and differs from a noiseless one; a search
chooses by the noisy scores it saw and is judged by its choice's seed-mean scores (regret,
epochs to the top-5% region, the pick's test score), computed here by hand; each table reports
one retraining's σ; a resumed run reads only searches of its own noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.hpo_measures import epochs_to_target
from benchmarks.hpo_measures import regret
from benchmarks.hpo_measures import regret_curve
from benchmarks.search_efficiency import _logged_runs
from benchmarks.search_efficiency import main
from benchmarks.search_efficiency import pick_within
from benchmarks.search_efficiency import reference
from benchmarks.search_efficiency import run_method
from benchmarks.search_efficiency import summarise_table


def test_a_noisy_simulated_search_is_the_same_twice_and_not_the_noiseless_one() -> None:
    first = run_method("omniglot-grid", "random+asha", 2, 3, 2, 200.0, "virtual", True)
    again = run_method("omniglot-grid", "random+asha", 2, 3, 2, 200.0, "virtual", True)
    assert first["noise"] and first["events"] == again["events"]
    assert first["configs"] == again["configs"]
    quiet = run_method("omniglot-grid", "random+asha", 2, 3, 2, 200.0, "virtual")
    assert not quiet["noise"] and quiet["events"] != first["events"]
    with pytest.raises(ValueError, match="virtual clock only"):
        run_method("omniglot-grid", "random+asha", 2, 3, 2, 200.0, "ray", True)


def test_the_ray_clock_refuses_noise() -> None:
    with pytest.raises(SystemExit):
        main(["--clock", "ray", "--noise", "--tables", "omniglot-grid", "--seeds", "1"])


def test_a_grid_points_seed_mean_is_its_recorded_seeds_mean() -> None:
    plain, mean = reference("omniglot-grid"), reference("omniglot-grid", True)
    table = plain.table
    key = next(k for k, s in table.curves if s == 1)
    a, b = table.curves[(key, 0)], table.curves[(key, 1)]
    point = {k: v for k, v in a.config.items() if k in plain.searched}

    def final(curve) -> tuple[float, float]:
        best = max(r["val"]["map@r"] for r in curve.epochs)
        return best, curve.test_at(len(curve.epochs), "map@r", "max")["map@r"]

    assert plain.final(point) == final(a)  # noiseless: seed 0, as before
    assert mean.final(point) == pytest.approx(
        ((final(a)[0] + final(b)[0]) / 2, (final(a)[1] + final(b)[1]) / 2))
    assert mean.summary()["sigma_val"] == pytest.approx(0.0220, abs=5e-5)


def test_a_noisy_search_is_judged_by_its_choices_seed_means() -> None:
    ref = reference("omniglot-grid", True)
    epochs = ref.epochs
    # two grid points: the better one by their seed means, and the worse one
    configs = sorted(({k: v for k, v in c.items() if k in ref.searched}
                      for c in ref.table.configs()), key=lambda c: ref.final(c)[0])
    worse, better = configs[len(configs) // 2], configs[-1]
    # the worse one trains first and draws a lucky seed: the search saw it score best
    events = ([(None, 0)] * (epochs - 1) + [(0.99, 1)]
              + [(None, 0)] * (epochs - 1) + [(ref.final(better)[0], 1)])
    run = {"table": "omniglot-grid", "method": "random", "seed": 0, "noise": True,
           "events": events, "configs": [worse, better], "trials": 2, "completed": 2,
           "seconds": 0.0}
    # the incumbent is the worse point (the search's choice), at its seed-mean score
    assert regret_curve(events, [epochs, 2 * epochs], best=ref.best, worst=ref.worst,
                        judged=[ref.final(worse)[0], ref.final(better)[0]]) == [
        regret(ref.final(worse)[0], ref.best, ref.worst)] * 2
    assert pick_within(run, math.inf, ref) == (ref.final(worse)[1], worse)
    assert epochs_to_target(events, 0.5, judged=[0.4, 0.6]) == math.inf  # the choice: 0.4
    assert epochs_to_target(events, 0.5) == epochs  # by the seen scores: at once
    runs = [run, {**run, "seed": 1}]
    body = summarise_table(runs, ref, budget=2)
    method = body["methods"]["random"]
    expected = regret(ref.final(worse)[0], ref.best, ref.worst)
    assert method["regret_at"]["1.0"]["mean"] == pytest.approx(expected)
    assert method["regret_in_sigma_at"]["1.0"]["mean"] == pytest.approx(
        expected * (ref.best - ref.worst) / ref.noise.sigma_val)
    assert method["test_of_pick"] == [ref.final(worse)[1]] * 2
    assert body["sigma_val"] == ref.noise.sigma_val and body["noise"]
    # a noiseless run of the same events is judged by what it saw, as before
    quiet = summarise_table([{**r, "noise": False} for r in runs], ref, budget=2)
    assert quiet["methods"]["random"]["regret_at"]["1.0"]["mean"] == 0.0


def test_a_resumed_run_reads_only_searches_of_its_own_noise(tmp_path: Path) -> None:
    log = tmp_path / "x.runs.jsonl"
    lines = [{"budget": 3, "concurrency": 2, "clock": "virtual", "events": []},
             {"budget": 3, "concurrency": 2, "clock": "virtual", "noise": True, "events": []}]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [r.get("noise") for r in _logged_runs(log, 3, [2], "virtual")] == [None]
    assert [r.get("noise") for r in _logged_runs(log, 3, [2], "virtual", True)] == [True]


def test_many_configurations_are_judged_as_each_alone() -> None:
    """``Reference.finals`` (one surrogate call for a run's trials) gives ``final``'s numbers,
    on a sampled table and on a grid."""
    for table in ("omniglot-ms", "omniglot-grid"):
        ref = reference(table, True)
        configs = [{k: v for k, v in c.items() if k in ref.searched}
                   for c in ref.table.configs()[:25]]
        assert ref.finals(configs) == [ref.final(c) for c in configs]
        assert ref.finals([]) == []
