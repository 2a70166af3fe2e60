"""The searcher's records, driven as Ray Tune drives it, over a real SQLite ``optuna.db``: one
record per trained trial with every epoch's score, PRUNED for a stopped trial, FAIL with its
reason, repeats that train nothing and teach the sampler nothing, the soft budgets, and a
restore that keeps the record as the truth. (A whole search through Ray: tests/e2e.)"""

from __future__ import annotations

import json
import pickle
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from dmlsearch.search.tune.searcher import MAX_REPEATS
from dmlsearch.search.tune.searcher import StudySearcher
from dmlsearch.search.tune.searcher import end_failed_trial
from dmlsearch.search.tune.study import RAY_TRIAL_ID
from dmlsearch.search.tune.study import REASON
from dmlsearch.search.tune.study import REPEATS_ANSWERED
from dmlsearch.search.tune.study import STOPPED_BY
from tests.helpers import run_cli

SCORES = {1e-3: 0.40, 3e-3: 0.55}


def _space(trial: optuna.Trial) -> dict[str, Any]:
    trial.suggest_categorical("lr", [1e-3, 3e-3])
    if trial.suggest_categorical("loss", ["a", "b"]) == "b":
        trial.suggest_float("loss.margin[b]", 0.1, 0.2)
    return {"epochs": 3, **trial.params}  # a fixed setting rides along, as in a real space


def _searcher(tmp_path: Path, sampler: optuna.samplers.BaseSampler | None = None,
              **kw: Any) -> StudySearcher:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return StudySearcher(space=_space, objectives=["score"], directions=["max"],
                         sampler=sampler or optuna.samplers.RandomSampler(seed=0),
                         storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s",
                         stopped_by="asha", **kw)


def _train(searcher: StudySearcher, trial_id: str, config: dict[str, Any], epochs: int,
           *, finished: bool) -> None:
    """Ray's calls for a trial: a result per epoch, the last one to on_trial_complete."""
    for epoch in range(1, epochs + 1):
        result = {"score": SCORES[config["lr"]] * epoch / 3, "training_iteration": epoch,
                  "trial_finished": int(finished and epoch == epochs)}
        if epoch < epochs:
            searcher.on_trial_result(trial_id, result)
        else:
            searcher.on_trial_complete(trial_id, result)


