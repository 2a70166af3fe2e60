"""Helpers shared by the tests, each defined once: ports, the real command line in a subprocess,
small trial configurations and batches, and results folders written through the project's own
``StudyDir`` and ``Summary`` (so no test re-encodes the results folder's layout)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.results import Budget
from dmlsearch.search.results import StudyInfo
from dmlsearch.search.results import Summary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.results import write_summary
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.metrics import metric_mode

REPO = Path(__file__).resolve().parents[1]
OMNIGLOT = REPO.parent / "shared" / "data" / "omniglot_background_small1.zip"
CURVE_GRID = REPO / "tests" / "data" / "curves_grid.yaml"
"""The grid of the session's learning-curve table (conftest ``curve_table``): 3 losses x 2 lrs."""
CURVE_SPACE = REPO / "tests" / "data" / "curves_space.yaml"
"""A finer space over the same settings, which replays that table (values snapped)."""


# ---- processes and ports ------------------------------------------------------------------------
def free_ports(count: int) -> list[int]:
    """``count`` distinct local ports nothing listens on (bound together, then released)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


RAY_INIT_SETS = ("PYTHONBREAKPOINT", "RAY_AUTH_MODE")
"""What ``ray.init`` writes into its own process's environment (Ray's debugger hook, its token
mode): once the suite has started Ray in the pytest process (``local_ray``...), those are not a
user's shell, so the commands the tests start do not inherit them."""
_AT_START = {name: os.environ.get(name) for name in RAY_INIT_SETS}


@contextlib.contextmanager
def ctrl_c_reaches_children() -> Iterator[None]:
    """While a child is started: SIGINT handled here, so the child starts with Ctrl-C's default
    (Python's KeyboardInterrupt) whatever this process inherited. A shell ignores SIGINT in a
    background job (``.ci/run &``) and a child inherits the ignoring, so a test's Ctrl-C would
    not reach it; Ray Tune used to hide this by leaving its own handler installed."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


def user_environ() -> dict[str, str]:
    """The pytest process's environment as the user's shell had it (see :data:`RAY_INIT_SETS`)."""
    env = dict(os.environ)
    for name, value in _AT_START.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def cli_env(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``dmlsearch`` subprocess: a private built-in dataset cache."""
    return {**user_environ(), "DMLSEARCH_CACHE": str(cache), "PYTHONUNBUFFERED": "1", **extra}


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dmlsearch.search.cli", *args]


