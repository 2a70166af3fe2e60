"""Record a learning-curve table: every point of a grid space trained for real, every epoch's
validation metrics, epoch times, and the test metrics of the best validation epoch so far.

The table is what the replay backend (``dmlsearch run --replay TABLE``) and the search benchmark
(``benchmarks/search_efficiency.py``) read instead of training: a search method can then be
compared with others over many seeds in minutes, on curves of real DML trainings.

    python benchmarks/learning_curves.py [--space benchmarks/curves/omniglot_grid.yaml]
        [--data ../shared/data/omniglot_background_small1.zip] [--workers 2]
        [--second-seed-subset 60] [--out benchmarks/curves/omniglot.jsonl] [--small]

Every grid point is trained with seed 0; a fixed random subset of them is trained again with
seed 1 (the noise between two trainings of one configuration). Each training is exactly one trial
of ``dmlsearch run`` with that configuration (``trainables.trial.fold_fitter`` on the space's
fixed class-disjoint split), plus one evaluation on the test classes after every epoch whose
validation score is the best so far: so for any epoch e, the test metrics of the model a trial
stopped at e would select are in the table.

The output is JSON lines: a ``header`` line (the space file, the base settings, the data file's
SHA-256, the code revision, the machine), then one ``run`` line per training, appended as each
finishes (one writer, flushed), so the command **resumes**: run it again with the same ``--out``
and it trains only what is missing. ``--workers`` trainings run at once, one CPU thread each (run
it under ``nice`` beside other work: each run records its CPU seconds as well as wall seconds).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import multiprocessing as mp
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPACE = REPO / "benchmarks" / "curves" / "omniglot_grid.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "omniglot_background_small1.zip"
DEFAULT_OUT = REPO / "benchmarks" / "curves" / "omniglot.jsonl"
TABLE_FORMAT = 1
VAL_KEYS = ("map@r", "recall@1", "precision@1", "r_precision", "recall@2", "recall@4",
            "recall@8")


def _key(config: dict[str, Any]) -> str:
    """The table's key of a configuration: its searched values as canonical JSON."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def jobs_for(space_file: Path, *, second_seed_subset: int, limit: int | None = None,
             order_seed: int = 0) -> list[tuple[dict[str, Any], int]]:
    """Every grid point with seed 0, then ``second_seed_subset`` of them with seed 1; in a
    seeded random order (a table cut short is a random sample of the grid)."""
    from dmlsearch.spaces import config_from_sample
    from dmlsearch.spaces import load_space

    space = load_space(space_file)
    points = [config_from_sample(p) for p in space.grid_points()]
    if limit is not None:
        points = random.Random(order_seed).sample(points, min(limit, len(points)))
    rng = random.Random(order_seed)
    order = rng.sample(points, len(points))
    again = rng.sample(points, min(second_seed_subset, len(points)))
    return [(p, 0) for p in order] + [(p, 1) for p in again]


