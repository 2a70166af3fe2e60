"""The built-in ``speakers`` corpus (espeak-ng, run as a program): a small one built here is
deterministic, its voices are really the ones written for it (espeak-ng falls back silently),
its split is speaker-disjoint and its trial list is between test speakers; without espeak-ng,
using it is one line that says how to install it. The tests that synthesise skip without it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from dmlsearch.trainables.audio import speakers as S
from dmlsearch.trainables.audio.corpora import build_speaker_folder
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.errors import UserError
from tests.helpers import run_cli

ESPEAK = shutil.which("espeak-ng") is not None
needs_espeak = pytest.mark.skipif(
    not ESPEAK, reason="the built-in speakers need the espeak-ng program (apt-get install "
    "espeak-ng); .ci/run installs it")
SMALL = {"speakers": 8, "sessions": 2, "utterances": 2}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not ESPEAK:
        pytest.skip("the built-in speakers need the espeak-ng program (apt-get install "
                    "espeak-ng)")
    return S.build_corpus(tmp_path_factory.mktemp("speakers") / "corpus", seed=3, **SMALL)


def _samples(root: Path) -> dict[str, np.ndarray]:
    return {str(p.relative_to(root)): soundfile.read(str(p), dtype="int16")[0]
            for p in sorted(root.rglob("*.flac"))}


@needs_espeak
def test_the_corpus_is_deterministic_and_laid_out_like_voxceleb(corpus: Path,
                                                                 tmp_path: Path) -> None:
    files = _samples(corpus)
    assert len(files) == 8 * 2 * 2
    assert all(len(Path(f).parts) == 3 and f.split("/")[1].startswith("session") for f in files)
    again = _samples(S.build_corpus(tmp_path / "again", seed=3, **SMALL))
    assert files.keys() == again.keys()
    assert all(np.array_equal(files[k], again[k]) for k in files)
    other = _samples(S.build_corpus(tmp_path / "other", seed=4, **SMALL))
    assert not any(np.array_equal(a, b) for a, b in zip(files.values(), other.values()))
    for samples in files.values():
        assert 1.0 < len(samples) / 16000 < 8.0 and np.abs(samples).max() <= 32000
    stamp = (corpus / S.FINGERPRINT_FILE).read_text()
    assert S.build_corpus(corpus, seed=3, **SMALL) == corpus  # found, not built again
    assert (corpus / S.FINGERPRINT_FILE).read_text() == stamp


@needs_espeak
def test_every_speaker_is_its_own_voice(corpus: Path) -> None:
    voices = [S.Voice.random(np.random.default_rng([3, k])) for k in range(8)]
    assert len({v.variant_text("x") for v in voices}) == 8
    assert len({v.accent for v in voices}) > 2 and {v.gender for v in voices} == {"male",
                                                                                   "female"}
    names = sorted(p.name for p in corpus.iterdir() if p.is_dir())
    assert names == [f"s{k:03d}-{v.label()}" for k, v in enumerate(voices)]
    # Our variant speaks differently from its plain accent; an unknown one is caught.
    _, data = S.espeak_version()
    program = S.espeak_program()
    folder = S._private_data(data, {"dmls0000": voices[0]}, corpus.parent / "private")
    S._check_variants_apply(program, folder, "dmls0000", {"dmls0000": voices[0]})
    with pytest.raises(UserError, match="espeak-ng ignored the built-in speakers' voice"):
        S._check_variants_apply(program, folder, "dmls0001", {"dmls0001": voices[1]})


@needs_espeak
def test_the_split_is_speaker_disjoint_and_the_trials_are_between_test_speakers(
        corpus: Path) -> None:
    data = build_speaker_folder(str(corpus))
    names = data.images.class_names
    assert [names[c] for c in data.train_classes] == list(names[:4])
    assert [names[c] for c in data.test_classes] == list(names[4:])
    trials = data.images.trials
    assert trials is not None and trials.target.any() and not trials.target.all()
    test = data.test()
    left, right, same = test.listed_pairs()
    assert (test.labels[left] == test.labels[right]).tolist() == same.tolist()
    assert set(np.unique(np.concatenate([left, right]))) <= set(range(len(test)))


def test_without_espeak_ng_the_built_in_speakers_say_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng anywhere
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match=r"the built-in speakers dataset synthesises speech with "
                       r"the espeak-ng program, which is not on the PATH; install it "
                       r"\(Debian/Ubuntu: apt-get install espeak-ng"):
        load_dataset("speakers")
    proc = run_cli("run", "--space", "e2e_voxceleb", "--preview", "--out",
                   str(tmp_path / "out"), cache=tmp_path / "cache", cwd=tmp_path,
                   env={"PATH": str(tmp_path)}, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install espeak-ng" in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_the_sizes_the_preview_assumes_are_the_built_in_corpus_s() -> None:
    from dmlsearch.spaces._preview import SPEAKER_CLASSES
    from dmlsearch.spaces._preview import SPEAKER_TRAIN_CLASSES
    from dmlsearch.spaces._preview import SPEAKER_UTTERANCES

    assert SPEAKER_CLASSES == S.SPEAKERS
    assert SPEAKER_UTTERANCES == S.SESSIONS * S.UTTERANCES_PER_SESSION
    assert SPEAKER_TRAIN_CLASSES == S.SPEAKERS // 2
