"""``prepare``: every check of the user's input, before anything is written; what it returns
(the budget of a grid study, the horizon of the scheduler, the points evaluated first)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import prepare
from dmlsearch.trainables.errors import UserError


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


def _space(tmp_path: Path, params: str, base: str = "{dataset: glyphs}") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nsource: test\nbase: {base}\nparams:\n{params}")
    return path


def test_prepare_checks_each_choice_within_its_branch_and_reads_categorical_epochs(
        tmp_path: Path) -> None:
    space = _space(tmp_path,
                   "  - loss: {type: categorical, choices: [multi_similarity, thesis_proxy]}\n"
                   # only thesis_proxy has a variant: checked with loss=thesis_proxy
                   "  - loss.variant: {type: categorical, choices: [1, 2], "
                   "when: {loss: thesis_proxy}}\n"
                   "  - epochs: {type: categorical, choices: [2, 5]}\n")
    prepared = prepare(SearchOptions(space=str(space), sampler="grid"))
    assert prepared.max_iterations == 5  # the scheduler's horizon is the longest choice
    assert prepared.trials == len(prepared.points) == 2 * 2 + 2
    assert prepared.searched == ("loss", "loss.variant", "epochs")
    capped = prepare(SearchOptions(space=str(space), sampler="grid", trials=3))
    assert capped.trials == 3


def test_kfold_and_repeats_multiply_the_horizon(tmp_path: Path) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n",
                   base="{dataset: glyphs, epochs: 3, protocol: kfold, folds: 2, repeats: 2}")
    prepared = prepare(SearchOptions(space=str(space)))
    assert prepared.max_iterations == 3 * 2 * 2 and prepared.mode == "max"


def test_relative_paths_become_absolute_and_workers_follow_the_cpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    monkeypatch.chdir(tmp_path)
    prepared = prepare(SearchOptions(space=str(space), cpus_per_trial=3,
                                     sets=(("pretrained", "none"),)))
    assert prepared.base.workers == 2  # one CPU trains, the others load data
    assert prepared.space.base["pretrained"] == "none"  # a keyword, not a path


def test_a_cpu_search_fixes_its_thread_count_and_a_gpu_search_leaves_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: a CPU search's trials, retrain and export compute with one recorded count (the
    CPUs a trial reserves), not with whatever each process has; a count the user set stays;
    GPU trials keep torch's default (threads 0)."""
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    cpu = {"space": str(space), "gpus_per_trial": 0.0}
    fixed = prepare(SearchOptions(**cpu))
    assert fixed.base.threads == 1 and fixed.auto_threads  # the retrain may use the driver's
    assert prepare(SearchOptions(**cpu, cpus_per_trial=3)).base.threads == 3
    given = prepare(SearchOptions(**cpu, sets=(("threads", "2"),)))
    assert given.base.threads == 2 and not given.auto_threads  # the user's count is kept
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # a cluster's GPUs: not looked for here
    assert prepare(SearchOptions(space=str(space), gpus_per_trial=0.5)).base.threads == 0


def test_a_bad_choice_names_the_space_file_and_line(tmp_path: Path) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
                   "  backbone: {type: categorical, choices: [smallcnn, vgg99]}\n")
    with pytest.raises(UserError, match=rf"{space}:6: unknown backbone 'vgg99'"):
        prepare(SearchOptions(space=str(space)))


def test_the_sizes_of_the_validation_and_test_sets_are_those_of_the_split(
        tmp_path: Path) -> None:
    """What the reports print beside the scores (issue 35): the classes and queries of the
    validation split a configuration is scored on (k-fold: all folds) and of the test classes,
    counted from the real built-in data as the trials split it."""
    import numpy as np

    from dmlsearch.search.results import EvalSet
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import splits_for

    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    prepared = prepare(SearchOptions(space=str(space)))
    dataset = load_for(prepared.base)
    labels = np.asarray(dataset.images.labels)
    for config in (prepared.base, prepared.base.replace(protocol="kfold", folds=3)):
        val, test = prepared.data.eval_sets(config.to_flat())
        splits = splits_for(config, dataset)
        held_out = np.concatenate([s.val_classes for s in splits])
        assert val.folds == len(splits) and val.classes == len(held_out)
        assert val.images == int(np.isin(labels, held_out).sum()) > 0
        assert test == EvalSet.of_labels(labels, dataset.test_classes)
        assert test.classes == len(dataset.test_classes) and test.queries <= test.images


