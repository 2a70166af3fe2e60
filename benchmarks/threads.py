"""Benchmark: does the same configuration train to the same numbers in a fresh, busy process?

Not a timing: a count. One small retrain (built-in glyphs, smallcnn, 16 px, one epoch, 2 CPU
threads asked) is run in fresh processes, and each one's test metrics and weight checksum are
compared with a reference run's. Two ways of applying the thread count, alternating, in the same
job:

- ``set_num_threads``: what fits did before issue 35, ``torch.set_num_threads(threads)`` only;
- ``pinned``: :func:`dmlsearch.trainables.threads.pin` (OpenMP's dynamic adjustment off in the
  fit's thread, then ``torch.set_num_threads``), what fits do now.

Each arm's reference is run with the process environment a search's driver has (no thread
variables: OpenMP's teams are then exactly the count asked for, whatever the load). The repeats
run with what a process may inherit from a Ray worker, a CI job or a shell, ``OMP_DYNAMIC=true``,
while ``--busy`` processes (default: one more than the CPUs) keep every core busy, so GNU OpenMP
would shrink each team to (CPUs - load average).

    python benchmarks/threads.py --repeats 6 --out benchmarks/results/threads.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONFIG: dict[str, Any] = {"dataset": "glyphs", "image_size": 16, "epochs": 1,
                          "embedding_size": 16, "device": "cpu", "seed": 0, "threads": 2}
ARMS = ("set_num_threads", "pinned")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_DYNAMIC", "MKL_DYNAMIC",
                    "TORCH_NUM_THREADS")


def child(arm: str) -> None:
    """One retrain of CONFIG in this process; prints its test metrics and weights' checksum."""
    import torch

    import dmlsearch.trainables.fit as fit
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.retrain import retrain

    if arm == "set_num_threads":  # the fit's thread count as it was applied before issue 35
        def only_torch(threads: int) -> int:
            count = threads or torch.get_num_threads()
            torch.set_num_threads(count)
            return count

        fit.pin_threads = only_torch
    result = retrain(TrialConfig.from_flat(CONFIG))
    checksum = sum(float(p.detach().double().sum()) for p in result.model.parameters())
    print(json.dumps({"test_metrics": result.test_metrics, "checksum": checksum}))


def _run(arm: str, env: dict[str, str]) -> dict[str, Any]:
    """One fresh process's outcome: its numbers, or the last line of its error (a run can fail:
    a loss that became NaN is an outcome here, not a crash of the benchmark)."""
    proc = subprocess.run([sys.executable, __file__, "--child", arm], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"failed": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def busy(loops: int, niceness: int = 0) -> Iterator[None]:
    """``loops`` processes that each keep a CPU busy until the block ends, at ``niceness``
    (19: they raise the load average that OpenMP's dynamic teams read, and take the CPUs only
    when nothing else wants them)."""
    spin = f"import os; os.nice({niceness})\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(loops)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=6, help="fresh busy processes per arm")
    parser.add_argument("--busy", type=int, default=None,
                        help="busy loops beside them (default: CPUs + 1)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    cpus = len(os.sched_getaffinity(0))
    loops = cpus + 1 if args.busy is None else args.busy
    with tempfile.TemporaryDirectory() as cache:
        driver = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
        driver["DMLSEARCH_CACHE"] = cache
        inherited = {**driver, "OMP_DYNAMIC": "true"}
        reference = {arm: _run(arm, driver) for arm in ARMS}
        same: dict[str, list[bool]] = {arm: [] for arm in ARMS}
        failed: dict[str, list[str]] = {arm: [] for arm in ARMS}
        with busy(loops):
            for _ in range(args.repeats):
                for arm in ARMS:  # alternating: both arms see the same load
                    outcome = _run(arm, inherited)
                    same[arm].append("failed" not in outcome and outcome == reference[arm])
                    if "failed" in outcome:
                        failed[arm].append(outcome["failed"])
    results = {
        "machine": f"{platform.platform()}, {cpus} CPUs", "python": platform.python_version(),
        "config": CONFIG, "busy_loops": loops, "repeats": args.repeats,
        "equal_to_reference": {arm: sum(flags) for arm, flags in same.items()},
        "runs": same, "failed": failed, "references": reference,
        "references_agree": reference["pinned"] == reference["set_num_threads"],
    }
    for arm in ARMS:
        said = "failed: " + reference[arm]["failed"] if "failed" in reference[arm] else "ran"
        print(f"{arm:16s} reference {said}; {sum(same[arm])}/{args.repeats} fresh busy "
              f"processes gave the reference's numbers, {len(failed[arm])} failed"
              + (f" ({failed[arm][0]})" if failed[arm] else ""))
    print(f"the two arms' references agree: {results['references_agree']}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
