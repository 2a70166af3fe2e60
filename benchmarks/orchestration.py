"""Benchmark: what ``dmlsearch run`` costs on top of the trials it runs (issue #8, item 2).

The same N trials (same flat configs, seeds and epochs; no early stopping, so every trial trains
all its epochs) run two ways, each in a fresh child process (its own session) whose wall clock,
spawn to exit, is measured here:

* **plain** — a Python loop calling :func:`trainables.trial.run_trial` on the flat configs; at
  concurrency 2 the same loop over a ``ProcessPoolExecutor`` of 2 spawned processes (each
  imports the trainables and loads the dataset once);
* **dmlsearch** — the real ``dmlsearch run`` path (:func:`search.run.run_search`, what the CLI
  calls): a grid space of N points, ``--sampler grid --scheduler none --no-retrain
  --cpus-per-trial 1 --concurrency C``; Ray Tune, Optuna (SQLite study), MLflow (SQLite store),
  a checkpoint per epoch, exactly as a user's search;
* **dmlsearch-fresh** (``--ablation``) — the same with a fresh Ray worker process for every
  trial, as Ray does by default (:data:`search.tune.tuner.REUSE_WORKERS` set to False).

Threads are pinned alike in both: every config sets ``threads=1`` (torch) and the plain children
run with ``OMP_NUM_THREADS=1``, which is what Ray gives a worker reserving one CPU (faiss and
OpenMP follow it). The trials are therefore bit-identical in all arms: the script checks that
every trial's validation score is the same.

Reported: wall-time ratio to plain per concurrency, fixed cost per trial ``(arm - plain) / N``
in seconds, the speed-up of concurrency 2 over sequential in each arm; and, because wall time
on a shared machine moves with other people's work, the CPU seconds of every process of each
child's session (sampled from ``/proc``: the driver, Ray's daemons, the trial workers), which
move less (contention for a core still inflates them by 10-15%). Where the difference goes: the driver's phases (imports and checks, MLflow/Optuna
set-up, ``ray.init``, the trials, shutdown) and each trial's first epoch (a fresh worker's
imports) against its later ones.

    python benchmarks/orchestration.py [--trials 4] [--epochs 20] [--concurrency 1 2]
        [--ablation] [--small] [--out results.json] [--keep DIR]

The default (4 trials of 20 epochs of ``smallcnn`` on the built-in ``glyphs``, 30-37 s a trial
on a quiet core) takes about 10 minutes on 2 cores; ``--ablation`` adds about 5; ``--small`` (2
trials of 3 epochs) takes about 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The trial: the quick-start space's base with one loss, fixed; only the learning rate differs
# between trials (a grid of N values), so every trial costs about the same.
BASE: dict[str, Any] = {
    "dataset": "glyphs", "backbone": "smallcnn", "protocol": "fixed", "val_ratio": 0.2,
    "batch_size": 64, "m_per_class": 4, "batch_sampler": "m_per_class", "optimizer": "adamw",
    "lr_schedule": "step", "lr_step_size": 4, "lr_gamma": 0.5, "weight_decay": 1.0e-4,
    "metric": "map@r", "loss": "multi_similarity", "embedding_size": 64, "patience": 0,
    "threads": 1, "workers": 0, "device": "cpu",
}
EPOCHS, TRIALS = 20, 4
SMALL_EPOCHS, SMALL_TRIALS = 3, 2
THREAD_ENV = {"OMP_NUM_THREADS": "1"}  # = what Ray sets for a worker reserving 1 CPU


def learning_rates(n: int) -> list[float]:
    """n learning rates spread geometrically over [5e-4, 4e-3] (rounded: exact in YAML)."""
    if n == 1:
        return [1e-3]
    return [float(f"{5e-4 * 8 ** (i / (n - 1)):.3g}") for i in range(n)]


def write_space(path: Path, *, epochs: int, lrs: list[float], dataset: str,
                data_root: str | None) -> None:
    import yaml

    base = {**BASE, "epochs": epochs, "dataset": dataset}
    if data_root:
        base["data_root"] = data_root
    path.write_text(yaml.safe_dump({
        "name": "orchestration_bench",
        "description": "benchmarks/orchestration.py: N trials differing only in lr",
        "source": "none: a benchmark grid, not a published one",
        "base": base,
        "params": {"lr": {"type": "categorical", "choices": lrs}},
    }, sort_keys=False))


def search_options(space: Path, *, concurrency: int, trials: int, out: Path | None) -> Any:
    from dmlsearch.search.options import SearchOptions

    return SearchOptions(space=str(space), sampler="grid", scheduler="none", trials=trials,
                         concurrency=concurrency, cpus_per_trial=1.0, gpus_per_trial=0.0,
                         retrain=False, seed=0, out=out)


def trial_configs(space: Path, trials: int) -> list[dict[str, Any]]:
    """The flat configs the search's trials get: the space's base (with the driver's overrides
    and absolute paths) plus each grid point, as :meth:`spaces.Space.define_by_run` builds them
    and :func:`spaces.config_from_sample` reads them in the Ray worker."""
    from dmlsearch.search.prepare import prepare
    from dmlsearch.spaces import config_from_sample

    prepared = prepare(search_options(space, concurrency=1, trials=trials, out=None))
    return [config_from_sample({**prepared.space.base, **point})
            for point in prepared.points[:prepared.trials]]


def fixed_cost_per_trial(orchestrated_s: float, plain_s: float, trials: int) -> float:
    """Seconds the orchestration adds per trial: (orchestrated − plain) / N."""
    return (orchestrated_s - plain_s) / trials


def epoch_split(epoch_seconds: list[float]) -> dict[str, float]:
    """A trial's first epoch (start-up: imports, data, model) vs its later epochs (median)."""
    later = epoch_seconds[1:] or epoch_seconds
    return {"first": epoch_seconds[0], "later_median": statistics.median(later),
            "total": sum(epoch_seconds)}


