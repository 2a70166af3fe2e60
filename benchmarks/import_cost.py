"""Benchmark: what a trial's and a driver's process spend importing their code, today against
the same imports plus torchvision and scikit-learn, which every such process imported before
they were imported where used (``trainables/data/_transforms.py``'s ops, the weight URLs of
``trainables/models/_resnet.py`` and ``_googlenet.py``, NMI in
``trainables/metrics/retrieval.py``, t-SNE in ``search/finish/views.py``, fANOVA's forest in
``search/reporting/fanova.py``; issue 34).

Each repetition starts fresh Python processes, interleaved (this machine is shared and noisy):
"today" imports what a trial (``dmlsearch.trainables.trial``) and a search's driver
(``dmlsearch.search.lifecycle``) import; "before" imports the same and then
``torchvision.models``, ``torchvision.transforms.functional`` and scikit-learn's ``metrics``,
``manifold`` and ``ensemble``, as they did before. The time is the process's own wall-clock
from start to the end of the imports (``python -c``, measured outside). Reports the median
seconds of each, their IQR, and the median per-repetition ratio today / before.

    python benchmarks/import_cost.py [--repeats 10] [--out results.json]
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.hpo_measures import quantiles  # noqa: E402

TODAY = "import dmlsearch.trainables.trial, dmlsearch.search.lifecycle"
BEFORE = TODAY + ("; import torchvision.models, torchvision.transforms.functional, "
                  "sklearn.metrics, sklearn.manifold, sklearn.ensemble")
WAYS = {"today": TODAY, "before": BEFORE}


def _seconds(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def _summary(values: list[float]) -> dict[str, float]:
    median, q1, q3 = quantiles(values)
    return {"median": median, "q1": q1, "q3": q3}


def summarise(times: dict[str, list[float]]) -> dict[str, Any]:
    """Each way's median and IQR, and the per-repetition ratio today / before."""
    ratios = [a / b for a, b in zip(times["today"], times["before"], strict=True)]
    return {**{way: _summary(values) for way, values in times.items()},
            "ratio_today_over_before": _summary(ratios)}


def measure(repeats: int) -> dict[str, Any]:
    _seconds(BEFORE)  # one warm-up: the files in the page cache for both ways alike
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for i in range(repeats):
        order = list(WAYS) if i % 2 == 0 else list(reversed(WAYS))
        for way in order:
            times[way].append(_seconds(WAYS[way]))
    return {"repeats": repeats, "seconds": times, **summarise(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    body = measure(args.repeats)
    body["machine"] = {"cpu": platform.processor() or platform.machine(),
                       "cores": os.cpu_count(), "python": platform.python_version()}
    for way in WAYS:
        s = body[way]
        print(f"{way:>6}: {s['median']:.2f} s (IQR {s['q1']:.2f}-{s['q3']:.2f})")
    r = body["ratio_today_over_before"]
    print(f"ratio today / before: {r['median']:.3f} (IQR {r['q1']:.3f}-{r['q3']:.3f})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(body, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