def run_cli(*args: str, cache: Path, timeout: float = 900, cwd: Path | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``dmlsearch`` command line in a process of its own, as a user runs it."""
    return run_command(args, env={**cli_env(cache), **(env or {})}, cwd=cwd, timeout=timeout)


def run_command(args: Sequence[str], *, env: Mapping[str, str], cwd: Path | None,
                timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m dmlsearch.search.cli ARGS`` to its end: a fork of the suite's fork server
    (tests/forkserver.py: the imports paid once), or a subprocess where that cannot stand in."""
    from tests import forkserver

    server = forkserver.server(user_environ())
    if server is not None and server.forks(env):
        return server.run(args, env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                          env=dict(env), cwd=cwd)


_CASES_DRIVER = """
import contextlib, io, json, logging, os, sys
from dmlsearch.search.cli import main
results = []
for case in json.load(sys.stdin):
    os.chdir(case["cwd"])
    logging.getLogger().handlers.clear()  # main's basicConfig: this case's stderr
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(case["argv"])
        except SystemExit as exc:  # argparse
            code = exc.code
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""


def run_cli_cases(cases: Sequence[tuple[Sequence[str], Path]], *, cache: Path,
                  timeout: float = 300) -> list[subprocess.CompletedProcess[str]]:
    """Several ``dmlsearch`` commands (each ``(argv, cwd)``) in one real process, one after the
    other, as ``python -m dmlsearch.search.cli`` runs each (its ``main``): each its exit code,
    stdout and stderr. One process pays the imports once (a few CPU-seconds each)."""
    payload = json.dumps([{"argv": list(argv), "cwd": str(cwd)} for argv, cwd in cases])
    proc = subprocess.run([sys.executable, "-c", _CASES_DRIVER], input=payload,
                          capture_output=True, text=True, timeout=timeout, env=cli_env(cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [subprocess.CompletedProcess(list(argv), r["returncode"], r["stdout"], r["stderr"])
            for (argv, _), r in zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]),
                                    strict=True)]


def kill_tree(pgid: int, marker: str) -> None:
    """SIGKILL the driver's process group and every process of its private Ray temp dir."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def between_saves(results: Path, *, timeout: float = 60.0) -> None:
    """Return at a moment when Ray Tune is not saving the experiment under ``results``: its
    newest ``experiment_state-*.json`` reads whole and was written 0.1-0.6 s ago (saved every
    second or more). A kill then does not cut a save short, which would leave the search
    nothing to resume from (``search/tune/restore.py``); with no save in ``timeout`` s, now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = sorted(results.rglob("experiment_state-*.json"), key=lambda p: p.name)
        try:
            age = time.time() - states[-1].stat().st_mtime
            json.loads(states[-1].read_text())
        except (IndexError, OSError, ValueError):
            age = -1.0
        if 0.1 <= age <= 0.6:
            return
        time.sleep(0.02)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its contents: nothing may be added, changed or removed."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def read_png(path: Path) -> Any:
    """The picture at ``path``, checked to be a real PNG of a readable size."""
    from matplotlib.image import imread

    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    return image


# ---- the bad-input catalogue's files (tests/e2e/test_bad_input.py, tests/search/test_cli.py) ----
BAD_HEAD = "name: demo\nsource: dmlsearch tests (bad input)\n"

BAD_SPACES = {
    # line 5 holds the unclosed flow mapping of line 4
    "syntax.yaml": BAD_HEAD + "params:\n  lr: {type: float, low: 1.0e-4, high: 1.0e-2\n"
                          "  loss: {type: categorical, choices: [triplet]}\n",
    "indent.yaml": BAD_HEAD + "params:\n  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n"
                          " epochs: 3\n",
    "unknown_param.yaml": BAD_HEAD + "base:\n  epochs: 2\nparams:\n"
                                 "  learning_rate: {type: float, low: 1.0e-4, high: 1.0e-2}\n",
    "unknown_loss.yaml": BAD_HEAD + "params:\n  loss: {type: categorical, "
                                "choices: [multi_similarity, arcfacee]}\n",
    "unknown_backbone.yaml": BAD_HEAD + "params:\n  backbone: {type: categorical, "
                                    "choices: [smallcnn, vgg99]}\n",
    "unknown_sampler.yaml": BAD_HEAD + "params:\n"
                                   "  batch_sampler: {type: categorical, "
                                   "choices: [m_per_class, pk]}\n",
    "renamed_setting.yaml": BAD_HEAD + "params:\n"
                                   "  scheduler: {type: categorical, choices: [step, none]}\n",
    "reversed.yaml": BAD_HEAD + "params:\n  lr: {type: float, low: 1.0e-2, high: 1.0e-4}\n",
    "step.yaml": BAD_HEAD + "params:\n  batch_size: {type: int, low: 32, high: 64, step: 64}\n",
    "batch_choice.yaml": BAD_HEAD + "params:\n"
                                "  batch_size: {type: categorical, choices: [32, 4096]}\n",
    "audio_param.yaml": BAD_HEAD + "params:\n"
                               "  n_features: {type: categorical, choices: [20, 30]}\n",
}

BAD_EXPORTS = {
    "unknown_setting.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\n  learning_rate: 0.1\n",
    "wrong_type.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: three\n",
    "wrong_type_bool.yaml": "dmlsearch_export: 1\nconfig:\n  nesterov: perhaps\n",
    "unknown_top.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\nnotes: mine\n",
    "not_yaml.yaml": "dmlsearch_export: 1\nconfig: {epochs: 1\n",
    "not_mapping.yaml": "- epochs\n- 1\n",
    "config_list.yaml": "dmlsearch_export: 1\nconfig: [epochs, 1]\n",
    "format.yaml": "dmlsearch_export: 7\nconfig:\n  epochs: 1\n",
    "good.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\n  embedding_size: 16\n",
}


def _image_tree(root: Path, *, classes: int, per_class: int, flat: bool = False) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root if flat else root / f"class{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(10, 10, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / (f"c{c}_{i}.png" if flat else f"{i}.png"))


def make_inputs(root: Path) -> Path:
    """Write every bad input under ``root`` (returned)."""
    from dmlsearch.trainables.data.cub_like import write_cub_like  # torch: only these cases

    for folder, files in (("spaces", BAD_SPACES), ("exports", BAD_EXPORTS)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / name).write_text(text)
    _image_tree(root / "flat", classes=8, per_class=4, flat=True)
    _image_tree(root / "one_class", classes=1, per_class=8)
    _image_tree(root / "corrupt", classes=8, per_class=4)
    (root / "corrupt" / "class03" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    _image_tree(root / "empty_image", classes=8, per_class=4)
    (root / "empty_image" / "class05" / "1.png").write_bytes(b"")
    # enough classes for the split and a batch: the settings are checked before any decoding
    cub = write_cub_like(root / "cub_truncated", classes=20, images=160)
    jpeg = sorted((cub / "images").rglob("*.jpg"))[10]  # of class 002
    jpeg.write_bytes(jpeg.read_bytes()[:3000])  # its header reads fine: PIL opens it
    (root / "a_file").write_text("not a folder\n")
    (root / "nonempty").mkdir()
    (root / "nonempty" / "notes.txt").write_text("keep me\n")
    finished = root / "finished"
    finished.mkdir()
    (finished / "search.yaml").write_text("options: {}\n")
    (finished / "summary.json").write_text("{}\n")
    # a comparison's folder (compare.yaml): its methods' searches are the folders inside it
    (root / "comparison" / "proxy_anchor").mkdir(parents=True)
    (root / "comparison" / "compare.yaml").write_text("options: {}\n")
    (root / "comparison" / "proxy_anchor" / "search.yaml").write_text("options: {}\n")
    # a finished search to start from (--prior-from): one scored trial of the quickstart
    make_study(root / "source", metric="map@r", searched=["loss", "lr"], best="t0", trials=[
        trial_record("t0", 0.5, config={"loss": "multi_similarity", "lr": 1e-3,
                                        "embedding_size": 64, "dataset": "glyphs"})])
    return root


# ---- MLflow ------------------------------------------------------------------------------------
def runs_by_kind(out: Path) -> tuple[Any, dict[str, list[Any]]]:
    """The MLflow client of a results folder's SQLite store and the runs of its experiment
    (named after the folder), grouped by their ``dmlsearch.kind`` tag (study, trial, retrain...)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    kinds: dict[str, list[Any]] = {}
    for run in client.search_runs([exp.experiment_id], max_results=500):
        kinds.setdefault(run.data.tags["dmlsearch.kind"], []).append(run)
    return client, kinds


# ---- the shared end-to-end search (tests/e2e/conftest.py) ----------------------------------
# Credentials a user's environment may hold: the shared search runs with fake ones, and
# tests/e2e/test_secrets.py checks that none reaches a file or an output.
SECRET_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
               "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "MLFLOW_TRACKING_PASSWORD",
               "MLFLOW_TRACKING_TOKEN", "HF_TOKEN", "WANDB_API_KEY", "GITHUB_TOKEN")
