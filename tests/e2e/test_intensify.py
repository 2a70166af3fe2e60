"""--intensify on a real search (Ray Tune, Optuna, MLflow, the built-in glyphs): two trainings'
worth of the budget are kept, the best two configurations train again with a second seed in the
driver, the pick is the best mean, and the summary, summary.json and the export follow it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.reporting import render_summary
from dmlsearch.search.run import run_search

pytestmark = pytest.mark.slow


def test_the_best_two_get_a_second_seed_and_the_pick_follows_their_mean(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(shared_cache))
    out = tmp_path / "intensified"
    opts = SearchOptions(space="quickstart", out=out, trials=5, intensify=2, scheduler="none",
                         concurrency=2, seed=1, register=False,
                         sets=(("epochs", 1), ("embedding_size", 16), ("batch_size", 32)))
    said: list[str] = []
    summary = run_search(opts, echo=said.append)
    assert ("3 trials, then second seeds of the best 2 (--intensify 2: 2 of --trials 5)"
            in "\n".join(said))
    # 5 trainings' worth, 2 kept: 3 trials of 1 epoch (no early stopping)
    assert len(summary.trials) == 3 and summary.budget.epochs == 3
    fits = summary.intensified
    assert len(fits) == 2
    by_id = {t.trial_id: t for t in summary.trials}
    for fit in fits:
        trial = by_id[fit["trial_id"]]
        assert fit["seeds"] == [1, 2] and fit["scores"][0] == trial.score
        assert math.isfinite(fit["scores"][1]) and fit["reason"] is None
    assert fits[0]["mean"] >= fits[1]["mean"]
    assert summary.best_trial == fits[0]["trial_id"]  # the pick follows the means
    assert summary.retrains[0].trial_id == fits[0]["trial_id"]
    text = render_summary(summary, results=str(out), browse="mlflow ui")
    assert "Second seeds (--intensify 2), best mean first:" in text
    assert f"{by_id[fits[0]['trial_id']].name}: " in text
