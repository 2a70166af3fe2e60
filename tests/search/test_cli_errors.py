"""Bad input on the command line: one line on stderr, exit code 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.search._cli import run_cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--space", "nope"], "unknown space"),
        (["run", "--set", "epochs"], "--set expects KEY=VALUE"),
        (["run", "--set", "epoch=3"], "unknown setting 'epoch'"),
        (["run", "--set", "loss=arcfacee"], "unknown loss 'arcfacee'"),
        (["run", "--dataset", "omniglot"], "--data-root"),
        (["run", "--dataset", "omniglot", "--data-root", "/no/such/dir"], "/no/such/dir"),
        (["run", "--trials", "0"], "--trials must be >= 1"),
        (["run", "--set", "val_ratio=1.5"], "val_ratio"),
        (["run", "--set", "batch_size=30"], "multiple of m_per_class"),
        (["run", "--protocol", "kfold", "--set", "folds=500"], "folds must be between"),
        (["run", "--set", "device=cuda"], "no GPU is visible"),
        (["run", "--set", "precision=fp16"], "precision fp16 needs a GPU"),
        (["run", "--set", "optimizer=adamx"], "unknown optimizer 'adamx'"),
        (["run", "--set", "backbone=vgg"], "unknown backbone 'vgg'"),
        (["run", "--set", "metric=recall@0"], "metric must be recall@<k>"),
        (["run", "--trials", "x"], "invalid int value"),
        (["train", "/no/such/best_config.yaml"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    extra = ["--out", str(out)] if args[0] == "run" else []
    proc = run_cli(*args, *extra, cache=tmp_path / "cache", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert not list(tmp_path.glob("dmlsearch-*"))


def test_bad_export_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "best_config.yaml"
    bad.write_text("dmlsearch_export: 1\nconfig:\n  epochs: 2\n  learning_rate: 0.1\n")
    proc = run_cli("train", str(bad), "--out", str(tmp_path / "o"), cache=tmp_path / "cache")
    assert proc.returncode == 2
    assert "unknown setting 'learning_rate'" in proc.stderr
    assert not (tmp_path / "o").exists()
