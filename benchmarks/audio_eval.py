"""Benchmark: embedding a speaker-verification test set, whole utterances packed into padded,
masked TDNN passes (``trainables.models.Utterances``) against one utterance at a time (what the
evaluation did before, and what the source's ``eval.py`` does), in one process.

The built-in ``speakers`` test split (80 speakers, 720 utterances of 1.4 to 5.8 s; synthesised
into the cache with espeak-ng on first use), an untrained model in eval mode, features computed
once up front (both arms read the same memo); then ``--repeats`` rounds, each timing
``trainables.metrics.embed`` (packed) and the one-at-a-time loop, alternating which goes first.
Reports the medians, their ratio and the largest difference of the two arms' embeddings.

    python benchmarks/audio_eval.py [--backbone tdnn_small|tdnn] [--repeats 5] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dmlsearch.trainables.data import load_dataset  # noqa: E402
from dmlsearch.trainables.metrics.evaluate import embed  # noqa: E402
from dmlsearch.trainables.models import build_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="tdnn_small", choices=["tdnn_small", "tdnn"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    test = load_dataset("speakers").test()
    torch.manual_seed(0)
    model = build_model(backbone=args.backbone, in_channels=test.channels, embedding_size=128,
                        pooling="gap").eval()
    device = torch.device("cpu")
    items = [test.whole(i) for i in range(len(test))]  # as the evaluation serves them

    @torch.no_grad()
    def one_at_a_time() -> np.ndarray:
        return torch.cat([model(x[None]) for x in items]).numpy()

    def packed() -> np.ndarray:
        return np.asarray(embed(model, test, device=device))

    times: dict[str, list[float]] = {"packed": [], "one_at_a_time": []}
    outputs: dict[str, np.ndarray] = {}
    arms = {"packed": packed, "one_at_a_time": one_at_a_time}
    for repeat in range(args.repeats):
        order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
        for name in order:
            started = time.perf_counter()
            outputs[name] = arms[name]()
            times[name].append(time.perf_counter() - started)
        print(f"[{repeat + 1}/{args.repeats}] packed {times['packed'][-1]:.2f} s, one at a "
              f"time {times['one_at_a_time'][-1]:.2f} s", flush=True)
    frames = [int(x.shape[1]) for x in items]
    ratios = [p / o for p, o in zip(times["packed"], times["one_at_a_time"])]
    result: dict[str, Any] = {
        "backbone": args.backbone, "utterances": len(items), "frames": [min(frames), max(frames)],
        "threads": torch.get_num_threads(), "repeats": args.repeats, "seconds": times,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
        "max_abs_difference": float(np.abs(outputs["packed"] - outputs["one_at_a_time"]).max()),
        "machine": {"cpu": platform.processor(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
    }
    print(f"{args.backbone}, {len(items)} utterances of {min(frames)}-{max(frames)} frames: "
          f"packed {result['median_s']['packed']:.2f} s, one at a time "
          f"{result['median_s']['one_at_a_time']:.2f} s (medians of {args.repeats}); packed / "
          f"one at a time {result['ratio_median']:.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f}); embeddings differ by at most {result['max_abs_difference']:.1e}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
