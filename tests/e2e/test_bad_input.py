"""The bad-input catalogue, in process (``dmlsearch.search.cli.main``): every case ends with exit code 2
and one line on stderr that says what was expected, what arrived and how to fix it; no
traceback; nothing written (no results folder, no MLflow store or ``mlruns/``, no exported file,
no input changed). ``tests/search/test_cli.py`` runs a representative set through the real command in
a subprocess; these are the same code path, without paying ~10 s of imports per case."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dmlsearch.search.cli import main
from tests.helpers import free_port
from tests.helpers import make_inputs
from tests.helpers import snapshot

ALL_LOSSES = "arcface, contrastive, cosface"  # the start of the list of valid names

# (case, arguments with {in} = the inputs folder and {out} = a new results folder, what the
# line must say). `run` gets `--out {out}` unless it names its own.
CASES: list[tuple[str, list[str], list[str]]] = [
    # -- data ---------------------------------------------------------------------------------
    ("data root missing", ["run", "--dataset", "folder"],
     ["dataset 'folder' reads files: pass --data-root DIR", "one sub-folder per class"]),
    ("data root does not exist", ["run", "--dataset", "folder", "--data-root", "{in}/nope"],
     ["{in}/nope does not exist"]),
    ("data root is a file", ["run", "--dataset", "folder", "--data-root", "{in}/a_file"],
     ["is a file but not a .zip archive"]),
    ("dataset in the wrong layout (flat)", ["run", "--dataset", "folder", "--data-root",
                                            "{in}/flat"],
     ["expected --data-root DIR to be a folder <class>/*", "32 image files at depth 1"]),
    ("dataset with one class", ["run", "--dataset", "folder", "--data-root", "{in}/one_class"],
     ["only 1 class"]),
    ("corrupt image", ["run", "--dataset", "folder", "--data-root", "{in}/corrupt"],
     ["cannot read image {in}/corrupt/class03/2.png", "replace or delete that file"]),
    ("truncated JPEG of a photo dataset (decoded before any trial)",
     ["run", "--dataset", "cub200", "--data-root", "{in}/cub_truncated", "--set",
      "image_size=32", "--set", "backbone=smallcnn", "--set", "batch_size=16"],
     ["cub200: cannot read image {in}/cub_truncated/CUB_200_2011/images/002.Synthetic_class_002/",
      "replace or delete that file"]),
    ("empty image file", ["run", "--dataset", "folder", "--data-root", "{in}/empty_image"],
     ["cannot read image {in}/empty_image/class05/1.png"]),
    ("unknown dataset", ["run", "--dataset", "imagenet"],
     ["unknown dataset 'imagenet'", "cars196, cifar10, cub200, folder, glyphs"]),
    # -- space files --------------------------------------------------------------------------
    ("space file missing", ["run", "--space", "{in}/spaces/nope.yaml"],
     ["space file {in}/spaces/nope.yaml does not exist", "quickstart"]),
    ("space syntax error", ["run", "--space", "{in}/spaces/syntax.yaml"],
     ["{in}/spaces/syntax.yaml:5: not valid YAML"]),
    ("space indentation error", ["run", "--space", "{in}/spaces/indent.yaml"],
     ["{in}/spaces/indent.yaml:5: not valid YAML"]),
    ("unknown parameter", ["run", "--space", "{in}/spaces/unknown_param.yaml"],
     ["unknown_param.yaml:6: unknown setting 'learning_rate'", "batch_size, optimizer, lr,"]),
    ("unknown loss in a space", ["run", "--space", "{in}/spaces/unknown_loss.yaml"],
     ["unknown_loss.yaml:4: unknown loss 'arcfacee'", ALL_LOSSES]),
    ("unknown backbone in a space", ["run", "--space", "{in}/spaces/unknown_backbone.yaml"],
     ["unknown_backbone.yaml:4: unknown backbone 'vgg99'", "smallcnn"]),
    ("unknown sampler in a space", ["run", "--space", "{in}/spaces/unknown_sampler.yaml"],
     ["unknown_sampler.yaml:4: unknown batch sampler 'pk' for batch_sampler",
      "m_per_class, random"]),
    ("a setting under its old name", ["run", "--space", "{in}/spaces/renamed_setting.yaml"],
     ["renamed_setting.yaml:4: setting 'scheduler' is now called 'lr_schedule'"]),
    ("bounds the wrong way round", ["run", "--space", "{in}/spaces/reversed.yaml"],
     ["reversed.yaml:4:", "wrong way round", "swap them"]),
    ("step larger than the range", ["run", "--space", "{in}/spaces/step.yaml"],
     ["step.yaml:4:", "step 64 is larger than the range [32, 64]"]),
    ("a batch-size choice the data cannot fill", ["run", "--space",
                                                  "{in}/spaces/batch_choice.yaml"],
     ["batch_choice.yaml:4: batch_size 4096", "lower batch_size"]),
    # -- names and values on the command line -------------------------------------------------
    ("unknown loss", ["run", "--set", "loss=arcfacee"], ["unknown loss 'arcfacee'", ALL_LOSSES]),
    ("unknown backbone", ["run", "--set", "backbone=vgg"], ["unknown backbone 'vgg'",
                                                            "smallcnn"]),
    ("unknown batch sampler", ["run", "--set", "batch_sampler=balanced"],
     ["unknown batch sampler 'balanced'", "m_per_class, random"]),
    ("the old name of the batch sampler", ["run", "--set", "sampler=random"],
     ["setting 'sampler' is now called 'batch_sampler'", "write batch_sampler: random"]),
    ("unknown setting", ["run", "--set", "epoch=3"], ["unknown setting 'epoch'", "epochs"]),
    ("wrong type", ["run", "--set", "epochs=three"], ["epochs must be an integer, got 'three'"]),
    ("a mistyped cache word (once a folder ./shmm)", ["run", "--set", "cache=shmm"],
     ["cache must be auto, shm, off or a folder, got 'shmm'", "(./shmm for one here)"]),
    ("an audio setting on images", ["run", "--set", "max_frames=300"],
     ["max_frames is a setting of audio datasets, but dataset glyphs is image data",
      "remove max_frames from --set or the space file"]),
    ("an image setting on audio", ["run", "--dataset", "speakers", "--set", "cache=off"],
     ["cache is a setting of image datasets, but dataset speakers is audio data"]),
    ("an audio setting searched on images", ["run", "--space", "{in}/spaces/audio_param.yaml"],
     ["n_features is a setting of audio datasets", "the space file's params"]),
    ("train with a setting of the other input kind",
     ["train", "{in}/exports/good.yaml", "--out", "{out}", "--set", "vad=false"],
     ["vad is a setting of audio datasets", "remove vad from --set"]),
    ("train with seeds 0", ["train", "{in}/exports/good.yaml", "--out", "{out}", "--seeds", "0"],
     ["--seeds must be an integer >= 1 (1: the configuration's seed), got 0"]),
    ("negative size", ["run", "--set", "embedding_size=-3"], ["embedding_size must be an "
                                                              "integer >= 1, got -3"]),
    ("prior from a folder that holds no search", ["run", "--prior-from", "{in}/spaces"],
     ["--prior-from {in}/spaces: no search results in {in}/spaces", "give the --out folder"]),
    ("prior from one search named twice", ["run", "--prior-from", "{in}/spaces",
                                           "{in}/spaces/../spaces/"],
     ["--prior-from names {in}/spaces 2 times; give each search once"]),
    ("prior from a search into a grid", ["run", "--prior-from", "{in}/spaces", "--sampler",
                                         "grid"],
     ["--prior-from gives the points a search starts from", "use a sampler"]),
    ("intensify one configuration", ["run", "--intensify", "1"],
     ["--intensify 1: one configuration has nothing to be compared with", "--intensify 2"]),
    ("intensify the whole budget", ["run", "--intensify", "3", "--trials", "3"],
     ["--intensify 3 keeps 3 trainings' worth of the budget, but --trials is 3",
      "give --trials above 3"]),
    ("intensify the whole default budget", ["run", "--intensify", "20"],
     ["--intensify 20 keeps 20 trainings' worth of the budget, but the search's default "
      "budget is 14", "give --trials above 20"]),
    ("intensify a replay", ["run", "--intensify", "2", "--replay", "{in}/a_file"],
     ["--intensify trains the best configurations again, but --replay trains nothing"]),
    ("unknown search sampler", ["run", "--sampler", "hyperopt"],
     ["unknown sampler 'hyperopt' for --sampler; expected one of: cmaes, gp, grid, nsga2, "
      "prior-tpe, priorband, priorband-tpe, random, tpe"]),
    ("unknown scheduler", ["run", "--scheduler", "pbt"],
     ["unknown scheduler 'pbt' for --scheduler; expected one of: asha, hyperband, median, "
      "none, soft-asha"]),
    ("unknown pareto cost", ["run", "--pareto", "flops"], ["--pareto must be one of"]),
    ("bad duration", ["run", "--time-budget", "soon"], ["--time-budget expects a duration"]),
    ("no concurrency", ["run", "--concurrency", "0"], ["--concurrency must be an integer >= 1"]),
    # -- impossible combinations --------------------------------------------------------------
    ("batch size not a multiple of images per class", ["run", "--set", "batch_size=30"],
     ["batch_size must be a multiple of m_per_class (4), got 30", "e.g. 28"]),
    ("fewer classes than a batch needs", ["run", "--set", "batch_size=1024", "--set",
                                          "m_per_class=2"],
     ["needs 512 classes", "has 48 classes", "lower batch_size"]),
    ("more folds than classes", ["run", "--protocol", "kfold", "--set", "folds=500"],
     ["folds must be between"]),
    ("one fold", ["run", "--protocol", "kfold", "--set", "folds=1"], ["folds must be"]),
    ("validation ratio 0", ["run", "--set", "val_ratio=0"],
     ["val_ratio must be a fraction strictly between 0 and 1"]),
    ("validation ratio 1.5", ["run", "--set", "val_ratio=1.5"],
     ["val_ratio must be a fraction strictly between 0 and 1"]),
    ("images per class above the class size", ["run", "--set", "m_per_class=64"],
     ["m_per_class 64 asks for more images of a class", "at most 20"]),
    ("recall@k above the validation set", ["run", "--set", "metric=recall@500"],
     ["metric recall@500 ranks 500 neighbours", "has only 240 images"]),
    ("GPU device without a GPU", ["run", "--set", "device=cuda"], ["no GPU is visible"]),
    ("GPUs per trial without a GPU", ["run", "--gpus-per-trial", "1"],
     ["--gpus-per-trial 1 asks for GPUs, but this machine has 0"]),
    ("fp16 without a GPU", ["run", "--set", "precision=fp16"], ["precision fp16 needs a GPU"]),
    # -- where results go ---------------------------------------------------------------------
    ("MLflow server that does not answer", ["run", "--mlflow-uri", "http://127.0.0.1:{port}"],
     ["the MLflow tracking store 'http://127.0.0.1:{port}' did not answer", "--mlflow-uri"]),
    ("output folder under a file", ["run", "--out", "{in}/a_file/results"],
     ["cannot write the results folder {in}/a_file/results", "choose a writable --out"]),
    ("output folder not empty", ["run", "--out", "{in}/nonempty"],
     ["--out {in}/nonempty already holds files"]),
    ("output folder not empty, from a prior", ["run", "--prior-from", "{in}/source/res",
                                               "--out", "{in}/nonempty"],
     ["--out {in}/nonempty already holds files"]),  # and no "prior from" line before it
    # -- resume, export, train ----------------------------------------------------------------
    ("resume a study that does not exist", ["resume", "{in}/nope"], ["no search to resume"]),
    ("resume a folder that holds no search", ["resume", "{in}/nonempty"],
     ["expected the search.yaml that `dmlsearch run` writes first"]),
    ("resume a finished study", ["resume", "{in}/finished"], ["finished already"]),
    ("export a folder with no search", ["export", "{in}/nope"], ["no search results"]),
    ("export a comparison's folder", ["export", "{in}/comparison"],
     ["{in}/comparison is a comparison (compare.yaml), not one search: give one of its "
      "methods' searches (proxy_anchor: e.g. {in}/comparison/proxy_anchor)", "comparison.md"]),
    ("report a comparison's folder", ["report", "{in}/comparison"],
     ["{in}/comparison is a comparison (compare.yaml), not one search"]),
    ("prior from a comparison's folder", ["run", "--prior-from", "{in}/comparison"],
     ["--prior-from {in}/comparison: {in}/comparison is a comparison"]),
    ("export top 0", ["export", "{in}/finished", "--top", "0"],
     ["--top must be an integer >= 1, got 0"]),
    ("importance of no study", ["importance", "{in}/nope"], ["no Optuna study"]),
    ("report of no search", ["report", "{in}/nope"], ["no search results"]),
    ("train a missing export", ["train", "{in}/exports/nope.yaml"], ["does not exist"]),
    ("export with an unknown setting", ["train", "{in}/exports/unknown_setting.yaml"],
     ["unknown_setting.yaml: config: unknown setting 'learning_rate'"]),
    ("export with a wrong type", ["train", "{in}/exports/wrong_type.yaml"],
     ["wrong_type.yaml: config: epochs must be an integer, got 'three'"]),
    ("export with a wrong boolean", ["train", "{in}/exports/wrong_type_bool.yaml"],
     ["nesterov must be true or false, got 'perhaps'"]),
    ("export with an unknown key", ["train", "{in}/exports/unknown_top.yaml"],
     ["unknown top-level keys ['notes']"]),
    ("export that is not YAML", ["train", "{in}/exports/not_yaml.yaml"],
     ["not_yaml.yaml: not valid YAML at line 3"]),
    ("export that is not a mapping", ["train", "{in}/exports/not_mapping.yaml"],
     ["expected a mapping with `config:`"]),
    ("export whose config is a list", ["train", "{in}/exports/config_list.yaml"],
     ["`config` must be a mapping of settings, got list"]),
    ("export of another format", ["train", "{in}/exports/format.yaml"],
     ["dmlsearch_export must be 1, got 7"]),
    ("train with an MLflow server that does not answer",
     ["train", "{in}/exports/good.yaml", "--out", "{out}", "--mlflow-uri",
      "http://127.0.0.1:{port}"], ["did not answer"]),
    ("train into a folder under a file", ["train", "{in}/exports/good.yaml", "--out",
                                          "{in}/a_file/train"], ["cannot write the results"]),
    ("show an unknown space", ["spaces", "show", "nope"], ["unknown space 'nope'",
                                                           "quickstart"]),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_inputs(tmp_path_factory.mktemp("bad_inputs"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")  # the glyphs, drawn once for every case


@pytest.fixture()
def workdir(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(cache))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # a default results folder or mlruns/ would appear here
    yield work


def test_case_names_are_unique() -> None:  # pytest would suffix duplicate ids silently
    assert len({case for case, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "args", "needles"), CASES, ids=[c for c, _, _ in CASES])
def test_bad_input(case: str, args: list[str], needles: list[str], inputs: Path,
                   workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = workdir.parent / "results"
    values = {"in": str(inputs), "out": str(out), "port": str(free_port())}
    argv = [a.format(**values) for a in args]
    if argv[0] == "run" and "--out" not in argv:
        argv += ["--out", str(out)]
    before = snapshot(inputs)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("dmlsearch"), lines[0]
    for needle in needles:
        assert needle.format(**values) in lines[0], (needle, lines[0])
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""  # the error is all a bad input prints
    assert not out.exists()
    assert list(workdir.iterdir()) == []
    assert snapshot(inputs) == before


# ---- the decoded-image store and audio (issue 35) ---------------------------------------------
@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file-backed photo dataset (CUB's layout), whose images go to a decoded store."""
    from dmlsearch.trainables.data.cub_like import write_cub_like

    return write_cub_like(tmp_path_factory.mktemp("photos"), classes=20, images=160).parent


