"""Benchmark: setting up a new study's stores, made by the libraries against copied from the
empty store of the installed version (``search/store_templates.py``).

Each repetition, in one process and interleaved (this machine is shared and noisy), makes a new
MLflow store and a new Optuna storage in a fresh folder both ways and opens each as the product
does (``MlflowClient.search_experiments``, ``optuna.storages.RDBStorage``): "library" lets MLflow
run its migrations and Optuna create its tables; "seeded" copies the templates first (made once,
before the timed repetitions, as a user's first search makes them). Reports the median seconds
of each way, their spread (IQR), and the ratio seeded / library per repetition (median).

    python benchmarks/store_setup.py [--repeats 15] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _open_both(folder: Path) -> float:
    """Seconds to open a new MLflow store and a new Optuna storage in ``folder``."""
    import optuna
    from mlflow.tracking import MlflowClient

    started = time.perf_counter()
    MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    optuna.storages.RDBStorage(f"sqlite:///{folder / 'optuna.db'}").engine.dispose()
    return time.perf_counter() - started


def _seeded(folder: Path) -> float:
    from dmlsearch.search.store_templates import seed_store

    started = time.perf_counter()
    seed_store(f"sqlite:///{folder / 'mlflow.db'}", "mlflow")
    seed_store(f"sqlite:///{folder / 'optuna.db'}", "optuna")
    return time.perf_counter() - started + _open_both(folder)


def measure(repeats: int) -> dict[str, Any]:
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["DMLSEARCH_CACHE"] = str(root / "cache")
        _seeded(root / "warm")  # the templates, made once; the imports paid before timing
        (root / "warm2").mkdir()
        _open_both(root / "warm2")
        library, seeded = [], []
        for i in range(repeats):
            for way, into in ((_open_both, library), (_seeded, seeded)):
                folder = root / f"{way.__name__}-{i}"
                folder.mkdir()
                into.append(way(folder))
    ratios = [s / lib for s, lib in zip(seeded, library)]
    return {"repeats": repeats, "library": _stats(library), "seeded": _stats(seeded),
            "ratio_seeded_to_library": _stats(ratios),
            "machine": {"cpu": platform.processor(), "cores": os.cpu_count(),
                        "python": platform.python_version()}}


def _stats(values: list[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return {"median": median, "q1": q1, "q3": q3, "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(args.repeats)
    for way in ("library", "seeded"):
        s = result[way]
        print(f"{way:8s} median {s['median']:.3f} s (IQR {s['q1']:.3f}-{s['q3']:.3f})")
    r = result["ratio_seeded_to_library"]
    print(f"seeded / library: median {r['median']:.3f} (IQR {r['q1']:.3f}-{r['q3']:.3f})")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
