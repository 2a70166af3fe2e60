"""The learning-curve tables the search benchmark runs on (``benchmarks/curves/``), what each
says about its space (best, worst, the top-5% region, the published defaults), and the thesis's
one-parameter-at-a-time sweep on each.

- ``omniglot-grid``: 420 grid points (2 losses, 6 hyperparameters of mixed kinds), replayed by
  nearest grid point; 12 epochs; recorded on CPU.
- ``omniglot-ms``: MultiSimilarity's margin, α, β, the miner's ε (Table 15 ranges) and the
  learning rate, a Sobol sample of that continuous space replayed through the table's
  surrogate; 12 epochs; recorded on a lent H100, finished on CPU.
- ``omniglot-ms-mirrored``: omniglot-ms's curves at mirrored configurations, derived on first
  use (``benchmarks/mirrored_table.py``): the deliberately misleading transfer source.
- ``glyphs``: the quickstart space (MultiSimilarity or ProxyAnchor with Table 15 ranges and
  steps, learning rate, embedding size) on the built-in glyphs, another dataset; a Sobol sample
  replayed through its surrogate; 8 epochs; recorded on a lent H100.

**What a table says about its space** (:class:`Reference`): a grid table, its recorded seed-0
points; a sampled table, the surrogate's curves at :data:`REFERENCE_POINTS` points of the
replayed space (a Sobol sample, seeded) and its warm starts. Each point's score is its best
validation score over the epochs, its test score the test score of the model selected there.
Best and worst are those of these points (regret's normalisation); the top-5% region is every
configuration at or above the score of the best 5% of them; "the best-validation
configuration" is the best of them. With ``seed_mean`` (a benchmark with training noise, issue
36), a grid point's scores are the means over its recorded seeds (what a user retraining it
gets), and :attr:`Reference.noise` the table's seed-to-seed spread
(``search/replay/noise.py``); a sampled table's surrogate is noiseless already.

**The sweep** (:func:`one_at_a_time_sweep`): the thesis's protocol (ch. 5.2): each loss in the
order of Table 15 (MultiSimilarity, then ProxyAnchor), from its Table 4 defaults (the space's
warm start for that loss), each parameter in turn over its values, the others fixed, keeping
the best value; training settings first (as the thesis fixed them, Table 3, before its loss
sweeps), then the loss's parameters in Table 15's order. ``sweep``: the training settings the
space searches (learning rate on a log grid, embedding size), then Table 15's steps (on the grid
table: every grid value); ``sweep-coarse``: the same on a coarser grid; ``sweep-table15``:
Table 15 alone, as the thesis ran it (the training settings at their defaults; for
MultiSimilarity 11 + 50 + 50 + 11 = 122 trainings, fewer where a stage repeats a point).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CURVES = REPO / "benchmarks" / "curves"
DERIVED = CURVES / "derived"  # tables derived from recorded ones on first use; not tracked
REFERENCE_POINTS = 8192
TOP_FRACTION = 0.05

__all__ = ["DEFAULT_TABLES", "REFERENCE_POINTS", "TABLES", "TOP_FRACTION", "Reference",
           "TableSpec", "materialise", "one_at_a_time_sweep", "replay_machine", "sweep_plan"]

Stage = tuple[str, list[Any]]  # a parameter and the values it is swept over


def one_at_a_time_sweep(plan: Sequence[tuple[dict[str, Any], Sequence[Stage]]],
                        score: Callable[[dict[str, Any]], float], *, concurrency: int,
                        epochs: int) -> list[dict[str, Any]]:
    """The sweep as events: for each (start, stages) of ``plan`` in order (one per loss), from
    ``start``, each stage's parameter over its values with the others fixed, keeping the best;
    a stage's points not trained yet train ``concurrency`` at a time, side by side as a
    search's concurrent trials do: one event per epoch of each point, a batch's epochs
    interleaved (epoch 1 of each point, then epoch 2, ...), so that its points finish together
    on its last epochs (the score on a point's last epoch, which ``finished``)."""
    events: list[dict[str, Any]] = []
    seen: dict[tuple[tuple[str, Any], ...], float] = {}
    for start, stages in plan:
        current = dict(start)
        for key, values in stages:
            stage = [{**current, key: v} for v in values]
            fresh = [p for p in stage if _frozen(p) not in seen]
            for i in range(0, len(fresh), concurrency):
                batch = fresh[i:i + concurrency]
                events += [{"score": None, "finished": False}] * ((epochs - 1) * len(batch))
                for point in batch:
                    seen[_frozen(point)] = score(point)
                    events.append({"score": seen[_frozen(point)], "finished": True,
                                   "config": point})
            current = max(stage, key=lambda p: seen[_frozen(p)])
    return events


def _frozen(point: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items()))


