"""A user's plug-in through the real command line: a space file that names it searches its
loss's parameters through Ray Tune, `dmlsearch train` retrains the export with it (from the path
the export recorded, or from where ``--plugin`` says it is now), and bad plug-ins are one line
with exit code 2 before any trial, leaving no results folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO
from tests.helpers import run_cli
from tests.helpers import run_cli_cases

EXAMPLE = REPO / "examples" / "my_loss.py"

SPACE = """\
name: my_margin
source: examples/my_loss.py, around its defaults
plugins:
  - plugin/my_loss.py
base:
  loss: margin_proxy
  epochs: 2
  embedding_size: 16
  batch_size: 32
params:
  loss.margin: {type: float, low: 0.0, high: 0.4}
  loss.scale: {type: float, low: 8, high: 32, log: true}
"""


@pytest.mark.slow
def test_a_space_with_a_plugin_searches_and_its_export_trains_again(
        tmp_path: Path, shared_cache: Path) -> None:
    (tmp_path / "plugin").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "plugin" / "my_loss.py")
    (tmp_path / "my_margin.yaml").write_text(SPACE)
    proc = run_cli("run", "--space", "my_margin.yaml", "--trials", "2", "--scheduler", "none",
                   "--out", "results", "--no-register", cache=shared_cache, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    trials = summary["trials"]
    assert len(trials) == 2 and {t["state"] for t in trials} == {"completed"}
    assert {t["config"]["loss"] for t in trials} == {"margin_proxy"}
    assert len({t["config"]["loss.margin"] for t in trials}) == 2  # searched
    export = yaml.safe_load((tmp_path / "results" / "best_config.yaml").read_text())
    plugin = str((tmp_path / "plugin" / "my_loss.py").resolve())
    assert export["config"]["plugins"] == [plugin]
    test_map = summary["retrains"][0]["mean"]["map@r"]

    # the export names the plug-in's file: train reads it from there ...
    again = run_cli("train", "results/best_config.yaml", "--out", "again", cache=shared_cache,
                    cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    got = json.loads((tmp_path / "again" / "test_metrics.json").read_text())
    assert got["map@r"] == pytest.approx(test_map, abs=1e-6)  # same machine, same numbers
    # ... or from where --plugin says it is on this machine
    moved = tmp_path / "elsewhere.py"
    shutil.move(tmp_path / "plugin" / "my_loss.py", moved)
    lost = run_cli("train", "results/best_config.yaml", "--out", "lost", cache=shared_cache,
                   cwd=tmp_path)
    assert lost.returncode == 2 and "plug-in" in lost.stderr and "my_loss.py" in lost.stderr
    assert len(lost.stderr.strip().splitlines()) == 1, lost.stderr
    assert not (tmp_path / "lost").exists()
    moved_proc = run_cli("train", "results/best_config.yaml", "--plugin", str(moved), "--out",
                         "moved", "--set", "epochs=1", cache=shared_cache, cwd=tmp_path)
    assert moved_proc.returncode == 0, moved_proc.stderr[-3000:]


BAD = {
    "import_error.py": "import torch\nimport not_a_module_xyz\n",
    "not_scalar.py": (
        "import torch\nimport dmlsearch\n\n"
        "class PerItem(torch.nn.Module):\n"
        "    def forward(self, embeddings, labels):\n"
        "        return embeddings.sum(dim=1)\n\n"
        "@dmlsearch.register_loss('per_item')\n"
        "def per_item(*, num_classes, embedding_size):\n"
        "    return PerItem()\n"),
    "clash.py": ("import dmlsearch\n\n@dmlsearch.register_loss('multi_similarity')\n"
                 "def mine(*, num_classes, embedding_size):\n    return None\n"),
}


def test_bad_plugins_are_one_line_before_any_trial(tmp_path: Path, shared_cache: Path) -> None:
    for name, text in BAD.items():
        (tmp_path / name).write_text(text)
    cases = [  # one process, as a notebook: the first case runs before any plug-in loaded
        (["compare", "--methods", "my_loss", "proxy_anchor", "--out", "r0"],
         "unknown method 'my_loss' in --methods; expected loss names ("),
        (["run", "--plugin", "import_error.py", "--out", "r1"],
         "plug-in import_error.py failed to import: ModuleNotFoundError: No module named "
         "'not_a_module_xyz' (import_error.py:2)"),
        (["run", "--plugin", "not_scalar.py", "--set", "loss=per_item", "--out", "r2"],
         "plug-in not_scalar.py: loss 'per_item' returned a tensor of shape [8]"),
        (["run", "--plugin", "clash.py", "--out", "r3"],
         "plug-in clash.py registers loss 'multi_similarity', a name dmlsearch already uses"),
        (["run", "--plugin", "missing.py", "--out", "r4"],
         "--plugin: plug-in file missing.py does not exist"),
        (["compare", "--plugin", "not_scalar.py", "--methods", "per_item", "proxy_anchor",
          "--out", "r5"],
         "method per_item: plug-in not_scalar.py: loss 'per_item' returned a tensor of shape "
         "[8]"),
        (["train", "nothing.yaml", "--plugin", "import_error.py"],
         "plug-in import_error.py failed to import"),
    ]
    procs = run_cli_cases([(argv, tmp_path) for argv, _ in cases], cache=shared_cache)
    for (argv, expected), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 2, (argv, proc.stderr[-2000:])
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (argv, proc.stderr[-2000:])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(BAD)  # nothing half-written
