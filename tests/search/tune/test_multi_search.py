"""A comparison's searcher and scheduler, driven as Ray Tune drives them, over real SQLite
studies: each method proposes from its own study, the least spent method first; every method
spends exactly its epoch budget (the scheduler stops its running trials when what is left is
owed to its others); results Ray repeats count once. (A comparison through Ray: tests/e2e.)"""

from __future__ import annotations

import pickle
import types
from pathlib import Path
from typing import Any

import optuna
from ray.tune.schedulers import FIFOScheduler
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.multi_search import METHOD_KEY
from dmlsearch.search.tune.multi_search import MethodRouter
from dmlsearch.search.tune.multi_search import MethodsScheduler
from dmlsearch.search.tune.multi_search import MethodsSearcher
from dmlsearch.search.tune.multi_search import without_method
from dmlsearch.search.tune.searcher import StudySearcher
from dmlsearch.search.tune.study import STOPPED_BY


def _space(trial: optuna.Trial) -> dict[str, Any]:
    return {"lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True)}


def _searcher(folder: Path, name: str, epochs: int) -> StudySearcher:
    folder.mkdir(parents=True, exist_ok=True)
    return StudySearcher(space=_space, objectives=["score"], directions=["max"],
                         sampler=optuna.samplers.RandomSampler(seed=0),
                         storage=f"sqlite:///{folder / f'{name}.db'}", study_name=name,
                         stopped_by="asha", max_epochs=epochs, hard_budget=True)


def _result(iteration: int, *, finished: bool = False, seconds: float = 1.0) -> dict[str, Any]:
    return {"score": 0.1 * iteration, "training_iteration": iteration,
            "time_total_s": seconds * iteration, "trial_finished": int(finished)}


def test_proposals_come_from_the_least_spent_method_each_in_its_own_study(
        tmp_path: Path) -> None:
    searchers = {"a": _searcher(tmp_path, "a", 6), "b": _searcher(tmp_path, "b", 6)}
    methods = MethodsSearcher(searchers, max_trials={"a": 10, "b": 10})
    first = methods.suggest("t1")
    assert first is not None and first[METHOD_KEY] == "a"
    second = methods.suggest("t2")  # a has a trial running: b is less committed
    assert second is not None and second[METHOD_KEY] == "b"
    assert without_method(second) == {"lr": second["lr"]}
    for epoch in (1, 2):
        methods.on_trial_result("t1", _result(epoch))
    methods.on_trial_complete("t1", _result(3, finished=True))
    third = methods.suggest("t3")
    assert third is not None and third[METHOD_KEY] == "b"  # a spent 3 of 6, b 0 (+1 running)
    for name in ("a", "b"):
        study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / f'{name}.db'}")
        assert len(study.trials) == (1 if name == "a" else 2)
    pickle.loads(pickle.dumps(methods))  # Ray pickles it with the experiment


def test_a_method_stops_proposing_at_its_trial_cap_and_the_search_then_finishes(
        tmp_path: Path) -> None:
    searchers = {"a": _searcher(tmp_path, "a", 100), "b": _searcher(tmp_path, "b", 100)}
    methods = MethodsSearcher(searchers, max_trials={"a": 1, "b": 1})
    assert methods.suggest("t1")[METHOD_KEY] == "a"  # type: ignore[index]
    assert methods.suggest("t2")[METHOD_KEY] == "b"  # type: ignore[index]
    assert methods.suggest("t3") == Searcher.FINISHED


def test_the_searcher_leaves_what_is_left_of_a_budget_to_the_running_trials(
        tmp_path: Path) -> None:
    """With 2 epochs left and 2 trials running, a third would overspend: none is proposed."""
    methods = MethodsSearcher({"a": _searcher(tmp_path, "a", 2)}, max_trials={"a": 10})
    assert methods.suggest("t1") is not None and methods.suggest("t2") is not None
    assert methods.suggest("t3") is None  # not finished: asked again when one ends
    methods.on_trial_complete("t1", _result(1))
    methods.on_trial_complete("t2", _result(1))
    assert methods.suggest("t3") == Searcher.FINISHED