# ---- the cheap checks before the expensive work (issue 35) ------------------------------------
@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file-backed photo dataset (CUB's layout): its images go to a decoded store."""
    from dmlsearch.trainables.data.cub_like import write_cub_like

    return write_cub_like(tmp_path_factory.mktemp("photos"), classes=20, images=160).parent


PHOTOS = {"dataset": "cub200", "image_size": 32, "backbone": "smallcnn", "batch_size": 16,
          "device": "cpu"}


def _photos_base(**changes: object) -> str:
    """The base of a space on ``photos``, in YAML (a key searched must not be fixed too)."""
    base = {**PHOTOS, **changes}
    return "{" + ", ".join(f"{k}: {v}" for k, v in base.items() if v is not None) + "}"

REFUSED_BEFORE_DECODING = [
    ("fp16 on a CPU", "", (("precision", "fp16"),), "precision fp16 needs a GPU"),
    ("a backbone of audio", "", (("backbone", "tdnn_small"),),
     "backbone tdnn_small takes audio input, but dataset cub200 is image"),
    ("a choice of fp16", "  precision: {type: categorical, choices: [fp32, fp16]}\n", (),
     "s.yaml:6: precision fp16 needs a GPU"),
    ("a choice of an audio backbone",
     "  backbone: {type: categorical, choices: [smallcnn, tdnn_small]}\n", (),
     "s.yaml:6: backbone tdnn_small takes audio input"),
    ("a batch-size choice the data cannot fill",
     "  batch_size: {type: categorical, choices: [16, 4096]}\n", (),
     "s.yaml:6: batch_size 4096"),
]


@pytest.mark.parametrize(("case", "params", "sets", "needle"), REFUSED_BEFORE_DECODING,
                         ids=[c for c, _, _, _ in REFUSED_BEFORE_DECODING])
def test_a_setting_or_choice_that_cannot_work_is_refused_before_any_image_is_decoded(
        case: str, params: str, sets: tuple, needle: str, photos: Path,
        tmp_path: Path) -> None:
    searched = params.split(":")[0].strip()
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n" + params,
                   base=_photos_base(**{searched: None} if searched else {}))
    opts = SearchOptions(space=str(space), data_root=str(photos), sets=sets)
    with pytest.raises(UserError, match=re.escape(needle)):
        prepare(opts)
    decoded = tmp_path / "cache" / "decoded"
    assert not decoded.exists() or not any(decoded.iterdir()), sorted(decoded.iterdir())


def test_the_stores_are_built_once_every_check_passed(photos: Path, tmp_path: Path) -> None:
    space = _space(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n",
                   base=_photos_base(train_crops="resized"))  # one small store
    prepared = prepare(SearchOptions(space=str(space), data_root=str(photos)))
    assert [p for p in (tmp_path / "cache" / "decoded").iterdir() if not p.name.startswith(".")]
    # sizes under 0.01 GiB in a unit that shows them, never "0.00 GiB"
    assert len(prepared.notes) == 1 and "0.00 GiB" not in prepared.notes[0]
    assert re.search(r"cub200: decoded 160 images once \([\d.]+ [KM]iB, ", prepared.notes[0])


def _speaker_search(tmp_path: Path, params: str, *,
                    extra: str = "") -> tuple[Path, SearchOptions]:
    """A ``speaker_folder`` tree of 8 speakers (4 utterances each) and the options of a search of
    it over ``params`` (``extra``: more base settings, each followed by ", ")."""
    from tests.trainables.audio import _trees

    root = tmp_path / "speakers"
    _trees.speaker_tree(root, speakers=8, per_speaker=4)
    space = _space(tmp_path, params, base="{dataset: speaker_folder, backbone: tdnn_small, "
                   f"{extra}batch_size: 8, val_ratio: 0.5}}")
    return root, SearchOptions(space=str(space), data_root=str(root))


def test_a_feature_choice_impossible_with_the_fixed_settings_is_refused_up_front(
        tmp_path: Path) -> None:
    _, options = _speaker_search(
        tmp_path, "  n_features: {type: categorical, choices: [20, 80]}\n",
        extra="audio_features: mfcc, ")
    with pytest.raises(UserError, match=r"s\.yaml:5: n_features \(80\) MFCCs need at least as "
                                        r"many mel bins, got 40"):
        prepare(options)


def test_a_file_that_is_not_audio_is_refused_before_the_search(tmp_path: Path) -> None:
    root, options = _speaker_search(tmp_path, "  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n")
    bad = root / "spk06" / "session0" / "002.wav"
    bad.write_bytes(np.random.default_rng(0).bytes(4000))  # random bytes named .wav
    with pytest.raises(UserError, match=rf"cannot read audio file {re.escape(str(bad))} \(.+\); "
                                        r"restore or remove that file"):
        prepare(options)