# ---- the children ------------------------------------------------------------------------
_DATASET: dict[str, Any] = {}


def _trial(flat: dict[str, Any]) -> dict[str, Any]:
    """One trial in this process (plain arm); the dataset is loaded once per process."""
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import run_trial

    cfg = TrialConfig.from_flat(flat)
    key = (cfg.dataset, cfg.data_root, cfg.image_size)
    started = time.perf_counter()
    if key not in _DATASET:
        _DATASET[key] = load_for(cfg)
    ticks: list[float] = []
    result = run_trial(cfg, dataset=_DATASET[key],
                       on_progress=lambda p, s: ticks.append(time.perf_counter()))
    epochs = [b - a for a, b in zip([started] + ticks, ticks)]
    return {"lr": flat["lr"], "score": result.score, "epochs": result.epochs_run,
            "seconds": time.perf_counter() - started, "epoch_seconds": epochs, "pid": os.getpid()}


def _warm() -> None:
    import dmlsearch.trainables.trial  # noqa: F401  (the imports a pool worker pays once)


def plain_child(configs: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    marks = {"main": time.time()}  # the trainables are imported by the first trial
    if concurrency == 1:
        trials = [_trial(flat) for flat in configs]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(concurrency, mp_context=mp.get_context("spawn"),
                                 initializer=_warm) as pool:
            trials = list(pool.map(_trial, configs))
    marks["trials_done"] = time.time()
    return {"marks": marks, "trials": trials}


def orchestrated_child(space: Path, out: Path, trials: int, concurrency: int, *,
                       reuse: bool = True) -> dict[str, Any]:
    """``dmlsearch run`` through the driver API, with timestamps around its phases.
    ``reuse=False``: the ablation, a fresh Ray worker process for every trial."""
    marks: dict[str, float] = {"main": time.time()}
    from dmlsearch.search import lifecycle
    from dmlsearch.search import run
    from dmlsearch.search.tune import tuner

    marks["imported"] = time.time()
    if not reuse:
        tuner.REUSE_WORKERS = False

    def timed(module: Any, name: str) -> None:
        inner = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:  # the first call's times
            marks.setdefault(f"{name}_start", time.time())
            try:
                return inner(*args, **kwargs)
            finally:
                marks.setdefault(f"{name}_end", time.time())
        setattr(module, name, wrapper)

    for name in ("init_ray", "shutdown_ray"):
        timed(lifecycle, name)
    for name in ("prepare", "run_tune"):
        timed(run, name)
    summary = run.run_search(search_options(space, concurrency=concurrency, trials=trials,
                                            out=out), echo=lambda _line: None)
    marks["search_done"] = time.time()
    rows = []
    for record in summary.trials:
        epochs, pid = [], None
        if record.path:
            lines = (Path(record.path) / "result.json").read_text().splitlines()
            results = [json.loads(line) for line in lines if line.strip()]
            epochs = [r["time_this_iter_s"] for r in results]
            pid = results[-1].get("pid") if results else None
        rows.append({"lr": record.config.get("lr"), "score": record.score,
                     "epochs": record.iterations, "seconds": record.seconds,
                     "epoch_seconds": epochs, "state": record.state.value, "pid": pid})
    return {"marks": marks, "trials": rows}


class SessionCPU:
    """CPU seconds (user + system) of every process of one session (``setsid``), sampled from
    ``/proc`` while it runs: the child and all it starts — Ray's GCS, raylet, dashboard and log
    processes and its trial workers keep the child's session id even when re-parented. Unlike
    wall time it does not count waiting, though contention for a core still inflates it. Processes that live less than
    one sampling period are missed (Linux only; elsewhere ``seconds`` stays None)."""

    def __init__(self, sid: int, period: float = 0.2) -> None:
        self.sid, self.period = sid, period
        self.last: dict[tuple[int, int], float] = {}
        self.kind: dict[tuple[int, int], str] = {}
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self.available = Path("/proc/self/stat").exists()

    def _sample(self) -> int:
        alive = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                raw = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
            if int(fields[3]) != self.sid:  # field 6: session id
                continue
            alive += 1
            utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])
            key = (int(entry.name), start)
            self.last[key] = (utime + stime) / self._tick
            if key not in self.kind:
                self.kind[key] = self._classify(key[0], raw)
        return alive

    def _classify(self, pid: int, stat: str) -> str:
        """driver (the child itself), trial workers (Ray's ``ray::`` worker processes, the plain
        pool's processes) or Ray's own daemons."""
        if pid == self.sid:
            return "driver"
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmdline = ""
        if cmdline.startswith("ray::"):
            return "ray daemons" if "Agent" in cmdline or "Supervisor" in cmdline else "workers"
        if "default_worker.py" in cmdline:  # a Ray worker before it renames itself ray::...
            return "workers"
        if comm in ("gcs_server", "raylet") or "/ray/" in cmdline:
            return "ray daemons"
        return "workers"

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, seconds in self.last.items():
            out[self.kind[key]] = out.get(self.kind[key], 0.0) + seconds
        return out

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.period)

    def start(self) -> SessionCPU:
        if self.available:
            self._thread.start()
        return self

    def stop(self, *, linger: float = 30.0) -> None:
        """Stop sampling once no process of the session is left (or after ``linger`` s)."""
        if not self.available:
            return
        self._stop.set()
        self._thread.join()
        deadline = time.time() + linger
        while self._sample() and time.time() < deadline:
            time.sleep(self.period)

    @property
    def seconds(self) -> float | None:
        return sum(self.last.values()) if self.available else None


