"""Tables for the terminal and for Markdown, and the number formats of every report."""

from __future__ import annotations

from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import fmt
from dmlsearch.search.reporting.tables import format_metrics
from dmlsearch.search.reporting.tables import kv


def test_text_columns_line_up_under_the_header() -> None:
    text = Table(["trial", "score"], [["a", "0.5"], ["bbbbbb", "0.25"]]).text()
    assert text.splitlines() == ["trial   score", "------  -----", "a       0.5",
                                 "bbbbbb  0.25"]
    assert Table(["x"], []).text().splitlines() == ["x", "-"]


def test_markdown_escapes_pipes() -> None:
    md = Table(["a", "b"], [[1, "x|y"]]).markdown()
    assert md.splitlines() == ["| a | b |", "|---|---|", "| 1 | x\\|y |"]


def test_formats() -> None:
    assert fmt(None) == "-" and fmt(0.000123456) == "0.0001235" and fmt(3) == "3"
    assert kv({"lr": 0.0025, "loss": "ms"}) == "lr=0.0025, loss=ms"
    metrics = {"map@r": 0.25, "recall@8": 0.9, "recall@1": 0.5, "num_queries": 10,
               "eer": 0.1, "verify_trials": 5000}
    # The counts are sizes of the set, not scores: left out (the reports say them apart).
    assert format_metrics(metrics) == "recall@1 0.5000  recall@8 0.9000  eer 0.1000  map@r 0.2500"
