"""The audio datasets' readers on small trees written here in each official layout (VoxCeleb1
with ``veri_test2.txt`` and ``iden_split.txt``, VoxCeleb2 beside a VoxCeleb1 test folder, a
speaker-per-folder tree), and their trial lists: a missing file, a malformed line, a speaker in
both train and test or a wrong label is one clear error; through the command line it is exit 2,
one line, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dmlsearch.trainables.audio import AudioSet
from dmlsearch.trainables.audio.corpora import VOXCELEB1_TEST_SPEAKERS
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.trial import load_for
from tests.helpers import run_cli
from tests.helpers import snapshot
from tests.trainables.audio import _trees


@pytest.fixture(scope="module")
def vox1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("vox1")
    files = _trees.voxceleb1(root)
    lines = _trees.trial_lines(files, ["id10270", "id10271", "id10272"])
    (root / "veri_test2.txt").write_text("\n".join(lines) + "\n")
    return root, files


def test_voxceleb1_reads_the_distributed_layout_and_its_trial_list(
        vox1: tuple[Path, list[str]]) -> None:
    root, files = vox1
    data = load_dataset("voxceleb1", root=str(root))
    audio = data.images
    assert isinstance(audio, AudioSet) and data.input_kind == "audio"
    assert list(audio.files) == files and audio.root == str(root / "wav")
    names = audio.class_names
    assert [names[c] for c in data.test_classes] == ["id10270", "id10271", "id10272"]
    assert [names[c] for c in data.train_classes] == [f"id{n}" for n in range(10001, 10007)]
    assert set(names[c] for c in data.test_classes) <= set(VOXCELEB1_TEST_SPEAKERS)
    # The trial list is the file's, and resolves to positions in the test set only.
    trials = audio.trials
    assert trials is not None and trials.source.endswith("veri_test2.txt")
    assert len(trials) == 2 * 12 and trials.target.sum() == 12
    test = data.test()
    left, right, same = test.listed_pairs()
    assert [str(test.files[i]) for i in left] == list(trials.enrol)
    assert (test.labels[left] == test.labels[right]).tolist() == same.tolist()
    assert data.train().listed_pairs() is None  # its utterances are not listed


def test_veri_test_txt_is_read_when_veri_test2_is_absent(tmp_path: Path) -> None:
    files = _trees.voxceleb1(tmp_path, per_video=1)
    (tmp_path / "veri_test.txt").write_text(
        "\n".join(_trees.trial_lines(files, ["id10270", "id10271"])) + "\n")
    trials = load_dataset("voxceleb1", root=str(tmp_path)).images.trials
    assert trials is not None and trials.source.endswith("veri_test.txt")


def test_iden_split_lists_the_utterances_without_walking_the_tree(
        vox1: tuple[Path, list[str]], tmp_path: Path) -> None:
    root, files = vox1
    (tmp_path / "wav").symlink_to(root / "wav")
    (tmp_path / "veri_test2.txt").write_text((root / "veri_test2.txt").read_text())
    # the inventory is the file's, not the tree's: every test file, every other dev file
    listed = [f for k, f in enumerate(files) if f.startswith("id1027") or k % 2 == 0]
    (tmp_path / "iden_split.txt").write_text(
        "\n".join(f"{1 + k % 3} {f}" for k, f in enumerate(listed)) + "\n")
    data = load_for(TrialConfig.from_flat(
        {"dataset": "voxceleb1", "data_root": str(tmp_path), "backbone": "tdnn_small"}))
    assert list(data.images.files) == sorted(listed)
    # ... but a listed trial file that is not on disk is still an error, naming its line.
    (tmp_path / "iden_split.txt").write_text(
        (tmp_path / "iden_split.txt").read_text() + "3 id10270/gone/00001.wav\n")
    (tmp_path / "veri_test2.txt").write_text(
        (root / "veri_test2.txt").read_text() + "1 id10270/gone/00001.wav "
        "id10270/vid0abcDEF/00001.wav\n")
    with pytest.raises(UserError, match=r"veri_test2.txt:25: id10270/gone/00001.wav is not a "
                       r"file of voxceleb1"):
        load_dataset("voxceleb1", root=str(tmp_path))
    (tmp_path / "iden_split.txt").write_text("3 id10270/a.wav extra\n")
    with pytest.raises(UserError, match=r"iden_split.txt:1: expected 'split path'"):
        load_dataset("voxceleb1", root=str(tmp_path))


def _copy_with_trials(vox1: tuple[Path, list[str]], where: Path, lines: list[str]) -> Path:
    root, _ = vox1
    where.mkdir(parents=True, exist_ok=True)
    (where / "wav").symlink_to(root / "wav")
    (where / "veri_test2.txt").write_text("\n".join(lines) + "\n")
    return where


def _good(vox1: tuple[Path, list[str]]) -> list[str]:
    return (vox1[0] / "veri_test2.txt").read_text().splitlines()


@pytest.mark.parametrize(("change", "needle"), [
    (lambda lines: lines[:2] + ["1 id10270/vid0abcDEF/00099.wav id10270/vid1abcDEF/00001.wav"]
     + lines[2:], r"veri_test2.txt:3: id10270/vid0abcDEF/00099.wav is not a file of voxceleb1"),
    (lambda lines: lines[:4] + ["1 id10270/vid0abcDEF/00001.wav"] + lines[4:],
     r"veri_test2.txt:5: expected a trial 'label enrol test'"),
    (lambda lines: lines[:1] + ["yes a b"] + lines[1:],
     r"veri_test2.txt:2: expected a trial 'label enrol test'"),
    (lambda lines: lines + ["0 id10270/vid0abcDEF/00001.wav id10001/vid0abcDEF/00001.wav"],
     r"veri_test2.txt:25: id10001/vid0abcDEF/00001.wav is by speaker id10001, whom voxceleb1 "
     r"trains on"),
    (lambda lines: lines + ["1 id10270/vid0abcDEF/00001.wav id10271/vid0abcDEF/00001.wav"],
     r"veri_test2.txt:25: the line says target \(same speaker\), but"),
    (lambda lines: [line for line in lines if line.startswith("1")],
     r"veri_test2.txt: no non-target trial"),
])
def test_a_bad_trial_list_is_one_clear_error(vox1: tuple[Path, list[str]], tmp_path: Path,
                                             change: object, needle: str) -> None:
    root = _copy_with_trials(vox1, tmp_path / "vox", change(_good(vox1)))  # type: ignore[operator]
    with pytest.raises(UserError, match=needle):
        load_dataset("voxceleb1", root=str(root))


def test_a_trial_list_setting_replaces_the_dataset_s_own(vox1: tuple[Path, list[str]],
                                                          tmp_path: Path) -> None:
    root, _ = vox1
    mine = tmp_path / "mine.txt"
    mine.write_text("\n".join(_good(vox1)[:6]) + "\n")
    cfg = TrialConfig.from_flat({"dataset": "voxceleb1", "data_root": str(root),
                                 "backbone": "tdnn_small", "trial_list": str(mine)})
    data = load_for(cfg)
    assert data.images.trials.source == str(mine) and len(data.images.trials) == 6
    mine.write_text("1 id10001/vid0abcDEF/00001.wav id10001/vid0abcDEF/00002.wav\n")
    with pytest.raises(UserError, match=r"mine.txt:1: id10001/vid0abcDEF/00001.wav is by speaker"
                       r" id10001, whom voxceleb1 trains on"):
        load_for(cfg)
    with pytest.raises(UserError, match="cannot read trial list .*nowhere.txt"):
        load_for(cfg.replace(trial_list=str(tmp_path / "nowhere.txt")))


def test_a_bad_trial_list_on_the_command_line_is_exit_2_one_line_nothing_written(
        vox1: tuple[Path, list[str]], tmp_path: Path) -> None:
    lines = _good(vox1)
    root = _copy_with_trials(vox1, tmp_path / "vox", lines + ["2 a b"])
    before = snapshot(tmp_path)
    out = tmp_path / "results"
    proc = run_cli("run", "--space", "e2e_voxceleb", "--dataset", "voxceleb1", "--data-root",
                   str(root), "--set", "backbone=tdnn_small", "--out", str(out),
                   cache=tmp_path / "cache", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "veri_test2.txt:25: expected a trial" in message[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists() and snapshot(tmp_path) == before


def test_voxceleb2_trains_on_its_speakers_and_tests_on_voxceleb1_beside_it(
        vox1: tuple[Path, list[str]], tmp_path: Path) -> None:
    for number in range(12, 20):  # a converted VoxCeleb2 tree: wav/ instead of aac/
        for u in range(3):
            _trees.write_wav(tmp_path / "wav" / f"id{number:05d}" / "vidX" / f"{u + 1:05d}.wav",
                             _trees.utterance(number, u))
    (tmp_path / "voxceleb1").mkdir()
    (tmp_path / "voxceleb1" / "wav").symlink_to(vox1[0] / "wav")
    (tmp_path / "voxceleb1" / "veri_test2.txt").write_text(
        (vox1[0] / "veri_test2.txt").read_text())
    data = load_dataset("voxceleb2", root=str(tmp_path))
    names = data.images.class_names
    assert [names[c] for c in data.train_classes] == [f"id{n:05d}" for n in range(12, 20)]
    assert [names[c] for c in data.test_classes] == ["id10270", "id10271", "id10272"]
    test = data.test()
    assert all(str(f).startswith("voxceleb1/wav/id1027") for f in test.files)
    assert test.listed_pairs() is not None and len(test.listed_pairs()[0]) == 24
    assert test.features_of(0).shape[0] == 30  # the files are found under the root
    # Without the VoxCeleb1 folder: a speaker-disjoint half of VoxCeleb2's own speakers.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "wav").symlink_to(tmp_path / "wav")
    half = load_dataset("voxceleb2", root=str(alone))
    assert len(half.train_classes) == len(half.test_classes) == 4
    assert half.images.trials is None


def test_voxceleb2_m4a_needs_ffmpeg_and_says_so(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for number in range(12, 18):
        path = tmp_path / "aac" / f"id{number:05d}" / "vidX" / "00001.m4a"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"not really aac")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no ffmpeg anywhere
    with pytest.raises(UserError, match=r"voxceleb2: .* holds m4a \(AAC\) audio, which needs the "
                       r"ffmpeg program, not found on the PATH; install ffmpeg \(Debian/Ubuntu: "
                       r"apt-get install ffmpeg\)"):
        load_dataset("voxceleb2", root=str(tmp_path))


def test_m4a_is_decoded_by_ffmpeg_when_present(tmp_path: Path) -> None:
    import shutil
    import subprocess

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (VoxCeleb2's m4a files need it: apt-get install "
                    "ffmpeg)")
    from dmlsearch.trainables.audio import read_audio

    wav = _trees.write_wav(tmp_path / "a.wav", _trees.utterance(3, 1))
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(wav), str(tmp_path / "a.m4a")],
                   check=True)
    decoded = read_audio(str(tmp_path / "a.m4a"), sample_rate=16000)
    assert abs(len(decoded) - len(_trees.utterance(3, 1))) < 2048  # AAC pads a frame or two


def test_a_speaker_folder_with_trials_txt_tests_its_speakers(tmp_path: Path) -> None:
    files = _trees.speaker_tree(tmp_path, speakers=8, ext=".flac")
    (tmp_path / "trials.txt").write_text(
        "\n".join(_trees.trial_lines(files, ["spk01", "spk05"])) + "\n")
    data = load_dataset("speaker_folder", root=str(tmp_path))
    names = data.images.class_names
    assert [names[c] for c in data.test_classes] == ["spk01", "spk05"]
    assert len(data.train_classes) == 6
    assert list(data.images.files) == files
    (tmp_path / "trials.txt").unlink()
    halves = load_dataset("speaker_folder", root=str(tmp_path))
    assert [names[c] for c in halves.test_classes] == ["spk04", "spk05", "spk06", "spk07"]


@pytest.mark.parametrize(("make", "needle"), [
    (lambda root: _trees.write_wav(root / "loose.wav", _trees.utterance(0, 0)),
     "holds audio outside a speaker folder"),
    (lambda root: None, "a speaker-disjoint protocol needs at least 4 speakers"),
])
def test_a_wrong_speaker_tree_says_what_was_expected(tmp_path: Path, make: object,
                                                     needle: str) -> None:
    _trees.speaker_tree(tmp_path, speakers=3)
    make(tmp_path)  # type: ignore[operator]
    with pytest.raises(UserError, match=needle):
        load_dataset("speaker_folder", root=str(tmp_path))
    with pytest.raises(UserError, match="is not a folder"):
        load_dataset("speaker_folder", root=str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="image_size applies to image datasets"):
        load_dataset("speaker_folder", root=str(tmp_path), image_size=32)


def test_a_broken_audio_file_is_an_error_naming_it(tmp_path: Path) -> None:
    files = _trees.speaker_tree(tmp_path, speakers=8)
    (tmp_path / files[0]).write_bytes(b"RIFF not a wav")
    audio = load_dataset("speaker_folder", root=str(tmp_path)).images
    with pytest.raises(UserError, match=f"cannot read audio file .*{files[0]}"):
        audio.features_of(0)


def test_reading_resamples_and_mixes_down_to_16_khz_mono(tmp_path: Path) -> None:
    import soundfile

    from dmlsearch.trainables.audio import read_audio

    t = np.arange(8000) / 8000
    tone = np.rint(8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    soundfile.write(str(tmp_path / "s.wav"), np.stack([tone, tone], axis=1), 8000)
    got = read_audio(str(tmp_path / "s.wav"), sample_rate=16000)
    assert got.dtype == np.int16 and len(got) == 16000
    spectrum = np.abs(np.fft.rfft(got.astype(float)))
    assert abs(int(np.argmax(spectrum)) - 440) <= 1  # the same tone, one second long
    assert os.path.getsize(tmp_path / "s.wav") > 0
