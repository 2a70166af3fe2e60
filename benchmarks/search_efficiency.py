"""Benchmark: how much training each search method needs to find a good configuration (issue #8,
item 3).

One space on the Omniglot sample (``omniglot_background_small1.zip``, 136 classes × 20 images,
read in place, never copied), searched three ways, each with seeds 0, 1, 2 (the seed trains every
trial and seeds the sampler):

* **sweep** — the thesis's protocol: starting from the loss's published defaults, vary one
  parameter at a time over its grid with the others fixed, keep the best value, go on to the
  next parameter (points already trained are not trained again). Trials are
  :func:`trainables.trial.run_trial` calls (two processes at a time; the order of the protocol is
  kept for counting);
* **random** — ``dmlsearch run --sampler random --scheduler none`` with as many trials as the
  sweep trains;
* **tpe+asha** — ``dmlsearch run --sampler tpe --scheduler asha`` (the defaults: grace period a
  quarter of the epochs, reduction factor 3) with twice as many trials (ASHA stops most early).

As every ``dmlsearch run``, both searches answer a proposal that repeats a configuration already
trained to its end from that trial's result instead of training it again. ``--warm-start`` (an
ablation): both also start from the sweep's start point (the space's ``warm_start``, as the
built-in spaces start from their sources' defaults).

All three sample the same grid values (categorical params). **Compute** is epochs trained. For
each seed the target is 99% of the best validation metric the sweep finds; a method's compute
to the target is the epochs its trials trained, counted in trial completion order, up to and
including the first trial whose best validation metric reaches the target (the sweep: in its
protocol order). Each method's pick (its best trial) is retrained on all training classes for
its best validation epoch (``dmlsearch.trainables.retrain.retrain``, as ``dmlsearch run`` retrains; the
searches use the driver's own retrain) and evaluated once on the test classes.

    python benchmarks/search_efficiency.py [--seeds 3] [--epochs 4] [--full] [--data ZIP]
        [--methods sweep random tpe+asha] [--warm-start] [--out results.json]

Default: 3 parameters × 3 values (27 points; the sweep trains 7), 4 epochs per trial, 32-pixel
images: about 10 minutes on 2 quiet cores (each search's start-up, Ray's included, is a large
part of it). ``--full``: 4 parameters × 4 values (256 points) and 8 epochs (~40
minutes). ``--small``: 1 seed, 2 parameters (~5 min).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_DATA = REPO.parent / "shared" / "data" / "omniglot_background_small1.zip"
TARGET_FRACTION = 0.99

BASE: dict[str, Any] = {
    "dataset": "omniglot", "image_size": 32, "backbone": "smallcnn", "protocol": "fixed",
    "val_ratio": 0.2, "loss": "proxy_anchor", "batch_size": 64, "m_per_class": 4,
    "batch_sampler": "m_per_class", "optimizer": "adamw", "weight_decay": 1e-4, "lr_schedule": "step",
    "lr_gamma": 0.5, "metric": "map@r", "threads": 1, "workers": 0, "device": "cpu",
}
# The sweep's starting point: Proxy-Anchor's published defaults (margin 0.1, alpha 32), lr 1e-3,
# a 64-d embedding. Every grid holds its starting value.
START: dict[str, Any] = {"lr": 1e-3, "embedding_size": 64, "loss.margin": 0.1, "loss.alpha": 32}
GRIDS: dict[str, list[Any]] = {  # swept in this order
    "lr": [1e-3, 3e-3, 1e-2],
    "loss.margin": [0.0, 0.1, 0.3],
    "loss.alpha": [8, 32, 64],
}
FULL_GRIDS: dict[str, list[Any]] = {
    "lr": [3e-4, 1e-3, 3e-3, 1e-2],
    "embedding_size": [32, 64, 128, 256],
    "loss.margin": [0.0, 0.1, 0.2, 0.4],
    "loss.alpha": [8, 16, 32, 64],
}
SMALL_GRIDS: dict[str, list[Any]] = {"lr": [3e-4, 1e-3, 3e-3], "loss.alpha": [8, 32, 64]}
EPOCHS, FULL_EPOCHS = 4, 8
THREAD_ENV = {"OMP_NUM_THREADS": "1"}  # = what Ray gives a trial reserving one CPU


# ---- pure helpers (tested in tests/benchmarks) ---------------------------------------------
def better(a: float, b: float | None, mode: str) -> bool:
    """Is score ``a`` better than ``b`` (None: nothing yet) under ``mode`` ("max" or "min")?"""
    return b is None or (a > b if mode == "max" else a < b)


def one_at_a_time_sweep(
    grids: dict[str, Sequence[Any]], start: dict[str, Any],
    evaluate: Callable[[list[dict[str, Any]]], list[float]], *, mode: str = "max",
) -> tuple[list[tuple[dict[str, Any], float]], dict[str, Any]]:
    """The thesis's sweep: for each parameter in order, evaluate its grid values with every other
    parameter at the current point, then fix the best value. ``evaluate`` scores a list of
    points (one stage at a time, so a stage may run in parallel). A point already scored is not
    scored again. Returns the trained points with their scores in protocol order, and the best.
    """
    missing = [k for k, values in grids.items() if k not in start or start[k] not in values]
    if missing:
        raise ValueError(f"the start point must hold a grid value of every parameter: {missing}")
    scored: list[tuple[dict[str, Any], float]] = []
    seen: dict[tuple[tuple[str, Any], ...], float] = {}
    current = dict(start)
    for key, values in grids.items():
        points = [{**current, key: v} for v in values]
        fresh = [p for p in points if _frozen(p) not in seen]
        for point, score in zip(fresh, evaluate(fresh) if fresh else [], strict=True):
            seen[_frozen(point)] = score
            scored.append((point, score))
        best_value, best_score = current[key], seen.get(_frozen(current))
        for point in points:
            if better(seen[_frozen(point)], best_score, mode):
                best_value, best_score = point[key], seen[_frozen(point)]
        current = {**current, key: best_value}
    return scored, current


def _frozen(point: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items()))


def compute_to_target(trials: Sequence[tuple[int, float | None]], target: float, *,
                      mode: str = "max") -> int | None:
    """Epochs trained, trials in completion order ``(epochs, best score)``, up to and including
    the first trial whose score reaches ``target`` (≥ for max, ≤ for min); None if none does."""
    total = 0
    for epochs, score in trials:
        total += epochs
        if score is not None and (score >= target if mode == "max" else score <= target):
            return total
    return None


def target_of(best: float, mode: str = "max", fraction: float = TARGET_FRACTION) -> float:
    """99% of the sweep's best (max metrics); for a min metric, the best divided by 0.99."""
    return best * fraction if mode == "max" else best / fraction