def _run_child(args: list[str], env_extra: dict[str, str], log: Path) -> dict[str, Any]:
    result = log.with_suffix(".json")
    env = {**os.environ, **env_extra}
    load = os.getloadavg()
    spawned = time.time()
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args,
                                 "--result", str(result)], stdout=sink,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        cpu = SessionCPU(proc.pid).start()
        returncode = proc.wait()
        ended = time.time()
        cpu.stop()
    if returncode != 0:
        raise RuntimeError(f"child {args} failed; its log:\n{log.read_text()[-4000:]}")
    body = json.loads(result.read_text())
    body.update(wall=ended - spawned, spawned=spawned, ended=ended, load_before=load,
                load_after=os.getloadavg(), cpu_seconds=cpu.seconds, cpu_by_kind=cpu.by_kind())
    return body


def _phases(run: dict[str, Any]) -> dict[str, float]:
    """Seconds of each phase of a child, from its spawn."""
    m, t0 = run["marks"], run["spawned"]
    out = {"python start": m["main"] - t0}
    if "prepare_start" in m:
        out["driver imports"] = m["imported"] - m["main"]
        out["prepare (checks, data)"] = m["prepare_end"] - m["prepare_start"]
        # The driver sets up its MLflow and Optuna stores in a thread while Ray starts.
        out["stores + ray.init (overlapped)"] = m["run_tune_start"] - m["prepare_end"]
        out["of which ray.init"] = m["init_ray_end"] - m["init_ray_start"]
        out["Tune: trials"] = m["run_tune_end"] - m["run_tune_start"]
        out["ray.shutdown"] = m["shutdown_ray_end"] - m["shutdown_ray_start"]
        out["after the search"] = m["search_done"] - m["shutdown_ray_end"]
    else:
        out["trials"] = m["trials_done"] - m["main"]
    out["exit"] = run["ended"] - max(v for k, v in m.items())
    return out


ARMS = ("plain", "dmlsearch", "dmlsearch-fresh")  # the last: --ablation only