def _steps(low: float, high: float, step: float) -> list[float]:
    count = int(round((high - low) / step)) + 1
    return [round(low + k * step, 10) for k in range(count)]


def _log_steps(low: float, high: float, count: int) -> list[float]:
    return [float(f"{low * (high / low) ** (k / (count - 1)):.3g}") for k in range(count)]


# Table 15's ranges and steps (Psomas 2020), fine and coarse; "(0, 100] step 2" is 2, 4, ..., 100.
TABLE15 = {
    "multi_similarity": [("loss.margin", _steps(0, 1, 0.1)), ("loss.alpha", _steps(2, 100, 2)),
                         ("loss.beta", _steps(2, 100, 2)), ("loss.epsilon", _steps(0, 1, 0.1))],
    "proxy_anchor": [("loss.margin", _steps(0, 1, 0.1)), ("loss.alpha", _steps(2, 100, 2))],
}
TABLE15_COARSE = {
    "multi_similarity": [("loss.margin", _steps(0, 1, 0.2)),
                         ("loss.alpha", [2.0, *_steps(20, 100, 20)]),
                         ("loss.beta", [2.0, *_steps(20, 100, 20)]),
                         ("loss.epsilon", _steps(0, 1, 0.2))],
    "proxy_anchor": [("loss.margin", _steps(0, 1, 0.2)),
                     ("loss.alpha", [2.0, *_steps(20, 100, 20)])],
}


def _quickstart_sweeps(low: float, high: float) -> dict[str, Any]:
    """The sweeps of a table of the quickstart space (lr over ``low``-``high``): per loss, the
    learning rate (9 or 5 log steps), then the embedding size, then Table 15's loss stages."""
    def lr_then_size(count: int) -> dict[str, list[Stage]]:
        return {loss: [("lr", _log_steps(low, high, count)), ("embedding_size", [32, 64, 128])]
                for loss in ("multi_similarity", "proxy_anchor")}

    return {"sweeps": {"sweep": lr_then_size(9), "sweep-coarse": lr_then_size(5),
                       "sweep-table15": {"multi_similarity": [], "proxy_anchor": []}},
            "loss_stages": {"sweep": TABLE15, "sweep-coarse": TABLE15_COARSE,
                            "sweep-table15": TABLE15}}


@dataclasses.dataclass(frozen=True)
class TableSpec:
    name: str
    table: Path
    space: Path | str  # the space searches replay (a file, or a shipped space's name)
    about: str
    # sweep name -> per loss (Table 15 order): its training-setting stages
    sweeps: Mapping[str, Mapping[str, Sequence[Stage]]]
    loss_stages: Mapping[str, Mapping[str, Sequence[Stage]]]  # sweep name -> loss -> stages
    # a table of TABLES whose configurations this one mirrors (benchmarks/mirrored_table.py):
    # ``table`` is then derived from it on first use (:func:`materialise`)
    mirror_of: str | None = None


