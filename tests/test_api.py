"""The Python API (``import dmlsearch``): the command line's twin. A real replayed search (real
Ray, Optuna and MLflow; the trials read a recorded learning-curve table) run and read back from
Python; bad input raises :class:`dmlsearch.UserError` with the command line's one-line message
and never exits the interpreter; importing the face imports neither torch nor Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dmlsearch
from tests.helpers import CURVE_SPACE


def test_the_face_exports_the_commands_and_imports_nothing_heavy() -> None:
    code = ("import sys, dmlsearch\n"
            "print(sorted(m for m in ('torch', 'ray', 'mlflow', 'optuna') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == "[]"
    for name in ("run", "compare", "resume", "train", "importance", "results", "UserError",
                 "SearchResult"):
        assert name in dmlsearch.__all__ and hasattr(dmlsearch, name)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: dmlsearch.run(trials=0), "--trials must be"),
    (lambda: dmlsearch.run(tirals=3), "unknown option 'tirals'"),
    (lambda: dmlsearch.run(sampler="tpee"), "tpee"),
    (lambda: dmlsearch.run("no-such-space"), "no-such-space"),
    (lambda: dmlsearch.compare(["proxy_anchor"], budget_s=60.0, trials=2), "give one"),
    (lambda: dmlsearch.results("/nonexistent/results"), "no search results"),
])
def test_bad_input_raises_the_commands_one_line_error(call, message: str,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dmlsearch.UserError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_search_from_python_returns_its_results(curve_table: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    result = dmlsearch.run(CURVE_SPACE, replay=str(curve_table), out=tmp_path / "r", trials=4,
                           concurrency=2, replay_speedup=50.0, scheduler="none",
                           sampler="random", set={"epochs": 3}, echo=lines.append)
    assert isinstance(result, dmlsearch.SearchResult)
    assert result.folder == (tmp_path / "r").resolve() and result.summary_json.is_file()
    trials = result.trials
    assert len(trials) == 4 and set(trials["state"]) == {"completed"}
    assert {"trial_id", "score", "epochs", "loss", "lr"} <= set(trials.columns)
    assert result.best_trial in set(trials["trial_id"])
    assert result.best_score == pytest.approx(trials["score"].max())
    assert result.best_config["loss"] in {"multi_similarity", "proxy_anchor", "contrastive"}
    assert result.test_metrics and "map@r" in result.test_metrics
    assert result.export is None  # a replay retrains nothing: its test metrics are the table's
    assert any("Best" in line or "best" in line for line in lines)  # the summary, to echo
    # a notebook shows one line, not the summary's every field
    name = trials.loc[trials["trial_id"] == result.best_trial, "trial"].item()
    assert repr(result) == (
        f"SearchResult({str(result.folder)!r}: {CURVE_SPACE.stem} on glyphs; 4 trials "
        f"(4 completed, 0 pruned, 0 failed); best {name} val map@r {result.best_score:.4f}; "
        "test map@r "
        f"{result.test_metrics['map@r']:.4f})")

    again = dmlsearch.results(result.folder)  # read back, as `dmlsearch report` does
    assert again.best_config == result.best_config
    assert list(again.trials["trial_id"]) == list(trials["trial_id"])


def test_searches_side_by_side_in_the_users_mlflow_experiment(
        curve_table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, MLflow's conventions: MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME put two
    searches in one experiment of one store, each study run with its own trial runs, named as
    the terminal and Optuna name them; a resume takes up its own study run, not the latest."""
    import mlflow
    import optuna

    from dmlsearch.search.tracking import Tracker

    store = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.chdir(tmp_path)  # a named experiment's artifacts: MLflow's ./mlruns, here
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "glyph-studies")
    results = [dmlsearch.run(CURVE_SPACE, replay=str(curve_table), out=tmp_path / name,
                             trials=3, concurrency=2, replay_speedup=50.0, scheduler="none",
                             sampler="random", seed=seed, set={"epochs": 3}, echo=lambda _: None)
               for seed, name in enumerate(("first", "second"))]
    client = mlflow.MlflowClient(store)
    experiment = client.get_experiment_by_name("glyph-studies")
    assert experiment is not None
    studies = client.search_runs([experiment.experiment_id],
                                 "tags.`dmlsearch.kind` = 'study'")
    assert {r.data.tags["dmlsearch.results"] for r in studies} == {
        str(r.folder) for r in results}
    for result in results:
        study_run = next(r for r in studies
                         if r.data.tags["dmlsearch.results"] == str(result.folder))
        trials = client.search_runs(
            [experiment.experiment_id],
            f"tags.`mlflow.parentRunId` = '{study_run.info.run_id}'")
        names = {r.data.tags["dmlsearch.trial_id"]: r.info.run_name.split()[0] for r in trials}
        frame = result.trials
        assert names == dict(zip(frame["trial_id"], frame["trial"]))  # MLflow = the summary
        study = optuna.load_study(study_name=result.folder.name,
                                  storage=f"sqlite:///{result.folder / 'optuna.db'}")
        assert {f"t{t.number:02d}" for t in study.trials} == set(frame["trial"])  # = Optuna
        assert (result.folder / "mlflow.db").exists() is False  # nothing in a private store
    assert (tmp_path / "mlruns").is_dir()  # where MLflow puts an experiment's artifacts

    first = Tracker(store, "glyph-studies")
    parent = first.attach_study(results=results[0].folder)
    assert client.get_run(parent).data.tags["dmlsearch.results"] == str(results[0].folder)
