"""The importance analysis drawn: one bar chart, one interaction map and the marginal curves
per analysis, as real PNGs."""

from __future__ import annotations

from pathlib import Path

from dmlsearch.search.reporting.importance import analyse_study
from dmlsearch.search.reporting.importance_plots import write_plots
from tests.helpers import known_study
from tests.helpers import read_png


def test_every_analysis_draws_its_three_pictures(tmp_path: Path) -> None:
    report = analyse_study(known_study(), min_trials=8)
    paths = write_plots(report, tmp_path / "importance")
    assert [p.name for p in paths] == ["00_common_parameters_importance.png",
                                       "00_common_parameters_interactions.png",
                                       "00_common_parameters_marginals.png"]
    for path in paths:
        read_png(path)
