"""Transfer between searches (``--prior-from DIR``): a new search starts from what a finished one
learnt, not from the published defaults.

Users rarely search a dataset first: they tuned on CUB and now tune on CARS, or tuned last month's
model and now change the backbone. A finished search's good region is then a better start than the
published defaults (issue 36 measured it on the project's learning-curve tables). What happens:

- **Which parameters transfer**: the setting keys the target space searches that the source's
  search searched too (``loss.margin`` of a MultiSimilarity branch in both, ``lr``), whatever the
  datasets, backbones or other settings. A source that shares none is refused, naming both sides.
- **Which configurations**: each source's trials that trained to their end, best first by the
  source's own metric (with none, its deepest stopped ones; a trial of a loss the target cannot
  train after the others), taken in turn from each source, skipping one that lies within
  :data:`MIN_SPREAD` of one already taken (a mean distance over the transferred values, in the
  target's ranges scaled to [0, 1], log-scaled for a ``log`` range: the best few *diverse*
  configurations), at most :data:`POINTS` (:func:`transfer_count`: a third of the budget).
- **Into the target space**: a transferred point takes the source's value of each shared
  parameter (a number outside the target's range moves to its nearest end, onto its step; a
  choice the target does not offer is not taken), a loss's parameters only from a trial of the
  same loss, and a branch selector's value (``loss``) from the source's configuration when the
  branch's parameters are shared; every other parameter keeps the target's own warm start of the
  same branch (the published defaults): what the source did not search keeps today's prior.
  A selector the target searches and no source did (a source that fixed its loss) is no
  evidence: the target's own warm starts of its other branches join the points.
- **The published defaults stay**: the target's own first warm start in the best pick's branch
  is tried after the transferred points (unless one lies within :data:`MIN_SPREAD` of it), so a
  search with transfer starts from what a search without it starts from, and more. A source
  whose best land below the published defaults on the target then costs the start nothing.
- **How the search uses them**: the points (the transferred ones, then the published defaults
  kept) replace the space's warm starts. They are tried first, and the prior samplers
  (``prior-tpe``, a ``--prior-from`` search's default, and PriorBand) draw around them (one
  mixture component each) instead of around the published defaults alone; the prior's weight
  decays as evidence comes in, and faster when the search's best trials do not resemble it
  (:mod:`dmlsearch.search.tune.prior`), which is how a misleading source is discounted. Other
  samplers only try them first.
- **The best point trains to its end**: the first transferred point (the first source's best)
  is not stopped early (:data:`TO_END`; :mod:`dmlsearch.search.tune.keep`, with ``asha`` or
  ``soft-asha``, the schedulers that can keep a trial). Tried at once beside the others, it
  would be judged on its first noisy epochs; trained to its end, the first wave says how the
  previous best does on the new data, for one training's worth of the budget at most.

The search's ``search.yaml``, ``summary.json`` (``study.transfer``), its MLflow study run (tag
``dmlsearch.prior_from`` and the artifact ``transfer.json``) and the terminal say what came from
where. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import rank
from dmlsearch.search.results import rank_partial
from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.trainables.config import LOSS_PREFIX
from dmlsearch.trainables.config import MINER_PREFIX
from dmlsearch.trainables.errors import UserError

__all__ = ["MIN_SPREAD", "POINTS", "PUBLISHED", "TO_END", "Pick", "Source", "Transfer",
           "plan_transfer", "read_source", "transfer_count"]

_PREFIXES = (LOSS_PREFIX, MINER_PREFIX)  # a loss's (miner's) own settings: loss.margin
POINTS = 3  # at most this many transferred configurations are tried first
MIN_SPREAD = 0.1  # a pick's mean distance (ranges in [0, 1]) from each pick already taken
PUBLISHED = "published defaults"  # the trial name of a pick that is the target's own defaults
# the best this many transferred points train to their end (issue 36: chosen on the first nine
# pairs, then reported on four recorded later; docs/benchmarks.md, "The source's best trains to
# its end")
TO_END = 1


@dataclasses.dataclass(frozen=True)
class Source:
    """A finished (or stopped) search read as transfer's evidence: its trials and what it
    searched, in setting keys."""

    name: str  # how the summary names it: its folder
    dataset: str
    space: str
    metric: str
    mode: str  # "max" or "min"
    searched: tuple[str, ...]
    trials: tuple[TrialRecord, ...]

    @classmethod
    def of_records(cls, name: str, records: Sequence[TrialRecord], *, searched: Sequence[str],
                   metric: str, mode: str, dataset: str = "-", space: str = "-") -> Source:
        """A source from a search's records (a replayed search's, in the benchmark)."""
        return cls(name=name, dataset=dataset, space=space, metric=metric, mode=mode,
                   searched=tuple(searched), trials=tuple(records))

    def ranked(self) -> list[TrialRecord]:
        """Its trials best first: those trained to their end, else its deepest stopped ones."""
        return rank(self.trials, self.mode) or rank_partial(self.trials, self.mode)


def read_source(folder: str | Path) -> Source:
    """The search in ``folder`` (a ``dmlsearch run --out`` folder, finished or stopped) as a
    :class:`Source`; a folder with no scored trial is a :class:`UserError`."""
    from dmlsearch.search.readback import load_summary

    try:
        study_dir, summary = load_summary(folder)
    except UserError as exc:
        raise UserError(f"--prior-from {folder}: {exc}") from None
    source = Source(name=str(study_dir.path), dataset=summary.study.dataset,
                    space=summary.study.space, metric=summary.study.metric,
                    mode=summary.study.mode, searched=tuple(summary.study.searched),
                    trials=tuple(summary.trials))
    if not source.ranked():
        raise UserError(f"--prior-from {folder}: none of its {len(summary.trials)} trials has a "
                        "score to learn from (all failed, or none had validated yet); give a "
                        "search with at least one scored trial, or leave out --prior-from")
    return source


@dataclasses.dataclass(frozen=True)
class Pick:
    """One transferred configuration: where it came from, and the target point it became."""

    source: str
    trial: str  # the source's trial name (t07)
    score: float | None  # its score in the source's search (the source's metric)
    point: dict[str, Any]  # in the target's setting keys
    taken: tuple[str, ...]  # the keys whose value came from the source
    to_end: bool = False  # not stopped early (TO_END)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"taken": list(self.taken)}


@dataclasses.dataclass(frozen=True)
class Transfer:
    """What a search takes from its sources (module docstring)."""

    sources: tuple[Source, ...]
    shared: dict[str, tuple[str, ...]]  # source name -> the target's keys it searched too
    picks: tuple[Pick, ...]
    named: tuple[dict[str, Any], ...]  # the picks in the target's Optuna names

    def to_json(self) -> dict[str, Any]:
        """What ``search.yaml``, ``summary.json`` and MLflow's ``transfer.json`` record."""
        return {"sources": [{"folder": s.name, "dataset": s.dataset, "space": s.space,
                             "metric": s.metric, "trials": len(s.trials),
                             "shared": list(self.shared[s.name])} for s in self.sources],
                "points": [p.to_json() for p in self.picks]}

    def to_end(self) -> tuple[tuple[tuple[str, Any], ...], ...]:
        """The points trained to their end, as ``TuneSettings.keep_to_end`` takes them."""
        return tuple(tuple(p.point.items()) for p in self.picks if p.to_end)

    def lines(self) -> list[str]:
        """What the terminal says before the first trial."""
        out = []
        for s in self.sources:
            count = sum(p.source == s.name for p in self.picks)
            out.append(f"prior from {s.name} ({s.space} on {s.dataset}, {len(s.trials)} trials): "
                       f"{count} of its best configurations tried first; shared "
                       f"{', '.join(self.shared[s.name])}")
            out += [f"its best ({p.trial}) trains to its end: early stopping does not judge it "
                    "on its first epochs" for p in self.picks if p.to_end and p.source == s.name]
        if any(p.trial == PUBLISHED for p in self.picks):
            out.append("and this space's published defaults tried beside them")
        return out


