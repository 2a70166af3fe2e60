"""The intensification benchmark (``benchmarks/search_intensify.py``): the intensified pick is
the best two-fit mean among the shorter search's best completed trials, each second fit is the
replay's own draw (the same twice, not the first fit's), and both picks are judged by their
seed-mean scores."""

from __future__ import annotations

import pytest

from benchmarks.hpo_measures import regret
from benchmarks.search_intensify import picks
from benchmarks.search_intensify import second_fit
from benchmarks.search_efficiency import DEFAULT_METHOD
from benchmarks.search_efficiency import reference
from benchmarks.search_efficiency import run_method


def test_the_intensified_pick_is_the_best_mean_of_the_shorter_searchs_best_two() -> None:
    row = picks("omniglot-grid", 1, budget=5, concurrency=2, intensify=2)
    short = run_method("omniglot-grid", DEFAULT_METHOD, 1, 3, 2, 1.0, clock="virtual",
                       noise=True, trials=True)
    done = sorted((t for t in short["trial_records"] if t["state"] == "completed"),
                  key=lambda t: -t["score"])[:2]
    seconds = [second_fit("omniglot-grid", t, 1) for t in done]
    assert seconds == [second_fit("omniglot-grid", t, 1) for t in done]  # deterministic
    means = [(t["score"] + s) / 2 for t, s in zip(done, seconds)]
    assert sorted(f["mean"] for f in row["intensified"]["fits"]) == pytest.approx(sorted(means))
    chosen = done[max(range(len(done)), key=lambda i: means[i])]
    ref = reference("omniglot-grid", noise=True)
    val, test = ref.final(chosen["config"])  # judged by its seed-mean scores
    assert row["intensified"]["val"] == pytest.approx(val)
    assert row["intensified"]["test"] == pytest.approx(test)
    assert row["intensified"]["regret"] == pytest.approx(regret(val, ref.best, ref.worst, "max"))
