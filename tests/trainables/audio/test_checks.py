"""An audio dataset's files and settings, checked before a search starts (issue 35): a file that
is not audio, an empty one or one shorter than a frame is one error naming it when the driver
opens the dataset, not a failure of every trial that reads it; feature settings that cannot go
together are refused before any file is read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.trial import check_settings
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import open_dataset
from tests.trainables.audio import _trees


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("speakers")
    _trees.speaker_tree(root, speakers=8, per_speaker=4)
    return root


def _config(root: Path, **changes: object) -> TrialConfig:
    return TrialConfig.from_flat({"dataset": "speaker_folder", "data_root": str(root),
                                  "backbone": "tdnn_small", "batch_size": 8, "m_per_class": 4,
                                  "val_ratio": 0.5, **changes})


BAD_FILES = [
    ("random bytes named .wav", lambda: np.random.default_rng(0).bytes(4000),
     "not an audio format libsndfile reads: wav, flac, ogg or mp3"),
    ("an empty file", lambda: b"", "the file is empty"),
]


@pytest.mark.parametrize(("case", "content", "why"), BAD_FILES, ids=[c for c, _, _ in BAD_FILES])
def test_a_file_that_is_not_audio_is_named_when_the_dataset_is_opened(
        case: str, content, why: str, tree: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(tree, tmp_path / "tree"))
    bad = root / "spk03" / "session1" / "001.wav"
    bad.write_bytes(content())
    cfg = _config(root)
    load_for(cfg)  # what a trial opens: its files are read as batches need them
    with pytest.raises(UserError) as caught:
        open_dataset(cfg)  # what the driver opens before a search: every file checked
    message = str(caught.value)
    assert message == (f"speaker_folder: cannot read audio file {bad} ({why}); restore or "
                       "remove that file, or fix --data-root"), message


def test_an_utterance_shorter_than_a_frame_is_named(tree: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(tree, tmp_path / "tree"))
    short = _trees.write_wav(root / "spk05" / "session0" / "clip.wav",
                             _trees.utterance(5, 0)[:160])  # 10 ms: a 25 ms frame needs 400
    with pytest.raises(UserError, match=rf"{short} holds 160 samples at 16000 Hz, shorter than "
                                        r"one 25 ms frame of features; remove it"):
        open_dataset(_config(root))


def test_sound_files_pass_and_are_checked_in_worker_processes(tree: Path) -> None:
    dataset, stored = open_dataset(_config(tree))
    assert stored is None and len(dataset.images) == 8 * 4
    from dmlsearch.trainables.audio.checks import check_audio_files

    check_audio_files(dataset.images, workers=2)  # a real pool of two, nothing to report


def test_features_that_cannot_go_together_are_refused_before_any_file_is_read(
        tmp_path: Path) -> None:
    nowhere = tmp_path / "no-such-folder"  # never looked at
    with pytest.raises(UserError, match=r"n_features \(80\) MFCCs need at least as many mel "
                                        r"bins, got 40; set n_features to 40 or less, or "
                                        r"audio_features=fbank"):
        check_settings(_config(nowhere, n_features=80))
    check_settings(_config(nowhere, n_features=80, audio_features="fbank"))  # 80 mel bins: fine
    assert not os.path.exists(nowhere)