def transfer_count(trials: int) -> int:
    """How many transferred points a search of ``trials`` trainings' worth tries first: at most
    :data:`POINTS`, and no more than a third of the budget."""
    return max(1, min(POINTS, trials // 3))


def plan_transfer(space: Space, sources: Sequence[Source], *, count: int = POINTS,
                  to_end: int = TO_END) -> Transfer:
    """The points ``space``'s search tries first and draws its prior around (module
    docstring); the first ``to_end`` of them train to their end (0: a scheduler that cannot
    keep them, ``SchedulerInfo.keeps``)."""
    keys = {p.key for p in space.params}
    shared = {s.name: tuple(k for k in dict.fromkeys(p.key for p in space.params)
                            if k in set(s.searched)) for s in sources}
    for s in sources:
        if not shared[s.name]:
            raise UserError(
                f"--prior-from {s.name}: its search ({s.space} on {s.dataset}) searched "
                f"{', '.join(s.searched) or 'nothing'}, and this space ({space.name}) searches "
                f"{', '.join(sorted(keys))}: no parameter in common to transfer; give a search "
                "of an overlapping space, or leave out --prior-from")
    queues = [_candidates(space, s, shared[s.name]) for s in sources]
    picks: list[Pick] = []
    units: list[dict[str, float | Any]] = []
    while len(picks) < count and any(queues):
        for queue in queues:
            while queue and len(picks) < count:
                source, trial, point, taken = queue.pop(0)
                unit = _unit(space, point)
                if all(_distance(unit, other, {*taken, *other_taken}) >= MIN_SPREAD
                       for other, other_taken in units):
                    picks.append(Pick(source=source.name, trial=trial.name, score=trial.score,
                                      point=point, taken=taken, to_end=len(picks) < to_end))
                    units.append((unit, taken))
                    break
    picks += _other_branches(space, sources, picks)
    picks += _published_defaults(space, picks)
    return Transfer(sources=tuple(sources), shared=shared, picks=tuple(picks),
                    named=tuple(space.named(p.point) for p in picks))


def _other_branches(space: Space, sources: Sequence[Source], picks: Sequence[Pick]
                    ) -> list[Pick]:
    """The target's own warm starts of the branches no pick is in, for each selector (``loss``)
    the target searches and no source did: the sources say nothing about those branches, so
    they keep today's prior (a MultiSimilarity-only source does not make a search of
    MultiSimilarity or ProxyAnchor try MultiSimilarity alone)."""
    searched = set().union(*(set(s.searched) for s in sources))
    selectors = [k for k in dict.fromkeys(k for p in space.params for k, _ in p.when)
                 if any(p.key == k for p in space.params) and k not in searched]
    if not picks:
        return []
    out: list[Pick] = []
    for start in space.points():
        fresh = [k for k in selectors if k in start and all(
            p.point.get(k) != start[k] for p in [*picks, *out])]
        if fresh:
            out.append(Pick(source="space", trial="warm start", score=None, point=dict(start),
                            taken=()))
    return out


def _published_defaults(space: Space, picks: Sequence[Pick]) -> list[Pick]:
    """The target's own first warm start in the best pick's branch (the published defaults a
    search without ``--prior-from`` starts from), tried after the transferred points unless
    one of them lies within :data:`MIN_SPREAD` of it: where the sources' best land below the
    published defaults on the target, the search does not lose the start it had without
    transfer (issue 36: into ``glyphs-wide`` the sources' top picks land at its 85th-99th
    percentile, 93rd on average, the published defaults in its top 5%)."""
    transferred = [p for p in picks if p.taken]
    if not transferred:
        return []
    selectors = {k for p in space.params for k, _ in p.when}
    best = transferred[0].point
    for start in space.points():
        if any(k in start and start[k] != best.get(k) for k in selectors):
            continue  # another branch (loss) than the best pick's
        unit = _unit(space, start)
        if any(_distance(unit, _unit(space, p.point), set(p.taken)) < MIN_SPREAD
               for p in transferred
               if all(p.point.get(k) == start[k] for k in selectors if k in start)):
            return []  # a transferred point of its branch stands for it already
        return [Pick(source="space", trial=PUBLISHED, score=None,
                     point=dict(start), taken=())]
    return []


def _candidates(space: Space, source: Source, shared: Sequence[str]
                ) -> list[tuple[Source, TrialRecord, dict[str, Any], tuple[str, ...]]]:
    """The source's ranked trials as target points, in the source's order, those of a loss
    (miner) the target cannot train after the others (a ProxyAnchor trial gives a
    MultiSimilarity space its learning rate only)."""
    out = []
    for trial in source.ranked():
        point, taken = _into(space, trial.config, shared)
        out.append((source, trial, point, taken))
    return sorted(out, key=lambda c: not _trainable_here(space, c[1].config))


def _trainable_here(space: Space, config: Mapping[str, Any]) -> bool:
    """Whether the target space can train the configuration's loss and miner: its base sets
    the same, or it searches them with that choice."""
    for key in (prefix[:-1] for prefix in _PREFIXES):
        if key not in config:
            continue
        if key in space.base:
            if space.base[key] != config[key]:
                return False
        elif any(p.key == key for p in space.params) and not any(
                p.key == key and p.contains(config[key]) for p in space.params):
            return False
    return True


def _owner(key: str) -> str | None:
    """The setting a key's meaning depends on: ``loss.margin`` is the margin of ``loss``."""
    return next((prefix[:-1] for prefix in _PREFIXES if key.startswith(prefix)), None)


def _into(space: Space, config: Mapping[str, Any], shared: Sequence[str]
          ) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A source configuration as a point of ``space`` (setting keys), and the keys it gave. A
    loss's (miner's) parameter is taken only from a configuration of the same loss (miner)."""
    selectors = {k for p in space.params for k, _ in p.when}
    point: dict[str, Any] = {}
    taken: list[str] = []

    def owned_by_shared(selector: str) -> bool:
        """A selector the source did not search is taken from its configuration only to place
        the shared parameters of its branch (its loss's margin): its own choice is not
        evidence, so :func:`plan_transfer` adds the target's other branches' warm starts."""
        return any(_owner(k) == selector or any(key == selector for p in space.params
                                                if p.key == k for key, _ in p.when)
                   for k in shared)
    for p in space.params:
        here = {**space.base, **point}
        if not p.is_active(here) or p.key in point:
            continue
        value = config.get(p.key)
        owner = _owner(p.key)
        if owner is not None and config.get(owner) != here.get(owner):
            value = None  # another loss's margin is not this loss's margin
        if value is not None and (p.key in shared or (p.key in selectors and
                                                      owned_by_shared(p.key))):
            value = _within(p, value)
            if value is not None:
                point[p.key] = value
                taken += [p.key] if p.key in shared else []
                continue
        point[p.key] = _own(space, p, point)
    return point, tuple(dict.fromkeys(taken))


def _within(p: Param, value: Any) -> Any:
    """``value`` as a value of ``p``: a number moved into its range and onto its step, a choice
    it offers; None when it cannot be (a choice it does not offer, a number for a choice)."""
    if p.kind == "categorical":
        return value if p.contains(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    assert p.low is not None and p.high is not None
    value = p.snap(min(max(value, p.low), p.high))
    return value if p.contains(value) else None


def _own(space: Space, p: Param, point: Mapping[str, Any]) -> Any:
    """The target's own value of ``p`` at ``point``: its first warm start in the same branch
    that sets it, else the parameter's representative value."""
    for start in space.points():
        agrees = all(start.get(k, v) == v for k, v in point.items() if not isinstance(v, float))
        if p.key in start and agrees and p.contains(start[p.key]):
            return p.snap(start[p.key])
    return p.default()


def _unit(space: Space, point: Mapping[str, Any]) -> dict[str, Any]:
    """A point's numbers in [0, 1] of their ranges (log-scaled for a log range; the range of
    the branch the point is in); choices as they are."""
    out: dict[str, Any] = {}
    here = {**space.base, **point}
    for p in space.params:
        if p.key not in point or p.key in out or not p.is_active(here):
            continue
        value = point[p.key]
        if p.kind == "categorical":
            out[p.key] = value
            continue
        low, high, x = float(p.low), float(p.high), float(value)  # type: ignore[arg-type]
        if p.log:
            low, high, x = math.log(low), math.log(high), math.log(max(x, low))
        out[p.key] = 0.0 if high <= low else (x - low) / (high - low)
    return out


def _distance(a: Mapping[str, Any], b: Mapping[str, Any], keys: set[str]) -> float:
    """The mean per-parameter distance of two points over ``keys`` (those transferred into
    either: the rest are the target's own values in both); a different choice counts 1, a
    parameter only one of them sets (another branch) counts 1."""
    if not keys:
        return 0.0
    total = 0.0
    for k in keys:
        if k not in a or k not in b:
            total += 1.0
        elif isinstance(a[k], float) and isinstance(b[k], float):
            total += abs(a[k] - b[k])
        else:
            total += float(a[k] != b[k])
    return total / len(keys)
