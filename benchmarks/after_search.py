"""Benchmark: the steps after a large search (plots, importance, closing the trials' MLflow
runs, summary) against a baseline revision's, in one job (issue #25: at most a third of the time
they took before).

1. One search of ``--trials`` one-epoch replayed trials (``benchmarks/search_overhead.py``'s
   table: every configuration's first epoch at no cost; random sampler, no early stopping,
   concurrency 4), run with this checkout's code. The steps after it are timed as they run,
   the three that changed (the study's plots, the importance analysis, closing the trial runs
   left open: ``Tracker.close_dangling``) apart from the rest (summary, study run, records),
   which is the same code in both revisions.
2. The three changed steps again on that study, ``--repeats`` times each, alternating between
   this checkout and ``--baseline`` (``git archive``: the code before the change; issue #25's
   own "before" is ``594fe48^``), each in a fresh child process that imports only its own tree
   (the runs are closed on a copy of the study's MLflow store).
3. After the search, per revision: the rest (step 1) + the median of its changed steps
   (step 2); the ratio is the measurement. The importance each wrote is compared: the largest
   difference of a parameter's fANOVA importance between the sample this checkout analyses
   and every trial, per analysis, and whether both rank the same parameter first.

    python benchmarks/after_search.py [--trials 3000] [--repeats 3] [--baseline 594fe48^]
        [--out after.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import TABLES  # noqa: E402
from benchmarks.search_overhead import one_epoch_space  # noqa: E402
from benchmarks.search_overhead import one_epoch_table  # noqa: E402

CHILD = textwrap.dedent('''
    import json, sys, time
    from pathlib import Path
    import optuna
    try:
        from dmlsearch.search.results import read_summary
    except ImportError:  # before the modules were split by concern
        from dmlsearch.search.record import read_summary
    from dmlsearch.search.reporting import importance, plots
    from dmlsearch.search.study_dir import StudyDir
    from dmlsearch.search.tracking import Tracker
    from dmlsearch.spaces import load_space
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder, space_file, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    study_dir = StudyDir(folder)
    summary = read_summary(study_dir)
    params = load_space(space_file).params
    started = time.perf_counter()
    plots.study_plots(summary.trials, params, summary.study.metric, summary.study.mode,
                      out / "plots")
    drawn = time.perf_counter()
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'optuna.db'}")
    report = importance.analyse_study(study, min_trials=importance.MIN_TRIALS)
    importance.write_importance(report, StudyDir(out))
    ended = time.perf_counter()
    (out / "mlflow.db").write_bytes((folder / "mlflow.db").read_bytes())  # a copy to close
    tracker = Tracker(f"sqlite:///{out / 'mlflow.db'}", folder.name)
    tracker.attach_study()
    closing = time.perf_counter()
    tracker.close_dangling()
    closed = time.perf_counter()
    print(json.dumps({"plots_s": drawn - started, "importance_s": ended - drawn,
                      "close_runs_s": closed - closing,
                      "code": importance.__file__,
                      "analysed": [[a.name, a.trials] for a in report.analyses]}))
''')


def _tree(revision: str, work: Path) -> Path:
    """``revision``'s files, importable as ``dmlsearch`` (as the editable install maps them)."""
    root = work / f"tree-{revision.replace('/', '_')}"
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return _package(root, work / f"pkg-{revision.replace('/', '_')}")


def _package(root: Path, where: Path) -> Path:
    """A folder holding ``dmlsearch/{search,trainables,spaces}`` linked to ``root``'s (put on
    PYTHONPATH, it wins over the editable install)."""
    package = where / "dmlsearch"
    package.mkdir(parents=True, exist_ok=True)
    for name in ("search", "trainables", "spaces"):
        (package / name).symlink_to(root / name)
    return where