# ---- the sweep (plain trials, no orchestration) --------------------------------------------
_DATASET: dict[str, Any] = {}


def _train(flat: dict[str, Any]) -> dict[str, Any]:
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import run_trial

    cfg = TrialConfig.from_flat(flat)
    key = (cfg.dataset, cfg.data_root, cfg.image_size)
    if key not in _DATASET:
        _DATASET[key] = load_for(cfg)
    result = run_trial(cfg, dataset=_DATASET[key])
    return {"score": result.score, "epochs": result.epochs_run,
            "best_epoch": result.fold_best_epochs[0], "metrics": result.best_metrics}


def run_sweep(pool: ProcessPoolExecutor, grids: dict[str, list[Any]], base: dict[str, Any],
              seed: int) -> dict[str, Any]:
    details: list[dict[str, Any]] = []

    def evaluate(points: list[dict[str, Any]]) -> list[float]:
        results = list(pool.map(_train, [{**base, **p, "seed": seed} for p in points]))
        details.extend({"point": p, **r} for p, r in zip(points, results, strict=True))
        return [r["score"] for r in results]

    started = time.perf_counter()
    scored, best_point = one_at_a_time_sweep(grids, {k: START[k] for k in grids}, evaluate)
    best = next(d for d in details if d["point"] == best_point)
    return {"trials": [{"point": d["point"], "score": d["score"], "epochs": d["epochs"],
                        "best_epoch": d["best_epoch"]} for d in details],
            "order": [(d["epochs"], d["score"]) for d in details],
            "pick": {"point": best_point, "score": best["score"],
                     "best_epoch": best["best_epoch"]},
            "seconds": time.perf_counter() - started}


def _retrain(flat: dict[str, Any]) -> dict[str, float]:
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.retrain import retrain

    return {k: float(v) for k, v in retrain(TrialConfig.from_flat(flat)).test_metrics.items()}


