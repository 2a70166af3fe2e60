"""A real grid study with a second objective: every grid point runs exactly once (no early
stopping), Optuna records both objectives, and the summary's Pareto front is non-dominated.
One branch of the grid is the learned distance (loss e2e): its distance diagnostics are reported
per epoch and its histograms reach the trial's MLflow run."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import optuna
import pytest

from dmlsearch.search.results import dominates
from tests.helpers import run_cli

SPACE = """\
name: tiny-grid
source: a test grid (no published source)
base: {dataset: glyphs, backbone: smallcnn, epochs: 1, batch_size: 32, m_per_class: 4,
       metric: map@r, lr: 3.0e-3}
params:
  - loss: {type: categorical, choices: [proxy_anchor, e2e]}
  - embedding_size: {type: categorical, choices: [8, 32]}
  - loss.d_size: {type: categorical, choices: [16], when: {loss: e2e}}
"""


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("e2e-grid")
    (root / "tiny.yaml").write_text(textwrap.dedent(SPACE))
    out = root / "results"
    proc = run_cli("run", "--space", str(root / "tiny.yaml"), "--sampler", "grid",
                   "--scheduler", "none", "--pareto", "embedding_size", "--concurrency", "2",
                   "--out", str(out), "--no-retrain", cache=shared_cache, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


@pytest.mark.slow
def test_grid_runs_each_point_once_and_reports_the_pareto_front(
    search: tuple[Path, str],
) -> None:
    out, stdout = search
    summary = json.loads((out / "summary.json").read_text())
    configs = [(t["config"]["loss"], t["config"]["embedding_size"]) for t in summary["trials"]]
    assert sorted(configs) == sorted(itertools.product(["e2e", "proxy_anchor"], [8, 32]))
    assert {t["state"] for t in summary["trials"]} == {"completed"}
    assert summary["budget"]["trials"] == 4 and summary["budget"]["epochs"] == 4
    assert summary["budget"]["cpu_hours"] > 0

    front = summary["pareto_front"]
    assert front["cost"] == "embedding_size" and front["trials"]
    by_id = {t["trial_id"]: (t["score"], t["config"]["embedding_size"])
             for t in summary["trials"]}
    on_front = {t["trial_id"] for t in front["trials"]}
    for tid in on_front:
        assert not any(dominates(p, by_id[tid], ("max", "min"))
                       for other, p in by_id.items() if other != tid)
    for tid in set(by_id) - on_front:  # everything off the front is dominated by something
        assert any(dominates(by_id[o], by_id[tid], ("max", "min")) for o in on_front)
    assert "Pareto front" in stdout and "CPU-hours" in stdout

    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.directions) == 2 and len(study.trials) == 4
    assert all(len(t.values) == 2 for t in study.trials if t.values is not None)


@pytest.mark.slow
def test_learned_distance_trials_carry_their_diagnostics(search: tuple[Path, str]) -> None:
    from mlflow.tracking import MlflowClient

    out, _ = search
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    runs = client.search_runs([exp.experiment_id],
                              filter_string="tags.`dmlsearch.kind` = 'trial'")
    e2e = [r for r in runs if r.data.params["loss"] == "e2e"]
    assert len(e2e) == 2
    for run in e2e:
        assert "val_diag_triangle_mean" in run.data.metrics
        files = {a.path for a in client.list_artifacts(run.info.run_id,
                                                       "distance_diagnostics/fit0")}
        assert files == {f"distance_diagnostics/fit0/{name}.png"
                         for name in ("self_distance", "asymmetry", "triangle_violation")}


@pytest.mark.slow
def test_nsga2_searches_both_objectives(tmp_path: Path, shared_cache: Path) -> None:
    """NSGA-II with --pareto in a real search: both objectives recorded for every trial,
    the front drawn from the trials that trained to their end."""
    (tmp_path / "tiny.yaml").write_text(textwrap.dedent(SPACE))
    out = tmp_path / "results"
    proc = run_cli("run", "--space", str(tmp_path / "tiny.yaml"), "--sampler", "nsga2",
                   "--scheduler", "asha", "--grace-period", "1", "--pareto", "embedding_size",
                   "--trials", "3", "--concurrency", "2", "--out", str(out), "--no-retrain",
                   cache=shared_cache, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["trials"]) == 3 and summary["pareto_front"]["trials"]
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == 3 and len(study.directions) == 2
    assert all(len(t.values) == 2 for t in study.trials
               if t.state == optuna.trial.TrialState.COMPLETE)