def summarise(runs: dict[str, dict[int, dict[str, Any]]], trials: int) -> dict[str, Any]:
    """Per concurrency: each orchestrated arm against the plain loop (wall and CPU), whether
    the trials' scores agree, and where the time went."""
    arms = [a for a in ARMS if runs.get(a)]
    out: dict[str, Any] = {"arms": arms, "per_concurrency": {}}
    for c in sorted(runs["plain"]):
        plain = runs["plain"][c]
        ps = {t["lr"]: t for t in plain["trials"]}
        row: dict[str, Any] = {"plain_s": plain["wall"], "plain_cpu_s": plain["cpu_seconds"],
                               "vs_plain": {}, "trial_seconds_mean": {}, "first_epoch_mean": {},
                               "later_epoch_median": {}, "phases": {}, "cpu_by_kind": {}}
        for arm in arms:
            run = runs[arm][c]
            if arm != "plain":
                other = {t["lr"]: t for t in run["trials"]}
                diffs = [abs(ps[lr]["score"] - other[lr]["score"]) for lr in ps if lr in other]
                cpu_ok = bool(plain["cpu_seconds"]) and run["cpu_seconds"] is not None
                row["vs_plain"][arm] = {
                    "seconds": run["wall"], "ratio": run["wall"] / plain["wall"],
                    "fixed_cost_per_trial_s": fixed_cost_per_trial(run["wall"], plain["wall"],
                                                                   trials),
                    "cpu_s": run["cpu_seconds"],
                    "cpu_ratio": run["cpu_seconds"] / plain["cpu_seconds"] if cpu_ok else None,
                    "cpu_cost_per_trial_s": fixed_cost_per_trial(
                        run["cpu_seconds"], plain["cpu_seconds"], trials) if cpu_ok else None,
                    "same_trials": len(diffs) == trials,
                    "max_score_difference": max(diffs) if diffs else None,
                    "worker_pids": len({t["pid"] for t in run["trials"]}),
                }
            split = [epoch_split(t["epoch_seconds"]) for t in run["trials"] if t["epoch_seconds"]]
            row["trial_seconds_mean"][arm] = statistics.fmean(x["total"] for x in split)
            row["first_epoch_mean"][arm] = statistics.fmean(x["first"] for x in split)
            row["later_epoch_median"][arm] = statistics.median(x["later_median"] for x in split)
            row["phases"][arm] = _phases(run)
            row["cpu_by_kind"][arm] = run["cpu_by_kind"]
        out["per_concurrency"][c] = row
    if all(1 in runs[a] and 2 in runs[a] for a in arms):
        out["speedup_2_over_1"] = {a: runs[a][1]["wall"] / runs[a][2]["wall"] for a in arms}
    return out


