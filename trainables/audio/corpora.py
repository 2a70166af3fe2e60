"""Speaker datasets: the built-in ``speakers``, VoxCeleb1, VoxCeleb2 and any speaker tree.

The registry entries are in :mod:`trainables.data._audio` (which imports this module only when a
dataset is built). Each builder returns a :class:`~trainables.data.Dataset` whose utterances are an
:class:`~trainables.audio.AudioSet` (speakers are its classes) with a speaker-disjoint split, and,
where the dataset has one, its trial list (checked here, before anything trains):

* ``speakers`` (built in): espeak-ng voices (:mod:`trainables.audio.speakers`), generated into the
  cache on first use; the second half of the speakers test, on the corpus's ``trials.txt``;
* ``voxceleb1``: ``<root>/wav/idXXXXX/<video>/NNNNN.wav`` (VoxCeleb1 dev and test unpacked
  together); the test speakers are the official 40 (id10270-id10309), every other speaker trains;
  trials from ``veri_test2.txt`` (else ``veri_test.txt``) in the root, as distributed. With
  ``iden_split.txt`` in the root the utterances are read from it instead of walking the tree
  (its identification split is not used: identification is closed-set, the same 1,251 speakers
  in its three parts, and dmlsearch's protocols are speaker-disjoint);
* ``voxceleb2``: ``<root>/aac/idXXXXX/<video>/NNNNN.m4a`` (decoded by ffmpeg) or a converted
  ``<root>/wav/`` tree; every VoxCeleb2 speaker trains and the test set is VoxCeleb1's test
  speakers and trial list when the root also holds a VoxCeleb1 folder ``<root>/voxceleb1/`` (the
  source's setup: train on VoxCeleb2, test on VoxCeleb1), else a speaker-disjoint half;
* ``speaker_folder``: ``<root>/<speaker>/**/*.{wav,flac,ogg,mp3,m4a}``; with a ``trials.txt``
  (VoxCeleb format, paths relative to the root) its speakers test and the others train, else the
  second half of the speakers (sorted) tests.

A trial list given with ``trial_list`` (a setting) replaces the dataset's own.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from dmlsearch.trainables.audio.audioset import AudioSet
from dmlsearch.trainables.audio.io import FFMPEG_HINT
from dmlsearch.trainables.audio.io import SOUNDFILE_EXTENSIONS
from dmlsearch.trainables.audio.io import ffmpeg_path
from dmlsearch.trainables.audio.trials import TrialList
from dmlsearch.trainables.audio.trials import read_trial_list
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import standard_split
from dmlsearch.trainables.data._registry import dataset_info
from dmlsearch.trainables.errors import UserError

__all__ = ["AUDIO_EXTENSIONS", "VOXCELEB1_TEST_SPEAKERS", "attach_trials", "build_speaker_folder",
           "build_speakers", "build_voxceleb1", "build_voxceleb2", "speaker_dataset"]

AUDIO_EXTENSIONS = (*SOUNDFILE_EXTENSIONS, ".m4a", ".aac")
#: VoxCeleb1's verification test speakers (the 40 of vox1_test_wav.zip).
VOXCELEB1_TEST_SPEAKERS = tuple(f"id{n}" for n in range(10270, 10310))
TRIAL_FILES = ("veri_test2.txt", "veri_test.txt")


def _layout(dataset: str) -> str:
    """The file layout ``dataset``'s registry entry describes (its one text, for messages)."""
    return dataset_info(dataset).layout


def _walk(top: Path, extensions: tuple[str, ...]) -> list[str]:
    """Audio files under ``top`` as sorted POSIX paths relative to it (hidden names skipped)."""
    found: list[str] = []
    for folder, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(folder, top)
        for name in files:
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in extensions:
                found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(found)


