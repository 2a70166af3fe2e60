"""Exports, reports, summaries and plots are written atomically (temp file, then rename): a
write that fails leaves the old file as it was and no temporary file behind."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

import dmlsearch.search
from dmlsearch.search import export
from dmlsearch.search.export import atomic_path
from dmlsearch.search.export import write_atomic
from dmlsearch.search.export import write_export

SEARCH = Path(search.__file__).resolve().parent


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

    monkeypatch.setattr(export.os, "fsync", disk_full)  # the new text is written, not synced
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

    monkeypatch.setattr(export.os, "replace", refuse)
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
    ``atomic_path`` (``tmp``), except the probe that tests the results folder is writable."""
    direct = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wax]b?\+?['\"]|"
                        r"\.savefig\(|json\.dump\(|\.to_csv\(|np\.save")
    found = []
    for path in sorted(SEARCH.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if direct.search(line) and "tmp" not in line and "probe" not in line:
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
