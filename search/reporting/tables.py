"""A table, rendered for the terminal or as Markdown, and the number formats every report uses."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from dmlsearch.search.results import scores_only

__all__ = ["Table", "fmt", "format_metrics", "kv"]


@dataclasses.dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]

    def text(self) -> str:
        """Columns aligned with spaces, a rule under the header."""
        rows = [[str(c) for c in r] for r in self.rows]
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(self.header)]
        line = "  ".join(h.ljust(w) for h, w in zip(self.header, widths)).rstrip()
        rule = "  ".join("-" * w for w in widths)
        body = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join([line, rule, *body])

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |",
                 "|" + "|".join("---" for _ in self.header) + "|"]
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"
                  for row in self.rows]
        return "\n".join(lines)


def fmt(value: Any) -> str:
    """A value in a table cell: ``-`` for none, floats to 4 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def counted(n: int, word: str) -> str:
    """``1 trial``, ``3 trials``: a count and its noun (plural by an s)."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def counted_of(n: int, word: str) -> str:
    """``1 trial's``, ``3 trials'``: :func:`counted` as a possessive (``... worth``)."""
    return f"{n} {word}'s" if n == 1 else f"{n} {word}s'"


def kv(values: Mapping[str, Any]) -> str:
    """``key=value, ...`` with floats to 4 significant digits."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in values.items())


def format_metrics(metrics: Mapping[str, Any], sep: str = "  ") -> str:
    """``recall@1 0.8123  recall@2 ...``: recalls first by k, then the others by name. The
    counts an evaluation reports (``num_queries``, ``verify_trials``) are sizes of the set, not
    scores: they are left out (:func:`dmlsearch.search.reporting.sections.set_text` says them)."""
    keys = sorted(scores_only(metrics), key=lambda k: (not k.startswith("recall@"),
                                          int(k.split("@")[1]) if k.startswith("recall@") else 0,
                                          k))
    return sep.join(f"{k} {metrics[k]:.4f}" if isinstance(metrics[k], float)
                    else f"{k} {metrics[k]}" for k in keys)
