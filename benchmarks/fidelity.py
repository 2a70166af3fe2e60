"""Benchmark: do the sources' claims hold on the Omniglot sample? (issue #4)

Three comparisons, each arm trained with :func:`dmlsearch.trainables.retrain.retrain` (all training
classes, fixed epochs, no validation, no model selection) and evaluated once on the test classes
of the standard class-disjoint split (first half of the classes train, second half test):

1. **MemVir** (Ko et al. 2021): Norm-softmax + MemVir(N, M) vs plain Norm-softmax — test P@1,
   MAP@R.
2. **Thesis proxy loss** (Psomas 2020 ch. 6, variant 2) vs Proxy-Anchor — test P@1, MAP@R,
   Recall@1.
3. **E2E** (Monteiro et al. 2020): EER of the learned distance D, of cosine scoring and of their
   fusion, all from the same ``e2e``-trained models; and, for reference, the cosine EER of the
   models trained with plain Norm-softmax (arm ``norm_softmax`` of comparison 1) and with
   Proxy-Anchor.

Every arm uses the same data, backbone, batch sampler, optimizer, schedule and number of epochs
(the same budget), and each seed gives every arm the same initial backbone and embedding weights
and the same batch composition (``Fitter`` seeds torch before building the model, then the loss;
the sampler has its own generator seeded by the seed). The random crops differ between arms (the
loader's seed is drawn from torch's RNG after the loss is built), so paired differences are
paired in initialisation and batches only. Loss hyperparameters are each loss's registered
defaults, i.e. the published ones (``dmlsearch settings``). All settings are fixed here, before
any run; nothing is tuned on the test classes. MemVir's N, M and warm-up are scaled to the
number of steps trained (:func:`memvir_schedule`; the paper's CARS196 recipe N = 45, M = 10,
warm-up 40 of 2,000 epochs, assumes ~126,000 steps).

The data is the Omniglot sample ``omniglot_background_small1.zip`` (136 classes × 20 images),
read in place by the project's ``omniglot`` reader; it is never downloaded. Runs go seed by seed,
all arms within a seed, so that changing machine load affects the arms alike.

    python benchmarks/fidelity.py [--small] [--seeds 3] [--epochs E] [--arms ...]
        [--data ZIP] [--out results.json]

The default run (5 arms × 3 seeds, 24 epochs, 32-pixel images) takes about 9 minutes on 2 quiet
CPU cores (much longer when other processes hold the cores: 39 minutes were recorded under a
load of 2-6); ``--small`` (5 arms × 1 seed, 4 epochs, 16-pixel images) under a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_DATA = REPO.parent / "shared" / "data" / "omniglot_background_small1.zip"

# ---- fixed settings (chosen before any run; see docs/benchmarks.md) -------------------------
COMMON: dict[str, Any] = {
    "dataset": "omniglot",
    "backbone": "smallcnn",
    "pretrained": "none",
    "embedding_size": 128,
    "pooling": "gap",
    "batch_sampler": "m_per_class",  # E2E needs several images per class; the same for every arm
    "m_per_class": 4,
    "batch_size": 64,  # 16 classes × 4 images
    "optimizer": "adamw",
    "lr": 1e-3,  # from scratch (the sources' 1e-4 is for ImageNet-pretrained backbones)
    "weight_decay": 1e-4,
    "lr_schedule": "step",  # one ×0.1 decay at half of training (lr_step_size set per run)
    "lr_gamma": 0.1,
    "device": "cpu",
    "threads": 2,
    "workers": 0,
    "verify_pairs": 0,  # EER over all test pairs i < j (924,120 for 1,360 test images)
}
EPOCHS, IMAGE_SIZE = 24, 32
SMALL_EPOCHS, SMALL_IMAGE_SIZE = 4, 16

ARMS: dict[str, dict[str, Any]] = {
    # comparison 1
    "norm_softmax": {"loss": "norm_softmax", "metric": "eer_cosine"},
    "norm_softmax+memvir": {"loss": "norm_softmax", "metric": "eer_cosine"},  # + memvir_*
    # comparison 2
    "proxy_anchor": {"loss": "proxy_anchor", "metric": "eer_cosine"},
    "thesis_proxy": {"loss": "thesis_proxy", "metric": "eer_cosine"},  # variant 2 (default)
    # comparison 3
    "e2e": {"loss": "e2e", "metric": "eer_e2e"},
}
COMPARISONS: list[dict[str, Any]] = [
    {"name": "1. MemVir + Norm-softmax vs Norm-softmax", "arms": ["norm_softmax+memvir",
                                                                  "norm_softmax"],
     "metrics": ["precision@1", "map@r", "r_precision"]},
    {"name": "2. thesis proxy (variant 2) vs Proxy-Anchor", "arms": ["thesis_proxy",
                                                                     "proxy_anchor"],
     "metrics": ["precision@1", "map@r", "recall@1", "r_precision"]},
]
E2E_METRICS = ["eer_e2e", "eer_cosine", "eer_fusion", "auc_e2e", "auc_cosine", "auc_fusion",
               "precision@1", "map@r"]
REFERENCE_ARMS = ["norm_softmax", "proxy_anchor"]  # standard losses, cosine scoring

# MemVir: the paper's N (45 virtual steps at most), M scaled from 10 to 2 and warm-up from 40 of
# 2,000 epochs to a fifth of training, so that all N are active for most of the run.
MEMVIR_N_MAX, MEMVIR_M = 45, 2
MEMVIR_WARMUP_FRACTION = 0.2  # of the epochs: the plain loss first forms the embedding
MEMVIR_RAMP_FRACTION = 0.25  # of the steps after warm-up: the step-paced ramp to N


def memvir_schedule(epochs: int, steps_per_epoch: int) -> dict[str, Any]:
    """MemVir's N, M, warm-up for a run of ``epochs`` × ``steps_per_epoch`` steps, and the
    share of steps with ≥ 1 and with all N virtual steps active (step-pacing: one more every
    M + 1 steps after warm-up, k(t) = min(N, ⌊t/(M+1)⌋))."""
    warmup = max(1, round(MEMVIR_WARMUP_FRACTION * epochs))
    after = (epochs - warmup) * steps_per_epoch
    n = max(1, min(MEMVIR_N_MAX, int(MEMVIR_RAMP_FRACTION * after) // (MEMVIR_M + 1)))
    total = epochs * steps_per_epoch
    stride = MEMVIR_M + 1
    any_active = max(0, after - stride)  # k ≥ 1 from t = M + 1
    all_active = max(0, after - n * stride)  # k = N from t = N(M + 1)
    return {
        "memvir_n": n, "memvir_m": MEMVIR_M, "memvir_warmup_epochs": warmup,
        "memvir_step_pacing": True, "steps_total": total, "steps_per_epoch": steps_per_epoch,
        "share_steps_with_virtual": any_active / total,
        "share_steps_with_all_n": all_active / total,
    }


def _load(path: Path, image_size: int):  # noqa: ANN202 - a trainables Dataset
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import load_for

    return load_for(TrialConfig.from_flat({"dataset": "omniglot", "data_root": str(path),
                                           "image_size": image_size}))


def _steps_per_epoch(dataset: Any) -> int:
    from dmlsearch.trainables.sampling import make_batches

    labels = dataset.train().labels
    return sum(1 for _ in make_batches(COMMON["batch_sampler"], labels,
                                       batch_size=COMMON["batch_size"],
                                       m=COMMON["m_per_class"], rng=np.random.default_rng(0)))


def arm_config(arm: str, *, seed: int, epochs: int, image_size: int, data: Path,
               memvir: dict[str, Any]) -> dict[str, Any]:
    flat = {**COMMON, **ARMS[arm], "data_root": str(data), "image_size": image_size,
            "epochs": epochs, "lr_step_size": max(1, epochs // 2), "seed": seed}
    if arm.endswith("+memvir"):
        flat.update({k: memvir[k] for k in ("memvir_n", "memvir_m", "memvir_warmup_epochs",
                                            "memvir_step_pacing")})
    return flat


def run_one(flat: dict[str, Any], dataset: Any) -> dict[str, Any]:
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.retrain import retrain

    cfg = TrialConfig.from_flat(flat)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    result = retrain(cfg, dataset=dataset)
    return {
        "seconds": time.perf_counter() - started,
        "loadavg_1min_before": load,
        "test_metrics": {k: float(v) for k, v in result.test_metrics.items()},
        "train_loss": [round(float(h["train_loss"]), 5) for h in result.history],
        "config": cfg.to_flat(),
    }


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else float("nan")
    return mean, std


def _fmt(values: list[float], pct: bool = False) -> str:
    scale = 100.0 if pct else 1.0
    mean, std = _mean_std([v * scale for v in values])
    digits = 2 if pct else 4
    if math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Mean, sample std and per-seed values per arm and metric; paired differences per
    comparison (arm A − arm B on the same seed) with how many seeds A wins."""
    per_arm: dict[str, dict[str, Any]] = {}
    for arm, rs in runs.items():
        keys = [k for k in rs[0]["test_metrics"] if k not in ("num_queries", "verify_trials")]
        per_arm[arm] = {}
        for k in keys:
            vals = [r["test_metrics"][k] for r in rs]
            mean, std = _mean_std(vals)
            per_arm[arm][k] = {"mean": mean, "std": std, "per_seed": vals}
    paired = []
    for comp in COMPARISONS:
        a, b = comp["arms"]
        if a not in runs or b not in runs:
            continue
        for k in comp["metrics"]:
            diffs = [ra["test_metrics"][k] - rb["test_metrics"][k]
                     for ra, rb in zip(runs[a], runs[b], strict=True)]
            mean, std = _mean_std(diffs)
            paired.append({"comparison": comp["name"], "metric": k, "a": a, "b": b,
                           "mean_diff": mean, "std_diff": std, "per_seed": diffs,
                           "a_wins": sum(d > 0 for d in diffs), "seeds": len(diffs)})
    if "e2e" in runs:
        for k in ("eer_cosine", "eer_fusion"):
            diffs = [r["test_metrics"]["eer_e2e"] - r["test_metrics"][k] for r in runs["e2e"]]
            mean, std = _mean_std(diffs)
            paired.append({"comparison": "3. E2E: learned distance vs other scorings",
                           "metric": f"eer_e2e - {k}", "a": "e2e", "b": "e2e",
                           "mean_diff": mean, "std_diff": std, "per_seed": diffs,
                           "a_wins": sum(d < 0 for d in diffs), "seeds": len(diffs)})
    return {"per_arm": per_arm, "paired": paired}