_DATASETS: dict[tuple[Any, ...], Any] = {}


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def record_run(base: dict[str, Any], config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train one configuration as a fixed-protocol trial would; its curve and test metrics."""
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.errors import TrialFailed
    from dmlsearch.trainables.metrics.evaluate import evaluate
    from dmlsearch.trainables.trial import fold_fitter
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import splits_for

    cfg = TrialConfig.from_flat({**base, **config, "seed": seed})
    data_key = (cfg.dataset, cfg.data_root, cfg.image_size)
    if data_key not in _DATASETS:
        _DATASETS[data_key] = load_for(cfg)
    dataset = _DATASETS[data_key]
    (split,) = splits_for(cfg, dataset)
    test = dataset.test()
    fitter = fold_fitter(cfg, dataset, split)
    epochs: list[dict[str, Any]] = []
    clock = [time.process_time()]
    started = time.perf_counter()

    def on_epoch(report: Any, _state: Any) -> None:
        cpu = time.process_time() - clock[0]
        row: dict[str, Any] = {
            "epoch": report.epoch, "train_loss": report.train_loss,
            "val": {k: float(report.metrics[k]) for k in VAL_KEYS if k in report.metrics},
            "seconds": report.seconds, "cpu_seconds": cpu,
        }
        if report.best_epoch == report.epoch:  # the model a trial stopped here would select
            row["test"] = {k: float(v) for k, v in evaluate(
                fitter.model, test, device=fitter.device, ks=fitter.ks).items()
                if k in VAL_KEYS}
        epochs.append(row)
        clock[0] = time.process_time()

    status, reason = "ok", None
    try:
        fitter.run(on_epoch)
    except TrialFailed as exc:
        status, reason = "failed", str(exc)
    best = None
    for row in epochs:
        value = row["val"].get(cfg.metric)
        if value is not None and (best is None or value > best["val"][cfg.metric]):
            best = row
    test_at_best = None
    if best is not None:  # the last epoch that improved is the best; its test is recorded
        test_at_best = best.get("test")
    return {
        "kind": "run", "key": _key(config), "config": config, "seed": seed,
        "status": status, "reason": reason, "epochs": epochs,
        "best_epoch": None if best is None else best["epoch"],
        "best_val": None if best is None else best["val"],
        "test_at_best": test_at_best,
        "seconds": time.perf_counter() - started,
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform()}


def _revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def read_table(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The header and the run lines of a table; a line cut short (a crash) is ignored."""
    header, runs = None, []
    if not path.is_file():
        return None, []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("kind") == "header":
            header = row
        elif row.get("kind") == "run":
            runs.append(row)
    return header, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", type=Path, default=DEFAULT_SPACE)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--second-seed-subset", type=int, default=60)
    parser.add_argument("--small", action="store_true",
                        help="smoke test: 6 points, 2 epochs, 2 of them with a second seed")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from dmlsearch.spaces import load_space

    if not args.data.is_file():
        print(f"learning_curves: no data file {args.data}; give --data with the Omniglot "
              "sample (omniglot_background_small1.zip)", file=sys.stderr)
        return 2
    space = load_space(args.space)
    base = {**space.base, "data_root": str(args.data.resolve())}
    limit, subset = (6, 2) if args.small else (None, args.second_seed_subset)
    if args.small:
        base["epochs"] = 2
    jobs = jobs_for(args.space, second_seed_subset=subset, limit=limit)
    header, runs = read_table(args.out)
    done = {(r["key"], r["seed"]) for r in runs}
    todo = [(c, s) for c, s in jobs if (_key(c), s) not in done]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as handle:
        if header is None:
            handle.write(json.dumps({
                "kind": "header", "format": TABLE_FORMAT, "space_file": args.space.name,
                "space": args.space.read_text(), "base": {**base, "data_root": args.data.name},
                "data": {"file": args.data.name, "sha256": _sha256(args.data)},
                "metric": base.get("metric"), "seeds": [0, 1], "val_keys": list(VAL_KEYS),
                "code_revision": _revision(), "machine": _machine(),
                "command": "python benchmarks/learning_curves.py " + " ".join(argv or sys.argv[1:]),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }) + "\n")
            handle.flush()
        print(f"learning_curves: {len(jobs)} trainings, {len(jobs) - len(todo)} in {args.out} "
              f"already, {len(todo)} to go, {args.workers} at a time", flush=True)
        started = time.time()
        ctx = mp.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx,
                                                    initializer=_init_worker) as pool:
            futures = [pool.submit(record_run, base, c, s) for c, s in todo]
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                row = future.result()
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                rate = (time.time() - started) / i
                best = (row["best_val"] or {}).get(base.get("metric"))
                print(f"[{i}/{len(todo)}] {row['status']} seed {row['seed']} "
                      f"{base.get('metric')} {best if best is None else round(best, 4)} "
                      f"{row['seconds']:.0f}s  eta {rate * (len(todo) - i) / 60:.0f} min  "
                      f"{row['key']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
