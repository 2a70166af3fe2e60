"""Benchmark: how well each search method spends a budget, on several learning-curve tables,
over many seeds, with the measures the HPO field uses (issues #15 and #25).

Every method searches each table's space (``benchmarks/efficiency_tables.py``: a grid of real
trainings on the Omniglot sample, a continuous MultiSimilarity space on it, the quickstart space
on the built-in glyphs) whose configurations replay real trainings, or the surrogate fitted on
them, instead of training. A replayed search is a real search: the product's searcher (Optuna,
records in an ``optuna.db``), ``ConcurrencyLimiter``, scheduler and Ray Tune; only the trials
read their curves (``dmlsearch run --replay``).

**Two clocks** (``--clock``). ``ray`` (the recorded runs until issue 36): the searches run
through Ray Tune, each epoch sleeping its recorded time / ``--speedup``; below Ray's own
per-trial overhead, so the concurrency a search gets depends on the machine and its load.
``virtual`` (issue 36): the same searcher and scheduler objects driven on a simulated clock
(``search/replay/simulate.py``): exactly ``--concurrency`` trials at once, every epoch its
recorded time, results heard in simulated-time order, the sweeps through the same clock
(``search/replay/sweep.py``); deterministic for a seed, on any machine. ``--concurrency``
takes several values (virtual default: 2 4 8): every search runs at each, and the results
compare them (:func:`concurrency_markdown`).

**Training noise** (``--noise``, issue 36; the default on the virtual clock, ``--no-noise``
turns it off; the Ray clock has none): each trial trains one of its configuration's recorded
seeds, or its curve with noise fitted to the table's seed-to-seed spread
(``search/replay/noise.py``), drawn from the search's seed and the trial's id (a sweep then runs
once per seed: its choices depend on the draws). A search chooses by the noisy scores it saw;
it is judged by what a user retraining its choice gets: the incumbent's regret by its
configuration's noiseless validation score, the pick's test score by its noiseless test score
(a grid point's means over its recorded seeds, a sampled table's surrogate mean;
:func:`judged_scores`, :func:`pick_within`). Each table's summary holds ``sigma_val``, one
retraining's σ of the best validation score (from the recorded pairs), and each method's regret
in those units (``regret_in_sigma_at``: normalised regret × (best − worst) / σ).

* **budget**: every method gets the same epochs (``--budget`` full trainings' worth, counted
  as full-training equivalents) and the same concurrency; a search proposes no trial once its
  budget is spent and its running trials end;
* **measures** (``benchmarks/hpo_measures.py``): normalised regret of the incumbent at 10, 25,
  50 and 100% of the budget (mean and bootstrap 95% interval over seeds), average rank per
  budget with Friedman's test (per table, and over tables), epochs to the top-5% region, the
  test score of the method's pick (its best configuration among the trials that trained to
  their end; the model it selects), and the pick at 15 full trainings' worth against the
  published defaults;
* **the thesis's sweep** at Table 15's steps (``sweep``) and on a coarser grid
  (``sweep-coarse``), in the thesis's order, computed from the table without Ray (it does not
  depend on the seed); it runs to its end (its epochs to the top-5% region are its own), its
  regret is read within the budget.

Methods (:data:`METHODS`): the sweeps, ``random``, ``random+asha``, ``tpe+asha`` (the default:
before issue #25, and again since the rule of docs/benchmarks.md chose it by leave-one-table-out
at 30 seeds), ``priorband`` (PriorBand's sampling on ASHA, the prior-guided multi-fidelity
anchor), ``prior-tpe+asha`` (TPE guided by the warm starts as a prior; the default from issue
#25 until then, and the search a ``--prior-from`` run gets: :data:`TRANSFER_BASE`), and both
TPE samplers with soft-ASHA (PASHA's soft ranking: early stopping that stays safe when early
ranks are noisy); ASHA decides first after a quarter of the epochs (the product's default) with
reduction factor 3.

**The choice of the default** (issue 36; ``benchmarks/default_choice.py``): docs/benchmarks.md's
rule on the development tables (every table run but ``--held-out TABLE``), leave-one-table-out on
them (each table judged by the choice the others make), the choice evaluated on the held-out
table, which runs with the others and is in no choice, and issue 36's goals checked for
:data:`DEFAULT_METHOD` on every table; in the JSON (``held_out_table``, ``default_choice``) and
the Markdown. ``--table-file NAME=PATH`` replays a table from another file (a snapshot of one
still being recorded; the JSON records its path and curves).

    python benchmarks/search_efficiency.py [--out results.json] [--plots DIR] [--full]
        [--tables ...] [--methods ...] [--seeds N] [--budget TRIALS] [--workers 2]
        [--clock ray|virtual] [--concurrency N [N ...]] [--noise | --no-noise]
        [--held-out TABLE] [--table-file NAME=PATH ...]
    python benchmarks/search_efficiency.py --report results.json --plots DIR [--markdown FILE]
        [--out refreshed.json]

Every finished search is appended to ``<out>.runs.jsonl``; the same command run again resumes
from it (only the searches not in it run).
    python benchmarks/search_efficiency.py --overhead [--out overhead.json]

Default: every table, the default's methods, 10 seeds. ``--full``: the recorded run of
docs/benchmarks.md (20 seeds). ``--report``: the summary and plots again from a results file.
``--overhead``: the driver's own cost per trial (``benchmarks/search_overhead.py``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.default_choice import FRACTIONS  # noqa: E402  (of the budget; blocks read by them)
from benchmarks.default_choice import default_choice  # noqa: E402
from benchmarks.default_choice import default_choice_markdown  # noqa: E402
from benchmarks.efficiency_tables import DEFAULT_TABLES  # noqa: E402
from benchmarks.efficiency_tables import TABLES  # noqa: E402
from benchmarks.efficiency_tables import TOP_FRACTION  # noqa: E402
from benchmarks.efficiency_tables import one_at_a_time_sweep  # noqa: E402
from benchmarks.efficiency_tables import replay_machine  # noqa: E402
from benchmarks.efficiency_tables import sweep_plan  # noqa: E402
from benchmarks.hpo_measures import average_ranks  # noqa: E402
from benchmarks.hpo_measures import bootstrap_mean  # noqa: E402
from benchmarks.hpo_measures import epochs_to_target  # noqa: E402
from benchmarks.hpo_measures import friedman  # noqa: E402
from benchmarks.hpo_measures import quantiles  # noqa: E402
from benchmarks.hpo_measures import regret_curve  # noqa: E402

# the product's default search (tune.DEFAULT_SAMPLER, ASHA), chosen by docs/benchmarks.md's rule
DEFAULT_METHOD = "tpe+asha"
# the default search given --prior-from (tune.TRANSFER_SAMPLER, ASHA): search_transfer.py
TRANSFER_BASE = "prior-tpe+asha"
SMALL_BUDGET = 15  # full trainings: the small search users run most (issue #25)
BUDGET = 40
# --full, the recorded run: 20 full trainings' worth per search, so that 20 seeds of every
# method on every table fit in about an hour of a shared 2-core machine (docs/benchmarks.md)
FULL_BUDGET = 20

CLOCKS = ("ray", "virtual")
VIRTUAL_CONCURRENCIES = (2, 4, 8)  # --clock virtual: every search at each (issue 36)

# name: (sampler, scheduler, sampler options); None: a sweep (computed from the table)
METHODS: dict[str, tuple[str, str, tuple[tuple[str, Any], ...]] | None] = {
    "sweep": None,
    "sweep-coarse": None,
    "sweep-table15": None,
    "random": ("random", "none", ()),
    "random+asha": ("random", "asha", ()),
    "tpe+asha": ("tpe", "asha", ()),
    "priorband": ("priorband", "asha", ()),
    "priorband-tpe+asha": ("priorband-tpe", "asha", ()),
    "prior-tpe+asha": ("prior-tpe", "asha", ()),
    "prior-tpe+soft-asha": ("prior-tpe", "soft-asha", ()),
    "tpe+soft-asha": ("tpe", "soft-asha", ()),
}
SMALL_METHODS = list(METHODS)
# the recorded run: the sweeps, the baselines the issue names, the anchor, and the product's
# candidates for its default: TPE or prior-TPE with ASHA or with soft-ASHA (PASHA's soft ranking)
FULL_METHODS = ["sweep", "sweep-coarse", "sweep-table15", "random", "random+asha", "tpe+asha",
                "priorband", "prior-tpe+asha", "tpe+soft-asha", "prior-tpe+soft-asha"]


# ---- one search ---------------------------------------------------------------------------------
class _Heard:
    """The trial events of one search, in order (what every measure is computed from), and
    the configuration (searched settings) of each trial that trained to its end, in order."""

    def __init__(self, searched: set[str]) -> None:
        self.events: list[tuple[float | None, int]] = []
        self.configs: list[dict[str, Any]] = []
        self._searched = searched
        self._started: dict[str, dict[str, Any]] = {}

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        self._started[trial_id] = {k: v for k, v in config.items() if k in self._searched}

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        score = result.get("score")
        ok = score is not None and math.isfinite(score)
        finished = int(bool(result.get("trial_finished")))
        self.events.append((score if ok else None, finished))
        if finished:
            self.configs.append(self._started.get(trial_id, {}))

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        pass


_RAY: list[bool] = []
_REFERENCES: dict[str, Any] = {}


def reference(table: str, noise: bool = False) -> Any:
    """What ``table`` says about its space; with ``noise``, a grid point's scores are its
    recorded seeds' means (``Reference``'s ``seed_mean``)."""
    from benchmarks.efficiency_tables import Reference

    key = f"{table}+noise" if noise else table
    if key not in _REFERENCES:
        _REFERENCES[key] = Reference(TABLES[table], seed_mean=noise)
    return _REFERENCES[key]


def run_method(table: str, method: str, seed: int, budget: int, concurrency: int,
               speedup: float, clock: str = "ray", noise: bool = False, *,
               warm_starts: list[dict[str, Any]] | None = None,
               keep_to_end: tuple[Any, ...] = (), trials: bool = False) -> dict[str, Any]:
    """One search of ``method`` with ``seed`` on ``table``: its events and its pick. ``clock``:
    "ray", the product's search through Ray Tune (each epoch sleeps its recorded time /
    ``speedup``); "virtual", the same searcher and scheduler on a simulated clock
    (``search/replay/simulate.py``: exactly ``concurrency`` trials at once, every epoch its
    recorded time; the same events for the same seed on any machine). ``noise``: each trial
    draws its training noise (virtual clock only; module docstring). ``warm_starts`` (virtual
    clock only; Optuna names): the points tried first and the prior samplers' prior instead of
    the space's warm starts (``benchmarks/search_transfer.py``: the transferred points);
    ``keep_to_end`` (virtual clock only): configurations not stopped early, as
    ``TuneSettings.keep_to_end`` (the transferred best); ``trials``: also each trial as the
    search ended it (:func:`_simulated`)."""
    if clock == "virtual":
        return _simulated(table, method, seed, budget, concurrency, noise=noise,
                          warm_starts=warm_starts, keep_to_end=keep_to_end, trials=trials)
    if warm_starts is not None or keep_to_end or trials:
        raise ValueError("warm_starts, keep_to_end and trials are the virtual clock's (--clock "
                         "virtual)")
    if noise:
        raise ValueError("training noise is replayed on the virtual clock only (--clock "
                         "virtual)")
    ref = reference(table)
    if METHODS[method] is None:
        return _sweep(table, method, seed, concurrency)
    from dmlsearch.search import tune

    if not _RAY:
        tune.init_ray(num_cpus=concurrency, num_gpus=0)
        _RAY.append(True)
    work = Path(tempfile.mkdtemp(prefix="se-", dir=_scratch()))
    url = f"sqlite:///{work / 'optuna.db'}"
    tune.create_storage(url)
    settings = _settings(ref, method, seed, budget, concurrency, work=work, storage=url,
                         speedup=speedup)
    heard = _Heard(ref.searched)
    started = time.time()
    records = tune.run_tune(settings, define_by_run=ref.space.define_by_run,
                            warm_starts=ref.space.warm_starts(), events=heard)
    seconds = time.time() - started
    shutil.rmtree(work, ignore_errors=True)
    completed = [r for r in records if r.full_budget]
    return {"table": table, "method": method, "seed": seed, "events": heard.events,
            "configs": heard.configs, "trials": len(records), "completed": len(completed),
            "seconds": seconds}


def _settings(ref: Any, method: str, seed: int, budget: int, concurrency: int, *, work: Path,
              storage: str, speedup: float | None) -> Any:
    """The search settings of ``method`` (a sweep: no searcher, no early stopping)."""
    from dmlsearch.search import tune

    sampler, scheduler, options = METHODS[method] or ("random", "none", ())
    epochs = ref.epochs
    return tune.TuneSettings(
        storage_path=work / "ray", experiment=work / "ray" / "tune", num_samples=budget * 50,
        concurrency=concurrency, max_iterations=epochs, grace_period=max(1, epochs // 4),
        reduction_factor=3, cpus_per_trial=1, gpus_per_trial=0, seed=seed,
        optuna_storage=storage, study_name="s", mode="max", max_failures=0, sampler=sampler,
        scheduler=scheduler, max_epochs=budget * epochs, replay=str(ref.spec.table),
        replay_speedup=speedup,
        verbose=0, sampler_options=(("n_startup_trials", _startup(budget)), *options)
        if sampler in ("tpe", "prior-tpe", "priorband-tpe") else options)


def _simulated(table: str, method: str, seed: int, budget: int, concurrency: int, *,
               noise: bool = False, warm_starts: list[dict[str, Any]] | None = None,
               keep_to_end: tuple[Any, ...] = (), trials: bool = False) -> dict[str, Any]:
    """One search on the simulated clock; a sweep runs through the same clock (to its end,
    as :func:`_sweep`: its regret is read within the budget). ``noise``: each trial draws its
    training noise from ``seed`` and its id. ``warm_starts`` (Optuna names; None: the space's
    own): the points the search tries first and its prior samplers draw around;
    ``keep_to_end``: configurations its scheduler may not stop early. ``trials``:
    the result also holds ``trial_records``, each trial in the order it was proposed: its id,
    configuration (every setting), state, epochs trained and last score."""
    from dmlsearch.search.replay.simulate import simulate
    from dmlsearch.search.replay.simulate import simulate_search
    from dmlsearch.search.replay.sweep import OneAtATimeSweep
    from dmlsearch.search.results import TrialState
    from dmlsearch.search.tune import SCHEDULERS

    ref = reference(table)
    settings = dataclasses.replace(
        _settings(ref, method, seed, budget, concurrency, work=Path("unused"), storage="unused",
                  speedup=None),  # the study stays in memory
        keep_to_end=keep_to_end)
    heard = _Heard(ref.searched)
    started = time.time()
    if METHODS[method] is None:
        plan = sweep_plan(ref.spec, method, ref.sweep_starts())
        sim = simulate(OneAtATimeSweep(plan, base=ref.space.base),
                       SCHEDULERS.get("none").make(settings), table=ref.spec.table,
                       concurrency=concurrency, events=heard,
                       noise_seed=seed if noise else None)
    else:
        sim = simulate_search(settings, define_by_run=ref.space.define_by_run,
                              warm_starts=(ref.space.warm_starts() if warm_starts is None
                                           else [dict(p) for p in warm_starts]),
                              events=heard, noise=noise)
    out = {"table": table, "method": method, "seed": seed, "noise": noise,
           "events": heard.events, "configs": heard.configs, "trials": len(sim.trials),
           "completed": sum(t.state is TrialState.COMPLETED for t in sim.trials),
           "seconds": time.time() - started, "simulated_seconds": sim.end,
           "budget_spent_at": sim.proposals_ended}
    if trials:
        out["trial_records"] = [{"trial_id": t.trial_id, "config": dict(t.config),
                                 "state": t.state.value, "epochs": t.epochs, "score": t.score}
                                for t in sim.trials]
    return out


def _startup(budget: int) -> int:
    from dmlsearch.search.tune.samplers import startup_trials

    return startup_trials(budget)


def _sweep(table: str, method: str, seed: int, concurrency: int) -> dict[str, Any]:
    ref = reference(table)
    plan = sweep_plan(ref.spec, method, ref.sweep_starts())
    events = one_at_a_time_sweep(plan, lambda p: ref.final(p)[0], concurrency=concurrency,
                                 epochs=ref.epochs)
    finished = [e for e in events if e["finished"]]
    return {"table": table, "method": method, "seed": seed, "trials": len(finished),
            "completed": len(finished),
            "events": [(e["score"], int(e["finished"])) for e in events],
            "configs": [e["config"] for e in finished], "seconds": 0.0}


def logged_lines(log: Path | None) -> list[dict[str, Any]]:
    """The JSON lines of a benchmark's runs log (resumes read it); a line cut by a crash is
    skipped; no file: none."""
    out = []
    if log is not None and log.is_file():
        for line in log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _logged_runs(log: Path | None, budget: int, concurrencies: list[int],
                 clock: str = "ray", noise: bool = False) -> list[dict[str, Any]]:
    """The searches an earlier run of the same budget, clock, noise and one of
    ``concurrencies`` logged (a line cut by a crash is skipped; a line without a clock is
    Ray's, one without noise noiseless)."""
    runs = []
    for run in logged_lines(log):
        if (run.get("budget") == budget and run.get("concurrency") in concurrencies
                and run.get("clock", "ray") == clock and bool(run.get("noise", False)) == noise):
            run["events"] = [tuple(e) for e in run["events"]]
            runs.append(run)
    return runs


def _scratch() -> str | None:
    """A memory-backed folder for the searches' stores when there is one (their SQLite writes
    are part of what a search does, not of what this benchmark compares)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _worker_init(table_files: dict[str, str] | None = None) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    override_tables(table_files or {})


def override_tables(table_files: dict[str, str]) -> None:
    """Replay each named table from another file (``--table-file NAME=PATH``: a snapshot of a
    table a recorder is still appending to); its space and sweeps stay the table's."""
    for name, path in table_files.items():
        if name not in TABLES:
            raise ValueError(f"--table-file: no table {name!r} (tables: {', '.join(TABLES)})")
        TABLES[name] = dataclasses.replace(TABLES[name], table=Path(path))
        for key in (name, f"{name}+noise"):
            _REFERENCES.pop(key, None)


def _table_file(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, path


# ---- the measures of one table --------------------------------------------------------------------
def pick_within(run: dict[str, Any], epochs: float, ref: Any
                ) -> tuple[float | None, dict[str, Any] | None]:
    """The test score of the run's pick within ``epochs`` epochs: its best configuration among
    the trials that trained to their end by then, by the scores the search saw (noisy in a
    replay with noise), and that configuration; (None, None) before any did. The score is
    ``ref.final``'s: the test score of the model the configuration selects at its best
    validation epoch, which a reference with ``seed_mean`` gives as the mean over the recorded
    seeds (the surrogate's mean for a sampled table): what a user retraining the pick gets,
    not the draw the search saw."""
    finished = completed_within(run, epochs)
    if not finished:
        return None, None
    _, config = max(finished, key=lambda p: p[0])
    return ref.final(config)[1], config


def completed_within(run: dict[str, Any], epochs: float) -> list[tuple[float, dict[str, Any]]]:
    """(the score the search saw, the configuration) of each of the run's trials that trained
    to its end within ``epochs`` epochs and has a score, in the order they ended."""
    finished, configs = [], iter(run["configs"])
    for n, (score, fin) in enumerate(run["events"], 1):
        if fin:
            config = next(configs)
            if n <= epochs and score is not None:
                finished.append((float(score), config))
    return finished


def judged_scores(run: dict[str, Any], ref: Any) -> list[float] | None:
    """The noiseless validation score of each trial that trained to its end, in order
    (``ref.final``: a grid point's seed mean, a sampled table's surrogate mean), by which a
    noisy search's incumbent is judged; None for a noiseless one (judged by what it saw, which
    is the same)."""
    if not run.get("noise"):
        return None
    return [val for val, _ in ref.finals(run["configs"])]


def summarise_table(runs: list[dict[str, Any]], ref: Any, *, budget: int) -> dict[str, Any]:
    """The measures of every method on one table (module docstring). A noisy search's
    incumbent is the trial it saw score best, its regret and epochs to the top-5% region
    judged by that configuration's noiseless score (:func:`judged_scores`); the pick's test
    score is its noiseless test score (:func:`pick_within`)."""
    epochs_budget = budget * ref.epochs
    budgets = [f * epochs_budget for f in FRACTIONS]
    sigma = ref.noise.sigma_val
    methods: dict[str, Any] = {}
    per_seed: dict[str, dict[int, list[float]]] = {}
    curve_x = sorted({max(1, round(epochs_budget * 10 ** (k / 20 - 2))) for k in range(41)}
                     | {epochs_budget})
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = sorted((r for r in runs if r["method"] == method), key=lambda r: r["seed"])
        judged = [judged_scores(r, ref) for r in mine]
        regrets = [regret_curve(r["events"], budgets, best=ref.best, worst=ref.worst, judged=j)
                   for r, j in zip(mine, judged)]
        curves = [regret_curve(r["events"], curve_x, best=ref.best, worst=ref.worst, judged=j)
                  for r, j in zip(mine, judged)]
        to_top = [epochs_to_target(r["events"], ref.top_target, judged=j)
                  for r, j in zip(mine, judged)]
        median, q1, q3 = quantiles(to_top)
        tests = [pick_within(r, epochs_budget, ref)[0] for r in mine]
        small = [pick_within(r, SMALL_BUDGET * ref.epochs, ref)[0] for r in mine]
        known = [t for t in tests if t is not None and math.isfinite(t)]
        small_known = [t for t in small if t is not None and math.isfinite(t)]
        defaults_test = max(d["test"] for d in ref.summary()["defaults"])
        per_seed[method] = {r["seed"]: row for r, row in zip(mine, regrets)}
        methods[method] = {
            "seeds": len(mine),
            "regret_at": {str(f): bootstrap_mean([row[i] for row in regrets], seed=i)
                          for i, f in enumerate(FRACTIONS)},
            # the same in units of one retraining's σ (the best validation score's spread
            # between seeds of one configuration)
            **({"regret_in_sigma_at": {
                str(f): bootstrap_mean([row[i] * (ref.best - ref.worst) / sigma
                                        for row in regrets], seed=i)
                for i, f in enumerate(FRACTIONS)}} if sigma else {}),
            "median_epochs_to_top5": median, "iqr_epochs_to_top5": [q1, q3],
            "reached_top5": sum(math.isfinite(t) for t in to_top),
            "epochs_to_top5": to_top,
            "median_test_of_pick": statistics.median(known) if known else None,
            "test_of_pick_vs_best": (statistics.median(known) / ref.best_test)
            if known else None,
            "test_of_pick": tests,
            # the pick after SMALL_BUDGET full trainings' worth, against the published
            # defaults' best test score (the small searches users run most)
            "median_test_of_pick_at_15": statistics.median(small_known) if small_known
            else None,
            "beats_defaults_at_15": sum(t > defaults_test for t in small_known),
            "test_of_pick_at_15": small,
            "trials_per_search": statistics.median(r["trials"] for r in mine),
            "completed_per_search": statistics.median(r["completed"] for r in mine),
            "seconds_per_search": statistics.median(r["seconds"] for r in mine),
            **({"whole_sweep": {"trainings": mine[0]["completed"],
                                "epochs": len(mine[0]["events"]),
                                "test_of_pick": pick_within(mine[0], math.inf, ref)[0]}}
               if METHODS.get(method, ()) is None else {}),
            "regret_curve": {"epochs": curve_x,
                             "mean": [statistics.fmean(c[i] for c in curves)
                                      for i in range(len(curve_x))],
                             "interval": [[bootstrap_mean([c[i] for c in curves], seed=i,
                                                          resamples=2000)[k]
                                           for k in ("low", "high")]
                                          for i in range(len(curve_x))]},
        }
    seeds = sorted(set.intersection(*(set(v) for v in per_seed.values())))
    ranks, tests = {}, {}
    for i, f in enumerate(FRACTIONS):
        blocks = [{m: per_seed[m][s][i] for m in per_seed} for s in seeds]
        ranks[str(f)] = average_ranks(blocks)
        tests[str(f)] = friedman(blocks)
    return {"reference": ref.summary(), "sigma_val": sigma,
            "noise": any(bool(r.get("noise")) for r in runs), "methods": methods,
            "average_rank": ranks,
            "friedman": tests, "blocks": {m: {str(s): v for s, v in per_seed[m].items()}
                                          for m in per_seed}}


def over_tables(tables: dict[str, Any]) -> dict[str, Any]:
    """Average ranks and Friedman's test over tables × seeds (the methods every table ran)."""
    common = set.intersection(*(set(t["blocks"]) for t in tables.values()))
    out: dict[str, Any] = {"average_rank": {}, "friedman": {}, "mean_regret": {}}
    for i, f in enumerate(FRACTIONS):
        blocks = []
        for body in tables.values():
            seeds = set.intersection(*(set(body["blocks"][m]) for m in common))
            blocks += [{m: body["blocks"][m][s][i] for m in sorted(common)} for s in sorted(seeds)]
        out["average_rank"][str(f)] = average_ranks(blocks)
        out["friedman"][str(f)] = friedman(blocks)
        out["mean_regret"][str(f)] = {
            m: statistics.fmean(t["methods"][m]["regret_at"][str(f)]["mean"]
                                for t in tables.values()) for m in sorted(common)}
    return out


def choose_default(tables: dict[str, Any], held_out: str | None) -> dict[str, Any]:
    """docs/benchmarks.md's rule on the development tables (all but ``held_out``),
    leave-one-table-out, the choice on the held-out table and the goal checks of
    :data:`DEFAULT_METHOD` (``benchmarks/default_choice.py``)."""
    return default_choice(tables, candidates=[m for m, v in METHODS.items() if v is not None],
                          default_method=DEFAULT_METHOD, held_out=held_out)


# ---- plots ------------------------------------------------------------------------------------
# matplotlib's ten default colours, then two more: one per method of METHODS, in its order
_COLOURS = [f"C{i}" for i in range(10)] + ["black", "#b8860b"]


def _colour(method: str) -> str:
    """One colour per method in every plot (the order of :data:`METHODS`); black for one of
    another benchmark's (the default with transfer)."""
    return _COLOURS[list(METHODS).index(method) % len(_COLOURS)] if method in METHODS else "black"


def _searches(curves: dict[str, Any]) -> dict[str, Any]:
    """The searches' curves, not the sweeps' (all of them when there are only sweeps)."""
    return {k: v for k, v in curves.items() if not k.startswith("sweep")} or curves


def _every_search_picked(curves: dict[str, tuple[list[float], dict[str, Any]]]) -> float | None:
    """The budget (in trainings) from which every search's mean regret is below 1 (each has a
    completed trial to pick on some seed); None: some search never has."""
    firsts = []
    for xs, curve in _searches(curves).values():
        below = [x for x, m in zip(xs, curve["mean"]) if m < 1.0]
        if not below:
            return None
        firsts.append(below[0])
    return max(firsts)


def _range_from(curves: dict[str, tuple[list[float], dict[str, Any]]], start: float
                ) -> tuple[float, float]:
    """The regret range the curves and their intervals span from ``start`` on (a step holds
    its value until the next point); the searches' own where there are any besides the sweeps
    (whose early steps, far above, would flatten them)."""
    values = []
    for xs, curve in _searches(curves).values():
        for i, x in enumerate(xs):
            if i + 1 == len(xs) or xs[i + 1] > start:
                values += [curve["mean"][i], *curve["interval"][i]]
    positive = [v for v in values if v > 0] or [1e-3]
    return min(positive) / 1.15, max(values) * 1.15  # a margin on the log scale


def plot_table(name: str, body: dict[str, Any], path: Path, budget: int, *,
               highlight: str = DEFAULT_METHOD) -> None:
    """The regret curves of every method on one table: the whole range (left: a method's
    regret is 1 until it has a completed trial to pick), and (right) from the budget at which
    every search has one, on the (log) range the searches span there, where they differ.
    ``highlight``: the method drawn thickest, on top, its interval shaded in the zoom."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter
    from matplotlib.ticker import NullFormatter

    ref = body["reference"]
    curves = {method: ([e / ref["epochs"] for e in m["regret_curve"]["epochs"]],
                       m["regret_curve"]) for method, m in body["methods"].items()}
    start = _every_search_picked(curves)
    fig = Figure(figsize=(12, 5.2))
    whole, zoom = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.5]})
    for ax in (whole, zoom):
        for method, (xs, curve) in curves.items():
            chosen = method == highlight  # drawn thickest, on top
            style = "--" if method.startswith("sweep") else "-"
            line, = ax.step(xs, curve["mean"], where="post", lw=2.6 if chosen else 1.3,
                            ls=style, label=method, color=_colour(method),
                            zorder=3 if chosen else 2)
            if ax is whole or chosen:  # the zoom shades the highlighted method's interval only
                lows, highs = zip(*curve["interval"])
                ax.fill_between(xs, lows, highs, step="post", alpha=0.15,
                                color=line.get_color(), lw=0, zorder=1)
        for f in FRACTIONS:
            ax.axvline(f * budget, color="0.7", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks([t for t in (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40, 60, 80)
                       if t <= budget])
        ax.set_xlabel("budget spent (full trainings' worth of epochs, log scale)")
        ax.grid(alpha=0.3, which="both")
    whole.set_ylim(-0.01, 1.01)
    whole.set_xlim(0.5, budget)
    whole.set_ylabel("normalised regret of the incumbent\n(mean over seeds, 95% bootstrap "
                     "interval)")
    whole.set_title("the whole budget", fontsize=9)
    if start is not None and start < budget:
        zoom.set_xlim(start, budget)
        low, high = _range_from(curves, start)
        wide = high / low > 3  # a log scale where regret falls by more than 3x, else linear
        if wide:
            zoom.set_yscale("log")
            zoom.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            zoom.yaxis.set_minor_formatter(FuncFormatter(  # 0.02, 0.03, 0.05, not every tick
                lambda y, _: f"{y:g}" if f"{y:.0e}"[0] in "235" else ""))
        zoom.set_ylim(low, high)
        zoom.tick_params(axis="y", which="minor", labelsize=7)
        worth = f"{start:.3g} training's" if start == 1 else f"{start:.3g} trainings'"
        cut = ("a sweep's steps outside it are cut, the left panel shows them; "
               if any(m.startswith("sweep") for m in curves) else "")
        zoom.set_title(f"from {worth} worth, when every search has a completed "
                       f"trial to pick: the searches' range{', log scale' if wide else ''}"
                       f"\n({cut}shaded: {highlight}'s interval)", fontsize=9)
    else:
        zoom.set_xlim(0.5, budget)
        zoom.set_title("(some method never completed a trial: the same view)", fontsize=9)
    for f in [f for f in FRACTIONS if f < 1]:  # each dotted line's share (100%: the edge)
        zoom.annotate(f"{f:.0%}", (f * budget, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(2, -10), textcoords="offset points", fontsize=7, color="0.4",
                      annotation_clip=True)
    zoom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle("\n".join(textwrap.wrap(f"{name}: {ref['about']}", 150)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_ranks(tables: dict[str, Any], overall: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    panels = [*tables.items(), ("all tables", overall)]
    fig = Figure(figsize=(4.0 * len(panels), 4.6))
    every = [m for m in METHODS if any(m in b["average_rank"]["0.25"] for _, b in panels)]
    for k, (name, body) in enumerate(panels, 1):
        ax = fig.add_subplot(1, len(panels), k)
        ranks = body["average_rank"]
        methods = list(next(iter(ranks.values())))
        for method in methods:
            ax.plot([float(f) for f in ranks], [ranks[f][method] for f in ranks], marker="o",
                    lw=2.6 if method == DEFAULT_METHOD else 1.2,
                    ls="--" if method.startswith("sweep") else "-", label=method,
                    color=_colour(method))
        p = body["friedman"]
        ax.set_title(f"{name}\nFriedman p at 25%: "
                     + (f"{p['0.25']['p_value']:.1e}" if p["0.25"]["p_value"] is not None
                        else "-"), fontsize=9)
        ax.set_xscale("log")
        ax.set_xticks([float(f) for f in FRACTIONS], [f"{f:.0%}" for f in FRACTIONS])
        ax.set_xlabel("share of the budget")
        ax.invert_yaxis()
        ax.grid(alpha=0.3)
        if k == 1:
            ax.set_ylabel("average rank (1 = lowest regret)")
    from matplotlib.lines import Line2D

    fig.legend([Line2D([], [], color=_colour(m), lw=2.6 if m == DEFAULT_METHOD else 1.2,
                       ls="--" if m.startswith("sweep") else "-", marker="o") for m in every],
               every, loc="lower center", ncol=len(every), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)


# ---- the tables of docs/benchmarks.md ----------------------------------------------------------
def _friedman_text(test: dict[str, Any], short: bool = False) -> str:
    """Friedman's statistic and p-value; a dash when it was not computed (every method tied on
    every seed: e.g. no trial trained to its end yet)."""
    if test.get("statistic") is None or test.get("p_value") is None:
        return "-, -" if short else "not computed (every method tied on every seed)"
    if short:
        return f"{test['statistic']:.1f}, {test['p_value']:.2g}"
    return f"statistic {test['statistic']:.1f}, p = {test['p_value']:.2g}"


def _epochs_text(m: dict[str, Any]) -> str:
    def one(x: float) -> str:
        return "∞" if not math.isfinite(x) else f"{x:g}"

    q1, q3 = m["iqr_epochs_to_top5"]
    return (f"{one(m['median_epochs_to_top5'])} ({one(q1)}–{one(q3)}), "
            f"{m['reached_top5']}/{m['seeds']}")


def markdown(body: dict[str, Any]) -> str:
    """The results section's tables (docs/benchmarks.md): one per table, methods in the order
    they ran, then the average ranks and mean regrets over tables."""
    out = []
    head = ("| method | regret at 10% | 25% | 50% | 100% | epochs to top-5%: median (IQR), "
            "reached | avg rank at 25% | pick's test: median (÷ best-val config's) | pick at "
            f"{body['small_budget_trials']} trainings beats the defaults |")
    for name, table in body["tables"].items():
        ref = table["reference"]
        defaults = max(d["test"] for d in ref["defaults"])
        out += [f"**{name}** — best validation {ref['best']:.4f}, worst {ref['worst']:.4f}, "
                f"top-5% region >= {ref['top_target']:.4f}; best-validation configuration "
                f"tests {ref['best_test']:.4f}; published defaults test {defaults:.4f}"
                + (f"; one retraining's σ {table['sigma_val']:.4f}" if table.get("sigma_val")
                   else "")
                + ("; training noise replayed, picks judged by their seed means"
                   if table.get("noise") else ""), "",
                head, "|" + "---|" * 9]
        for method, m in table["methods"].items():
            label = f"**{method} (default)**" if method == body["default_method"] else method
            if "whole_sweep" in m:
                whole = m["whole_sweep"]
                label += (f" (whole sweep: {whole['trainings']} trainings, {whole['epochs']} "
                          "epochs)")
            regrets = [m["regret_at"][str(f)] for f in FRACTIONS]
            test = m["median_test_of_pick"]
            out.append("| " + " | ".join([
                label, *(f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" for r in regrets),
                _epochs_text(m), f"{table['average_rank']['0.25'][method]:.2f}",
                "-" if test is None else f"{test:.3f} ({m['test_of_pick_vs_best']:.3f})",
                f"{m['beats_defaults_at_15']}/{m['seeds']}"]) + " |")
        out += ["", f"Friedman at 25%: {_friedman_text(table['friedman']['0.25'])}", ""]
    overall = body["over_tables"]
    shares = [str(f) for f in FRACTIONS]
    out += ["**over tables**", "",
            "| method | " + " | ".join(f"avg rank at {float(f):.0%}" for f in shares) + " | "
            + " | ".join(f"mean regret at {float(f):.0%}" for f in shares) + " |",
            "|" + "---|" * (1 + 2 * len(shares))]
    for method in sorted(overall["average_rank"]["0.25"],
                         key=lambda k: overall["average_rank"]["0.25"][k]):
        out.append("| " + " | ".join(
            [method, *(f"{overall['average_rank'][f][method]:.2f}" for f in shares),
             *(f"{overall['mean_regret'][f][method]:.3f}" for f in shares)]) + " |")
    tests = "; ".join(f"{float(f):.0%} {_friedman_text(overall['friedman'][f], short=True)}"
                      for f in shares)
    out += ["", f"Friedman over tables (statistic, p): {tests}"]
    return "\n".join(out) + "\n"


# ---- main ---------------------------------------------------------------------------------------
def report(body: dict[str, Any], plots: Path | None, markdown_file: Path | None = None) -> None:
    """The summary on the terminal; the plots into ``plots`` and docs/benchmarks.md's tables
    into ``markdown_file`` when given. Several concurrencies: each one's, then the comparison
    of concurrencies (:func:`concurrency_markdown`)."""
    parts = body.get("by_concurrency") or {}
    choice = body.get("default_choice")
    choice_text = "\n" + default_choice_markdown(choice) if choice else ""
    if len(parts) <= 1:
        _report_one(body, plots, "")
        _print_choice(choice)
        if markdown_file:
            markdown_file.write_text(markdown(body) + choice_text)
        return
    sections = []
    for c, part in parts.items():
        print(f"\n######## concurrency {c} ({body.get('clock', 'ray')} clock)")
        one = {**body, **part, "concurrency": int(c)}
        _report_one(one, plots, f"_c{c}")
        sections.append(f"**Concurrency {c}**\n\n" + markdown(one))
    summary = concurrency_markdown(body)
    print("\n" + summary)
    _print_choice(choice)
    if markdown_file:
        markdown_file.write_text(summary + "\n" + "\n".join(sections) + choice_text)


def _print_choice(choice: dict[str, Any] | None) -> None:
    """The choice of the default on the terminal (the headline concurrency's)."""
    if not choice:
        return
    rule = choice["on_development"]
    print(f"\nthe rule on {', '.join(rule['tables'])}: {rule['chosen']} (average rank at 25%: "
          + ", ".join(f"{m} {rule['average_rank']['0.25'][m]:.2f}" for m in rule["candidates"])
          + ")")
    for name, fold in choice["leave_one_out"].items():
        on = fold["on_table"]
        gap = on["gap_in_sigma_to_best_at_25"]
        print(f"  without {name}: {fold['chosen']}; on {name} regret at 25% "
              f"{on['regret_at']['0.25']['mean']:.3f}, best {on['best_at_25']}, gap "
              f"{'-' if gap is None else f'{gap:.2f}'} σ")
    if choice["held_out"]:
        on = choice["held_out"]["on_table"]
        print(f"  held out {choice['held_out']['table']}: {choice['held_out']['chosen']}, regret "
              f"at 25% {on['regret_at']['0.25']['mean']:.3f}, at 100% "
              f"{on['regret_at']['1.0']['mean']:.3f}, best at 25% {on['best_at_25']}")
    goals = choice["goals"]
    for name, g in goals["tables"].items():
        print(f"  goals for {goals['method']} on {name}: "
              + ", ".join(f"{k} {v}" for k, v in g["checks"].items()))


def _report_one(body: dict[str, Any], plots: Path | None, suffix: str) -> None:
    budget = body["budget_trials"]
    for name, table in body["tables"].items():
        ref = table["reference"]
        print(f"\n== {name}: best val {ref['best']:.4f}, worst {ref['worst']:.4f}, top-5% "
              f"{ref['top_target']:.4f}, best-validation config tests {ref['best_test']:.4f}"
              + (f", σ of one retraining {table['sigma_val']:.4f}" if table.get("sigma_val")
                 else ""))
        print(f"{'method':16s} " + " ".join(f"{'regret@' + str(f):>17s}" for f in FRACTIONS)
              + f" {'epochs to top5':>16s} {'reached':>8s} {'pick test':>10s}")
        for method, m in table["methods"].items():
            cells = [f"{m['regret_at'][str(f)]['mean']:.3f}"
                     f" [{m['regret_at'][str(f)]['low']:.3f},{m['regret_at'][str(f)]['high']:.3f}]"
                     for f in FRACTIONS]
            test = m["median_test_of_pick"]
            print(f"{method:16s} " + " ".join(f"{c:>17s}" for c in cells)
                  + f" {m['median_epochs_to_top5']:>16g} {m['reached_top5']:>4d}/{m['seeds']:<3d}"
                  f" {'-' if test is None else f'{test:.4f}':>10s}")
        print("average rank at 25%:", {k: round(v, 2)
                                        for k, v in table["average_rank"]["0.25"].items()},
              "Friedman p:", table["friedman"]["0.25"]["p_value"])
        if plots:
            plot_table(name, table, plots / f"search_efficiency_{name}{suffix}.png", budget)
    overall = body["over_tables"]
    print("\nover tables, average rank at 25%:",
          {k: round(v, 2) for k, v in overall["average_rank"]["0.25"].items()},
          "Friedman p:", overall["friedman"]["0.25"]["p_value"])
    if plots:
        plot_ranks(body["tables"], overall, plots / f"search_efficiency_ranks{suffix}.png")


def concurrency_markdown(body: dict[str, Any]) -> str:
    """Per table and method, at each concurrency: the mean normalised regret at 25% of the
    budget (bootstrap 95% interval) and at 100%, and the median epochs to the top-5% region
    (IQR, seeds that reached it)."""
    parts = body["by_concurrency"]
    cs = list(parts)
    head = ("| table | method | " + " | ".join(f"regret at 25%, c={c}" for c in cs) + " | "
            + " | ".join(f"at 100%, c={c}" for c in cs) + " | "
            + " | ".join(f"epochs to top-5%, c={c}" for c in cs) + " |")
    title = (f"Clock: {body.get('clock', 'ray')}; budget {body['budget_trials']} full "
             f"trainings' worth; {body['seeds']} seeds")
    out = [title, "", head, "|" + "---|" * (2 + 3 * len(cs))]
    first = parts[cs[0]]["tables"]
    for name in first:
        for method in first[name]["methods"]:
            cells = [parts[c]["tables"][name]["methods"][method] for c in cs]
            at25 = [m["regret_at"]["0.25"] for m in cells]
            out.append("| " + " | ".join([
                name, f"**{method}**" if method == body["default_method"] else method,
                *(f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" for r in at25),
                *(f"{m['regret_at']['1.0']['mean']:.3f}" for m in cells),
                *(_epochs_text(m) for m in cells)]) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the recorded run (20 seeds)")
    parser.add_argument("--tables", nargs="+", default=None, choices=list(TABLES))
    parser.add_argument("--methods", nargs="+", default=None, choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None,
                        help=f"full trainings' worth of epochs per search (default {BUDGET}; "
                        f"--full: {FULL_BUDGET})")
    parser.add_argument("--clock", choices=CLOCKS, default="ray",
                        help="ray: searches through Ray Tune, epochs sleeping their recorded "
                        "time / --speedup; virtual: the same searches on a simulated clock "
                        "(exact concurrency, deterministic, no Ray)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=None,
                        help="trials at once; several: every search at each (default 4; "
                        f"--clock virtual: {' '.join(map(str, VIRTUAL_CONCURRENCIES))})")
    parser.add_argument("--noise", action=argparse.BooleanOptionalAction, default=None,
                        help="training noise: each trial draws one of its configuration's "
                        "recorded seeds or noise fitted to the table's seed-to-seed spread; "
                        "picks and incumbents judged by their seed means (default: on with "
                        "--clock virtual; the Ray clock has none)")
    parser.add_argument("--speedup", type=float, default=200.0)
    parser.add_argument("--workers", type=int, default=2, help="searches at once (processes)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None, help="folder for the PNGs")
    parser.add_argument("--report", type=Path, default=None,
                        help="summarise and plot a results file again (no search runs; the "
                        "choice of the default made again from its tables, written to --out "
                        "when given)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the results as docs/benchmarks.md's tables to this file")
    parser.add_argument("--held-out", default=None, metavar="TABLE",
                        help="a table that runs with the others but is left out of every "
                        "choice of the default; the report evaluates the chosen default on it")
    parser.add_argument("--table-file", type=_table_file, action="append", default=[],
                        metavar="NAME=PATH", help="replay table NAME from PATH (a snapshot of "
                        "a table still being recorded); repeatable")
    parser.add_argument("--overhead", action="store_true")
    args = parser.parse_args(argv)
    table_files = dict(args.table_file)
    override_tables(table_files)
    if args.overhead:
        from benchmarks.search_overhead import main as overhead_main

        args.table, args.space = TABLES["omniglot-grid"].table, TABLES["omniglot-grid"].space
        return overhead_main(args)
    if args.plots:
        args.plots.mkdir(parents=True, exist_ok=True)
    if args.report:
        body = json.loads(args.report.read_text())
        if body.get("tables"):  # derived from the tables: made again by today's code
            body["default_method"] = DEFAULT_METHOD  # the method the goals are checked for
            held_out = body.get("held_out_table")
            body["default_choice"] = choose_default(body["tables"], held_out)
            body["held_out_table_curves"] = (body["tables"][held_out]["reference"]["curves"]
                                             if held_out else None)
        if args.out:
            args.out.write_text(json.dumps(body, default=str, separators=(",", ":")))
        report(body, args.plots, args.markdown)
        return 0
    noise = args.clock == "virtual" if args.noise is None else args.noise
    if noise and args.clock != "virtual":
        parser.error("--noise needs --clock virtual (the Ray clock replays no training noise)")
    seeds = args.seeds or (20 if args.full else 10)
    if args.budget is None:
        args.budget = FULL_BUDGET if args.full else BUDGET
    concurrencies = args.concurrency or (list(VIRTUAL_CONCURRENCIES) if args.clock == "virtual"
                                         else [4])
    tables = args.tables or list(DEFAULT_TABLES)
    if args.held_out is not None and args.held_out not in tables:
        parser.error(f"--held-out {args.held_out}: not among the tables run ({' '.join(tables)})")
    if args.held_out is not None and len(tables) < 3:
        parser.error("--held-out needs at least two development tables besides it")
    methods = args.methods or (FULL_METHODS if args.full else SMALL_METHODS)
    jobs = [(t, m, s, c) for c in concurrencies for s in range(seeds) for t in tables
            for m in methods
            # a sweep: once, unless noise makes its choices depend on the seed
            if METHODS[m] is not None or ((s == 0 or noise) and m in TABLES[t].sweeps)]
    print(f"search_efficiency: {len(tables)} tables x {len(methods)} methods x {seeds} seeds, "
          f"budget {args.budget} full trainings, concurrency "
          f"{' '.join(map(str, concurrencies))}, clock {args.clock}, noise "
          f"{'on' if noise else 'off'}", flush=True)
    # every finished search is appended to <out>.runs.jsonl; a run again resumes from it
    log = args.out.with_suffix(".runs.jsonl") if args.out else None
    runs = _logged_runs(log, args.budget, concurrencies, args.clock, noise)
    done = {(r["table"], r["method"], r["seed"], r["concurrency"]) for r in runs}
    todo = [j for j in jobs if j not in done]
    if done:
        print(f"{len(jobs) - len(todo)} searches already in {log}", flush=True)
    started = time.time()
    context = mp.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context,
                                                initializer=_worker_init,
                                                initargs=(table_files,)) as pool:
        futures = {pool.submit(run_method, t, m, s, args.budget, c, args.speedup,
                               args.clock, noise): c for t, m, s, c in todo}
        for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
            run = {**future.result(), "budget": args.budget, "concurrency": futures[future],
                   "clock": args.clock, "noise": noise}
            runs.append(run)
            if log is not None:
                with open(log, "a") as handle:
                    handle.write(json.dumps(run, default=str) + "\n")
            print(f"[{i}/{len(todo)}] {run['table']:14s} {run['method']:15s} seed "
                  f"{run['seed']:2d} c{run['concurrency']}: {run['trials']} trials "
                  f"({run['completed']} to the end), {len(run['events'])} epochs, "
                  f"{run['seconds']:.1f} s", flush=True)
    runs = [r for r in runs if (r["table"], r["method"], r["seed"], r["concurrency"])
            in set(jobs)]
    for c in concurrencies if not noise else ():  # a sweep's one run stands for every seed
        for t in tables:
            for m in methods:
                if METHODS[m] is None and m in TABLES[t].sweeps:
                    (one,) = [r for r in runs if r["table"] == t and r["method"] == m
                              and r["concurrency"] == c]
                    runs += [{**one, "seed": s} for s in range(1, seeds)]
    bodies = {}
    for c in concurrencies:
        mine = [r for r in runs if r["concurrency"] == c]
        body = {"default_method": DEFAULT_METHOD, "budget_trials": args.budget,
                "fractions": list(FRACTIONS), "top_fraction": TOP_FRACTION,
                "small_budget_trials": SMALL_BUDGET, "concurrency": c, "clock": args.clock,
                "noise": noise,
                "speedup": args.speedup if args.clock == "ray" else None, "seeds": seeds,
                "tables": {}}
        for t in tables:
            body["tables"][t] = summarise_table([r for r in mine if r["table"] == t],
                                                reference(t, noise), budget=args.budget)
        body["over_tables"] = over_tables(body["tables"])
        bodies[c] = body
    # the headline (concurrency 4 when it ran) at the top, as one concurrency's file was
    body = {**bodies[4 if 4 in bodies else concurrencies[0]]}
    if len(concurrencies) > 1:
        body["concurrencies"] = concurrencies
        body["by_concurrency"] = {str(c): {k: bodies[c][k] for k in ("tables", "over_tables")}
                                  for c in concurrencies}
    body["held_out_table"] = args.held_out
    body["held_out_table_curves"] = (body["tables"][args.held_out]["reference"]["curves"]
                                     if args.held_out else None)
    body["table_files"] = {name: {"path": path,
                                  "curves": reference(name, noise).summary()["curves"]}
                           for name, path in table_files.items() if name in tables}
    body["default_choice"] = choose_default(body["tables"], args.held_out)
    body["seconds"] = time.time() - started
    body["machine"] = replay_machine()
    body["runs"] = [r for r in runs if noise or not (METHODS[r["method"]] is None
                                                     and r["seed"] > 0)]
    if args.out:
        args.out.write_text(json.dumps(body, default=str, separators=(",", ":")))
    report(body, args.plots, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
