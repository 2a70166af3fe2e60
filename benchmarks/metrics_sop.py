"""Benchmark: retrieval metrics on an SOP-shaped set — time and peak memory.

Compares, in the same run (the machine may be shared and noisy):

(a) ``bare``: a bare faiss exact search, ``IndexFlatIP.search(x, k = largest class size)``, over
    all queries — the floor any exact kNN metric pays;
(b) ``ours-sop``: ``trainables.metrics.retrieval_metrics(x, y, ks=(1, 10, 100, 1000))`` (SOP's
    recall cut-offs), and ``ours-default`` with ``ks=(1, 2, 4, 8)``;
(c) ``pml``: pytorch-metric-learning's ``AccuracyCalculator(k="max_bin_count")`` for P@1,
    R-Precision and MAP@R;
(optional) ``bare-block4096``: (a) with faiss's BLAS database block raised from 1024 to 4096
    rows, as ``retrieval_metrics`` does on the CPU — shows what that setting alone is worth.

Each measurement runs in its own child process: it imports everything and loads the data,
reads ``ru_maxrss`` (the baseline), runs the method once, and reports the wall time and the peak
RSS above the baseline. Methods are interleaved across ``--repeats`` rounds; the table gives
medians.

The data: 60,502 x 512 float32 (SOP's test set size), classes of 2-12 items (mean ~5.4, geometric
sizes), each item its class centre plus Gaussian noise with a per-class scale, L2-normalised. The
noise is set so that Recall@1 is about 0.8 and Recall@1000 about 0.98, as strong SOP models reach.

    python benchmarks/metrics_sop.py [--small] [--repeats 3] [--out results.json]
        [--methods bare ours-sop ours-default pml bare-block4096]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
METHODS = ("bare", "ours-sop", "ours-default", "pml")
EXTRA_METHODS = ("bare-block4096",)  # ablation: the bare search with our faiss block size
SOP_KS = (1, 10, 100, 1000)
DEFAULT_KS = (1, 2, 4, 8)
PML_METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")


def make_data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SOP-shaped synthetic embeddings ``[n, d]`` (float32, unit rows) and labels ``[n]``."""
    rng = np.random.default_rng(seed)
    size_values = np.arange(2, 13)
    probs = 0.84 ** (size_values - 2)
    sizes = rng.choice(size_values, size=n, p=probs / probs.sum())
    ends = np.cumsum(sizes)
    num_classes = int(np.searchsorted(ends, n)) + 1
    sizes = sizes[:num_classes].copy()
    sizes[-1] -= int(ends[num_classes - 1]) - n
    if sizes[-1] < 2:  # keep every class at 2+ items: merge a short tail into its neighbour
        sizes[-2] += sizes[-1]
        sizes = sizes[:-1]
    labels = np.repeat(np.arange(len(sizes)), sizes)
    centres = rng.standard_normal((len(sizes), d), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise_scale = (1.8 * np.exp(0.35 * rng.standard_normal(len(sizes)))).astype(np.float32)
    x = rng.standard_normal((n, d), dtype=np.float32)
    x *= (noise_scale[labels] / np.sqrt(d))[:, None]
    x += centres[labels]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    order = rng.permutation(n)  # classes not contiguous, as in a real loader
    return np.ascontiguousarray(x[order]), labels[order].astype(np.int64)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(method: str, data_dir: Path) -> dict[str, Any]:
    """Run one method once in this process; return time, peak memory above baseline, results."""
    import faiss
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    sys.path.insert(0, str(REPO))
    from dmlsearch.trainables.metrics.retrieval import retrieval_metrics

    x = np.load(data_dir / "x.npy")
    y = np.load(data_dir / "y.npy")
    baseline = _rss_mib()
    start = time.perf_counter()
    if method == "bare":
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        _, ids = index.search(x, int(np.bincount(y).max()))
        result: dict[str, Any] = {"p@1 (nearest != self)": float(np.mean(y[ids[:, 1]] == y))}
    elif method == "bare-block4096":
        faiss.cvar.distance_compute_blas_database_bs = 4096
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        _, ids = index.search(x, int(np.bincount(y).max()))
        result = {"p@1 (nearest != self)": float(np.mean(y[ids[:, 1]] == y))}
    elif method == "ours-sop":
        result = retrieval_metrics(x, y, ks=SOP_KS)
    elif method == "ours-default":
        result = retrieval_metrics(x, y, ks=DEFAULT_KS)
    elif method == "pml":
        calc = AccuracyCalculator(include=PML_METRICS, k="max_bin_count",
                                  device=torch.device("cpu"))
        result = calc.get_accuracy(x, y)
    else:
        raise SystemExit(f"unknown method {method!r}; expected one of {METHODS + EXTRA_METHODS}")
    seconds = time.perf_counter() - start
    return {"method": method, "seconds": seconds, "peak_mib": _rss_mib() - baseline,
            "baseline_mib": baseline, "result": result}


def _run_child(method: str, data_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", method,
           "--data", str(data_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _machine() -> dict[str, Any]:
    import faiss
    import pytorch_metric_learning
    import sklearn
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "faiss_omp_threads": faiss.omp_get_max_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "torch": torch.__version__,
        "pytorch_metric_learning": pytorch_metric_learning.__version__,
        "sklearn": sklearn.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="6,000 x 128 instead of 60,502 x 512")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of all methods (default 3)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--methods", nargs="+", choices=METHODS + EXTRA_METHODS,
                        default=list(METHODS), help=f"default: {' '.join(METHODS)}")
    parser.add_argument("--worker", choices=METHODS + EXTRA_METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.data)))
        return 0

    n, d = (6000, 128) if args.small else (60502, 512)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory(prefix="metrics_sop_") as tmp:
        x, y = make_data(n, d)
        np.save(Path(tmp) / "x.npy", x)
        np.save(Path(tmp) / "y.npy", y)
        sizes = np.bincount(y)
        print(f"data: {n} x {d}, {len(sizes)} classes of {sizes.min()}-{sizes.max()} "
              f"(mean {sizes.mean():.2f}); {args.repeats} rounds", flush=True)
        del x
        for round_ in range(args.repeats):
            for method in args.methods:
                load = os.getloadavg()[0]
                run = _run_child(method, Path(tmp))
                run["loadavg_1min_before"] = load
                runs[method].append(run)
                print(f"  round {round_ + 1} {method:14s} {run['seconds']:7.2f} s "
                      f"{run['peak_mib']:8.1f} MiB  (load before: {load:.1f})", flush=True)

    summary = {m: {"seconds_median": statistics.median(r["seconds"] for r in rs),
                   "seconds_min": min(r["seconds"] for r in rs),
                   "peak_mib_median": statistics.median(r["peak_mib"] for r in rs),
                   "result": rs[-1]["result"]} for m, rs in runs.items()}
    bare_s = summary["bare"]["seconds_median"] if "bare" in summary else None
    pml_mib = summary["pml"]["peak_mib_median"] if "pml" in summary else None
    print("\n| method | time median (min) s | x bare search | peak MiB above data | x PML |")
    print("|---|---|---|---|---|")
    for m, s in summary.items():
        s["time_ratio_to_bare"] = s["seconds_median"] / bare_s if bare_s else None
        s["memory_ratio_to_pml"] = s["peak_mib_median"] / pml_mib if pml_mib else None
        time_ratio = f"{s['time_ratio_to_bare']:.3f}" if bare_s else "-"
        mem_ratio = f"{s['memory_ratio_to_pml']:.3f}" if pml_mib else "-"
        print(f"| {m} | {s['seconds_median']:.2f} ({s['seconds_min']:.2f}) | "
              f"{time_ratio} | {s['peak_mib_median']:.0f} | {mem_ratio} |")
    print("\nmetrics:")
    for m, s in summary.items():
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in s["result"].items()}
        print(f"  {m}: {shown}")
    if args.out:
        record = {"n": n, "d": d, "repeats": args.repeats, "command": sys.argv,
                  "machine": _machine(),
                  "summary": summary, "runs": runs}
        args.out.write_text(json.dumps(record, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
