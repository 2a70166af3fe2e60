"""Recipe cards: what a trial of a space trains, section by section, in plain words.

``dmlsearch spaces show NAME`` prints a space's table (:meth:`Space.describe`) and then its card
(:func:`recipe_card`): data and protocol, backbone (with its input convention), BatchNorm, warm-up,
optimiser and its parameter groups, schedule, crops, sampler, loss, MemVir where it can be on,
and the space's known differences from its authors' code (its ``differences:``). Each fact is
read where the code keeps it (:mod:`spaces._recipe_sections`); a searched setting reads
"(searched: ...)" and a setting set per branch names its branches.

Imports torch (the trainables' registries): :mod:`spaces` imports this module only when a card is
asked for.
"""

from __future__ import annotations

import textwrap

from dmlsearch.spaces._recipe_sections import Section
from dmlsearch.spaces._recipe_sections import card_sections
from dmlsearch.spaces._space import Space

__all__ = ["Section", "recipe_card", "recipe_sections", "show_text"]

#: Column where a section's text starts (its title before it); continuation lines indent 2 more.
TEXT_COLUMN = 22


def recipe_sections(space: Space) -> list[Section]:
    """The card's sections, in order; MemVir only where the space can turn it on."""
    return card_sections(space)


def recipe_card(space: Space, *, width: int = 100) -> str:
    """The card of ``space`` as text, wrapped to ``width`` columns without cutting words (a word
    longer than a line, such as a long path, gets a line of its own)."""
    lines = ["recipe card (what a trial of this space trains):"]
    for section in recipe_sections(space):
        for i, paragraph in enumerate(section.lines):
            title = section.title if i == 0 else ""
            lines += textwrap.wrap(
                paragraph, width=max(width, TEXT_COLUMN + 20),
                initial_indent=f"  {title}".ljust(TEXT_COLUMN),
                subsequent_indent=" " * (TEXT_COLUMN + 2),
                break_long_words=False, break_on_hyphens=False,
            )
    return "\n".join(lines)


def show_text(space: Space, *, width: int = 100) -> str:
    """What ``dmlsearch spaces show`` prints: the space's table with its prose wrapped to
    ``width`` (table rows stay whole), then its recipe card."""
    return f"{_wrap_prose(space.describe(), width)}\n\n{recipe_card(space, width=width)}"


def _wrap_prose(text: str, width: int) -> str:
    """``text`` with each line longer than ``width`` wrapped, unless it is a table row (cells
    two spaces or more apart); continuation lines indent 2 past the line's own indent."""
    out: list[str] = []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if len(line) <= width or "  " in line.strip():
            out.append(line)
            continue
        out += textwrap.wrap(line.strip(), width=width, initial_indent=" " * indent,
                             subsequent_indent=" " * (indent + 2), break_long_words=False,
                             break_on_hyphens=False)
    return "\n".join(out)