TABLES: dict[str, TableSpec] = {
    "omniglot-grid": TableSpec(
        "omniglot-grid", CURVES / "omniglot.jsonl", CURVES / "omniglot_space.yaml",
        "Omniglot sample, smallcnn, 12 epochs: 420 grid points (2 losses, 6 hyperparameters), "
        "nearest grid point",
        sweeps={"sweep": {loss: [("lr", [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]),
                                 ("embedding_size", [32, 128]), ("m_per_class", [2, 4, 8]),
                                 ("weight_decay", [1e-4, 1e-2])]
                          for loss in ("multi_similarity", "proxy_anchor")},
                "sweep-table15": {"multi_similarity": [], "proxy_anchor": []}},
        loss_stages={loss_sweep: {"multi_similarity": [("loss.margin", [0.5, 0.8]),
                                                       ("loss.alpha", [2.0, 18.0])],
                                  "proxy_anchor": [("loss.alpha", [8.0, 32.0, 128.0])]}
                     for loss_sweep in ("sweep", "sweep-table15")}),
    "omniglot-ms": TableSpec(
        "omniglot-ms", CURVES / "omniglot_ms.jsonl", CURVES / "omniglot_ms_space.yaml",
        "Omniglot sample, smallcnn, 12 epochs, MultiSimilarity: margin, alpha, beta, epsilon "
        "(Table 15 ranges) and lr, continuous; surrogate of a Sobol sample",
        sweeps={"sweep": {"multi_similarity": [("lr", _log_steps(1e-4, 1e-2, 9))]},
                "sweep-coarse": {"multi_similarity": [("lr", _log_steps(1e-4, 1e-2, 5))]},
                "sweep-table15": {"multi_similarity": []}},
        loss_stages={"sweep": {"multi_similarity": TABLE15["multi_similarity"]},
                     "sweep-coarse": {"multi_similarity": TABLE15_COARSE["multi_similarity"]},
                     "sweep-table15": {"multi_similarity": TABLE15["multi_similarity"]}}),
    "glyphs": TableSpec(
        "glyphs", CURVES / "glyphs.jsonl", "quickstart",
        "built-in glyphs, smallcnn, 8 epochs: the quickstart space (MultiSimilarity or "
        "ProxyAnchor, Table 15 ranges and steps, lr, embedding size); surrogate of a Sobol "
        "sample",
        **_quickstart_sweeps(3e-4, 1e-2)),
    # Transfer pairs (issue 36): the quickstart space on Omniglot (matched with glyphs; recorded
    # in full, 222 curves, and the held-out table of benchmarks/default_choice.py), and on
    # glyphs trained with SGD (glyphs' AdamW table as a possibly misleading source; a partial
    # recording, resumed by the recorded command). Not in DEFAULT_TABLES: the default was
    # chosen without them.
    "omniglot-quickstart": TableSpec(
        "omniglot-quickstart", CURVES / "omniglot_quickstart.jsonl",
        CURVES / "omniglot_quickstart_space.yaml",
        "Omniglot sample (28x28), smallcnn, 8 epochs: the quickstart space (MultiSimilarity or "
        "ProxyAnchor, Table 15 ranges and steps, lr, embedding size); surrogate of a Sobol "
        "sample; glyphs' matched transfer pair",
        **_quickstart_sweeps(3e-4, 1e-2)),
    # The second matched pair (issue 36): the quickstart space on glyphs and on glyphs_b (120
    # characters glyphs lacks, drawn the same way: two datasets of one kind, as Omniglot's
    # background and evaluation alphabets), recorded by the same code at the same 222
    # configurations (glyphs-a is glyphs again, after the recipes' fixes that the first glyphs
    # table predates).
    "glyphs-a": TableSpec(
        "glyphs-a", CURVES / "glyphs_a.jsonl", CURVES / "glyphs_a_quickstart_space.yaml",
        "built-in glyphs, smallcnn, 8 epochs: the quickstart space, recorded by today's "
        "training code at glyphs-b's configurations; surrogate of a Sobol sample; glyphs-b's "
        "matched transfer pair",
        **_quickstart_sweeps(3e-4, 1e-2)),
    "glyphs-b": TableSpec(
        "glyphs-b", CURVES / "glyphs_b.jsonl", CURVES / "glyphs_b_quickstart_space.yaml",
        "built-in glyphs_b (other characters than glyphs', drawn the same way), smallcnn, 8 "
        "epochs: the quickstart space; surrogate of a Sobol sample; glyphs-a's matched "
        "transfer pair",
        **_quickstart_sweeps(3e-4, 1e-2)),
    "glyphs-sgd": TableSpec(
        "glyphs-sgd", CURVES / "glyphs_sgd.jsonl", CURVES / "glyphs_sgd_space.yaml",
        "built-in glyphs, smallcnn, 8 epochs, SGD (momentum 0.9) instead of AdamW: the "
        "quickstart space with lr 3e-4 to 1 (log); surrogate of a Sobol sample; target of "
        "the transfer pair from glyphs (AdamW)",
        **_quickstart_sweeps(3e-4, 1.0)),
    # The third matched pair (issue 36): glyphs-sgd's space on glyphs and on glyphs_b, recorded
    # by the same code at the same 142 configurations after the transfer rule and the default
    # were fixed: a pair neither was chosen on.
    "glyphs-a-sgd": TableSpec(
        "glyphs-a-sgd", CURVES / "glyphs_a_sgd.jsonl", CURVES / "glyphs_a_sgd_space.yaml",
        "built-in glyphs, smallcnn, 8 epochs, SGD (momentum 0.9): glyphs-sgd's space, "
        "recorded by today's training code at glyphs-b-sgd's configurations; surrogate of a "
        "Sobol sample; glyphs-b-sgd's matched transfer pair",
        **_quickstart_sweeps(3e-4, 1.0)),
    "glyphs-b-sgd": TableSpec(
        "glyphs-b-sgd", CURVES / "glyphs_b_sgd.jsonl", CURVES / "glyphs_b_sgd_space.yaml",
        "built-in glyphs_b, smallcnn, 8 epochs, SGD (momentum 0.9): glyphs-sgd's space; "
        "surrogate of a Sobol sample; glyphs-a-sgd's matched transfer pair",
        **_quickstart_sweeps(3e-4, 1.0)),
    # The harder table (issue 36): ten hyperparameters, 16 epochs, one loss. Its sweep is the
    # thesis's order (§3.4: learning rate, then the embedding, the batch composition and the
    # weight decay, then Table 15's loss stages); warm-up and decay factor keep the defaults a
    # sweep starts from, as a user following the thesis would.
    "glyphs-wide": TableSpec(
        "glyphs-wide", CURVES / "glyphs_wide.jsonl", CURVES / "glyphs_wide_space.yaml",
        "built-in glyphs, smallcnn, 16 epochs, MultiSimilarity: lr, weight decay, embedding "
        "size, images per class, warm-up epochs, decay factor and Table 15's four loss "
        "parameters (10 hyperparameters); surrogate of a Sobol sample",
        sweeps={name: {"multi_similarity": [
                    ("lr", _log_steps(1e-4, 1e-2, count)),
                    ("embedding_size", [32, 64, 128, 256]), ("m_per_class", [2, 4, 8, 16]),
                    ("weight_decay", _log_steps(1e-6, 1e-1, 6))]}
                for name, count in (("sweep", 9), ("sweep-coarse", 5))}
        | {"sweep-table15": {"multi_similarity": []}},
        loss_stages={"sweep": {"multi_similarity": TABLE15["multi_similarity"]},
                     "sweep-coarse": {"multi_similarity": TABLE15_COARSE["multi_similarity"]},
                     "sweep-table15": {"multi_similarity": TABLE15["multi_similarity"]}}),
}

