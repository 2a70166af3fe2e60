"""``dmlsearch compare`` end to end, tiny (2 methods, a budget of 2 trials of 3 epochs, 2 seeds):
one real comparison, killed with SIGKILL once a trial finished and another is half-way, then
resumed by ``dmlsearch resume``, serves every test here: it resumes without retraining what
finished, and what it leaves is what an uninterrupted one leaves (one Ray Tune experiment for
both searches, an Optuna study and a results folder per method, equal budgets read back from the
study records, the same split and retrain seeds, statistics that match scipy on the retrained
numbers, one MLflow tree); bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats as sps

from dmlsearch.search.cli import main
from tests.helpers import between_saves
from tests.helpers import cli_command
from tests.helpers import kill_tree
from tests.helpers import read_png
from tests.helpers import run_cli

METHODS = ("multi_similarity", "contrastive")
TRIALS, EPOCHS, SEEDS = 2, 3, 2
ARGS = ("--trials", str(TRIALS), "--seeds", str(SEEDS), "--set", f"epochs={EPOCHS}",
        "--set", "embedding_size=16", "--scheduler", "none", "--concurrency", "2", "--seed", "1")


@dataclasses.dataclass(frozen=True)
class Killed:
    """The comparison: its folder, what ``resume`` printed, the trials that had finished when
    the first driver was killed, and a second ``resume`` of the finished comparison."""

    out: Path
    stdout: str
    finished: set[str]
    again: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Killed:
    root = tmp_path_factory.mktemp("compare")
    out = root / "results"
    ray_tmp = tempfile.mkdtemp(prefix="dc", dir="/tmp")  # short: Ray's socket paths are limited
    env = {**os.environ, "DMLSEARCH_CACHE": str(shared_cache), "RAY_TMPDIR": ray_tmp,
           "PYTHONUNBUFFERED": "1", "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    log = (root / "first.log").open("w")
    driver = subprocess.Popen(cli_command("compare", "--methods", *METHODS, *ARGS, "--out",
                                          str(out)),
                              env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # a trial finished, another half-way: pull the plug
            time.sleep(1)
            assert driver.poll() is None, (root / "first.log").read_text()[-3000:]
            runs = _trial_runs(out) if (out / "compare.yaml").exists() else []
            if (any(r.info.status == "FINISHED" for r in runs)
                    and any(r.info.status == "RUNNING" and "score" in r.data.metrics
                            for r in runs)):
                break
        else:
            pytest.fail("the comparison did not reach a finished trial in time")
        time.sleep(2)  # Ray's experiment state is saved every second here
        between_saves(out)
        finished = {r.data.tags["dmlsearch.trial_id"] for r in _trial_runs(out)
                    if r.info.status == "FINISHED"}
    finally:
        kill_tree(driver.pid, ray_tmp)
        driver.wait(timeout=60)
        log.close()
    assert not (out / "comparison.json").exists()
    proc = run_cli("resume", str(out), cache=shared_cache, cwd=root)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Resumed again after the report: it finished, nothing to do.
    again = run_cli("resume", str(out), cache=shared_cache, cwd=root)
    return Killed(out=out, stdout=proc.stdout, finished=finished, again=again)


@pytest.fixture(scope="module")
def comparison(killed: Killed) -> tuple[Path, str]:
    return killed.out, killed.stdout


def _study(folder: Path) -> optuna.Study:
    return optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'optuna.db'}")


@pytest.mark.slow
def test_every_method_spends_the_same_budget_on_the_same_split(
        comparison: tuple[Path, str]) -> None:
    out, stdout = comparison
    budget = TRIALS * EPOCHS
    configs = {}
    for method in METHODS:
        folder = out / method
        summary = json.loads((folder / "summary.json").read_text())
        # from the study records: every epoch of every trial is an intermediate value
        study = _study(folder)
        epochs = sum(len(t.intermediate_values) for t in study.trials)
        assert epochs == budget == summary["budget"]["epochs"]
        assert len(study.trials) == len(summary["trials"]) >= TRIALS
        assert {t["config"]["loss"] for t in summary["trials"]} == {method}
        for t in summary["trials"]:
            if t["state"] == "pruned" and t["iterations"] < EPOCHS:
                assert t["stopped_by"] in ("asha", "the budget")
        configs[method] = summary["trials"][0]["config"]
        retrain = summary["retrains"][0]
        assert retrain["seeds"] == [1, 2]  # the search seed and the next: the same for all
    for key in ("dataset", "split_seed", "val_ratio", "epochs", "embedding_size", "seed",
                "backbone", "batch_size", "metric"):
        assert configs["multi_similarity"][key] == configs["contrastive"][key], key
    compare = json.loads((out / "comparison.json").read_text())
    for method in METHODS:
        assert compare["methods"][method]["budget"]["used"]["epochs"] == budget
    assert "Comparison finished" in stdout and "comparison.md" in stdout
    # each trial's line names its method and what its method's space searched
    searched = {m: json.loads((out / m / "summary.json").read_text())["study"]["searched"]
                for m in METHODS}
    lines = re.findall(r"^\[\d+\] trial t\d\d .*?\(method=(\w+)((?:, [^=,()]+=[^,()]+)*)\)",
                       stdout, flags=re.M)
    assert lines, stdout[-3000:]
    for method, shown in lines:
        keys = [pair.split("=")[0] for pair in shown.split(", ")[1:]]
        assert set(searched[method]) <= set(keys), (method, shown)


@pytest.mark.slow
def test_the_statistics_are_the_retrained_numbers_paired_by_seed(
        comparison: tuple[Path, str]) -> None:
    out, _ = comparison
    compare = json.loads((out / "comparison.json").read_text())
    per_seed = {m: [t["map@r"] for t in json.loads((out / m / "summary.json").read_text())
                    ["retrains"][0]["test_metrics"]] for m in METHODS}
    for method in METHODS:
        entry = compare["methods"][method]
        assert entry["test_mean"]["map@r"] == pytest.approx(statistics.mean(per_seed[method]))
        assert entry["rank"] in (1, 2) and "test_ci95" in entry
    pair = next(p for p in compare["pairs"] if p["metric"] == "map@r")
    a, b = per_seed[pair["a"]], per_seed[pair["b"]]
    assert pair["diff"] == pytest.approx(statistics.mean(x - y for x, y in zip(a, b)))
    assert pair["p"] == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert pair["p_holm"] == pytest.approx(pair["p"])  # one pair: Holm changes nothing
    text = (out / "comparison.md").read_text()
    assert "## Ranking" in text and "R@1" in text and "MAP@R" in text
    for png in ("comparison_metric.png", "comparison_budget.png"):
        read_png(out / "plots" / png)


@pytest.mark.slow
def test_one_mlflow_tree_holds_the_comparison(comparison: tuple[Path, str]) -> None:
    out, _ = comparison
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    runs = client.search_runs([exp.experiment_id], max_results=500)
    kind = {r.info.run_id: r.data.tags.get("dmlsearch.kind") for r in runs}
    parent = [r for r in runs if kind[r.info.run_id] == "comparison"]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    files = {f.path for f in client.list_artifacts(parent[0].info.run_id)}
    assert {"comparison.md", "comparison.json", "compare.yaml", "plots"} <= files
    studies = {r.data.tags["dmlsearch.method"]: r for r in runs
               if kind[r.info.run_id] == "study"}
    assert set(studies) == set(METHODS)
    for method, study in studies.items():
        assert study.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == study.info.run_id]
        trials = [r for r in children if kind[r.info.run_id] == "trial"]
        retrains = [r for r in children if kind[r.info.run_id] == "retrain"]
        assert trials and all(r.data.tags["dmlsearch.method"] == method for r in trials)
        assert all(r.data.params["loss"] == method for r in trials)
        assert all(r.info.run_name.startswith(f"{method} t") for r in trials)  # told apart
        assert len(retrains) == SEEDS
    assert parent[0].data.metrics[f"{METHODS[0]}.test_mean_map_at_r"] > 0


@pytest.mark.slow
def test_each_methods_folder_is_a_search_the_other_commands_read(
        comparison: tuple[Path, str]) -> None:
    out, _ = comparison
    proc = run_cli("report", str(out / "contrastive"), cache=out.parent / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "contrastive" in proc.stdout
    assert (out / "contrastive" / "best_config.yaml").is_file()


def _trial_runs(out: Path) -> list:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id],
                              filter_string="tags.`dmlsearch.kind` = 'trial'", max_results=100)


@pytest.mark.slow
def test_a_killed_comparison_resumes_without_retraining_what_finished(killed: Killed) -> None:
    out = killed.out
    compare = json.loads((out / "comparison.json").read_text())
    ids: list[str] = []
    for method in METHODS:
        summary = json.loads((out / method / "summary.json").read_text())
        ids += [t["trial_id"] for t in summary["trials"]]
        assert summary["budget"]["epochs"] == TRIALS * EPOCHS  # equal, and exactly the budget
        assert compare["methods"][method]["rank"] in (1, 2)
    assert killed.finished and len(ids) == len(set(ids)) and killed.finished <= set(ids)
    for tid in killed.finished:  # kept, not trained again: one result per epoch
        lines = (out / "ray" / "tune" / f"trial_{tid}" / "result.json").read_text().splitlines()
        assert [json.loads(x)["training_iteration"] for x in lines] == list(range(1, EPOCHS + 1))
    assert all(r.info.status != "RUNNING" for r in _trial_runs(out))
    assert killed.again.returncode == 2 and "finished already" in killed.again.stderr


def _bad_space(tmp_path: Path) -> Path:
    path = tmp_path / "longer.yaml"
    path.write_text(textwrap.dedent("""\
        name: longer
        source: a test space
        base: {loss: proxy_anchor, epochs: 20}
        params:
          loss.alpha: {type: float, low: 16.0, high: 48.0}
        """))
    return path


@pytest.mark.parametrize(("args", "words"), [
    (("--methods", "proxy_anchor", "nope"), "unknown method 'nope'"),
    (("--methods", "proxy_anchor"), "at least two methods, got 1"),
    (("--methods", "proxy_anchor", "contrastive", "--seeds", "1"),
     "--seeds must be an integer >= 2"),
    (("--methods", "contrastive", "--space", "BAD"), "shares epochs: 6"),
    (("--methods", "contrastive", "proxy_anchor", "--trials", "2", "--budget", "1h"),
     "--budget and --trials"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
        tmp_path: Path, args: tuple[str, ...], words: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (the checks run before anything starts), as ``dmlsearch`` runs them."""
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results"
    args = tuple(str(_bad_space(tmp_path)) if a == "BAD" else a for a in args)
    try:
        code = main(["compare", *args, "--out", str(out)])
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert words in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert not out.exists()
