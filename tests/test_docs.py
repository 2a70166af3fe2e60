"""The README and the guide in docs/: the README's first screen says what dmlsearch is, how to
install it and its two commands (the ones CI runs); every relative link resolves, anchors
included; every guide page is reachable from the README; the text cites papers, never a document
the user does not have; and it stays short where it has to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted({README, *(ROOT / "docs").rglob("*.md"), ROOT / "cluster" / "README.md",
                ROOT / "benchmarks" / "README.md"})

INSTALL = 'pip install -e ".[dev]"'
TEST = "python -m pytest"

#: What only the project's own notes are called: a user has none of them.
INTERNAL = re.compile(r"SPEC\b|SPEC §|research/|reference-implementations|peers\.md|DESIGN\.md|"
                      r"memvir\.txt|thesis-metric-learning|e2e-verification-learned|shared/seeds")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> str:
    """The text without its fenced code blocks (a link-like string in code is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _links(path: Path) -> list[str]:
    return [a or b for a, b in _LINK.findall(_prose(path.read_text()))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = _slug(match.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def test_first_screen_says_what_how_to_install_and_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    screen = "\n".join(lines[:30])
    assert "deep metric learning" in screen.lower()
    assert INSTALL in screen and "espeak-ng" in screen and "apt-get install espeak-ng" in screen
    # The search on built-in data, on a line of its own: the quick start needs no argument.
    assert re.search(r"^dmlsearch run$", screen, re.MULTILINE)
    assert re.search(rf"^{re.escape(TEST)}$", screen, re.MULTILINE)


def test_ci_installs_and_tests_as_the_readme_says() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert INSTALL in ci and TEST in ci
    assert INSTALL in README.read_text() and TEST in README.read_text()


def test_the_readme_is_short_and_links_every_guide_page() -> None:
    text = README.read_text()
    assert len(text.split()) <= 1000, "the README is read in five minutes: move detail to docs/"
    linked = {(README.parent / link.split("#")[0]).resolve() for link in _links(README)}
    pages = {page.resolve() for page in GUIDE.glob("*.md") if page.name != "README.md"}
    assert pages, "docs/guide/ has no pages"
    assert pages <= linked, sorted(_rel(p) for p in pages - linked)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    for link in _links(page):
        if re.match(r"[a-z]+:", link):  # http(s), mailto: not checked here
            continue
        target, _, anchor = link.partition("#")
        file = (page.parent / target).resolve() if target else page
        assert file.exists(), f"{_rel(page)}: {link} does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"{_rel(page)}: {link}: no heading #{anchor}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_pages_cite_papers_not_internal_notes(page: Path) -> None:
    text = page.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        assert not INTERNAL.search(line), f"{_rel(page)}:{number}: {line}"
    # "The thesis" is a paper with a name: every page that leans on it says which.
    if re.search(r"\bthesis\b", text, re.IGNORECASE):
        assert "Psomas" in text, f"{_rel(page)} says 'the thesis' without naming it"


@pytest.mark.parametrize("page", [README, *sorted(GUIDE.glob("*.md"))], ids=_rel)
def test_table_cells_stay_short(page: Path) -> None:
    """A table cell is a line's worth; longer explanations are prose or lists."""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("|"):
            for cell in line.strip("|").split("|"):
                assert len(cell.split()) <= 30, f"{_rel(page)}:{number}: {cell.strip()[:60]}..."