# The deliberately misleading transfer source (issue 36): omniglot-ms's recorded curves at
# mirrored configurations (benchmarks/mirrored_table.py), so its good region is where omniglot-ms
# is poor. Derived on first use, not recorded, not tracked.
TABLES["omniglot-ms-mirrored"] = dataclasses.replace(
    TABLES["omniglot-ms"], name="omniglot-ms-mirrored",
    table=DERIVED / "omniglot_ms_mirrored.jsonl", mirror_of="omniglot-ms",
    about="omniglot-ms with every configuration mirrored through the middle of the space (lr "
          "in log space): the same recorded curves at the opposite settings; the deliberately "
          "misleading source of the pair to omniglot-ms; surrogate of the mirrored sample")


def materialise(spec: TableSpec) -> Path:
    """The file of ``spec``'s table: a mirrored table is written from its original first
    (again when the original changed)."""
    if spec.mirror_of is not None:
        from benchmarks.mirrored_table import mirrored
        from dmlsearch.spaces import load_space

        space = load_space(str(spec.space))
        mirrored(TABLES[spec.mirror_of].table, spec.table, space.params, space_name=space.name)
    return spec.table


# The tables a benchmark replays when none are named: the development tables the default was
# chosen on (docs/benchmarks.md); the held-out and the partial tables are named when wanted.
DEFAULT_TABLES = ("omniglot-grid", "omniglot-ms", "glyphs")


def sweep_plan(spec: TableSpec, sweep: str, starts: Mapping[str, dict[str, Any]]
               ) -> list[tuple[dict[str, Any], list[Stage]]]:
    """The plan of ``sweep`` on ``spec``: per loss in Table 15's order, its start (the
    space's warm start for that loss) and stages."""
    order = [loss for loss in ("multi_similarity", "proxy_anchor") if loss in starts]
    return [(dict(starts[loss]), [*spec.sweeps[sweep][loss], *spec.loss_stages[sweep][loss]])
            for loss in order if loss in spec.sweeps[sweep]]


