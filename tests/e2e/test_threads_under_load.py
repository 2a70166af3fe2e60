"""The same export trains to the same numbers on the same machine, whoever trains it and however
busy the machine is (issue 35; trainables/threads.py).

The search's retrain runs in a process as the search's driver has it (no thread variables in its
environment) and writes its export as the search does; ``dmlsearch train`` of it then runs in a
fresh process beside busy loops (one more than the CPUs), with what such a process may inherit:
``OMP_NUM_THREADS=1`` (a Ray worker, a CI job, a shell that exports it) and ``OMP_DYNAMIC=true``
(OpenMP shrinks every team by the load average). Its test metrics must equal the retrain's
recorded ones exactly. Before the fix, the export said ``threads: 0`` and the fresh process
computed with its own count (and, busy, its own team size): other numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.threads import THREAD_VARIABLES
from benchmarks.threads import busy as busy_machine
from dmlsearch.search.finish import read_export
from tests.helpers import cli_command
from tests.helpers import cli_env

CONFIG = {"dataset": "glyphs", "image_size": 16, "epochs": 1, "embedding_size": 16,
          "device": "cpu", "seed": 0}
"""Small enough for two CPU cores; its numbers depend on the thread count (1 vs 2: other
weights, MAP@R differs in the 5th decimal)."""


_RETRAIN = """
import json, sys, torch
from pathlib import Path
from dmlsearch.search.finish import retrain_seeds, write_export
outcome = retrain_seeds(json.loads(sys.argv[2]), seeds=1, trial_id="t0", rank=1, tracker=None)
run = outcome.runs[0]  # what the search's finish exports (export_best)
write_export(Path(sys.argv[1]), config=run.config, provenance={"test_metrics": run.test_metrics})
print(torch.get_num_threads())
"""

CPUS = len(os.sched_getaffinity(0))


@pytest.mark.slow
@pytest.mark.skipif(CPUS < 2, reason="one CPU: every process computes with one thread")
def test_an_export_trains_to_the_retrains_numbers_in_a_fresh_busy_process(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    driver = {k: v for k, v in cli_env(cache).items() if k not in THREAD_VARIABLES}
    export = tmp_path / "best_config.yaml"
    retrained = subprocess.run([sys.executable, "-c", _RETRAIN, str(export), json.dumps(CONFIG)],
                               env=driver, capture_output=True, text=True, timeout=900)
    assert retrained.returncode == 0, retrained.stderr[-3000:]
    config, provenance = read_export(export)

    inherited = {**driver, "OMP_NUM_THREADS": "1", "OMP_DYNAMIC": "true"}
    # The loops run at the lowest priority: they load the machine (OpenMP's dynamic teams
    # read the load average) without making the training wait minutes for its turns.
    with busy_machine(CPUS + 1, niceness=19):
        trained = subprocess.run(cli_command("train", str(export), "--out",
                                             str(tmp_path / "train")),
                                 env=inherited, capture_output=True, text=True, timeout=1200)
    assert trained.returncode == 0, trained.stderr[-3000:]
    again = json.loads((tmp_path / "train" / "test_metrics.json").read_text())
    assert again == provenance["test_metrics"]
    assert config["threads"] == int(retrained.stdout.split()[-1])  # the count it computed with