SHARED_TRIALS = 4


@dataclasses.dataclass(frozen=True)
class SharedSearch:
    """A finished real search (TPE + ASHA, 4 trials, retrain, export), then ``export --top 2``
    and ``report`` of it, all through the real command line, with fake credentials in the
    environment; what they printed; Ray's session folder (its logs)."""

    out: Path
    root: Path
    cache: Path
    stdout: str  # of `dmlsearch run`
    outputs: tuple[str, ...]  # stdout + stderr of run, export, report
    export: subprocess.CompletedProcess[str]
    ray_tmp: Path
    secrets: dict[str, str]  # variable -> value (and "private key" -> the key file's secret)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Another ``dmlsearch`` command in the same environment (it reads the results)."""
        return run_command(args, env=self._env(), cwd=self.root, timeout=900)

    def _env(self) -> dict[str, str]:  # the environment the search ran in
        fake = {k: v for k, v in self.secrets.items() if k != "private key"}
        return {**user_environ(), **fake, "DMLSEARCH_CACHE": str(self.cache),
                "RAY_TMPDIR": str(self.ray_tmp), "PYTHONUNBUFFERED": "1"}


# ---- trainables ---------------------------------------------------------------------------------
SMALL = {"epochs": 3, "batch_size": 32, "m_per_class": 4, "embedding_size": 32, "lr": 3e-3,
         "threads": 2}


