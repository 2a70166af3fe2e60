"""A configuration already trained to its end is not trained again: the searcher answers the
sampler's repeat from the earlier result (a trial is deterministic given its configuration and
seed), and a space trained out ends the search instead of training repeats."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import optuna
import pytest

from dmlsearch.search._ray_parts import MAX_REPEATS
from dmlsearch.search._ray_parts import SafeOptunaSearch
from dmlsearch.search.importance import analyse_study
from dmlsearch.search.study_attrs import FULL_LENGTH
from dmlsearch.search.study_attrs import RAY_TRIAL_ID
from dmlsearch.search.study_attrs import REPEAT_OF
from tests.search._cli import run_cli

SCORES = {1e-3: 0.40, 3e-3: 0.55}


def _space(trial: optuna.Trial) -> dict[str, Any]:
    trial.suggest_categorical("lr", [1e-3, 3e-3])
    return {"epochs": 2}  # a fixed setting rides along, as in a real space


def _searcher(tmp_path: Path, sampler: optuna.samplers.BaseSampler) -> SafeOptunaSearch:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    return SafeOptunaSearch(space=_space, metric="score", mode="max", sampler=sampler,
                            study_name="repeats", storage=storage)


def _finish(searcher: SafeOptunaSearch, trial_id: str, config: dict[str, Any], *,
            full: bool) -> None:
    score = SCORES[config["lr"]] - (0 if full else 0.1)
    searcher.on_trial_complete(trial_id, {"score": score, "trial_finished": int(full)})


def test_repeats_are_answered_and_a_trained_out_space_finishes(tmp_path: Path) -> None:
    searcher = _searcher(tmp_path, optuna.samplers.RandomSampler(seed=0))
    trained: list[float] = []
    for n in range(5):
        config = searcher.suggest(f"t{n}")
        if config == SafeOptunaSearch.FINISHED:
            break
        assert config["epochs"] == 2
        assert config["lr"] not in trained, "a configuration trained to its end came back"
        trained.append(config["lr"])
        _finish(searcher, f"t{n}", config, full=True)
    assert sorted(trained) == [1e-3, 3e-3]
    assert config == SafeOptunaSearch.FINISHED  # both points trained: nothing new to offer

    trials = searcher._ot_study.get_trials(deepcopy=False)
    real = [t for t in trials if REPEAT_OF not in t.user_attrs]
    repeats = [t for t in trials if REPEAT_OF in t.user_attrs]
    assert len(real) == 2 and all(t.user_attrs[FULL_LENGTH] for t in real)
    assert {t.user_attrs[RAY_TRIAL_ID] for t in real} == {"t0", "t1"}
    assert len(repeats) >= MAX_REPEATS
    by_number = {t.number: t for t in real}
    for t in repeats:  # answered with the earlier trial's own value, never trained
        earlier = by_number[t.user_attrs[REPEAT_OF]]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.params == earlier.params and t.values == earlier.values
        assert RAY_TRIAL_ID not in t.user_attrs
    # fANOVA sees each trained point once, not once per repeat.
    assert analyse_study(searcher._ot_study, min_trials=2).trials == 2


def test_a_trial_stopped_early_is_no_answer(tmp_path: Path) -> None:
    """ASHA stops a trial on a partial result: its configuration may run again in full."""
    searcher = _searcher(tmp_path, optuna.samplers.RandomSampler(seed=0))
    first = searcher.suggest("t0")
    _finish(searcher, "t0", first, full=False)
    runs = [first["lr"]]
    for n in range(1, 12):
        config = searcher.suggest(f"t{n}")
        runs.append(config["lr"])
        _finish(searcher, f"t{n}", config, full=False)
    assert runs.count(first["lr"]) > 1  # stopped early each time, so proposed and run again
    assert not any(REPEAT_OF in t.user_attrs for t in searcher._ot_study.trials)


def test_a_running_or_failed_trial_is_no_answer(tmp_path: Path) -> None:
    searcher = _searcher(tmp_path, optuna.samplers.RandomSampler(seed=0))
    running = searcher.suggest("t0")
    failed = searcher.suggest("t1")
    searcher.on_trial_complete("t1", None, error=True)
    searcher._fail("t1", "out of memory")
    again = [searcher.suggest(f"t{n}")["lr"] for n in range(2, 8)]
    assert running["lr"] in again and failed["lr"] in again
    assert not any(REPEAT_OF in t.user_attrs for t in searcher._ot_study.trials)


SPACE = """\
name: two_points
source: a test grid (no published source)
base: {dataset: glyphs, backbone: smallcnn, epochs: 1, batch_size: 32, m_per_class: 4,
       embedding_size: 16, metric: map@r, threads: 1}
params:
  lr: {type: categorical, choices: [1.0e-3, 3.0e-3]}
"""


@pytest.mark.slow
def test_a_search_trains_each_configuration_once(tmp_path: Path) -> None:
    """``--trials 4`` over a 2-point space: 2 trials train, the repeats are answered from
    them, the search ends when the space is trained out, and the summary says so."""
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    out = tmp_path / "results"
    proc = run_cli("run", "--space", str(tmp_path / "space.yaml"), "--sampler", "tpe",
                   "--scheduler", "none", "--trials", "4", "--concurrency", "1",
                   "--out", str(out), "--no-retrain", cache=tmp_path / "cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(t["config"]["lr"] for t in summary["trials"]) == [1e-3, 3e-3]
    assert {t["state"] for t in summary["trials"]} == {"completed"}
    assert summary["repeats_answered"] >= MAX_REPEATS
    assert "repeated a trained configuration and were answered from its result" in proc.stdout
    assert len(list((out / "ray" / "tune").glob("trial_*"))) == 2
