"""The reference text the command line prints (`dmlsearch settings`, `spaces list`, `spaces show`)
and the shipped space files: they cite the papers, their tables and the authors' code, never a
document the user does not have; the settings that pick a part by name list the names there are;
`spaces list` never cuts a description mid-word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmlsearch.search.cli import main
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names

#: What only the project's own notes are called: a user has none of them.
INTERNAL = re.compile(r"SPEC\b|SPEC §|research/|reference-implementations|peers\.md|DESIGN\.md|"
                      r"memvir\.txt|thesis-metric-learning|e2e-verification-learned|shared/seeds")

SPACE_FILES = sorted((Path(__file__).resolve().parents[2] / "spaces" / "files").glob("*.yaml"))


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_settings_cites_papers_not_internal_notes(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, "settings")
    assert not INTERNAL.search(out), INTERNAL.search(out)
    assert "Psomas 2020, Tables 4 and 5" in out  # the loss defaults' source, named


@pytest.mark.parametrize("name", space_names())
def test_spaces_show_cites_papers_not_internal_notes(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    out = _out(capsys, "spaces", "show", name)
    assert not INTERNAL.search(out), INTERNAL.search(out)
    source = " ".join(load_space(name).source.split())
    # Every space names the paper it mirrors by authors and year.
    assert re.search(r"(Psomas|Ko|Monteiro|Kim|Wang) et al\.|Psomas 2020", source), source


@pytest.mark.parametrize("path", SPACE_FILES, ids=lambda p: p.stem)
def test_space_files_cite_papers_not_internal_notes(path: Path) -> None:
    """The files themselves, comments included: a user opens them to write their own."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        assert not INTERNAL.search(line), f"{path.name}:{number}: {line}"


def _setting_line(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if line.split()[:1] == [name]]
    return line


def test_settings_list_the_optimizers_and_schedules_there_are(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dmlsearch.trainables.optim import LR_SCHEDULES
    from dmlsearch.trainables.optim import OPTIMIZERS

    # A schedule registered now appears too: the list is the registry's, not a copy of it.
    monkeypatch.setitem(LR_SCHEDULES._entries, "zz_test_schedule", LR_SCHEDULES.get("step"))
    out = _out(capsys, "settings")
    optimizer, schedule = _setting_line(out, "optimizer"), _setting_line(out, "lr_schedule")
    assert f"one of: {', '.join(OPTIMIZERS.names())}" in optimizer
    assert f"one of: {', '.join(LR_SCHEDULES.names())}" in schedule
    assert "zz_test_schedule" in schedule
    assert {"adamw", "sgd"} <= set(re.findall(r"\w+", optimizer))
    # The other settings that pick by name or from a few words list them as well.
    assert "gap+gmp" in _setting_line(out, "pooling")
    assert "bninception" in _setting_line(out, "backbone")
    # A help that already names every choice is not repeated.
    assert "one of" not in _setting_line(out, "protocol")


def test_spaces_list_never_cuts_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, "spaces", "list")
    entries: dict[str, list[str]] = {}
    for line in out.splitlines():
        if not line.strip() or line.lstrip() != line and not entries:
            continue
        if line[0] != " " and line.split()[0] in space_names():
            name = line.split()[0]
            entries[name] = [line[len(name):].strip()]
        elif line.startswith(" ") and entries:
            entries[name].append(line.strip())
    assert sorted(entries) == space_names()
    for name, lines in entries.items():
        assert len(lines) <= 2, (name, lines)
        shown = " ".join(lines)
        space = load_space(name)
        text = " ".join((space.description or space.source).split())
        if shown.endswith(" …"):
            kept = shown[: -len(" …")]
            assert text.startswith(kept) and text[len(kept)] == " ", (name, shown)
        else:  # the whole first sentence
            assert shown.endswith(".") and text.startswith(shown.rstrip(".")), (name, shown)
            rest = text[len(shown.rstrip(".")):]
            assert rest == "" or rest.startswith("."), (name, shown)
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "dmlsearch spaces show NAME" in out
