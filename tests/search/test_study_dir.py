"""The results folder: made only where it may be (a new or empty folder; a file, a folder holding
files or one that cannot be written is a user error), its stores' addresses, and atomic writes
(temp file, then rename): a write that fails leaves the old file as it was and no temporary file
behind."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

import dmlsearch.search
from dmlsearch.search import study_dir as study_dir_module
from dmlsearch.search.finish.export import write_export
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import atomic_path
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.trainables.errors import UserError

SEARCH = Path(dmlsearch.search.__file__).resolve().parent


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_replaces_the_file_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "summary.json"
    write_atomic(target, '{"a": 1}')
    write_atomic(target, b'{"a": 2}')
    assert target.read_text() == '{"a": 2}'
    assert _files(target.parent) == ["summary.json"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's private 0600


def test_the_old_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "best_config.yaml"
    write_export(target, config={"epochs": 3}, provenance={"study": "s"})
    old = target.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(study_dir_module.os, "fsync", disk_full)  # the new text is written, not synced
    with pytest.raises(OSError, match="No space left"):
        write_export(target, config={"epochs": 9}, provenance={"study": "s"})
    assert target.read_bytes() == old
    assert _files(tmp_path) == ["best_config.yaml"]


def test_a_failed_rename_leaves_no_temp_file(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "summary.json"
    write_atomic(target, "old")

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(study_dir_module.os, "replace", refuse)
    with pytest.raises(PermissionError):
        write_atomic(target, "new")
    assert target.read_text() == "old" and _files(tmp_path) == ["summary.json"]


def test_an_interrupted_figure_leaves_the_old_png(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    target = tmp_path / "importance.png"
    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png"  # savefig picks PNG from it
        fig.savefig(tmp)
    png = target.read_bytes()
    assert png.startswith(b"\x89PNG")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half a pic")
            raise KeyboardInterrupt
    assert target.read_bytes() == png and _files(tmp_path) == ["importance.png"]


def test_results_files_are_written_only_through_write_atomic() -> None:
    """No module of search/ writes a file directly: every write goes to the temporary path of
    ``atomic_path`` (``tmp``), except the probe that tests the results folder is writable and
    the append-only logs (the learning-curve table, whose reader skips a line cut by a crash;
    Ray's console output, ray.log)."""
    direct = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wax]b?\+?['\"]|"
                        r"\.savefig\(|json\.dump\(|\.to_csv\(|np\.save")
    found = []
    for path in sorted(SEARCH.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if direct.search(line) and not any(word in line for word in
                                               ("tmp", "probe", "append-only")):
                found.append(f"{path.relative_to(SEARCH)}:{number}: {line.strip()}")
    assert found == []


def test_a_new_folder_is_created_and_discarded_again(tmp_path: Path) -> None:
    study_dir, created = StudyDir.create(tmp_path / "a" / "b", prefix="quickstart")
    assert created and study_dir.path.is_dir() and study_dir.name == "b"
    (study_dir.path / "mlflow.db").write_text("half set up")
    study_dir.discard(created=created)
    assert not study_dir.path.exists()


def test_a_users_empty_folder_is_used_and_emptied_not_deleted(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    study_dir, created = StudyDir.create(tmp_path / "mine", prefix="quickstart")
    assert not created
    (study_dir.path / "ray").mkdir()
    (study_dir.path / "optuna.db").write_text("")
    study_dir.discard(created=created)
    assert study_dir.path.is_dir() and list(study_dir.path.iterdir()) == []


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.write_text("x"), "is a file; give a new or empty folder"),
    (lambda p: (p.mkdir(), (p / "notes.txt").write_text("keep")), "already holds files"),
])
def test_out_that_cannot_hold_results_is_a_user_error(tmp_path: Path, make, message: str) -> None:
    target = tmp_path / "out"
    make(target)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(UserError, match=message):
        StudyDir.create(target, prefix="quickstart")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_out_under_a_file_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UserError, match="cannot write the results folder .* choose a writable"):
        StudyDir.create(tmp_path / "a_file" / "results", prefix="quickstart")


def test_default_out_is_a_new_folder_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    study_dir, created = StudyDir.create(None, prefix="spaces/files/quickstart.yaml")
    assert created and study_dir.path.parent == tmp_path
    assert study_dir.name.startswith("dmlsearch-quickstart-")


def test_stores_and_ray_storage_addresses(tmp_path: Path) -> None:
    local = StudyDir(tmp_path / "s1")
    assert local.optuna_url == f"sqlite:///{tmp_path}/s1/optuna.db"
    assert local.default_tracking_uri == f"sqlite:///{tmp_path}/s1/mlflow.db"
    assert local.tune_experiment == tmp_path / "s1" / "ray" / "tune"
    shared = StudyDir(tmp_path / "s1", storage=str(tmp_path / "nfs"))
    assert shared.tune_experiment == tmp_path / "nfs" / "s1" / "tune"
    bucket = StudyDir(tmp_path / "s1", storage="s3://bucket/runs/")
    assert bucket.tune_experiment == "s3://bucket/runs/s1/tune"
    assert bucket.ray_trial_folders() == []


def test_of_search_reads_the_storage_the_search_used(tmp_path: Path) -> None:
    StudyDir(tmp_path).write_resolved({"options": {"storage": str(tmp_path / "nfs")}})
    assert StudyDir.of_search(tmp_path).storage == str(tmp_path / "nfs")
    assert StudyDir.of_search(tmp_path / "nope").read_resolved() == {}