def _utterances(files: list[str], *, dataset: str, layout: str, root: Path
                ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(files, labels, speaker names): the speaker of a file is its first folder."""
    nested = [f for f in files if "/" in f]
    if len(nested) < len(files):
        loose = next(f for f in files if "/" not in f)
        raise UserError(f"{dataset}: expected --data-root DIR to be {layout}; {root} holds "
                        f"audio outside a speaker folder ({loose})")
    speakers = sorted({f.split("/", 1)[0] for f in files})
    if len(speakers) < 4:
        raise UserError(f"{dataset}: expected --data-root DIR to be {layout}; {root} holds "
                        f"{len(files)} audio files of {len(speakers)} speaker(s); a speaker-"
                        "disjoint protocol needs at least 4 speakers")
    index = {name: k for k, name in enumerate(speakers)}
    labels = np.fromiter((index[f.split("/", 1)[0]] for f in files), np.int64, len(files))
    return np.asarray(files, dtype=object), labels, tuple(speakers)


def attach_trials(dataset: Dataset, trials: TrialList) -> Dataset:
    """``dataset`` with ``trials`` as its trial list, after checking it against the dataset."""
    audio = dataset.images
    assert isinstance(audio, AudioSet)
    trials.check(audio.files, audio.labels, audio.class_names, dataset.test_classes,
                 dataset=dataset.name)
    return dataclasses.replace(dataset, images=dataclasses.replace(audio, trials=trials))


def speaker_dataset(name: str, root: Path, files: np.ndarray, labels: np.ndarray,
                    speakers: tuple[str, ...], *, test: np.ndarray | None,
                    trials: TrialList | None) -> Dataset:
    """A dataset of ``files`` under ``root``: ``test`` speaker ids (None: the second half),
    every other speaker trains; ``trials`` checked and attached."""
    audio = AudioSet(root=str(root), files=files, labels=labels, class_names=speakers,
                     dataset=name)
    if test is None:
        train, test = standard_split(len(speakers))
    else:
        test = np.unique(test)
        train = np.setdiff1d(np.arange(len(speakers)), test)
    if len(train) < 4 or len(test) < 2:
        raise UserError(f"{name}: {len(train)} training and {len(test)} test speakers in "
                        f"{root}; expected at least 4 training speakers (validation is held out "
                        "of them) and 2 test speakers")
    dataset = Dataset(name=name, images=audio, train_classes=train, test_classes=test)
    return dataset if trials is None else attach_trials(dataset, trials)


def _root(root: str | None, dataset: str, layout: str) -> Path:
    path = Path(root or "")
    if not path.is_dir():
        raise UserError(f"{dataset}: --data-root {root} is not a folder; expected {layout}")
    return path


def _default_trials(*folders: Path) -> TrialList | None:
    for folder in folders:
        for name in TRIAL_FILES:
            if (folder / name).is_file():
                return read_trial_list(str(folder / name))
    return None


# ---- VoxCeleb1 ----------------------------------------------------------------------------


def _voxceleb1_parts(root: Path, dataset: str
                     ) -> tuple[Path, list[str], TrialList | None]:
    """(the wav folder, its files, the default trial list) of a VoxCeleb1 root."""
    wav = root / "wav"
    if not wav.is_dir():
        raise UserError(f"{dataset}: expected --data-root DIR to be {_layout('voxceleb1')}; "
                        f"{root} has no wav/ folder")
    inventory = root / "iden_split.txt"
    if inventory.is_file():
        files = _iden_split(inventory)
    else:
        files = _walk(wav, AUDIO_EXTENSIONS)
    trials = _default_trials(root)
    if trials is not None and inventory.is_file():  # listed, but are they on disk?
        for utterance in trials.utterances():
            if not (wav / utterance).is_file():
                line = int(trials.lines[np.flatnonzero(
                    (trials.enrol == utterance) | (trials.test == utterance))[0]])
                raise UserError(f"{trials.source}:{line}: {utterance} is not a file of "
                                f"{dataset} (expected it under {wav}); restore the file")
    return wav, files, trials


def _iden_split(path: Path) -> list[str]:
    files = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or fields[0] not in ("1", "2", "3"):
            raise UserError(f"{path}:{number}: expected 'split path' with split 1, 2 or 3, e.g. "
                            f"'3 id10003/na8-QEFmj44/00003.wav', got {line.strip()[:80]!r}; "
                            "restore the file as distributed or remove it")
        files.append(fields[1])
    return sorted(set(files))


def build_voxceleb1(root: str | None) -> Dataset:
    """The ``voxceleb1`` dataset under ``root`` (see the module's notes)."""
    top = _root(root, "voxceleb1", _layout("voxceleb1"))
    wav, files, trials = _voxceleb1_parts(top, "voxceleb1")
    names, labels, speakers = _utterances(files, dataset="voxceleb1",
                                          layout=_layout("voxceleb1"),
                                          root=wav)
    test = np.asarray([k for k, s in enumerate(speakers) if s in VOXCELEB1_TEST_SPEAKERS])
    if not len(test):
        raise UserError(f"voxceleb1: {wav} holds none of the 40 test speakers id10270-id10309; "
                        "unpack vox1_test_wav.zip into the same wav/ folder")
    return speaker_dataset("voxceleb1", wav, names, labels, speakers, test=test, trials=trials)


# ---- VoxCeleb2 ----------------------------------------------------------------------------


def build_voxceleb2(root: str | None) -> Dataset:
    """The ``voxceleb2`` dataset under ``root`` (see the module's notes)."""
    top = _root(root, "voxceleb2", _layout("voxceleb2"))
    parts = [p for p in ("aac", "wav") if (top / p).is_dir()]
    if not parts:
        raise UserError(f"voxceleb2: expected --data-root DIR to be {_layout('voxceleb2')}; {top} "
                        "has neither aac/ nor wav/")
    files = [f"{part}/{f}" for part in parts for f in _walk(top / part, AUDIO_EXTENSIONS)]
    if any(f.endswith((".m4a", ".aac")) for f in files) and ffmpeg_path() is None:
        raise UserError(f"voxceleb2: {top} holds m4a (AAC) audio, which needs the ffmpeg "
                        f"program, not found on the PATH; {FFMPEG_HINT}")
    loose = [f for f in files if f.count("/") < 2]
    if loose:
        raise UserError(f"voxceleb2: expected --data-root DIR to be {_layout('voxceleb2')}; "
                        f"{top / loose[0]} is not in a speaker folder")
    pairs = [(f.split("/")[1], f) for f in files]  # aac/<speaker>/<video>/<utterance>
    test: np.ndarray | None = None
    trials = None
    vox1 = top / "voxceleb1"
    if vox1.is_dir():  # the source's setup: VoxCeleb1's test speakers and trial list
        wav1, files1, trials = _voxceleb1_parts(vox1, "voxceleb2")
        rel = os.path.relpath(wav1, top).replace(os.sep, "/")
        tested = [(f.split("/", 1)[0], f"{rel}/{f}") for f in files1
                  if f.split("/", 1)[0] in VOXCELEB1_TEST_SPEAKERS]
        clash = sorted({s for s, _ in pairs} & {s for s, _ in tested})
        if clash:
            raise UserError(f"voxceleb2: speaker {clash[0]} is in both VoxCeleb2 (training) and "
                            "VoxCeleb1's test set; remove it from one of them")
        pairs += tested
        trials = None if trials is None else trials.prefixed(rel + "/")
    speakers = tuple(sorted({s for s, _ in pairs}))
    index = {s: k for k, s in enumerate(speakers)}
    pairs.sort(key=lambda pair: pair[1])
    names = np.asarray([f for _, f in pairs], dtype=object)
    labels = np.asarray([index[s] for s, _ in pairs], dtype=np.int64)
    if vox1.is_dir():
        test = np.asarray(sorted({index[s] for s in speakers if s in VOXCELEB1_TEST_SPEAKERS}),
                          dtype=np.int64)
    return speaker_dataset("voxceleb2", top, names, labels, speakers, test=test, trials=trials)


# ---- any speaker tree, and the built-in set -----------------------------------------------


def _folder_dataset(name: str, top: Path, layout: str) -> Dataset:
    files = _walk(top, AUDIO_EXTENSIONS)
    names, labels, speakers = _utterances(files, dataset=name, layout=layout, root=top)
    trials_file = top / "trials.txt"
    trials = read_trial_list(str(trials_file)) if trials_file.is_file() else None
    test = None
    if trials is not None:
        where = {s: k for k, s in enumerate(speakers)}
        listed = {str(u).split("/", 1)[0] for u in trials.utterances()}
        test = np.asarray(sorted(where[s] for s in listed if s in where))
    return speaker_dataset(name, top, names, labels, speakers, test=test, trials=trials)


def build_speaker_folder(root: str | None) -> Dataset:
    """The ``speaker_folder`` dataset under ``root`` (see the module's notes)."""
    layout = _layout("speaker_folder")
    return _folder_dataset("speaker_folder", _root(root, "speaker_folder", layout), layout)


def build_speakers(seed: int) -> Dataset:
    """The built-in ``speakers`` dataset, generated into the cache on first use."""
    from dmlsearch.trainables.audio.speakers import build_corpus
    from dmlsearch.trainables.audio.speakers import corpus_dir
    from dmlsearch.trainables.data._cache import cache_dir

    top = build_corpus(corpus_dir(cache_dir(), seed=seed), seed=seed)
    return _folder_dataset("speakers", top, _layout("speaker_folder"))
