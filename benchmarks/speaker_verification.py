"""Benchmark: does the learned distance D (or its fusion with cosine) verify unseen speakers
better than cosine scoring of the same encoder? (Issue #24 goal; the E2E source's Table 2:
on VoxCeleb1 E2E 2.51% EER vs the same model's cosine 4.97%.)

On the built-in ``speakers`` corpus (espeak-ng voices; 80 training speakers, 80 test speakers,
11,520 test trials), with the commands a user runs:

1. ``dmlsearch run --space e2e_voxceleb --preview --sampler random --trials T --no-retrain``
   (the source's random search over its appendix A.3 grid, at the preview's size:
   ``tdnn_small``, batches of 12 speakers x 5 utterances, crops of at most 4 s), with ``--set
   epochs=E --set warmup_steps=W`` (the preview's 3 epochs and 5 warm-up steps are too short
   to train D); validation: EER of D on all pairs of 16 held-out training speakers;
2. ``dmlsearch export`` of its best trial (epochs set to its best validation epoch, as the
   search's own retrain does);
3. ``dmlsearch train <that best_config.yaml> --set seed=K`` for S seeds (the trial's seed and
   the next S-1), at most ``--train-concurrency`` at a time (each one torch thread): the best
   configuration trained on all 80 training speakers, each tested once on the trial list.
   These are the runs the search's retrain makes with ``--seeds S``, one after another there.

Reported per seed and as mean ± the half-width of the 95% Student-t interval: the test EER and
minDCF (p_target 0.01) of cosine, D and fusion, and the paired differences D − cosine and
fusion − cosine (negative: better than cosine).

    python benchmarks/speaker_verification.py --out DIR [--trials 12] [--epochs 40]
        [--warmup-steps 40] [--seeds 3] [--concurrency 2] [--seed 0] [--train-concurrency N]

A folder that already holds a finished search, export or seed's training is reused (resume by
re-running).

``--d-scale`` instead measures why ``e2e_voxceleb`` scales D's input (``loss.d_input_norm``): D
alone (the ``e2e`` loss's pair term, SGD with the space's chosen lr 0.0237 and Nesterov
momentum 0.95) trained on fixed 64-d L2-normalised embeddings of 64 noisy clusters (12 x 5
per batch, as the preview's batches), for 1 to 4 hidden layers of 256, its input at norm 1
(the embedding as it is) and at norm sqrt(64) = 8; the EER of D on 40 held-out clusters after
100, 400 and 1,600 steps, beside the cosine EER of the same embeddings; 3 seeds.

``--budget`` instead answers the source's claim at a budget where D can learn (issue #32; the
search above gave D about 200 steps): the source's chosen configuration (the space's warm start)
trained on all 80 training speakers, as ``dmlsearch train`` does, for ``--budget-steps``
optimisation steps or until ``--budget-seconds`` have passed, and tested on the 11,520 trials
``--evals`` times (EER, AUC and minDCF of cosine, D and fusion; D's weight decay and
input scale as the recipe now sets them). Arms, each in its own process, at once: ``preview``
(the preview's sizes: ``tdnn_small``, 12 x 5 utterances, crops of at most 4 s, embedding 64),
one per seed of ``--seeds``, and ``full`` (the space's own sizes: ``tdnn``, 24 x 5, 8 s,
embedding 256), seed ``--seed``. The learning-rate warm-up keeps the source's share of the
budget (4,000 of 600k steps; at least 5). Every evaluation is a line of
``<out>/budget-<arm>-seed<K>.jsonl`` as soon as it is made; ``<out>/budget.json`` gathers them
(the last evaluation of each run, its medians over the preview seeds and their range). ``--device
cuda`` on a GPU; on a CPU ``--arms preview --seeds 1 --budget-steps 12 --eval-every 1`` is a
check of the code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]


def _command(*args: str) -> list[str]:
    print("$ dmlsearch " + " ".join(args), flush=True)
    return [sys.executable, "-m", "dmlsearch.search.cli", *args]


def _run(*args: str) -> None:
    """``dmlsearch ARGS`` in a subprocess (run this script under ``nice``: a search's Ray workers
    run 15 above their raylet, the trainings at the script's niceness)."""
    subprocess.run(_command(*args), check=True)


def _start(*args: str) -> subprocess.Popen:
    """``dmlsearch ARGS`` started in a subprocess; its output goes to ``<out>.log`` beside its
    ``--out`` folder."""
    out = Path(args[args.index("--out") + 1])
    out.parent.mkdir(parents=True, exist_ok=True)
    log = (out.parent / f"{out.name}.log").open("w")
    return subprocess.Popen(_command(*args), stdout=log, stderr=subprocess.STDOUT)


def _interval(values: list[float]) -> tuple[float, float]:
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), float(t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def d_scale(seeds: int = 3) -> dict[str, object]:
    """D alone on fixed clusters (see the module's notes): EER by layers, input norm, steps."""
    import torch

    sys.path.insert(0, str(REPO))
    from dmlsearch.trainables.losses import build_loss
    from dmlsearch.trainables.losses import resolve_loss_params
    from dmlsearch.trainables.metrics.roc import verification_metrics

    torch.set_num_threads(1)
    classes, dim, checkpoints = 64, 64, (100, 400, 1600)
    table: dict[str, list[list[float]]] = {}
    cosine: list[float] = []
    for seed in range(seeds):
        g = torch.Generator().manual_seed(seed)
        centres = torch.nn.functional.normalize(torch.randn(2 * classes, dim, generator=g), dim=1)

        def batch(first: int, count: int, pick: int, gen: torch.Generator
                  ) -> tuple[torch.Tensor, torch.Tensor]:
            """5 noisy points of each of ``pick`` clusters among ``first``..``first+count``."""
            cls = (first + torch.randperm(count, generator=gen)[:pick]).repeat_interleave(5)
            noise = torch.randn(len(cls), dim, generator=gen) * 2.7 / dim ** 0.5
            return torch.nn.functional.normalize(centres[cls] + noise, dim=1), cls

        held, held_y = batch(classes, 40, 40, torch.Generator().manual_seed(1000 + seed))
        i, j = torch.triu_indices(len(held_y), len(held_y), 1)
        same = (held_y[i] == held_y[j]).numpy()
        cosine.append(verification_metrics((held[i] * held[j]).sum(1).numpy(), same)["eer"])
        for layers in (1, 2, 3, 4):
            for norm in (1.0, float(dim) ** 0.5):
                torch.manual_seed(seed)
                crit = build_loss("e2e", resolve_loss_params("e2e", {
                    "d_layers": layers, "d_size": 256, "d_dropout": 0.1, "aux_margin": 0.0,
                    "label_smoothing": 0.1, "d_input_norm": norm}), num_classes=classes,
                    embedding_size=dim).criterion
                opt = torch.optim.SGD(crit.distance.parameters(), lr=0.023717, momentum=0.95,
                                      nesterov=True)
                gen = torch.Generator().manual_seed(2000 + seed)
                eers = []
                for step in range(1, checkpoints[-1] + 1):
                    x, y = batch(0, classes, 12, gen)
                    loss = crit.pair_loss(x, y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    if step in checkpoints:
                        scores = crit.pair_scores(held[i], held[j]).numpy()
                        eers.append(verification_metrics(scores, same)["eer"])
                table.setdefault(f"{layers} layers, input norm {norm:g}", []).append(eers)
    result = {"steps": list(checkpoints), "cosine_eer": cosine,
              "d_eer_median_over_seeds": {k: [float(np.median([r[c] for r in v]))
                                              for c in range(len(checkpoints))]
                                          for k, v in table.items()}}
    print(f"cosine EER of the held-out pairs: {np.median(cosine):.3f}; D's EER (median of "
          f"{seeds} seeds) after {', '.join(map(str, checkpoints))} steps:")
    for name, values in result["d_eer_median_over_seeds"].items():
        print(f"  {name:28s} " + "  ".join(f"{v:.3f}" for v in values))
    return result


# ---- --budget: D against cosine at a budget where D can learn --------------------------------
BUDGET_ARMS = ("preview", "full")
SOURCE_WARMUP_SHARE = 4000 / 600_000  # the reference's warm-up steps of its 600k iterations
SCORINGS = ("cosine", "e2e", "fusion")


class _OutOfTime(Exception):
    pass


def budget_config(arm: str, *, seed: int, steps: int, evals: int, device: str,
                  eval_every: int = 0) -> dict[str, object]:
    """The flat configuration of one ``--budget`` run (see the module's notes)."""
    sys.path.insert(0, str(REPO))
    from dmlsearch.spaces import load_space
    from dmlsearch.spaces import preview

    space = load_space("e2e_voxceleb")
    if arm == "preview":
        space = preview(space)[0]
    cfg = dict(space.default_config())  # the base and the warm start: the source's choice
    train_utterances = 80 * 9  # the built-in speakers' training half
    per_epoch = train_utterances // int(cfg["batch_size"])
    epochs = max(1, -(-steps // per_epoch))
    cfg.update({"dataset": "speakers", "data_root": None, "seed": seed, "epochs": epochs,
                "eval_every": min(eval_every or max(1, epochs // evals), epochs), "patience": 0,
                "warmup_steps": max(5, round(SOURCE_WARMUP_SHARE * epochs * per_epoch)),
                "device": device, "precision": "auto", "channels_last": None, "threads": 1,
                "workers": 0})
    return {k: v for k, v in cfg.items() if v is not None}


def budget_run(arm: str, *, seed: int, steps: int, evals: int, eval_every: int, device: str,
               deadline: float, out: Path) -> None:
    """One ``--budget`` run: trains, tests every ``eval_every`` epochs, appends to ``out``."""
    import torch

    sys.path.insert(0, str(REPO))
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.fit import EpochReport
    from dmlsearch.trainables.fit import Fitter
    from dmlsearch.trainables.trial import load_for

    started = time.time()
    flat = budget_config(arm, seed=seed, steps=steps, evals=evals, eval_every=eval_every,
                         device=device)
    cfg = TrialConfig.from_flat(flat)
    dataset = load_for(cfg)
    train, test = dataset.train(), dataset.test()
    fitter = Fitter(cfg, train, test, seed=seed, keep_best=False)
    done_steps = [0]

    def write(row: dict[str, object]) -> None:
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")

    write({"arm": arm, "seed": seed, "config": flat, "train_utterances": len(train),
           "test_utterances": len(test), "device": str(fitter.device),
           "gpu": torch.cuda.get_device_name(0) if fitter.device.type == "cuda" else None,
           "precision": fitter.precision, "setup_seconds": time.time() - started})

    def on_epoch(report: EpochReport, _state: object) -> None:
        done_steps[0] += len(fitter.step_losses)
        if report.metrics:
            write({"arm": arm, "seed": seed, "epoch": report.epoch,
                   "steps": done_steps[0], "seconds": time.time() - started,
                   "train_loss": report.train_loss,
                   **{k: float(v) for k, v in report.metrics.items()
                      if isinstance(v, (int, float)) and not k.startswith("diag_")}})
        if time.time() > deadline:
            raise _OutOfTime

    try:
        fitter.run(on_epoch)
        stop = "finished"
    except _OutOfTime:
        stop = "deadline"
    write({"arm": arm, "seed": seed, "end": stop, "steps": done_steps[0],
           "epochs": fitter.epoch, "seconds": time.time() - started})


def _summary(rows: list[dict[str, object]]) -> dict[str, object]:
    """The last evaluation of each run; per arm, medians and ranges over its seeds."""
    last: dict[tuple[str, int], dict[str, object]] = {}
    for row in rows:
        if "eer_e2e" in row:
            last[(str(row["arm"]), int(row["seed"]))] = row  # type: ignore[arg-type]
    keys = [f"{m}_{s}" for m in ("eer", "auc", "mindcf01") for s in SCORINGS]
    arms: dict[str, object] = {}
    for arm in BUDGET_ARMS:
        runs = [r for (a, _), r in sorted(last.items()) if a == arm]
        if not runs:
            continue
        table = {k: [float(r[k]) for r in runs if k in r] for k in keys}  # type: ignore[arg-type]
        table["eer: e2e - cosine"] = [float(r["eer_e2e"]) - float(r["eer_cosine"])  # type: ignore[arg-type]
                                      for r in runs]
        table["eer: fusion - cosine"] = [float(r["eer_fusion"]) - float(r["eer_cosine"])  # type: ignore[arg-type]
                                         for r in runs]
        arms[arm] = {"seeds": [r["seed"] for r in runs], "steps": [r["steps"] for r in runs],
                     "epochs": [r["epoch"] for r in runs],
                     "median": {k: float(np.median(v)) for k, v in table.items() if v},
                     "range": {k: [min(v), max(v)] for k, v in table.items() if v},
                     "per_seed": table}
    return arms


def budget(args: argparse.Namespace) -> dict[str, object]:
    """Every ``--budget`` run at once, each in its own process; gathered into one JSON."""
    started = time.time()
    deadline = started + args.budget_seconds
    runs = [("preview", args.seed + k) for k in range(args.seeds)]
    if "full" in args.arms:
        runs.append(("full", args.seed))
    runs = [(a, s) for a, s in runs if a in args.arms]
    procs = {}
    for arm, seed in runs:
        path = args.out / f"budget-{arm}-seed{seed}.jsonl"
        path.unlink(missing_ok=True)
        log = (args.out / f"budget-{arm}-seed{seed}.log").open("w")
        procs[(arm, seed)] = (path, subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--out", str(args.out),
             "--budget-run", arm, "--seed", str(seed), "--budget-steps", str(args.budget_steps),
             "--evals", str(args.evals), "--eval-every", str(args.eval_every),
             "--device", args.device,
             "--deadline", str(deadline)], stdout=log, stderr=subprocess.STDOUT))
    for (arm, seed), (_, proc) in procs.items():
        try:  # a run stops itself at the deadline after its epoch; then it is stopped
            proc.wait(timeout=max(1.0, deadline + args.grace - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    rows, ends = [], {}
    for (arm, seed), (path, proc) in procs.items():
        lines = path.read_text().splitlines() if path.is_file() else []
        got = [json.loads(line) for line in lines if line.strip()]
        rows += got
        ends[f"{arm}-seed{seed}"] = {"exit": proc.returncode, "end": next(
            (r["end"] for r in got if "end" in r), "killed or failed (see its log)")}
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": time.time() - started,
              "budget_steps": args.budget_steps, "budget_seconds": args.budget_seconds,
              "runs": ends, "summary": _summary(rows), "rows": rows}
    for name, arm in result["summary"].items():  # type: ignore[union-attr]
        print(f"{name}: seeds {arm['seeds']}, steps {arm['steps']}")
        for k in ("eer_cosine", "eer_e2e", "eer_fusion", "eer: e2e - cosine"):
            lo, hi = arm["range"][k]
            print(f"  {k:20s} {100 * arm['median'][k]:6.2f} %  ({100 * lo:.2f}..{100 * hi:.2f})")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-scale", action="store_true",
                        help="measure D alone at two input scales instead (see above)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-concurrency", type=int, default=None,
                        help="seeds trained at once (default: --concurrency)")
    parser.add_argument("--budget", action="store_true",
                        help="D against cosine at a budget where D can learn (see above)")
    parser.add_argument("--arms", nargs="+", default=list(BUDGET_ARMS), choices=BUDGET_ARMS)
    parser.add_argument("--budget-steps", type=int, default=3000)
    parser.add_argument("--budget-seconds", type=float, default=150.0,
                        help="wall time of the --budget runs (each stops after its epoch)")
    parser.add_argument("--grace", type=float, default=20.0,
                        help="seconds past --budget-seconds before a run is stopped")
    parser.add_argument("--evals", type=int, default=20,
                        help="--budget: test evaluations per run (every epochs // evals epochs)")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="--budget: test every this many epochs instead (0: see --evals)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget-run", choices=BUDGET_ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.budget_run:
        budget_run(args.budget_run, seed=args.seed, steps=args.budget_steps, evals=args.evals,
                   eval_every=args.eval_every, device=args.device, deadline=args.deadline,
                   out=args.out / f"budget-{args.budget_run}-seed{args.seed}.jsonl")
        return
    if args.budget:
        (args.out / "budget.json").write_text(json.dumps(budget(args), indent=2))
        return
    if args.d_scale:
        (args.out / "d_scale.json").write_text(json.dumps(d_scale(args.seeds), indent=2))
        return
    search, started = args.out / "search", time.time()
    if not (search / "summary.json").is_file():
        _run("run", "--space", "e2e_voxceleb", "--preview", "--sampler", "random",
             "--trials", str(args.trials), "--concurrency", str(args.concurrency),
             "--seed", str(args.seed), "--set", f"epochs={args.epochs}",
             "--set", f"warmup_steps={args.warmup_steps}", "--set", "threads=1",
             "--no-retrain", "--out", str(search))
    summary = json.loads((search / "summary.json").read_text())
    export = search / "export" / "best_config.yaml"
    if not export.is_file():
        _run("export", str(search))
    exported = yaml.safe_load(export.read_text())["config"]
    first_seed = int(exported.get("seed", 0))
    seed_list = [first_seed + k for k in range(args.seeds)]
    trains = {s: args.out / f"train-seed{s}" for s in seed_list}
    todo = [s for s, d in trains.items() if not (d / "test_metrics.json").is_file()]
    retrain_started = time.time()
    while todo:  # at most --train-concurrency trainings at a time
        at_once = args.train_concurrency or args.concurrency
        batch, todo = todo[:at_once], todo[at_once:]
        for proc in [_start("train", str(export), "--set", f"seed={s}", "--out", str(trains[s]))
                     for s in batch]:
            if proc.wait() != 0:
                raise SystemExit(f"dmlsearch train exited {proc.returncode}")
    runs = [json.loads((trains[s] / "test_metrics.json").read_text()) for s in seed_list]
    best = next(t for t in summary["trials"] if t["trial_id"] == summary["best_trial"])
    rows = {}
    for kind in ("eer", "mindcf01"):
        for scoring in ("cosine", "e2e", "fusion"):
            rows[f"{kind}_{scoring}"] = [r[f"{kind}_{scoring}"] for r in runs]
        for scoring in ("e2e", "fusion"):
            rows[f"{kind}: {scoring} - cosine"] = [
                r[f"{kind}_{scoring}"] - r[f"{kind}_cosine"] for r in runs]
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "date":
        time.strftime("%Y-%m-%d"), "wall_seconds": round(time.time() - started),
        "search_seconds": round(summary["seconds"]),
        "train_seconds": round(time.time() - retrain_started),
        "trials": args.trials, "epochs": args.epochs, "seeds": seed_list,
        "best_trial": summary["best_trial"], "best_config": best["config"],
        "trained_epochs": int(exported["epochs"]),
        "best_val_eer_e2e": best["score"], "test_trials": runs[0]["verify_trials"],
        "per_seed": rows, "mean_ci95": {k: _interval(v) for k, v in rows.items()},
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print(f"best trial {summary['best_trial']} (val EER of D {best['score']:.4f}); test on "
          f"{runs[0]['verify_trials']} trials, seeds {seed_list}:")
    for name, values in rows.items():  # EER in %, minDCF as it is
        mean, ci = result["mean_ci95"][name]
        scale, unit = (1, "") if name.startswith("mindcf") else (100, " %")
        print(f"  {name:24s} {scale * mean:7.3f} ± {scale * ci:6.3f}{unit}   ("
              + ", ".join(f"{scale * v:.3f}" for v in values) + ")")


if __name__ == "__main__":
    main()
