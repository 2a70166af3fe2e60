"""A real search end to end (the session's ``shared_search``): Ray Tune (local cluster), Optuna
TPE with its SQLite study, ASHA, MLflow (SQLite store), faiss metrics, retrain, export, one worker
process running several trials, and ``dmlsearch train`` reproducing it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from dmlsearch.search.finish import read_export
from dmlsearch.trainables.config import TrialConfig
from tests.helpers import SHARED_TRIALS as TRIALS
from tests.helpers import SharedSearch
from tests.helpers import runs_by_kind


@pytest.fixture(scope="module")
def search(shared_search: SharedSearch) -> tuple[Path, str, SharedSearch]:
    return shared_search.out, shared_search.stdout, shared_search


@pytest.mark.slow
def test_trials_ran_through_ray_tune_and_optuna(search: tuple[Path, str, SharedSearch]) -> None:
    out, stdout, _ = search
    summary = json.loads((out / "summary.json").read_text())
    # --trials 4 is 4 trials' worth of 3 epochs, which ASHA (first decision after 1 epoch)
    # spreads over up to 12 trials; running trials finish, so at most one epoch per slot more
    ran = len(summary["trials"])
    assert TRIALS <= ran <= TRIALS * 3
    assert sum(t["iterations"] for t in summary["trials"]) <= TRIALS * 3 + 2 * 3
    assert "4 trials' worth of training (4 x 3 epochs" in stdout
    assert {t["state"] for t in summary["trials"]} <= {"completed", "pruned"}
    assert any(t["state"] == "completed" for t in summary["trials"])
    for t in summary["trials"]:
        assert 0.0 < t["score"] <= 1.0 and 1 <= t["iterations"] <= 3
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == ran
    # The first two proposals are the space's warm starts (thesis Table 4 defaults).
    first = {t.params["loss"]: t.params for t in study.trials[:2]}
    assert first["multi_similarity"]["loss.margin[multi_similarity]"] == pytest.approx(0.5)
    assert first["multi_similarity"]["loss.beta"] == pytest.approx(50.0)
    assert first["proxy_anchor"]["loss.alpha[proxy_anchor]"] == pytest.approx(32.0)
    # What optuna-dashboard shows of it: the metric's name, and what was searched on what
    assert study.metric_names == ["val map@r"]
    assert study.user_attrs["dmlsearch_space"] == "quickstart"
    assert study.user_attrs["dmlsearch_dataset"] == "glyphs"
    assert study.user_attrs["dmlsearch_metric"] == "map@r"
    assert "Search finished" in stdout and "mlflow ui --backend-store-uri" in stdout
    assert (out / "ray").is_dir()


@pytest.mark.slow
def test_the_study_records_every_epoch_and_what_stopped_early(
        search: tuple[Path, str, SharedSearch]) -> None:
    """optuna.db: one trial per Ray trial; every epoch's score an intermediate value; a trial
    ASHA stopped PRUNED (its value: its last score); the best trial one that trained to its
    end."""
    out, _, _ = search
    summary = json.loads((out / "summary.json").read_text())
    by_ray = {t["trial_id"]: t for t in summary["trials"]}
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials) == sorted(by_ray)
    states = {"completed": optuna.trial.TrialState.COMPLETE,
              "pruned": optuna.trial.TrialState.PRUNED}
    for trial in study.trials:
        ran = by_ray[trial.user_attrs["ray_trial_id"]]
        assert trial.state == states[ran["state"]]
        assert sorted(trial.intermediate_values) == list(range(1, ran["iterations"] + 1))
        assert trial.value == pytest.approx(trial.intermediate_values[ran["iterations"]])
        assert ran["curve"] == pytest.approx([trial.intermediate_values[i]
                                              for i in sorted(trial.intermediate_values)])
        if ran["state"] == "pruned":
            assert trial.user_attrs["dmlsearch_stopped_by"] == "asha"
    assert by_ray[summary["best_trial"]]["state"] == "completed"


@pytest.mark.slow
def test_mlflow_holds_parent_children_and_retrain(search: tuple[Path, str, SharedSearch]) -> None:
    out, _, _ = search
    client, kinds = runs_by_kind(out)
    (parent,) = kinds["study"]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["space"] == "quickstart"
    assert parent.data.metrics["trials_failed"] == 0
    trials = kinds["trial"]
    summary = json.loads((out / "summary.json").read_text())
    assert len(trials) == len(summary["trials"])
    for run in trials:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["dmlsearch.state"] in {"completed", "pruned"}
        assert run.info.status == "FINISHED"
        assert "loss" in run.data.params and "lr" in run.data.params
        history = client.get_metric_history(run.info.run_id, "val_recall_at_1")
        assert len(history) >= 1 and [m.step for m in history] == sorted(m.step for m in history)
    (retrain,) = kinds["retrain"]
    assert retrain.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert 0.0 < retrain.data.metrics["test_recall_at_1"] <= 1.0
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"best_config.yaml", "summary.json", "search.yaml", "plots"} <= artifacts
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "plots")} == {
        "plots/optimisation_history.png", "plots/parallel_coordinates.png",
        "plots/learning_curves.png"}
    assert retrain.data.tags["dmlsearch.registered_model"] == f"dmlsearch-{out.name}/1"


@pytest.mark.slow
def test_mlflow_shows_what_a_dml_user_looks_for(search: tuple[Path, str, SharedSearch]) -> None:
    """Trial runs named by what tells them apart, the data and class split of every run as
    dataset inputs, the study's headline figures and a description on the study run."""
    out, _, _ = search
    _, by_kind = runs_by_kind(out)
    names = sorted(r.info.run_name for r in by_kind["trial"])
    ran = len(json.loads((out / "summary.json").read_text())["trials"])
    assert [n.split()[0] for n in names] == [f"t{i:02d}" for i in range(ran)]
    for run in by_kind["trial"]:
        assert run.data.params["loss"] in run.info.run_name and "lr=" in run.info.run_name
        inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
        assert set(inputs) == {"training", "validation"}
        assert {d.name for d in inputs.values()} == {"glyphs"}
    digests = {tuple(sorted((i.tags[0].value, i.dataset.digest) for i in r.inputs.dataset_inputs))
               for r in by_kind["trial"]}
    assert len(digests) == 1  # every trial: the same class split
    (retrain,) = by_kind["retrain"]
    assert {i.tags[0].value for i in retrain.inputs.dataset_inputs} == {"training", "test"}
    (study,) = by_kind["study"]
    assert "best_val_score" in study.data.metrics and "test_mean_map_at_r" in study.data.metrics
    assert "Best trial" in study.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_export_trains_again_to_the_same_test_metrics(search: tuple[Path, str, SharedSearch]) -> None:
    out, _, shared = search
    config, provenance = read_export(out / "best_config.yaml")
    cfg = TrialConfig.from_flat(config)
    summary = json.loads((out / "summary.json").read_text())
    assert provenance["trial_id"] == summary["best_trial"]
    assert provenance["test_metrics"] == summary["test_metrics"]
    assert cfg.epochs == provenance["validation"]["best_epoch"]
    # the trials computed with their 1 CPU; the retrain, alone in the driver, with all of its
    # CPUs, and the export says so (train computes with the same count)
    assert cfg.threads == len(os.sched_getaffinity(0))
    assert all(t["config"].get("threads") == 1 for t in summary["trials"])

    proc = shared.run("train", str(out / "best_config.yaml"), "--out", str(shared.root / "train"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((shared.root / "train" / "test_metrics.json").read_text())
    for key, value in summary["test_metrics"].items():
        assert again[key] == pytest.approx(value, abs=1e-4), key


@pytest.mark.slow
def test_importance_of_the_finished_study(search: tuple[Path, str, SharedSearch]) -> None:
    out, _, shared = search
    # ASHA stops some trials (and funds more with what they did not train): analyse all of
    # them at epoch 1, which each reached.
    ran = len(json.loads((out / "summary.json").read_text())["trials"])
    proc = shared.run("importance", str(out), "--at-epoch", "1", "--min-trials", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"common parameters: {ran} trials at epoch 1" in proc.stdout and "lr" in proc.stdout
    assert "logged to the study's MLflow run" in proc.stdout
    body = json.loads((out / "importance" / "importance.json").read_text())
    assert set(body["analyses"][0]["params"]) == {"loss", "lr"}  # embedding_size is --set
    client, kinds = runs_by_kind(out)
    (parent,) = kinds["study"]
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "importance")}
    assert "importance/importance.json" in logged


@pytest.mark.slow
def test_export_top_two_of_the_finished_study(search: tuple[Path, str, SharedSearch]) -> None:
    out, _, shared = search
    proc = shared.export  # `dmlsearch export OUT --top 2`, run by the fixture
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, _ = read_export(out / "export" / "best_config.yaml")
    best, _ = read_export(out / "best_config.yaml")
    assert first == best  # the best trial, exported as the search's retrain exported it
    summary = json.loads((out / "summary.json").read_text())
    if sum(t["state"] == "completed" for t in summary["trials"]) < 2:  # ASHA stopped the rest
        assert "exported 1 of the 2 asked for" in proc.stdout
        assert not (out / "export" / "best_config-2.yaml").exists()
        return
    second, provenance = read_export(out / "export" / "best_config-2.yaml")
    assert provenance["rank"] == 2 and second != first


@pytest.mark.slow
def test_one_worker_process_runs_several_trials(search: tuple[Path, str, SharedSearch]) -> None:
    """A finished trial's worker runs the next trial (``tune.tuner.REUSE_WORKERS``), also when
    ASHA stops trials early: the 4 trials ran in at most 2 processes (``--concurrency 2``)."""
    out, _, _ = search
    pids = {json.loads(line)["pid"]
            for folder in (out / "ray" / "tune").glob("trial_*")
            for line in (folder / "result.json").read_text().splitlines()}
    assert 1 <= len(pids) <= 2 < TRIALS, pids


@pytest.mark.slow
def test_the_scores_are_printed_with_the_size_of_their_sets(
        search: tuple[Path, str, SharedSearch]) -> None:
    """Issue 35: the validation and test scores come with how many classes and queries each was
    measured on (the test queries as the metrics counted them), in summary.json and on the
    terminal; the query count is not printed as a metric, and one seed has no interval."""
    out, stdout, _ = search
    summary = json.loads((out / "summary.json").read_text())
    val, test = summary["validation_set"], summary["test_set"]
    assert 2 <= val["classes"] and val["folds"] == 1 and val["queries"] <= val["images"]
    assert test["queries"] == summary["test_metrics"]["num_queries"]
    assert f"(validation set: {val['classes']} classes, {val['queries']:,} queries)" in stdout
    assert f"test set ({test['classes']} classes, {test['queries']:,} queries)" in stdout
    assert "num_queries" not in stdout
    assert set(summary["retrains"][0]["ci95"].values()) == {None}  # one seed
