"""The closing summary of a search: a table a person reads, and a JSON a program reads."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

__all__ = ["format_table", "format_metrics", "trial_rows"]


def format_table(header: list[str], rows: Iterable[list[str]]) -> str:
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, rule, *body])


def trial_rows(records: Iterable[Any], metric: str) -> tuple[list[str], list[list[str]]]:
    header = ["trial", "state", f"val {metric}", "best epoch", "epochs", "time [s]", "reason"]
    from dmlsearch.trainables.metrics.names import metric_mode

    sign = 1.0 if metric_mode(metric) == "min" else -1.0  # best first
    ordered = sorted(records, key=lambda r: (r.score is None, sign * (r.score or 0.0)))
    rows = [[
        r.trial_id, r.state, _score(r),
        str(r.last_result.get("best_epoch", "-")) if r.score is not None else "-",
        str(r.iterations), f"{r.seconds:.1f}", r.reason or "",
    ] for r in ordered]
    return header, rows


def _score(record: Any) -> str:
    """The trial's score; k-fold trials with two or more folds scored add ± the folds' std."""
    if record.score is None:
        return "-"
    if "fold1_best" in record.last_result:
        return f"{record.score:.4f} ± {record.last_result.get('score_std', 0.0):.4f}"
    return f"{record.score:.4f}"


def format_metrics(metrics: Mapping[str, float]) -> str:
    keys = sorted(metrics, key=lambda k: (not k.startswith("recall@"),
                                          int(k.split("@")[1]) if k.startswith("recall@") else 0,
                                          k))
    return "  ".join(f"{k} {metrics[k]:.4f}" if isinstance(metrics[k], float)
                     else f"{k} {metrics[k]}" for k in keys)