def _trial(trial_id: str, method: str) -> Any:
    return types.SimpleNamespace(trial_id=trial_id, config={METHOD_KEY: method, "lr": 1e-3},
                                 status="PENDING", last_result={})


def test_the_scheduler_spends_each_budget_exactly_and_methods_apart() -> None:
    """Method a, 5 epochs, 3 trials at once: each reported epoch is counted; once what is left
    is owed to the others (each still training an epoch), the reporting trial is stopped."""
    scheduler = MethodsScheduler({"a": FIFOScheduler(), "b": FIFOScheduler()},
                                 limits={"a": Limit(epochs=5), "b": Limit(epochs=5)},
                                 devices_per_trial=0.0)
    trials = {t: _trial(t, "a") for t in ("x", "y", "z")}
    other = _trial("w", "b")
    for trial in [*trials.values(), other]:
        scheduler.on_trial_add(None, trial)
    decisions = []
    epochs = {t: 0 for t in trials}
    spent = 0
    while any(t in scheduler._live["a"] for t in trials):  # round-robin, as trials report
        for name, trial in trials.items():
            if name not in scheduler._live["a"]:
                continue
            epochs[name] += 1
            spent += 1
            decision = scheduler.on_trial_result(None, trial, _result(epochs[name]))
            decisions.append((name, decision))
            if decision == TrialScheduler.STOP:
                scheduler.on_trial_complete(None, trial, _result(epochs[name]))
    assert spent == 5 == scheduler._usage["a"].epochs
    assert [d for _, d in decisions].count(TrialScheduler.STOP) == 3
    assert scheduler._usage["b"].epochs == 0  # b's budget untouched by a's trials
    assert scheduler.on_trial_result(None, other, _result(1)) == TrialScheduler.CONTINUE


def test_a_restored_scheduler_counts_what_its_trials_trained_before() -> None:
    scheduler = MethodsScheduler({"a": FIFOScheduler()}, limits={"a": Limit(epochs=4)},
                                 devices_per_trial=0.0)
    done = _trial("x", "a")
    done.status, done.last_result = "TERMINATED", _result(3, finished=True)
    scheduler.on_trial_add(None, done)
    assert scheduler._usage["a"].epochs == 3 and "x" not in scheduler._live["a"]
    running = _trial("y", "a")
    scheduler.on_trial_add(None, running)
    assert scheduler.on_trial_result(None, running, _result(1)) == TrialScheduler.STOP


def test_router_sends_a_trial_to_its_methods_listener_and_the_screen(tmp_path: Path) -> None:
    heard: list[tuple[str, str, Any]] = []

    class Listener:
        def __init__(self, name: str) -> None:
            self.name = name

        def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
            heard.append((self.name, trial_id, config))

        def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
            heard.append((self.name, trial_id, "result"))

        def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
            heard.append((self.name, trial_id, state))

    router = MethodRouter({"a": Listener("a"), "b": Listener("b")}, [Listener("screen")])
    router.trial_started("t1", {METHOD_KEY: "b", "lr": 0.1})
    router.trial_result("t1", {"score": 1.0})
    router.trial_finished("t1", "completed", None)
    assert heard == [("b", "t1", {"lr": 0.1}), ("screen", "t1", {"method": "b", "lr": 0.1}),
                     ("b", "t1", "result"), ("screen", "t1", "result"),
                     ("b", "t1", "completed"), ("screen", "t1", "completed")]


def test_a_trial_stopped_by_the_budget_says_so_in_its_study(tmp_path: Path) -> None:
    searcher = _searcher(tmp_path, "a", 2)
    config = searcher.suggest("t1")
    assert config is not None
    searcher.on_trial_result("t1", _result(1))
    searcher.on_trial_complete("t1", _result(2))  # stopped at the budget, not finished
    study = optuna.load_study(study_name="a", storage=f"sqlite:///{tmp_path / 'a.db'}")
    assert study.trials[0].user_attrs[STOPPED_BY] == "the budget"