PHOTO_SETS = ["--dataset", "cub200", "--set", "image_size=32", "--set", "backbone=smallcnn",
              "--set", "batch_size=16", "--set", "device=cpu"]


def _one_line(argv: list[str], workdir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``dmlsearch ARGV`` refused as the catalogue's cases are (exit 2, one line on stderr, no
    traceback, no results folder, nothing in the working folder): that line."""
    out = workdir.parent / "results"
    code = main([*argv, "--out", str(out)] if argv[0] == "run" else argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""  # the error is all a bad input prints
    assert not out.exists() and list(workdir.iterdir()) == []
    return lines[0]


def test_an_empty_cache_setting_says_what_it_takes(workdir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(["run", "--set", "cache="], workdir, capsys)
    assert "cache must be auto, shm, off or a folder, got an empty value" in line, line
    assert "None" not in line and "type str" not in line


@pytest.mark.parametrize(("case", "sets", "needle"), [
    ("fp16 on a CPU", ["--set", "precision=fp16"], "precision fp16 needs a GPU"),
    ("a backbone of the other input kind", ["--set", "backbone=tdnn_small"],
     "backbone tdnn_small takes audio input, but dataset cub200 is image"),
])
def test_a_setting_that_cannot_work_is_refused_before_any_image_is_decoded(
        case: str, sets: list[str], needle: str, photos: Path, tmp_path: Path, workdir: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "photo-cache"
    monkeypatch.setenv("DMLSEARCH_CACHE", str(cache))
    line = _one_line(["run", *PHOTO_SETS, "--data-root", str(photos), *sets], workdir, capsys)
    assert needle in line, line
    assert not (cache / "decoded").exists()  # nothing decoded, nothing written


def test_train_refuses_fp16_on_a_cpu_before_any_image_is_decoded(
        photos: Path, tmp_path: Path, workdir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "photo-cache"
    monkeypatch.setenv("DMLSEARCH_CACHE", str(cache))
    export = tmp_path / "fp16.yaml"
    export.write_text(f"dmlsearch_export: 1\nconfig:\n  dataset: cub200\n  data_root: {photos}\n"
                      "  image_size: 32\n  backbone: smallcnn\n  batch_size: 16\n  epochs: 1\n"
                      "  device: cpu\n  precision: fp16\n")
    line = _one_line(["train", str(export), "--out", str(workdir.parent / "results")], workdir,
                     capsys)
    assert "precision fp16 needs a GPU" in line, line
    assert not (cache / "decoded").exists()  # nothing decoded, nothing written


@pytest.mark.parametrize(("content", "why"), [
    (b"", "the file is empty"),
    (b"\x00\x01 not an image", "not an image format PIL can read"),
])
def test_an_unreadable_image_of_an_in_memory_dataset_is_said_in_words(
        content: bytes, why: str, tmp_path: Path, workdir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import _image_tree

    root = tmp_path / "tree"
    _image_tree(root, classes=8, per_class=4)  # small: decoded into memory (read_image)
    (root / "class05" / "1.png").write_bytes(content)
    line = _one_line(["run", "--dataset", "folder", "--data-root", str(root)], workdir, capsys)
    assert f"folder: cannot read image {root}/class05/1.png ({why}): replace or delete that " \
           "file" in line, line
    assert "<_io." not in line and "object at 0x" not in line


def _speakers(root: Path) -> Path:
    from tests.trainables.audio import _trees

    _trees.speaker_tree(root, speakers=8, per_speaker=4)
    return root


def _audio_space(tmp_path: Path, params: str) -> Path:
    path = tmp_path / "audio.yaml"
    path.write_text("name: audio\nsource: test\nbase: {dataset: speaker_folder, backbone: "
                    "tdnn_small, audio_features: mfcc, batch_size: 8, val_ratio: 0.5, "
                    f"epochs: 1}}\nparams:\n{params}")
    return path


def test_an_audio_file_that_is_not_audio_is_refused_before_the_search(
        tmp_path: Path, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    root = _speakers(tmp_path / "speakers")
    bad = root / "spk02" / "session1" / "001.wav"
    bad.write_bytes(np.random.default_rng(7).bytes(5000))  # random bytes named .wav
    space = _audio_space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n")
    line = _one_line(["run", "--space", str(space), "--data-root", str(root)], workdir, capsys)
    assert (f"speaker_folder: cannot read audio file {bad} (not an audio format libsndfile "
            "reads: wav, flac, ogg or mp3); restore or remove that file") in line, line


def test_an_audio_choice_impossible_with_the_fixed_settings_is_refused_before_the_search(
        tmp_path: Path, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _speakers(tmp_path / "speakers")
    space = _audio_space(tmp_path, "  n_features: {type: categorical, choices: [20, 80]}\n")
    line = _one_line(["run", "--space", str(space), "--data-root", str(root)], workdir, capsys)
    assert f"{space}:5: n_features (80) MFCCs need at least as many mel bins, got 40" in line


# A cache folder this process cannot write in. Root writes anywhere, so as root the commands run
# as the user nobody (setpriv), keeping only the capability to read and search every folder
# (the root-owned Python, project and data stay readable; writing is what is checked).
_UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def _unprivileged(tmp_path: Path) -> list[str]:
    """The command prefix of a process whose folder permissions are enforced (nothing when
    this is not root), or a skip saying why there is none."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, whom no folder permission stops, and without setpriv "
                    "(util-linux) to run the commands as another user")
    probe = subprocess.run([*_UNPRIVILEGED, sys.executable, "-c", "import os; print(os.getuid())"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0 or probe.stdout.strip() != "65534":
        pytest.skip(f"running as root and setpriv cannot drop to the user nobody here "
                    f"({probe.stderr.strip()[-300:]})")
    return _UNPRIVILEGED


def test_a_cache_folder_that_cannot_be_written_is_one_line_from_run_and_train(
        photos: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from tests.helpers import _CASES_DRIVER
    from tests.helpers import cli_env

    prefix = _unprivileged(tmp_path)
    readonly = tmp_path / "readonly-cache"
    readonly.mkdir()
    readonly.chmod(0o555)
    # the user's home (matplotlib writes there), where access(2) finds it without root's
    # capabilities: not under pytest's private folder
    home = Path(tempfile.mkdtemp(prefix="dmlsearch-home-"))
    home.chmod(0o777)
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    attempt = subprocess.run([*prefix, sys.executable, "-c", "import sys; open(sys.argv[1], 'w')",
                              str(readonly / "probe")], capture_output=True, text=True,
                             check=False)
    assert attempt.returncode != 0 and "PermissionError" in attempt.stderr  # never vacuous
    export = home / "photos.yaml"
    export.write_text(f"dmlsearch_export: 1\nconfig:\n  dataset: cub200\n  data_root: {photos}\n"
                      f"  image_size: 32\n  backbone: smallcnn\n  batch_size: 16\n  epochs: 1\n"
                      f"  device: cpu\n  cache: {readonly}\n")
    cases = [{"argv": ["run", *PHOTO_SETS, "--data-root", str(photos), "--set",
                       f"cache={readonly}", "--out", str(home / "results")], "cwd": str(home)},
             {"argv": ["train", str(export), "--out", str(home / "trained")], "cwd": str(home)}]
    done = subprocess.run([*prefix, sys.executable, "-c", _CASES_DRIVER],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=600,
                          # matplotlib's folder too: CI points MPLCONFIGDIR into its clone,
                          # which the user nobody cannot write (a warning line on stderr)
                          env=cli_env(home / "cache", HOME=str(home),
                                      MPLCONFIGDIR=str(home / ".config" / "matplotlib")),
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for case, result in zip(cases, json.loads(done.stdout.strip().splitlines()[-1]), strict=True):
        lines = result["stderr"].strip().splitlines()
        assert result["returncode"] == 2 and len(lines) == 1, (case["argv"][0], result["stderr"])
        assert lines[0].startswith(f"dmlsearch: error: cannot write in the decoded-image cache "
                                   f"folder {readonly} (Permission denied); "), lines[0]
        assert "cache=off" in lines[0] and "Traceback" not in result["stdout"]
    assert not (home / "results").exists() and not (home / "trained").exists()
    assert list(readonly.iterdir()) == []
