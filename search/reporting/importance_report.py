"""The result of an importance analysis, typed: :class:`Analysis` (one group of trials) and
:class:`ImportanceReport` (a study's, with its JSON form). :mod:`.importance` computes them and
:mod:`.importance_plots` draws them; neither imports the other for these types.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MIN_FIT_R2", "TRIALS_PER_PARAM", "Analysis", "ImportanceReport", "plain"]

TRIALS_PER_PARAM = 10  # fewer per analysed parameter: analysed, with a caveat
MIN_FIT_R2 = 0.5  # the forest's out-of-bag R² below this: a caveat


def plain(value: Any) -> Any:
    """A NumPy scalar as the Python number it holds (JSON and messages); anything else as is."""
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


@dataclasses.dataclass(frozen=True)
class Analysis:
    """The importance analysis of one group of trials (the common one, or one branch)."""

    name: str
    trials: int
    params: list[str]  # the parameters analysed: those that vary in the group
    importance: dict[str, float]  # main effect: fraction of the forest's variance, alone
    interactions: dict[tuple[str, str], float]  # same, a pair beyond its main effects
    marginals: dict[str, tuple[list[Any], list[float]]]  # parameter -> (values, mean objective)
    scales: dict[str, str] = dataclasses.field(default_factory=dict)  # log/linear/categorical
    fixed: dict[str, Any] = dataclasses.field(default_factory=dict)  # one value in the group
    fit_r2: float | None = None  # the forest's out-of-bag R² (None: not measurable)
    observed: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # trials' values
    sampled_from: int | None = None  # the group's trials, when more than were analysed

    @property
    def caveats(self) -> list[str]:
        """Why these numbers are a hint, not a measurement (empty: no known reason)."""
        out = []
        if self.params and self.trials < TRIALS_PER_PARAM * len(self.params):
            out.append(f"{self.trials} trials for {len(self.params)} parameters, fewer than "
                       f"{TRIALS_PER_PARAM} per parameter")
        if self.fit_r2 is not None and self.fit_r2 < MIN_FIT_R2:
            out.append(f"the forest predicts the trials it was not fitted to with R² "
                       f"{self.fit_r2:.2f} (1: exactly, 0: no better than their mean)")
        return out


@dataclasses.dataclass(frozen=True)
class ImportanceReport:
    study: str
    objective: str  # what is explained, e.g. "validation map@r"
    trials: int  # analysed, at ``budget``
    analyses: list[Analysis]
    skipped: list[str]  # branches with too few trials, and why
    budget: str = "full budget"  # "full budget" (completed trials) or "epoch E"
    left_out: dict[str, int] = dataclasses.field(default_factory=dict)  # state -> trials
    # the deepest epoch that ``min_trials`` trials reached, and how many did (None: no epoch)
    deepest: tuple[int, int] | None = None

    def advice(self, folder: Path | str) -> str:
        """What to run for an analysis at another budget ("" when there is nothing to advise)."""
        if self.deepest is None or self.budget == f"epoch {self.deepest[0]}":
            return ""
        epoch, n = self.deepest
        return (f"`dmlsearch importance {folder} --at-epoch {epoch}` analyses the {n} trials "
                f"that reached epoch {epoch}")

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study, "objective": self.objective, "trials": self.trials,
            "budget": self.budget, "left_out": self.left_out, "skipped": self.skipped,
            "measure": "fANOVA main effect: fraction of the surrogate forest's variance",
            "analyses": [{
                "name": a.name, "trials": a.trials, "sampled_from": a.sampled_from,
                "params": a.params, "fixed": {k: plain(v) for k, v in a.fixed.items()},
                "fit_r2": a.fit_r2, "caveats": a.caveats, "scales": a.scales,
                "importance": a.importance, "observed": a.observed,
                "interactions": [{"params": list(k), "value": v}
                                 for k, v in sorted(a.interactions.items(),
                                                    key=lambda kv: -kv[1])],
                "marginals": {k: {"values": [plain(x) for x in xs], "objective": ys}
                              for k, (xs, ys) in a.marginals.items()},
            } for a in self.analyses],
        }