def small_config(**settings: Any) -> Any:
    """A :class:`TrialConfig` that trains in seconds on the built-in glyphs (``settings`` win)."""
    from dmlsearch.trainables.config import TrialConfig

    return TrialConfig.from_flat({**SMALL, **settings})


def embedding_batch(seed: int = 0, *, classes: int = 4, per_class: int = 4, dim: int = 8,
                    normalise: bool = True) -> tuple[Any, Any]:
    """``classes × per_class`` random embeddings (L2-normalised) and their labels, class-major."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(classes * per_class, dim, generator=g)
    labels = torch.arange(classes).repeat_interleave(per_class)
    return (F.normalize(x, dim=1) if normalise else x), labels


# ---- Optuna studies ----------------------------------------------------------------------------
def known_study(storage: str | None = None, name: str | None = None) -> Any:
    """objective = 10x + 3·[c = b] + 6(x − ½)(y − ½)·4 + 0.1·log10(z) + noise: x matters most,
    then c; y acts only through its interaction with x; z barely matters."""
    import numpy as np
    import optuna

    rng = np.random.default_rng(0)
    study = optuna.create_study(storage=storage, study_name=name,
                                sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(t: optuna.Trial) -> float:
        x = t.suggest_float("x", 0.0, 1.0)
        y = t.suggest_float("y", 0.0, 1.0)
        z = t.suggest_float("z", 1e-3, 1.0, log=True)
        c = t.suggest_categorical("c", ["a", "b", "c"])
        return (10 * x + 3 * (c == "b") + 24 * (x - 0.5) * (y - 0.5) + 0.1 * np.log10(z)
                + rng.normal(0, 0.05))

    study.optimize(objective, n_trials=150)
    return study


# ---- the Ray Tune layer ------------------------------------------------------------------------
def tune_settings(**changes: Any) -> Any:
    """Small, valid :class:`~dmlsearch.search.tune.TuneSettings` for the Ray Tune layer's tests
    (``changes`` win)."""
    from dmlsearch.search.tune import TuneSettings

    base: dict[str, Any] = dict(
        storage_path=Path("."), experiment=Path("./tune"), num_samples=1, concurrency=1,
        max_iterations=8, grace_period=1, reduction_factor=2, cpus_per_trial=1,
        gpus_per_trial=0, seed=0, optuna_storage="sqlite://", study_name="s", mode="max",
        max_failures=0, sampler="tpe", scheduler="asha")
    return TuneSettings(**{**base, **changes})


class Heard:
    """The trial events a search's listener hears (a ``TrialEvents``), kept for assertions."""

    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.results: dict[str, list[float]] = {}
        self.finished: dict[str, tuple[str, str | None]] = {}

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        self.started[trial_id] = config

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.results.setdefault(trial_id, []).append(result["score"])

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        self.finished[trial_id] = (state, reason)