def print_tables(runs: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> None:
    seeds = len(next(iter(runs.values())))
    print(f"\nTest metrics, mean ± sample std over {seeds} seed(s) "
          "(retrieval ×100; EER in %, lower is better)")
    for comp in COMPARISONS:
        arms = [a for a in comp["arms"] if a in runs]
        if not arms:
            continue
        print(f"\n{comp['name']}\n")
        print("| arm | " + " | ".join(comp["metrics"]) + " |")
        print("|---" * (len(comp["metrics"]) + 1) + "|")
        for arm in arms:
            cells = [_fmt([r["test_metrics"][k] for r in runs[arm]], pct=True)
                     for k in comp["metrics"]]
            print(f"| {arm} | " + " | ".join(cells) + " |")
    if "e2e" in runs or any(a in runs for a in REFERENCE_ARMS):
        print("\n3. E2E learned distance vs cosine scoring (same e2e models); references: "
              "cosine EER of standard losses\n")
        cols = ["eer_e2e", "eer_cosine", "eer_fusion", "auc_e2e", "auc_cosine", "precision@1"]
        print("| arm | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for arm in ["e2e"] + REFERENCE_ARMS:
            if arm not in runs:
                continue
            cells = [_fmt([r["test_metrics"][k] for r in runs[arm]], pct=True)
                     if k in runs[arm][0]["test_metrics"] else "–" for k in cols]
            print(f"| {arm} | " + " | ".join(cells) + " |")
    if summary["paired"]:
        print("\nPaired differences (same seed; ×100): mean ± std, seeds where the first arm "
              "is better\n")
        print("| comparison | metric | A − B | A better |")
        print("|---|---|---|---|")
        for p in summary["paired"]:
            label = f"{p['a']} − {p['b']}" if p["a"] != p["b"] else p["a"]
            print(f"| {p['comparison'].split(' ', 1)[0]} {label} | {p['metric']} | "
                  f"{_fmt(p['per_seed'], pct=True)} | {p['a_wins']}/{p['seeds']} |")


def _machine() -> dict[str, Any]:
    import faiss
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help=f"smoke test: 1 seed, {SMALL_EPOCHS} epochs, "
                             f"{SMALL_IMAGE_SIZE}-pixel images (~1 min)")
    parser.add_argument("--seeds", type=int, help="number of seeds, 0..n-1 (default 3; "
                                                  "--small: 1)")
    parser.add_argument("--epochs", type=int, help=f"epochs per run (default {EPOCHS}; "
                                                   f"--small: {SMALL_EPOCHS})")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                        help="arms to train (default: all)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the Omniglot sample zip (default: ../shared/data/"
                             "omniglot_background_small1.zip beside the repository)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"fidelity: Omniglot sample not found at {args.data}; provide "
              "omniglot_background_small1.zip (136 classes x 20 images) with --data PATH",
              file=sys.stderr)
        return 2

    started = time.perf_counter()
    seeds = args.seeds if args.seeds is not None else (1 if args.small else 3)
    epochs = args.epochs if args.epochs is not None else (SMALL_EPOCHS if args.small else EPOCHS)
    image_size = SMALL_IMAGE_SIZE if args.small else IMAGE_SIZE
    if seeds < 1 or epochs < 2:
        parser.error("--seeds must be >= 1 and --epochs >= 2 (MemVir needs a warm-up epoch)")

    dataset = _load(args.data, image_size)
    memvir = memvir_schedule(epochs, _steps_per_epoch(dataset))
    print(f"data: {dataset}; {image_size}px; {epochs} epochs × {memvir['steps_per_epoch']} "
          f"steps; seeds 0..{seeds - 1}; arms: {' '.join(args.arms)}", flush=True)
    print(f"MemVir: N={memvir['memvir_n']}, M={memvir['memvir_m']}, warm-up "
          f"{memvir['memvir_warmup_epochs']} epochs; virtual classes on "
          f"{memvir['share_steps_with_virtual']:.0%} of steps, all N on "
          f"{memvir['share_steps_with_all_n']:.0%}", flush=True)

    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in args.arms}
    for seed in range(seeds):
        for arm in args.arms:
            flat = arm_config(arm, seed=seed, epochs=epochs, image_size=image_size,
                              data=args.data, memvir=memvir)
            run = run_one(flat, dataset)
            run["seed"] = seed
            runs[arm].append(run)
            m = run["test_metrics"]
            extra = "".join(f" {k} {m[k]:.4f}" for k in ("eer_cosine", "eer_e2e") if k in m)
            print(f"  seed {seed} {arm:20s} {run['seconds']:6.1f} s (load "
                  f"{run['loadavg_1min_before']:.1f})  P@1 {m['precision@1']:.4f} "
                  f"MAP@R {m['map@r']:.4f}{extra}  final train loss "
                  f"{run['train_loss'][-1]:.3f}", flush=True)

    summary = summarise(runs)
    print_tables(runs, summary)
    wall = time.perf_counter() - started
    print(f"\nwall time {wall:.0f} s; load average at the end "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.out:
        record = {
            "command": sys.argv, "small": args.small, "seeds": list(range(seeds)),
            "epochs": epochs, "image_size": image_size, "data": str(args.data),
            "common_settings": COMMON, "arms": {a: ARMS[a] for a in args.arms},
            "memvir": memvir, "machine": _machine(),
            "loadavg_end": os.getloadavg(), "wall_seconds": wall,
            "summary": summary, "runs": runs,
        }
        args.out.write_text(json.dumps(record, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