def _record(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def test_every_epoch_reaches_the_record_and_the_endings_are_told_apart(tmp_path: Path) -> None:
    searcher = _searcher(tmp_path)
    configs = {f"t{i}": searcher.suggest(f"t{i}") for i in range(3)}
    # setting keys, not Optuna's names (``loss.margin[b]``)
    assert all(set(c) <= {"epochs", "lr", "loss", "loss.margin"} for c in configs.values())
    _train(searcher, "t0", configs["t0"], 3, finished=True)
    _train(searcher, "t1", configs["t1"], 1, finished=False)  # the scheduler stops it
    searcher.on_trial_complete("t2", None, error=True)
    end_failed_trial("t2", "TrialFailed: loss became nan")
    trials = {t.user_attrs[RAY_TRIAL_ID]: t for t in _record(tmp_path).trials}
    assert len(trials) == 3
    done, pruned, failed = trials["t0"], trials["t1"], trials["t2"]
    assert done.state == TrialState.COMPLETE and sorted(done.intermediate_values) == [1, 2, 3]
    assert done.value == pytest.approx(SCORES[configs["t0"]["lr"]])
    assert pruned.state == TrialState.PRUNED and list(pruned.intermediate_values) == [1]
    assert pruned.value == pytest.approx(pruned.intermediate_values[1])  # its last score
    assert pruned.user_attrs[STOPPED_BY] == "asha"
    assert failed.state == TrialState.FAIL and "loss became nan" in failed.user_attrs[REASON]
    assert done.params == searcher._proposals.trials[0].params  # the same point in both


def test_repeats_train_nothing_and_teach_nothing(tmp_path: Path) -> None:
    searcher = _searcher(tmp_path)
    trained: list[dict[str, Any]] = []
    for n in range(40):
        config = searcher.suggest(f"t{n}")
        if config == StudySearcher.FINISHED:
            break
        assert config not in trained or "loss.margin" in config  # continuous margins differ
        trained.append(config)
        _train(searcher, f"t{n}", config, 3, finished=True)
    record = _record(tmp_path)
    assert len(record.trials) == len(trained)  # exactly one record per trained trial
    assert {t.state for t in record.trials} == {TrialState.COMPLETE}
    repeats = record.user_attrs.get(REPEATS_ANSWERED, 0)
    assert repeats > 0
    proposals = searcher._proposals.trials
    answered = [t for t in proposals if t.state == TrialState.FAIL]
    assert len(answered) == repeats  # in the proposal study only, where no sampler learns
    learned = searcher._proposals.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(learned) == len(trained)


def test_a_trained_out_space_ends_the_search(tmp_path: Path) -> None:
    def two_points(trial: optuna.Trial) -> dict[str, Any]:
        trial.suggest_categorical("lr", [1e-3, 3e-3])
        return {"epochs": 3, **trial.params}

    searcher = StudySearcher(space=two_points, objectives=["score"], directions=["max"],
                             sampler=optuna.samplers.RandomSampler(seed=0),
                             storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    for n in range(2):
        config = searcher.suggest(f"t{n}")
        _train(searcher, f"t{n}", {"lr": config["lr"]}, 3, finished=True)
    assert searcher.suggest("t2") == StudySearcher.FINISHED
    record = _record(tmp_path)
    assert len(record.trials) == 2 and record.user_attrs[REPEATS_ANSWERED] == MAX_REPEATS


def test_a_pruned_or_running_configuration_is_no_answer(tmp_path: Path) -> None:
    def one_point(trial: optuna.Trial) -> dict[str, Any]:
        trial.suggest_categorical("lr", [1e-3])
        return dict(trial.params)

    searcher = StudySearcher(space=one_point, objectives=["score"], directions=["max"],
                             sampler=optuna.samplers.RandomSampler(seed=0),
                             storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    running = searcher.suggest("t0")
    again = searcher.suggest("t1")  # t0 still runs: its configuration is proposed again
    assert running == again == {"lr": 1e-3}
    _train(searcher, "t0", running, 1, finished=False)
    _train(searcher, "t1", again, 1, finished=False)
    assert searcher.suggest("t2") == {"lr": 1e-3}  # pruned twice: trained again
    assert _record(tmp_path).user_attrs.get(REPEATS_ANSWERED, 0) == 0


def test_the_soft_budgets_start_no_trial_but_let_running_ones_finish(tmp_path: Path) -> None:
    timed = _searcher(tmp_path / "time", deadline=time.time() + 3600)
    first = timed.suggest("t0")
    timed._deadline = time.time() - 1  # the --time-budget runs out while t0 trains
    assert timed.suggest("t1") == StudySearcher.FINISHED
    _train(timed, "t0", first, 3, finished=True)  # the running trial still finishes
    assert _record(tmp_path / "time").trials[0].state == TrialState.COMPLETE
    epochs = _searcher(tmp_path / "epochs", max_epochs=4)
    config = epochs.suggest("t0")
    _train(epochs, "t0", config, 3, finished=True)
    assert isinstance(epochs.suggest("t1"), dict)  # 3 of 4 epochs spent
    _train(epochs, "t1", config, 1, finished=False)
    assert epochs.suggest("t2") == StudySearcher.FINISHED


def test_a_restored_searcher_learns_what_the_record_finished_meanwhile(
        tmp_path: Path) -> None:
    searcher = _searcher(tmp_path)
    config = searcher.suggest("t0")
    saved = tmp_path / "searcher.pkl"
    searcher.save(str(saved))
    _train(searcher, "t0", config, 3, finished=True)  # recorded after the state was saved
    restored = _searcher(tmp_path / "other")
    restored.restore(str(saved))
    assert restored._stored.study_name == "s"  # reopened from its URL, not unpickled
    assert restored._proposals.trials[0].state == TrialState.COMPLETE
    assert "t0" not in restored._live
    pickle.dumps(restored)  # Ray pickles it again at the next checkpoint


WARM = [{"lr": 1e-3, "loss": "a"}, {"lr": 3e-3, "loss": "a"}]


def _started(experiment: Path, trial_id: str, config: dict[str, Any]) -> None:
    """What Ray leaves when it starts a trial: its folder with its ``params.json``."""
    folder = experiment / f"trial_{trial_id}"
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps(config))


def test_a_warm_start_pruned_after_the_save_is_not_proposed_again(tmp_path: Path) -> None:
    """Ray saved the searcher with the first warm start running; the second was proposed and
    pruned before the driver stopped. Restored, the searcher knows it ran: the queue moves
    on, and the proposal study holds it as the stored study does."""
    experiment = tmp_path / "ray"
    searcher = _searcher(tmp_path, points=WARM, experiment=experiment)
    first = searcher.suggest("t0")
    saved = tmp_path / "searcher.pkl"
    searcher.save(str(saved))
    second = searcher.suggest("t1")  # after the save: Ray's saved state never held it
    assert second["lr"] == 3e-3
    _started(experiment, "t1", second)
    _train(searcher, "t1", second, 1, finished=False)  # pruned at its first epoch
    restored = _searcher(tmp_path / "other")
    restored.restore(str(saved))
    proposals = {t.params["lr"]: t.state for t in restored._proposals.trials if t.params}
    assert proposals[3e-3] == TrialState.PRUNED
    assert not restored._proposals.get_trials(states=(TrialState.WAITING,))
    _train(restored, "t0", first, 3, finished=True)
    assert isinstance(restored.suggest("t2"), dict)
    assert "fixed_params" not in restored._proposals.trials[-1].system_attrs  # the sampler's
    assert [t.user_attrs[RAY_TRIAL_ID] for t in _record(tmp_path).trials] == ["t0", "t1", "t2"]


def test_a_proposal_ray_never_started_is_proposed_again_as_the_same_trial(
        tmp_path: Path) -> None:
    """Asked for after Ray's last save and never started (no trial folder): restored, the
    searcher hands the same configuration to the next Ray trial, as the same stored trial
    (no FAIL, no second configuration), and records what it trains there."""
    experiment = tmp_path / "ray"
    searcher = _searcher(tmp_path, experiment=experiment)
    saved = tmp_path / "searcher.pkl"
    searcher.save(str(saved))
    lost = searcher.suggest("t0")  # the kill came before Ray ran it
    restored = _searcher(tmp_path / "other")
    restored.restore(str(saved))
    again = restored.suggest("t5")
    assert again == lost
    _train(restored, "t5", again, 3, finished=True)
    [trial] = _record(tmp_path).trials
    assert trial.state == TrialState.COMPLETE and trial.user_attrs[RAY_TRIAL_ID] == "t5"
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    assert [t.state for t in restored._proposals.trials] == [TrialState.COMPLETE]


def test_a_trial_ray_started_after_the_save_stays_its_own(tmp_path: Path) -> None:
    """Started by Ray after its last save (its folder exists): restored, Ray runs it again
    under its own id (:mod:`dmlsearch.search.tune.restore`), so the searcher records its
    results there and proposes something else for the next trial; its epochs count."""
    experiment = tmp_path / "ray"
    searcher = _searcher(tmp_path, experiment=experiment, max_epochs=3)
    saved = tmp_path / "searcher.pkl"
    searcher.save(str(saved))
    config = searcher.suggest("t0")
    _started(experiment, "t0", config)
    (experiment / "trial_t0" / "result.json").write_text(
        json.dumps({"training_iteration": 1, "score": 0.1}) + "\n")
    restored = _searcher(tmp_path / "other")
    restored.restore(str(saved))
    assert restored.usage.epochs == 1  # the epoch it trained before the driver stopped
    assert isinstance(restored.suggest("t1"), dict)
    _train(restored, "t0", config, 3, finished=True)
    trials = _record(tmp_path).trials
    assert [t.user_attrs[RAY_TRIAL_ID] for t in trials] == ["t0", "t1"]
    assert trials[0].state == TrialState.COMPLETE


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
    """``--trials 4`` over a 2-point space: 2 trials train, the repeats train nothing, the
    search ends when the space is trained out, and the summary says so."""
    import json

    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    out = tmp_path / "results"
    proc = run_cli("run", "--space", str(tmp_path / "space.yaml"), "--sampler", "tpe",
                   "--scheduler", "none", "--trials", "4", "--concurrency", "1",
                   "--out", str(out), "--no-retrain", cache=tmp_path / "cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(t["config"]["lr"] for t in summary["trials"]) == [1e-3, 3e-3]
    assert {t["state"] for t in summary["trials"]} == {"completed"}
    assert summary["repeats_answered"] == MAX_REPEATS
    assert "repeated a trained configuration" in proc.stdout
    assert len(list((out / "ray" / "tune").glob("trial_*"))) == 2
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == 2  # optuna.db: exactly one trial per Ray trial
