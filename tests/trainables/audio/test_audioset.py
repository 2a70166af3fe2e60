"""Batches of an audio set: the source's training crops (one random length per batch in
[max_frames/4, max_frames), a random window of every utterance, short ones repeated), the same
batches for any number of workers, whole utterances in evaluation (packed, in order), and a
model embedding them (the TDNN, statistics pooling over time)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dmlsearch.trainables.audio import AudioSet
from dmlsearch.trainables.audio import FeatureSpec
from dmlsearch.trainables.audio.audioset import MIN_EVAL_FRAMES
from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data import sequential_batches
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.evaluate import embed
from dmlsearch.trainables.models import Utterances
from dmlsearch.trainables.models import build_model
from tests.trainables.audio import _trees


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> AudioSet:
    root = tmp_path_factory.mktemp("speakers")
    _trees.speaker_tree(root, speakers=8, per_speaker=4)
    _trees.write_wav(root / "spk00" / "long" / "999.wav", _trees.utterance(0, 9, seconds=3.0))
    data = load_dataset("speaker_folder", root=str(root))
    return data.images.with_options(max_frames=80)


def _long(audio: AudioSet) -> int:
    """The position of the 3-second utterance."""
    return [str(f) for f in audio.files].index("spk00/long/999.wav")


def _frames(audio: AudioSet) -> list[int]:
    return [audio.features_of(i).shape[1] for i in range(len(audio))]


def test_an_audio_set_answers_what_an_image_set_answers(audio: AudioSet) -> None:
    assert audio.input_kind == "audio" and audio.channels == 30
    assert len(audio) == 33 and audio.num_classes == 8
    assert audio.classes().tolist() == list(range(8))
    two = audio.select_classes([1, 4])
    assert set(two.labels.tolist()) == {1, 4} and len(two) == 8
    assert two.features == audio.features and two.max_frames == 80
    assert list(audio.subset(np.array([3, 0])).files) == [audio.files[3], audio.files[0]]
    assert audio.features_of(0) is audio.features_of(0)  # computed once per process
    assert "33 utterances, 8 speakers" in repr(audio)
    with pytest.raises(UserError, match="max_frames must be an integer >= 16"):
        audio.with_options(max_frames=8)


def test_training_batches_are_random_crops_of_one_random_length_per_batch(
        audio: AudioSet) -> None:
    batches = [np.arange(k, k + 6) % len(audio) for k in range(0, 60, 6)]
    with BatchLoader(audio, train=True, seed=3) as loader:
        got = list(loader.epoch(batches))
    lengths = set()
    for (x, y), idx in zip(got, batches):
        assert x.dtype == torch.float32 and x.shape[:2] == (6, 30)
        assert 20 <= x.shape[2] < 80  # [max_frames / 4, max_frames)
        assert y.tolist() == audio.labels[idx].tolist()
        lengths.add(x.shape[2])
        for row, i in zip(x, idx):  # a window of that utterance's features (or it repeated)
            feats = audio.features_of(int(i))
            if feats.shape[1] >= x.shape[2]:
                windows = feats.unfold(1, x.shape[2], 1)  # [F, starts, L]
                assert any(torch.equal(windows[:, s], row) for s in range(windows.shape[1]))
            else:
                assert torch.equal(feats.repeat(1, 9)[:, :x.shape[2]], row)
    assert len(lengths) > 3  # a new length per batch
    with BatchLoader(audio, train=True, seed=3) as again:
        assert all(torch.equal(a[0], b[0]) for a, b in zip(got, again.epoch(batches)))
    with BatchLoader(audio, train=True, seed=3, workers=2) as workers:
        assert all(torch.equal(a[0], b[0]) for a, b in zip(got, workers.epoch(batches)))


def test_evaluation_serves_whole_utterances_in_order(audio: AudioSet) -> None:
    frames = _frames(audio)
    with BatchLoader(audio, train=False) as loader:
        served = list(loader.epoch(sequential_batches(len(audio), 7)))
    assert sum(len(y) for _, y in served) == len(audio)
    assert all(isinstance(x, Utterances) and len(x.lengths) == len(y) for x, y in served)
    widths = [int(n) for x, _ in served for n in x.lengths]
    assert widths == [max(f, MIN_EVAL_FRAMES) for f in frames]
    position = 0  # each utterance's frames, whole, after the previous one's
    for x, _ in served:
        for row, n in enumerate(x.lengths.tolist()):
            feats = audio.features_of(position)
            expected = feats if feats.shape[1] >= MIN_EVAL_FRAMES else feats.repeat(
                1, -(-MIN_EVAL_FRAMES // feats.shape[1]))[:, :MIN_EVAL_FRAMES]
            torch.testing.assert_close(x.padded([row])[0], expected)
            position += 1
    assert max(frames) > 200  # the 3-second utterance is served whole (its silence cut)
    labels = torch.cat([y for _, y in served]).tolist()
    assert labels == audio.labels.tolist()


def test_a_tdnn_embeds_every_utterance_once_at_full_length(audio: AudioSet) -> None:
    torch.manual_seed(0)
    model = build_model(backbone="tdnn_small", in_channels=audio.channels, embedding_size=16,
                        pooling="gap")
    emb = embed(model, audio, device=torch.device("cpu"))
    assert emb.shape == (len(audio), 16)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    model.eval()
    with torch.no_grad():  # the same as each utterance alone, whole
        alone = model(audio.features_of(_long(audio))[None]).numpy()
    np.testing.assert_allclose(emb[_long(audio)], alone[0], atol=1e-5)


def test_features_follow_the_set_s_spec(audio: AudioSet) -> None:
    fbank = audio.with_options(features=FeatureSpec(kind="fbank", n_features=24, vad=False))
    assert fbank.channels == 24 and fbank.features_of(0).shape[0] == 24
    no_vad = audio.with_options(features=FeatureSpec(vad=False))
    assert no_vad.features_of(_long(audio)).shape[1] > \
        audio.features_of(_long(audio)).shape[1]


def test_an_unreadable_file_stops_the_epoch_with_its_name(tmp_path: Path) -> None:
    files = _trees.speaker_tree(tmp_path, speakers=8, per_speaker=2)
    (tmp_path / files[3]).write_bytes(b"broken")
    audio = load_dataset("speaker_folder", root=str(tmp_path)).images
    for workers in (0, 1):
        with BatchLoader(audio, train=True, seed=0, workers=workers) as loader:
            with pytest.raises(UserError, match=f"cannot read audio file .*{files[3]}"):
                list(loader.epoch([np.arange(8)]))
