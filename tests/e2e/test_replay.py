"""Searches replayed from a real learning-curve table (recorded by the session fixture): the same
driver, searcher, scheduler and records as a training search, so every sampler and scheduler
runs here in a real search (in one Ray, left running between them), each worker running
several trials; the replay reproduces the table's curves exactly; the time budget lets running
trials finish; a capped grid covers every loss."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.replay import load_table
from dmlsearch.search.replay import lookup
from dmlsearch.search.results import TrialState
from dmlsearch.search.run import run_search
from dmlsearch.search.tune import DEFAULT_SAMPLER
from dmlsearch.search.tune import init_ray
from dmlsearch.search.tune import ray_running
from dmlsearch.search.tune import shutdown_ray
from tests.helpers import CURVE_GRID
from tests.helpers import CURVE_SPACE

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module", autouse=True)
def _one_ray() -> Iterator[None]:
    """One local Ray for the module's searches: a search that finds Ray running leaves it
    running (a program's own Ray), so they share one start instead of one each."""
    init_ray()
    yield
    shutdown_ray()


def _replay(table: Path, out: Path, **options: object) -> object:
    opts = SearchOptions(**{"space": str(CURVE_SPACE), "replay": str(table), "out": out,
                            "trials": 6, "concurrency": 2, "replay_speedup": 20.0,
                            **options})
    return run_search(opts, echo=lambda _: None)


def _records_agree(out: Path, summary: object) -> None:
    """optuna.db holds exactly one trial per Ray trial, in the same state."""
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    by_ray = {t.user_attrs["ray_trial_id"]: t for t in study.trials}
    assert sorted(by_ray) == sorted(t.trial_id for t in summary.trials)
    states = {TrialState.COMPLETED: optuna.trial.TrialState.COMPLETE,
              TrialState.PRUNED: optuna.trial.TrialState.PRUNED,
              TrialState.FAILED: optuna.trial.TrialState.FAIL}
    for trial in summary.trials:
        recorded = by_ray[trial.trial_id]
        assert recorded.state == states[trial.state]
        if trial.state is not TrialState.FAILED and len(study.directions) == 1:
            assert len(recorded.intermediate_values) == trial.iterations  # every epoch
            assert recorded.value == pytest.approx(trial.score)


@pytest.mark.parametrize(("sampler", "scheduler"), [
    ("tpe", "asha"), ("random", "hyperband"), ("cmaes", "median"), ("gp", "none"),
    ("grid", "asha"), ("prior-tpe", "soft-asha"), ("priorband", "asha"),
    ("priorband-tpe", "asha"),
])
def test_every_sampler_and_scheduler_runs_a_real_search(curve_table: Path, tmp_path: Path,
                                                        sampler: str, scheduler: str) -> None:
    out = tmp_path / f"{sampler}-{scheduler}"
    space = CURVE_GRID if sampler == "grid" else CURVE_SPACE  # a grid needs a grid
    summary = _replay(curve_table, out, sampler=sampler, scheduler=scheduler,
                      grace_period=1, reduction_factor=2, space=str(space))
    # 6 trials' worth of 3 epochs: up to 18 trials when the scheduler decides after epoch 1
    most = 6 if scheduler == "none" or sampler == "grid" else 18
    assert 1 <= len(summary.trials) <= most and summary.best_trial is not None
    assert sum(t.iterations for t in summary.trials) <= 6 * 3 + 2 * 3  # + what was running
    assert summary.study.sampler == sampler and summary.study.scheduler == scheduler
    assert any(t.state is TrialState.COMPLETED for t in summary.trials)
    if scheduler == "none":
        assert {t.state for t in summary.trials} == {TrialState.COMPLETED}
    for trial in summary.trials:
        if trial.state is TrialState.PRUNED:
            assert trial.stopped_by == scheduler and trial.iterations < 3
    _records_agree(out, summary)
    if scheduler != "hyperband":  # a paused trial may resume in another worker
        # A finished trial's worker runs the next one (tune.tuner.REUSE_WORKERS), also when
        # the scheduler stops trials early: the trials ran in at most --concurrency processes.
        pids = {json.loads(line)["pid"] for t in summary.trials
                for line in (Path(t.path or "") / "result.json").read_text().splitlines()
                if line.strip()}
        assert 1 <= len(pids) <= 2, pids
    assert summary.test_metrics and summary.study.replay == str(curve_table)
    text = json.loads((out / "summary.json").read_text())
    assert text["study"]["replay"] == str(curve_table)


def test_a_replay_reproduces_the_tables_curves_exactly(curve_table: Path,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "exact"
    summary = _replay(curve_table, out, sampler="random", scheduler="none", trials=4)
    assert ray_running()  # the module's own Ray: a search leaves running what it found running
    table = load_table(curve_table)
    for trial in summary.trials:
        curve = lookup(table, trial.config)
        rows = [json.loads(line) for line in (Path(trial.path) / "result.json").read_text()
                .splitlines() if line.strip()]
        for row, recorded in zip(rows, curve.epochs, strict=True):
            for key, value in recorded["val"].items():
                assert row[f"val_{key}"] == value  # exactly, not approximately
        assert trial.score == max(r["val"]["map@r"] for r in curve.epochs)
        assert trial.best_epoch == curve.best_epoch
    best = summary.trial(summary.best_trial)
    assert summary.test_metrics == lookup(table, best.config).test_at_best


def test_one_trial_at_a_time_the_same_command_makes_the_same_search(curve_table: Path,
                                                                    tmp_path: Path) -> None:
    """The default search (sampler and scheduler), seeded, one trial at a time: run twice, the
    same trials in the same order with the same scores, stops and pick (docs/guide/searches.md,
    ``--seed``); another seed proposes other configurations."""
    def trials(name: str, seed: int) -> list[tuple]:
        summary = _replay(curve_table, tmp_path / name, concurrency=1, seed=seed,
                          grace_period=1, reduction_factor=2, replay_speedup=200.0)
        assert (summary.study.sampler, summary.study.scheduler) == (DEFAULT_SAMPLER, "asha")
        return [(t.config, t.state, t.score, t.iterations) for t in summary.trials]

    first = trials("first", seed=5)
    assert len(first) > 6  # early stopping spread the 6 trials' worth over more trials
    assert trials("again", seed=5) == first
    assert [c for c, *_ in trials("other", seed=6)] != [c for c, *_ in first]


def test_the_time_budget_starts_no_trial_after_it_and_lets_running_ones_finish(
        curve_table: Path, tmp_path: Path) -> None:
    # each replayed trial takes about its recorded CPU seconds / 2, a few seconds
    summary = _replay(curve_table, tmp_path / "budget", sampler="random", scheduler="none",
                      trials=50, replay_speedup=2.0, time_budget_s=2.0, concurrency=2)
    assert 1 <= len(summary.trials) < 50
    assert {t.state for t in summary.trials} == {TrialState.COMPLETED}  # none was stopped
    starts = sorted(t.started for t in summary.trials)
    assert starts[-1] - starts[0] < 2.0 + 1.5  # nothing started well after the budget


def test_a_sampled_table_is_replayed_through_its_surrogate(curve_table: Path,
                                                          tmp_path: Path) -> None:
    """The session's table, declared a sample of a continuous space (as `record-curves
    --sample` writes it): every configuration a search proposes is answered by the surrogate
    fitted on it, through the same searcher, scheduler and records."""
    lines = curve_table.read_text().splitlines()
    header = json.loads(lines[0])
    header["design"] = {"kind": "sobol", "count": 6, "seed": 0, "warm_starts": True}
    header["space"] = CURVE_SPACE.read_text()  # the learning rate continuous, in log scale
    sampled = tmp_path / "sampled.jsonl"
    sampled.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    out = tmp_path / "surrogate"
    summary = _replay(sampled, out, sampler="prior-tpe", scheduler="soft-asha",
                      grace_period=1, reduction_factor=2)
    assert summary.best_trial is not None and summary.test_metrics
    table = load_table(sampled)
    assert table.sampled
    lrs = {t.config["lr"] for t in summary.trials}
    assert lrs - {1e-3, 3e-3}  # learning rates between the recorded ones were answered
    for trial in summary.trials:
        if trial.state is TrialState.COMPLETED:
            curve = lookup(table, trial.config)
            assert trial.score == pytest.approx(max(r["val"]["map@r"] for r in curve.epochs))
    _records_agree(out, summary)


def test_a_capped_grid_covers_every_loss(curve_table: Path, tmp_path: Path) -> None:
    out = tmp_path / "grid"
    opts = SearchOptions(space=str(CURVE_GRID), replay=str(curve_table), out=out,
                         sampler="grid", scheduler="none", trials=3, concurrency=2,
                         replay_speedup=20.0)
    lines: list[str] = []
    summary = run_search(opts, echo=lines.append)
    assert sorted(t.config["loss"] for t in summary.trials) == [
        "contrastive", "multi_similarity", "proxy_anchor"]
    assert summary.study.grid_size == 6
    assert "Grid: 3 of its 6 points ran" in lines[-1]


def test_a_search_starts_from_a_finished_one_with_prior_from(curve_table: Path,
                                                            tmp_path: Path) -> None:
    """--prior-from: the source's best diverse configurations are the target's first trials
    (enqueued before any sampled one), and search.yaml, summary.json, transfer.json and the
    MLflow study run say what came from where."""
    import mlflow
    import yaml

    from dmlsearch.search.reporting.sections import transfer_lines

    source = tmp_path / "source"
    _replay(curve_table, source, trials=6, seed=3)
    out = tmp_path / "target"
    summary = _replay(curve_table, out, trials=6, seed=4, prior_from=(str(source),))
    transfer = json.loads((out / "transfer.json").read_text())
    (from_source,) = transfer["sources"]
    assert from_source["folder"] == str(source.resolve())
    assert from_source["shared"] == ["loss", "lr"]
    points = [p["point"] for p in transfer["points"]]
    # 6 trainings' worth: at most a third of them transferred, then the published defaults
    # (unless a transferred point lies on them)
    transferred = [p for p in transfer["points"] if p["source"] != "space"]
    assert 1 <= len(transferred) <= 2 and len(points) <= len(transferred) + 1
    source_best = json.loads((source / "summary.json").read_text())["best_trial"]
    source_trials = json.loads((source / "summary.json").read_text())["trials"]
    best_config = next(t["config"] for t in source_trials if t["trial_id"] == source_best)
    assert points[0] == {k: best_config[k] for k in ("loss", "lr")}  # its best, first
    # ... kept from ASHA through Ray Tune (search/tune/keep.py): trained to its end
    assert [p["to_end"] for p in transfer["points"]] == [True] + [False] * (len(points) - 1)
    (best_here,) = [t for t in summary.trials
                    if all(t.config.get(k) == v for k, v in points[0].items())]
    assert best_here.full_budget and best_here.iterations == summary.study.max_iterations
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    first = sorted(study.trials, key=lambda t: t.number)[:len(points)]
    assert [t.params for t in first] == points
    assert summary.study.transfer == transfer
    # what the terminal and the report say: the source, then each point and how it fared here
    lines = transfer_lines(summary)
    assert lines[0].startswith(f"Prior from {source.resolve()} (")
    assert len(lines) == 1 + len(points)
    kept = [p for p in transfer["points"] if p["trial"] == "published defaults"]
    assert sum("its published defaults, kept beside" in line for line in lines) == len(kept)
    recorded = yaml.safe_load((out / "search.yaml").read_text())
    assert recorded["transfer"] == transfer
    # the default sampler, and around the transferred points, with --prior-from, the prior's
    assert (yaml.safe_load((source / "search.yaml").read_text())["options"]["sampler"],
            recorded["options"]["sampler"]) == ("tpe", "prior-tpe")
    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string="tags.`dmlsearch.kind` = 'study'")
    assert run.data.tags["dmlsearch.prior_from"] == str(source.resolve())
    assert "transfer.json" in [a.path for a in client.list_artifacts(run.info.run_id)]