def print_report(summary: dict[str, Any], trials: int, epochs: int) -> None:
    arms = summary["arms"]
    print(f"\n{trials} trials × {epochs} epochs; wall time of each child process, spawn to exit; "
          "CPU time of all its processes\n")
    print("| concurrency | arm | wall s | × plain | fixed cost per trial s | CPU s | "
          "× plain (CPU) | CPU s per trial | worker processes | scores identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c, s in summary["per_concurrency"].items():
        cpu = "–" if s["plain_cpu_s"] is None else f"{s['plain_cpu_s']:.0f}"
        print(f"| {c} | plain | {s['plain_s']:.1f} | 1 | 0 | {cpu} | 1 | 0 | {c} | |")
        for arm, v in s["vs_plain"].items():
            same = "yes" if v["same_trials"] and v["max_score_difference"] == 0 else (
                f"max diff {v['max_score_difference']}")
            cpu = ("– | – | –" if v["cpu_ratio"] is None else
                   f"{v['cpu_s']:.0f} | {v['cpu_ratio']:.3f} | {v['cpu_cost_per_trial_s']:.2f}")
            print(f"| {c} | {arm} | {v['seconds']:.1f} | {v['ratio']:.3f} | "
                  f"{v['fixed_cost_per_trial_s']:.2f} | {cpu} | {v['worker_pids']} | {same} |")
    if "speedup_2_over_1" in summary:
        print("\nconcurrency 2 vs 1 (wall): " + ", ".join(
            f"{a} ×{v:.2f}" for a, v in summary["speedup_2_over_1"].items()))
    print("\nper trial (mean over trials): trial seconds, first epoch (start-up), later epochs "
          "(median)")
    for c, s in summary["per_concurrency"].items():
        for arm in arms:
            print(f"  c={c} {arm:15s} trial {s['trial_seconds_mean'][arm]:6.1f} s, first epoch "
                  f"{s['first_epoch_mean'][arm]:5.2f} s, later epochs "
                  f"{s['later_epoch_median'][arm]:5.2f} s")
    print("\nCPU seconds of each child's processes:")
    for c, s in summary["per_concurrency"].items():
        for arm in arms:
            print(f"  c={c} {arm:15s} " + ", ".join(
                f"{k} {v:.1f}" for k, v in s["cpu_by_kind"][arm].items()))
    print("\nphases of each child (s):")
    for c, s in summary["per_concurrency"].items():
        for arm in arms:
            print(f"  c={c} {arm:15s} " + ", ".join(
                f"{k} {v:.1f}" for k, v in s["phases"][arm].items()))


def _machine() -> dict[str, Any]:
    import ray
    import torch

    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "ray": ray.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, help=f"trials per arm (default {TRIALS})")
    parser.add_argument("--epochs", type=int, help=f"epochs per trial, i.e. the trial length "
                                                   f"(default {EPOCHS}, ~30 s on a quiet core)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dataset", default="glyphs")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--small", action="store_true",
                        help=f"{SMALL_TRIALS} trials of {SMALL_EPOCHS} epochs (smoke test)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, help="keep the children's folders and logs here")
    parser.add_argument("--ablation", action="store_true",
                        help="also run dmlsearch with a fresh worker process per trial (Ray's "
                             "default; search.tune.tuner.REUSE_WORKERS)")
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--space", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--configs", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    trials = args.trials or (SMALL_TRIALS if args.small else TRIALS)
    epochs = args.epochs or (SMALL_EPOCHS if args.small else EPOCHS)
    c = args.concurrency[0]

    if args.child == "plain":
        body = plain_child(json.loads(args.configs.read_text()), c)
        args.result.write_text(json.dumps(body))
        return 0
    if args.child in ("dmlsearch", "dmlsearch-fresh"):
        body = orchestrated_child(args.space, args.results_dir, trials, c,
                                  reuse=args.child == "dmlsearch")
        args.result.write_text(json.dumps(body))
        return 0

    started = time.time()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="orchestration_") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        space = work / "space.yaml"
        write_space(space, epochs=epochs, lrs=learning_rates(trials), dataset=args.dataset,
                    data_root=args.data_root)
        configs = trial_configs(space, trials)  # also builds the glyphs cache, once, here
        (work / "configs.json").write_text(json.dumps(configs))
        print(f"{trials} trials × {epochs} epochs of {args.dataset}/smallcnn, lr "
              f"{[f['lr'] for f in configs]}, threads 1; load {load_start[0]:.2f}", flush=True)
        arms = [a for a in ARMS if a != "dmlsearch-fresh" or args.ablation]
        runs: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in arms}
        for i, conc in enumerate(args.concurrency):
            for arm in arms if i % 2 == 0 else arms[::-1]:  # interleaved against drift
                common = ["--child", arm, "--concurrency", str(conc), "--trials", str(trials)]
                if arm == "plain":
                    extra = ["--configs", str(work / "configs.json")]
                else:
                    extra = ["--space", str(space),
                             "--results-dir", str(work / f"search-{arm}-c{conc}")]
                run = _run_child(common + extra, THREAD_ENV if arm == "plain" else {},
                                 work / f"{arm}-c{conc}.log")
                runs[arm][conc] = run
                cpu = "" if run["cpu_seconds"] is None else f", {run['cpu_seconds']:.0f} CPU s"
                print(f"  concurrency {conc} {arm:15s} {run['wall']:7.1f} s{cpu} (load "
                      f"{run['load_before'][0]:.1f} → {run['load_after'][0]:.1f})", flush=True)
        summary = summarise(runs, trials)
    print_report(summary, trials, epochs)
    wall = time.time() - started
    load_end = os.getloadavg()
    print(f"\nwall time {wall:.0f} s; load average at the start "
          f"{' '.join(f'{x:.2f}' for x in load_start)}, at the end "
          f"{' '.join(f'{x:.2f}' for x in load_end)}")
    if args.out:
        args.out.write_text(json.dumps({
            "command": sys.argv, "trials": trials, "epochs": epochs, "dataset": args.dataset,
            "base": BASE, "machine": _machine(), "load_start": load_start, "load_end": load_end,
            "wall_seconds": wall, "summary": summary, "runs": runs,
        }, indent=2, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