def _timed_search(trials: int, table: Path, space: Path, work: Path) -> dict[str, Any]:
    """The search, and its after-search steps timed: all of them, plots, importance, closing
    the trials' MLflow runs."""
    from dmlsearch.search import lifecycle
    from dmlsearch.search import run
    from dmlsearch.search.options import SearchOptions
    from dmlsearch.search.tracking import Tracker

    spent = {"plots_s": 0.0, "importance_s": 0.0, "close_runs_s": 0.0}

    def timed(name: str, inner: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return call

    marks: dict[str, float] = {}
    originals = (run.run_tune, lifecycle.study_plots, lifecycle.study_importance,
                 lifecycle.write_importance, Tracker.close_dangling)

    def timed_run_tune(*args: Any, **kwargs: Any) -> Any:
        try:
            return originals[0](*args, **kwargs)
        finally:
            marks["tune_end"] = time.time()

    run.run_tune = timed_run_tune  # what run_search calls; the steps after it: lifecycle's
    lifecycle.study_plots = timed("plots_s", originals[1])
    lifecycle.study_importance = timed("importance_s", originals[2])
    lifecycle.write_importance = timed("importance_s", originals[3])
    Tracker.close_dangling = timed("close_runs_s", originals[4])  # type: ignore[method-assign]
    try:
        opts = SearchOptions(space=str(space), sampler="random", scheduler="none",
                             trials=trials, concurrency=4, out=work / f"n{trials}",
                             retrain=False, register=False, replay=str(table),
                             replay_speedup=1e9)
        summary = run.run_search(opts, echo=lambda _line: None)
        ended = time.time()
    finally:
        (run.run_tune, lifecycle.study_plots, lifecycle.study_importance,
         lifecycle.write_importance, Tracker.close_dangling) = originals
    after = ended - marks["tune_end"]
    return {"trials": len(summary.trials), "folder": str(work / f"n{trials}"),
            "after_search_s": after, **spent,
            "rest_s": after - sum(spent.values())}


def _differences(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per analysis: the largest |importance difference| of a parameter between this checkout's
    runs and the baseline's, and whether they rank the same parameter first."""
    def gap(a: dict[str, float], b: dict[str, float]) -> float:
        return max((abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b)), default=0.0)

    out: dict[str, dict[str, Any]] = {}
    base = [r["importance"] for r in runs["baseline"]]
    mine = [r["importance"] for r in runs["current"]]
    for name in base[0]:
        pairs = [(m[name], b[name]) for m in mine for b in base if name in m and name in b]
        out[name] = {
            "sampled_vs_all": max(gap(m, b) for m, b in pairs),
            "same_top": all(max(m, key=m.get) == max(b, key=b.get) for m, b in pairs)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default="594fe48^",
                        help="the revision before the change (default: before issue #25)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="after-search-"))
    spec = TABLES["omniglot-grid"]
    table, space = work / "one_epoch.jsonl", work / "one_epoch_space.yaml"
    one_epoch_table(spec.table, table)
    one_epoch_space(Path(spec.space), space)
    print(f"after_search: a {args.trials}-trial search in {work}", flush=True)
    search = _timed_search(args.trials, table, space, work)
    print(f"search done: after it {search['after_search_s']:.1f} s (plots "
          f"{search['plots_s']:.1f}, importance {search['importance_s']:.1f}, closing the "
          f"runs {search['close_runs_s']:.1f}, rest {search['rest_s']:.1f})", flush=True)
    trees = {"baseline": _tree(args.baseline, work), "current": _package(REPO, work / "pkg")}
    script = work / "child.py"
    script.write_text(CHILD)
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
    for repeat in range(args.repeats):
        order = ["baseline", "current"] if repeat % 2 == 0 else ["current", "baseline"]
        for version in order:
            out = work / f"{version}-{repeat}"
            out.mkdir()
            env = {**os.environ, "PYTHONPATH": str(trees[version])}
            proc = subprocess.run([sys.executable, str(script), search["folder"], str(space),
                                   str(out)], env=env, capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["load"] = os.getloadavg()[0]
            row["importance"] = {a["name"]: a["importance"] for a in json.loads(
                (out / "importance" / "importance.json").read_text())["analyses"]}
            runs[version].append(row)
            print(f"[{repeat + 1}/{args.repeats}] {version:8s}: plots {row['plots_s']:.1f} s, "
                  f"importance {row['importance_s']:.1f} s, closing the runs "
                  f"{row['close_runs_s']:.1f} s (load {row['load']:.1f}; "
                  f"{row['analysed']})", flush=True)
    result: dict[str, Any] = {"trials": search["trials"], "search": search, "runs": runs,
                              "baseline_revision": args.baseline}
    for version, rows in runs.items():
        steps = [r["plots_s"] + r["importance_s"] + r["close_runs_s"] for r in rows]
        result[version] = {
            "plots_s": statistics.median(r["plots_s"] for r in rows),
            "importance_s": statistics.median(r["importance_s"] for r in rows),
            "close_runs_s": statistics.median(r["close_runs_s"] for r in rows),
            "changed_steps_s": statistics.median(steps),
            "changed_steps_range_s": [min(steps), max(steps)],
            "after_search_s": search["rest_s"] + statistics.median(steps)}
    result["ratio"] = result["current"]["after_search_s"] / result["baseline"]["after_search_s"]
    result["importance_difference"] = _differences(runs)
    result["machine"] = {"cpu": platform.processor(), "cores": os.cpu_count(),
                         "python": platform.python_version()}
    for version in ("baseline", "current"):
        r = result[version]
        print(f"{version:8s}: after the search {r['after_search_s']:.1f} s = rest "
              f"{search['rest_s']:.1f} + plots {r['plots_s']:.1f} + importance "
              f"{r['importance_s']:.1f} + closing the runs {r['close_runs_s']:.1f} (medians "
              f"of {args.repeats})")
    print(f"current / baseline: {result['ratio']:.2f} (goal <= 0.33)")
    for name, diff in result["importance_difference"].items():
        print(f"importance, {name}: sampled vs all trials max |diff| "
              f"{diff['sampled_vs_all']:.3f}; same top parameter: {diff['same_top']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