# ---- the searches (dmlsearch run, in a child process: Ray's output goes to its log) --------
def write_space(path: Path, grids: dict[str, list[Any]], base: dict[str, Any], *,
                warm_start: bool = False) -> None:
    """The searches' space file. ``warm_start`` (the ablation): its first point is the sweep's
    start (the published defaults), as the built-in spaces start from theirs (e.g.
    ``spaces/files/thesis_search_proxy_anchor.yaml``)."""
    import yaml

    body: dict[str, Any] = {
        "name": "search_efficiency",
        "description": "benchmarks/search_efficiency.py: Proxy-Anchor on the Omniglot sample",
        "source": "thesis one-parameter-at-a-time sweep protocol (SPEC §5), a small grid",
        "base": base,
        "params": {k: {"type": "categorical", "choices": v} for k, v in grids.items()},
    }
    if warm_start:
        body["warm_start"] = [{k: START[k] for k in grids}]
    path.write_text(yaml.safe_dump(body, sort_keys=False))


def search_child(space: Path, out: Path, sampler: str, scheduler: str, trials: int,
                 seed: int, tpe_startup: int | None = None) -> dict[str, Any]:
    """``dmlsearch run`` through the driver API; trial completions in the order the driver saw
    them (the tracker's events). ``tpe_startup``: the ablation, TPE with that many random
    start-up trials instead of Optuna's 10."""
    import optuna

    from dmlsearch.search import driver
    from dmlsearch.search import ray_backend
    from dmlsearch.search.options import SearchOptions
    from dmlsearch.search.tracking import Tracker
    from dmlsearch.spaces import config_from_sample
    from dmlsearch.spaces import load_space

    if tpe_startup is not None:
        ray_backend.make_sampler = lambda settings: optuna.samplers.TPESampler(
            seed=settings.seed, n_startup_trials=tpe_startup)

    keys = list(dict.fromkeys(p.key for p in load_space(str(space)).params))

    finished: list[tuple[float, str]] = []
    inner = Tracker.trial_finished

    def trial_finished(self: Tracker, trial_id: str, state: str, reason: str | None) -> None:
        finished.append((time.time(), trial_id))
        inner(self, trial_id, state, reason)

    Tracker.trial_finished = trial_finished  # type: ignore[method-assign]
    opts = SearchOptions(space=str(space), sampler=sampler, scheduler=scheduler, trials=trials,
                         concurrency=2, cpus_per_trial=1.0, gpus_per_trial=0.0, seed=seed,
                         out=out, retrain=True)
    started = time.perf_counter()
    outcome = driver.run_search(opts, echo=lambda _line: None)
    records = {r.trial_id: r for r in outcome.records}
    order = [tid for _, tid in finished if tid in records]
    order += [tid for tid in records if tid not in order]  # none expected
    rows = [{"trial_id": tid, "state": records[tid].state, "epochs": records[tid].iterations,
             "score": records[tid].score,
             "point": {k: config_from_sample(records[tid].config)[k] for k in keys}}
            for tid in order]
    best = outcome.best
    return {"trials": rows, "order": [(r["epochs"], r["score"]) for r in rows],
            "pick": None if best is None else {
                "trial_id": best.trial_id, "score": best.score,
                "best_epoch": best.last_result.get("best_epoch"),
                "point": next(r["point"] for r in rows if r["trial_id"] == best.trial_id)},
            "test_metrics": outcome.final.test_metrics if outcome.final else None,
            "repeats_answered": outcome.repeats, "seconds": time.perf_counter() - started}


METHODS = {  # name: (sampler, scheduler, TPE start-up trials, trial budget × the sweep's)
    "random": ("random", "none", None, 1),
    "tpe+asha": ("tpe", "asha", None, 2),
    "tpe3+asha": ("tpe", "asha", 3, 2),  # ablation: 3 random start-up trials, not Optuna's 10
}


