"""Bad input on the command line: one line on stderr, exit code 2, no traceback, nothing
written. The cases that read files run through the real command, all in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.cli import main
from tests.helpers import free_port
from tests.helpers import make_inputs
from tests.helpers import run_cli_cases
from tests.helpers import snapshot


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--space", "nope"], "unknown space"),
        (["run", "--set", "epochs"], "--set expects KEY=VALUE"),
        (["run", "--set", "epoch=3"], "unknown setting 'epoch'"),
        (["run", "--set", "loss=arcfacee"], "unknown loss 'arcfacee'"),
        (["run", "--dataset", "omniglot"], "--data-root"),
        (["run", "--dataset", "omniglot", "--data-root", "/no/such/dir"], "/no/such/dir"),
        (["run", "--trials", "0"], "--trials must be an integer >= 1"),
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
        # settings once silently wrong: a typo became a folder, another kind's was ignored
        (["run", "--set", "cache=shmm"], "cache must be auto, shm, off or a folder, got 'shmm'"),
        (["run", "--set", "max_frames=300"], "max_frames is a setting of audio datasets"),
        (["run", "--dataset", "speakers", "--set", "cache=off"],
         "cache is a setting of image datasets"),
        # train's flags are run's, checked alike
        (["train", "/no/such/best_config.yaml", "--seeds", "0"],
         "--seeds must be an integer >= 1"),
        (["train", "/no/such/best_config.yaml", "--set", "epochs"], "--set expects KEY=VALUE"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str], needle: str, tmp_path: Path, glyphs_cache: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """In this process, as ``dmlsearch`` runs them (the checks come before anything starts;
    the cases that read files go through the real command below)."""
    monkeypatch.setenv("DMLSEARCH_CACHE", str(glyphs_cache))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results"
    extra = ["--out", str(out)] if args[0] == "run" else []
    try:
        code = main([*args, *extra])
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
    assert not out.exists()
    assert not list(tmp_path.glob("dmlsearch-*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no ./shmm either


# The catalogue's cases that read files, through the real command (the rest of the catalogue runs
# in process: test_bad_input.py). {in}: the inputs folder; {port}: a port nothing listens on.
FILE_CASES = {
    "space syntax error": (["run", "--space", "{in}/spaces/syntax.yaml"],
                           "{in}/spaces/syntax.yaml:5: not valid YAML"),
    "unknown parameter": (["run", "--space", "{in}/spaces/unknown_param.yaml"],
                          "unknown_param.yaml:6: unknown setting 'learning_rate'; expected one "
                          "of: dataset,"),
    "wrong layout": (["run", "--dataset", "folder", "--data-root", "{in}/flat"],
                     "image files at depth 1"),
    "corrupt image": (["run", "--dataset", "folder", "--data-root", "{in}/corrupt"],
                      "cannot read image {in}/corrupt/class03/2.png"),
    "mlflow not answering": (["run", "--mlflow-uri", "http://127.0.0.1:{port}"],
                             "did not answer (connection refused)"),
    "gpus without a gpu": (["run", "--gpus-per-trial", "1"], "--gpus-per-trial 1 asks for GPUs"),
    "unwritable out": (["run", "--out", "{in}/a_file/results"], "cannot write the results folder"),
    "resume nothing": (["resume", "{in}/nope"], "no search to resume in {in}/nope"),
    "export with an unknown setting": (["train", "{in}/exports/unknown_setting.yaml"],
                                       "unknown setting 'learning_rate'"),
    "edited export": (["train", "{in}/exports/wrong_type.yaml"],
                      "wrong_type.yaml: config: epochs must be an integer, got 'three'; fix it in "
                      "wrong_type.yaml"),
}


@pytest.fixture(scope="module")
def glyphs_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")  # the built-in dataset, drawn once


@pytest.fixture(scope="module")
def file_cases(tmp_path_factory: pytest.TempPathFactory,
               glyphs_cache: Path) -> dict[str, tuple[Any, ...]]:
    """Every file case through the real command, all in one process (each in its own folders):
    case -> (result, its inputs folder, its values, its --out, its cwd, the inputs before)."""
    prepared = {}
    for case, (args, _) in FILE_CASES.items():
        root = tmp_path_factory.mktemp("case")
        inputs = make_inputs(root / "inputs")
        out = root / "results"
        values = {"in": str(inputs), "port": str(free_port())}
        argv = [a.format(**values) for a in args]
        if argv[0] in ("run", "train") and "--out" not in argv:
            argv += ["--out", str(out)]
        work = root / "cwd"
        work.mkdir()
        prepared[case] = (argv, inputs, values, out, work, snapshot(inputs))
    # The timeout guards "fails fast": an unanswered MLflow server or a GPU that never comes
    # would otherwise keep a command waiting for minutes (or for ever).
    results = run_cli_cases([(argv, work) for argv, _, _, _, work, _ in prepared.values()],
                            cache=glyphs_cache, timeout=60 * len(prepared))
    return {case: (result, *rest[1:]) for (case, rest), result
            in zip(prepared.items(), results, strict=True)}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_bad_files_are_one_line_exit_2_and_write_nothing(
        case: str, file_cases: dict[str, tuple[Any, ...]]) -> None:
    proc, inputs, values, out, work, before = file_cases[case]
    needle = FILE_CASES[case][1]
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle.format(**values) in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert list(work.iterdir()) == []
    assert snapshot(inputs) == before
