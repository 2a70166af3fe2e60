"""A trial's worker process runs the next trials (a fresh worker imports Ray, torch and the
trainables again, docs/benchmarks.md), also when a scheduler stops trials early."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.helpers import run_cli

SPACE = """\
name: reuse
source: a test grid (no published source)
base: {dataset: glyphs, backbone: smallcnn, epochs: 3, batch_size: 32, m_per_class: 4,
       embedding_size: 16, metric: map@r, threads: 1}
params:
  lr: {type: categorical, choices: [1.0e-4, 3.0e-3, 1.0e-6, 2.0e-3]}
"""


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["none", "asha"])
def test_one_worker_runs_every_trial(tmp_path: Path, scheduler: str) -> None:
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    out = tmp_path / "results"
    proc = run_cli("run", "--space", str(tmp_path / "space.yaml"), "--sampler", "grid",
                   "--scheduler", scheduler, "--grace-period", "1", "--reduction-factor", "2",
                   "--concurrency", "1", "--out", str(out), "--no-retrain",
                   cache=tmp_path / "cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    states = [t["state"] for t in summary["trials"]]
    assert len(states) == 4 and "failed" not in states
    if scheduler == "asha":  # lr 1e-6 falls behind after its first epoch
        assert "pruned" in states, states
    pids = {json.loads(line)["pid"]
            for folder in (out / "ray" / "tune").glob("trial_*")
            for line in (folder / "result.json").read_text().splitlines()}
    assert len(pids) == 1, pids