def _run_search(space: Path, work: Path, method: str, trials: int, seed: int) -> dict[str, Any]:
    sampler, scheduler, startup, _ = METHODS[method]
    tag = f"{method.replace('+', '-')}-s{seed}"
    result, log = work / f"{tag}.json", work / f"{tag}.log"
    with log.open("w") as sink:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(space),
             "--child-out", str(work / tag), "--child-result", str(result), "--child-sampler",
             sampler, "--child-scheduler", scheduler, "--child-trials", str(trials),
             "--child-seed", str(seed)]
            + ([] if startup is None else ["--child-tpe-startup", str(startup)]),
            stdout=sink, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed; log:\n{log.read_text()[-4000:]}")
    return json.loads(result.read_text())


# ---- summary -------------------------------------------------------------------------------
def _mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.fmean(values):.4g} ± {statistics.stdev(values):.2g}"


GOAL = 1.25  # issue #8: TPE + ASHA within 25% of the sweep's compute


def repeats(points: list[dict[str, Any]]) -> int:
    """How many trials trained a configuration an earlier trial had already trained."""
    seen: set[tuple[tuple[str, Any], ...]] = set()
    count = 0
    for point in points:
        key = _frozen(point)
        count += key in seen
        seen.add(key)
    return count


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sweeps = runs["sweep"]
    for method, rs in runs.items():
        per_seed = []
        for r, sweep in zip(rs, sweeps, strict=True):
            target = target_of(max(s for _, s in sweep["order"]))
            need = compute_to_target([tuple(x) for x in r["order"]], target)
            sweep_need = compute_to_target([tuple(x) for x in sweep["order"]], target)
            per_seed.append({
                "target": target, "compute_to_target": need,
                "ratio_to_sweep": None if need is None else need / sweep_need,
                "total_epochs": sum(e for e, _ in r["order"]), "trials": len(r["order"]),
                "repeated_trials": repeats([t["point"] for t in r["trials"]]),
                "repeats_answered": r.get("repeats_answered", 0),  # not trained (the searches)
                "best_val": max(s for _, s in r["order"] if s is not None),
                "test_map@r": r["test_metrics"]["map@r"],
                "test_precision@1": r["test_metrics"]["precision@1"],
                "pick": r["pick"]["point"], "seconds": r["seconds"],
            })
        ratios = [p["ratio_to_sweep"] for p in per_seed]
        reached = [x for x in ratios if x is not None]
        out[method] = {
            "per_seed": per_seed, "reached": len(reached), "seeds": len(per_seed),
            "ratio_to_sweep_mean": statistics.fmean(reached) if len(reached) == len(ratios)
            else None,  # undefined unless every seed reached the target
            "total_epochs_mean": statistics.fmean(p["total_epochs"] for p in per_seed),
            "goal_met": len(reached) == len(ratios) and statistics.fmean(reached) <= GOAL,
        }
    return out