# ---- learning-curve tables --------------------------------------------------------------------
def memory_table(points: Iterable[Mapping[str, Any]], seeds: tuple[int, ...] = (0,)) -> Any:
    """An in-memory table of ``points`` (each seed's curve: 3 epochs, best validation at 2)."""
    from dmlsearch.search.replay import Curve
    from dmlsearch.search.replay import CurveTable
    from dmlsearch.search.replay import config_key

    curves = {}
    for point in points:
        for seed in seeds:
            rows = [{"epoch": 1, "val": {"map@r": 0.1 + seed}, "test": {"map@r": 0.05}},
                    {"epoch": 2, "val": {"map@r": 0.3 + seed}, "test": {"map@r": 0.2}},
                    {"epoch": 3, "val": {"map@r": 0.2 + seed}}]
            curves[(config_key(point), seed)] = Curve(
                config=dict(point), seed=seed, status="ok", reason=None, epochs=rows,
                best_epoch=2, test_at_best={"map@r": 0.2})
    return CurveTable(path=Path("t.jsonl"), curves=curves,
                      header={"metric": "map@r", "base": {"epochs": 3, "dataset": "glyphs"}})


# ---- results folders ----------------------------------------------------------------------------
def trial_record(trial_id: str, score: float | None, *, state: str = "completed",
                 config: Mapping[str, Any] | None = None, **fields: Any) -> TrialRecord:
    defaults: dict[str, Any] = {"best_epoch": 3 if score is not None else None,
                                "iterations": 4, "seconds": 1.5}
    if state == "failed":
        defaults["reason"] = "TrialFailed: loss became nan"
    return TrialRecord(trial_id=trial_id, config=dict(config or {}), state=TrialState(state),
                       score=score, **{**defaults, **fields})


def make_study(root: Path, *, metric: str, trials: Iterable[TrialRecord],
               searched: Iterable[str], name: str = "res", sampler: str = "tpe",
               scheduler: str = "asha", best: str | None = None, finished: bool = True,
               resolved: Mapping[str, Any] | None = None, **summary: Any) -> StudyDir:
    """A results folder as ``dmlsearch run`` leaves it: ``search.yaml`` and, when ``finished``,
    ``summary.json`` (``summary`` overrides its fields)."""
    study_dir = StudyDir(root / name)
    study_dir.path.mkdir(parents=True)
    trials = list(trials)
    searched = list(searched)
    study_dir.write_resolved({
        "space": "quickstart", "space_source": "name: quickstart\n",
        "options": {"space": "quickstart", "sampler": sampler, "scheduler": scheduler,
                    "out": str(study_dir.path)},
        "base": {"dataset": "glyphs", "protocol": "fixed", "metric": metric},
        "searched": searched, "code_revision": "abc123+dirty", "dmlsearch": "0.1",
        **(resolved or {})})
    if finished:
        write_summary(study_dir, Summary(**{
            "study": StudyInfo(name=study_dir.name, space="quickstart", dataset="glyphs",
                               protocol="fixed", metric=metric, mode=metric_mode(metric),
                               sampler=sampler, scheduler=scheduler, searched=tuple(searched)),
            "trials": trials, "seconds": 161.0,
            "tracking_uri": study_dir.default_tracking_uri, "best_trial": best,
            "budget": Budget(trials=len(trials), epochs=40, trial_hours=0.02, cpu_hours=0.04),
            "test_metrics": {"recall@1": 0.61, "map@r": 0.25} if best else None,
            "export": str(study_dir.best_config) if best else None, **summary}))
    return study_dir


def add_ray_trial(study_dir: StudyDir, trial_id: str, config: Mapping[str, Any],
                  results: Iterable[Mapping[str, Any]], *, error: str | None = None) -> Path:
    """A Ray Tune trial folder in the study's experiment, as an interrupted search leaves it:
    ``params.json``, one ``result.json`` line per report, ``error.txt`` for a failure."""
    folder = Path(study_dir.tune_experiment) / f"trial_{trial_id}"
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps(dict(config)))
    (folder / "result.json").write_text("".join(
        json.dumps({"trial_id": trial_id, **r}) + "\n" for r in results))
    if error is not None:
        (folder / "error.txt").write_text(error)
    return folder