def replay_machine() -> dict[str, Any]:
    """What a replayed benchmark's results depend on besides the tables: the machine (as a
    learning-curve table names it: the CPU's model) and the libraries whose samplers and
    schedulers the searches run, with the code revision."""
    from importlib import metadata

    from dmlsearch.search.provenance import code_revision
    from dmlsearch.search.replay.table import machine

    versions = {}
    for name in ("optuna", "ray", "numpy", "scipy", "scikit-learn"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {**machine(), "versions": versions, "code_revision": code_revision()}


class Reference:
    """What a table says about the space a benchmark replays on it (module docstring)."""

    def __init__(self, spec: TableSpec, *, points: int = REFERENCE_POINTS,
                 seed_mean: bool = False) -> None:
        from dmlsearch.search.replay import fit_noise
        from dmlsearch.search.replay import load_table
        from dmlsearch.search.replay import lookup
        from dmlsearch.search.replay import seed_curves
        from dmlsearch.spaces import config_from_sample
        from dmlsearch.spaces import load_space

        self.spec, self.seed_mean = spec, seed_mean
        self.table = load_table(materialise(spec))
        self.noise = fit_noise(self.table)
        self.space = load_space(str(spec.space))
        self.metric = self.table.metric
        self.epochs = self.table.epochs
        base = self.space.base
        self.warm_starts = [{**base, **config_from_sample(p)} for p in self.space.warm_starts()]
        if self.table.sampled:
            from dmlsearch.search.replay.surrogate import surrogate_for

            named = self.space.sample_points(points, seed=12345)
            configs = self.warm_starts + [{**base, **config_from_sample(p)} for p in named]
            curves = surrogate_for(self.table).curves(configs)
        else:
            curves = [c for c in self.table.curves.values() if c.seed == 0 and c.status == "ok"]
            configs = [c.config for c in curves]
        self._lookup = lambda config: lookup(self.table, config)
        self._seeds = lambda config: seed_curves(self.table, config)
        self.searched = {p.key for p in self.space.params}
        scores = ([self._mean(self._seeds(c)) for c in configs]
                  if seed_mean and not self.table.sampled else [self._final(c) for c in curves])
        self.scores = sorted((s for s, _ in scores), reverse=True)
        self.best, self.worst = self.scores[0], self.scores[-1]
        self.top_target = self.scores[max(0, math.ceil(TOP_FRACTION * len(self.scores)) - 1)]
        best_index = max(range(len(scores)), key=lambda i: scores[i][0])
        self.best_config = configs[best_index]
        self.best_test = scores[best_index][1]
        self.points = len(scores)

    def _final(self, curve: Any) -> tuple[float, float]:
        row = max(curve.epochs, key=lambda r: r["val"][self.metric])
        test = (curve.test_at(len(curve.epochs), self.metric, "max") or {}).get(self.metric)
        return float(row["val"][self.metric]), float(test if test is not None else math.nan)

    def _mean(self, curves: Sequence[Any]) -> tuple[float, float]:
        scores = [self._final(c) for c in curves]
        return (math.fsum(s for s, _ in scores) / len(scores),
                math.fsum(t for _, t in scores) / len(scores))

    def final(self, config: Mapping[str, Any]) -> tuple[float, float]:
        """A configuration's best validation score and its selected model's test score (with
        ``seed_mean``: their means over the recorded seeds)."""
        if self.seed_mean:
            return self._mean(self._seeds({**self.space.base, **config}))
        return self._final(self._lookup({**self.space.base, **config}))

    def finals(self, configs: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
        """:meth:`final` of each of ``configs``, their seed curves found at once
        (:func:`seed_curves_of`: a sampled table's surrogate called once)."""
        if self.seed_mean:
            from dmlsearch.search.replay import seed_curves_of

            return [self._mean(curves) for curves in seed_curves_of(
                self.table, [{**self.space.base, **c} for c in configs])]
        return [self.final(c) for c in configs]

    def test_after(self, config: Mapping[str, Any], epochs: int) -> float | None:
        """The test score of the model a trial of ``config`` stopped after ``epochs`` keeps."""
        scored = self._lookup({**self.space.base, **config}).test_at(epochs, self.metric, "max")
        return None if scored is None else scored.get(self.metric)

    def defaults(self) -> list[dict[str, Any]]:
        """The published defaults of each loss (the warm starts a sweep starts from: for each
        loss, the last warm start of it, which the spaces list as Table 4's defaults)."""
        by_loss: dict[str, dict[str, Any]] = {}
        for point in self.warm_starts:
            by_loss[str(point.get("loss", "multi_similarity"))] = point
        return list(by_loss.values())

    def sweep_starts(self) -> dict[str, dict[str, Any]]:
        """The searched settings of each loss's published defaults."""
        keys = {p.key for p in self.space.params} | {"loss"}
        return {str(p.get("loss", "multi_similarity")): {k: v for k, v in p.items() if k in keys}
                for p in self.defaults()}

    def summary(self) -> dict[str, Any]:
        return {"about": self.spec.about, "table": self.spec.table.name,
                "space": str(self.spec.space), "sampled": self.table.sampled,
                "curves": len(self.table.curves), "reference_points": self.points,
                "epochs": self.epochs, "best": self.best, "worst": self.worst,
                "top_target": self.top_target, "best_test": self.best_test,
                "best_config": self.best_config, "seed_mean": self.seed_mean,
                "sigma_val": self.noise.sigma_val, "seed_noise": self.noise.summary(),
                "defaults": [{"config": d, "val": self.final(d)[0], "test": self.final(d)[1]}
                             for d in self.defaults()]}