def print_report(summary: dict[str, Any]) -> None:
    print("\nCompute = epochs trained; target = 99% of the sweep's best validation MAP@R (same "
          "seed). –: not reached within the method's budget.\n")
    print("| method | reached | epochs to target (per seed) | × sweep (per seed) | × sweep "
          "(mean) | epochs in total | trials (repeats trained; answered) | best val MAP@R | "
          "test MAP@R of pick | "
          "test P@1 of pick |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for method, s in summary.items():
        ps = s["per_seed"]
        need = ", ".join("–" if p["compute_to_target"] is None else str(p["compute_to_target"])
                         for p in ps)
        per = ", ".join("–" if p["ratio_to_sweep"] is None else f"{p['ratio_to_sweep']:.2f}"
                        for p in ps)
        mean = "–" if s["ratio_to_sweep_mean"] is None else f"{s['ratio_to_sweep_mean']:.2f}"
        trials = ", ".join(f"{p['trials']} ({p['repeated_trials']}; {p['repeats_answered']})"
                           for p in ps)
        print(f"| {method} | {s['reached']}/{s['seeds']} | {need} | {per} | {mean} | "
              f"{_mean_std([p['total_epochs'] for p in ps])} | {trials} | "
              f"{_mean_std([p['best_val'] for p in ps])} | "
              f"{_mean_std([p['test_map@r'] for p in ps])} | "
              f"{_mean_std([p['test_precision@1'] for p in ps])} |")
    for method, s in summary.items():
        if method.startswith("tpe"):
            print(f"\ngoal ({method} reaches the target on every seed, within {GOAL:.2f}× the "
                  f"sweep's compute on average): {'met' if s['goal_met'] else 'not met'}")
    print("\npicks:")
    for method, s in summary.items():
        for seed, p in enumerate(s["per_seed"]):
            print(f"  {method:9s} seed {seed}: {p['pick']} (val {p['best_val']:.4f}, "
                  f"{p['seconds']:.0f} s)")


def _machine() -> dict[str, Any]:
    import torch

    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, help="seeds 0..n-1 (default 3; --small 1)")
    parser.add_argument("--epochs", type=int, help=f"epochs per trial (default {EPOCHS}, "
                                                   f"--full {FULL_EPOCHS})")
    parser.add_argument("--full", action="store_true", help="4 values per parameter, 8 epochs")
    parser.add_argument("--small", action="store_true", help="smoke test: 1 seed, 2 parameters")
    parser.add_argument("--methods", nargs="+", default=["sweep", "random", "tpe+asha"],
                        choices=["sweep", *METHODS],
                        help="tpe3+asha: ablation, TPE with 3 random start-up trials")
    parser.add_argument("--warm-start", action="store_true",
                        help="ablation: the searches start from the sweep's start point")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, help="keep the searches' folders and logs here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-sampler", help=argparse.SUPPRESS)
    parser.add_argument("--child-scheduler", help=argparse.SUPPRESS)
    parser.add_argument("--child-trials", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-tpe-startup", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        body = search_child(args.child, args.child_out, args.child_sampler,
                            args.child_scheduler, args.child_trials, args.child_seed,
                            args.child_tpe_startup)
        args.child_result.write_text(json.dumps(body))
        return 0
    if not args.data.is_file():
        print(f"search_efficiency: Omniglot sample not found at {args.data}; give --data PATH "
              "(omniglot_background_small1.zip)", file=sys.stderr)
        return 2
    if "sweep" not in args.methods:
        parser.error("--methods must include sweep (it sets the target)")

    grids = SMALL_GRIDS if args.small else FULL_GRIDS if args.full else GRIDS
    epochs = args.epochs or (FULL_EPOCHS if args.full else EPOCHS)
    seeds = args.seeds or (1 if args.small else 3)
    base = {**BASE, "data_root": str(args.data.resolve()), "epochs": epochs,
            "lr_step_size": max(1, epochs // 2)}
    started, load_start = time.time(), os.getloadavg()
    os.environ.update(THREAD_ENV)  # the sweep's processes inherit it, as Ray's workers get it
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory(prefix="search_efficiency_") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        space = work / "space.yaml"
        write_space(space, grids, base, warm_start=args.warm_start)
        with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
            for seed in range(seeds):
                sweep = run_sweep(pool, grids, base, seed)
                pick = {**base, **sweep["pick"]["point"], "seed": seed,
                        "epochs": max(1, int(sweep["pick"]["best_epoch"]))}
                sweep["test_metrics"] = pool.submit(_retrain, pick).result()
                runs["sweep"].append(sweep)
                n = len(sweep["order"])
                print(f"seed {seed} sweep: {n} trials, best val {sweep['pick']['score']:.4f} at "
                      f"{sweep['pick']['point']}, {sweep['seconds']:.0f} s (load "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
                for method in [m for m in args.methods if m != "sweep"]:
                    trials = n * METHODS[method][3]
                    r = _run_search(space, work, method, trials, seed)
                    runs[method].append(r)
                    print(f"seed {seed} {method}: {len(r['order'])} trials, "
                          f"{sum(e for e, _ in r['order'])} epochs, best val "
                          f"{r['pick']['score']:.4f}, {r['seconds']:.0f} s (load "
                          f"{os.getloadavg()[0]:.1f})", flush=True)
    summary = summarise(runs)
    print_report(summary)
    wall, load_end = time.time() - started, os.getloadavg()
    print(f"\nwall time {wall:.0f} s; load average at the start "
          f"{' '.join(f'{x:.2f}' for x in load_start)}, at the end "
          f"{' '.join(f'{x:.2f}' for x in load_end)}")
    if args.out:
        args.out.write_text(json.dumps({
            "command": sys.argv, "seeds": seeds, "epochs": epochs, "grids": grids,
            "warm_start": args.warm_start,
            "start": START, "base": base, "machine": _machine(), "load_start": load_start,
            "load_end": load_end, "wall_seconds": wall, "summary": summary, "runs": runs,
        }, indent=2, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
