"""The parts of a search's report, built once from its :class:`~dmlsearch.search.results.Summary`:
the terminal's closing summary (:mod:`.console`) and ``report.md`` (:mod:`.markdown`) render the
same tables and lines, each in its own format."""

from __future__ import annotations

import math

from dmlsearch.search.intensify import Intensified
from dmlsearch.search.intensify import seed_spread
from dmlsearch.search.intensify import told_apart
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import counted
from dmlsearch.search.reporting.tables import counted_of
from dmlsearch.search.reporting.tables import fmt
from dmlsearch.search.reporting.tables import format_metrics
from dmlsearch.search.reporting.tables import kv
from dmlsearch.search.results import COUNTS
from dmlsearch.search.results import EvalSet
from dmlsearch.search.results import Summary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.results import over_fits
from dmlsearch.search.results import rank
from dmlsearch.search.results import rank_partial
from dmlsearch.search.transfer import PUBLISHED
from dmlsearch.search.trust import TRUST_FULL_TRIALS
from dmlsearch.search.trust import TRUST_WORTH_PER_SETTING
from dmlsearch.search.trust import trusted_worth
from dmlsearch.trainables.input_kinds import model_input_text

__all__ = ["MIN_RANK_PAIRS", "TRUST_FULL_TRIALS", "TRUST_WORTH_PER_SETTING", "best_line",
           "budget_given", "budget_lines", "early_stopping_lines", "ensemble_lines", "leaderboard",
           "model_input", "not_comparable_lines", "note_markdown", "pareto_line", "plan_lines",
           "retrain_table", "score_text", "seeds_text", "set_text", "sets_lines", "states_text",
           "test_heading", "trust_lines"]

# The fewest trials (pairs of an early and a final score) whose rank correlation is reported.
# Below 10, chance alone gives a large Spearman ρ: a two-sided test at 5% needs ρ >= 1.0 with 5
# pairs, 0.89 with 6, 0.79 with 7, 0.71 with 8, 0.70 with 9; with 10 it needs 0.65, so a good
# agreement (ρ around 0.7) can first be told from none.
MIN_RANK_PAIRS = 10


def set_text(sizes: EvalSet, metrics: dict | None = None) -> str:
    """How large a set a score was measured on: ``12 classes, 240 queries``; k-fold
    validation: ``120 classes in 4 folds, 2,400 queries in all``; with ``metrics`` that count
    verification trials, those too."""
    text = (f"{sizes.classes:,} classes, {sizes.queries:,} queries" if sizes.folds < 2 else
            f"{sizes.classes:,} classes in {sizes.folds} folds, {sizes.queries:,} queries in all")
    trials = (metrics or {}).get("verify_trials")
    if isinstance(trials, (int, float)):
        text += f", {int(trials):,} verification pairs"
    return text


def sets_lines(summary: Summary) -> list[str]:
    """What the validation and test scores are measured on, and that they are not comparable."""
    val, test = summary.validation_set, summary.test_set
    lines = []
    if val is not None:
        where = (f"{val.folds} class-disjoint folds of the training classes (a trial's score is "
                 "the mean over its folds)" if val.folds > 1
                 else "classes held out of the training classes")
        lines.append(f"Validation set: {set_text(val)}; {where}. Every trial is scored on it.")
    if test is not None:
        lines.append(f"Test set: {set_text(test, summary.test_metrics)}; classes never used in "
                     "the search. The retrained best configuration is scored on it once.")
    return lines + not_comparable_lines(summary)


def not_comparable_lines(summary: Summary) -> list[str]:
    """Why the test score differs from the validation score, when both sets are known."""
    if summary.validation_set is None or summary.test_set is None:
        return []
    line = ("Validation and test scores are not comparable: they are measured on different "
            "classes and on sets of different sizes (among fewer classes there are fewer "
            "look-alikes to confuse, so scores are usually better).")
    return [line]


def test_heading(summary: Summary) -> str:
    """``test set (60 classes, 1,200 queries)``: what the test metrics were measured on (a
    summary written before the sets were recorded: the queries its metrics counted)."""
    if summary.test_set is not None:
        return f"test set ({set_text(summary.test_set, summary.test_metrics)})"
    queries = (summary.test_metrics or {}).get("num_queries")
    return "test classes" + (f" ({int(queries):,} queries)"
                             if isinstance(queries, (int, float)) else "")


def score_text(record: TrialRecord) -> str:
    """The trial's score; with two or more fits (k-fold, repeats) ± the spread of their bests."""
    if record.score is None:
        return "-"
    if record.fits > 1 and record.score_std is not None:
        return f"{record.score:.4f} ± {record.score_std:.4f}"
    return f"{record.score:.4f}"


def states_text(summary: Summary) -> str:
    """``10 trials (2 completed, 8 pruned by asha, 0 failed)``."""
    counts = summary.counts()
    parts = []
    for state, n in counts.items():
        if state == TrialState.PRUNED.value:
            by = sorted({t.stopped_by for t in summary.trials
                         if t.state is TrialState.PRUNED and t.stopped_by})
            parts.append(f"{n} pruned" + (f" by {' and '.join(by)}" if by and n else ""))
        else:
            parts.append(f"{n} {state}")
    return f"{counted(len(summary.trials), 'trial')} ({', '.join(parts)})"


def budget_given(summary: Summary) -> str:
    """What the search was given, beside what it spent: `` of a budget of 80 (--trials 10:
    10 full trainings' worth of 8 epochs, spread by early stopping over more trials)``."""
    study = summary.study
    if study.budget_epochs is None or study.budget_trials is None:
        return ""
    n = study.budget_trials
    worth = (f"{counted_of(n, 'full training')} worth of {counted(study.max_iterations, 'epoch')}"
             if study.max_iterations else f"{counted_of(n, 'training')} worth")
    return (f" of a budget of {study.budget_epochs} (--trials {study.budget_trials}: {worth}, "
            "spread by early stopping over more trials; running trials finish)")


def _epochs_text(summary: Summary) -> str:
    budget = summary.budget
    return ("" if budget is None
            else f", {counted(budget.epochs, 'epoch')} trained{budget_given(summary)}")


def plan_lines(summary: Summary) -> list[str]:
    """What kind of search it was, when that is not a plain one: a capped grid, a replay."""
    lines = []
    study = summary.study
    if study.grid_size is not None and len(summary.trials) < study.grid_size:
        lines.append(f"Grid: {len(summary.trials)} of its {study.grid_size} points ran (--trials "
                     "caps it: a seeded subset covering every value of every parameter as "
                     "evenly as the cap allows).")
    if study.replay is not None:
        lines.append(f"Replayed from the learning-curve table {study.replay}: no model was "
                     "trained.")
    return lines + transfer_lines(summary)


def intensify_lines(summary: Summary) -> list[str]:
    """With ``--intensify``: the best configurations' two fits, the pick, and whether the best
    two can be told apart."""
    fits = summary.intensified
    if not fits:
        return []
    typed = [Intensified.from_json(f) for f in fits]
    lines = [f"Second seeds (--intensify {len(typed)}), best mean first:"]
    for f in typed:
        scores = " and ".join(f"{s:.4f} (seed {seed})" for s, seed in zip(f.scores, f.seeds))
        failed = "" if f.reason is None else f"; its second fit failed: {f.reason}"
        lines.append(f"  {f.name}: {scores}, mean {f.mean:.4f}{failed}")
    apart, sigma = told_apart(typed), seed_spread(typed)
    if apart is False:
        lines.append(f"  {typed[0].name} and {typed[1].name} cannot be told apart: their means "
                     f"differ by {abs(typed[0].mean - typed[1].mean):.4f}, within two standard "
                     f"errors of the seed-to-seed spread measured here (σ {sigma:.4f}); "
                     f"{typed[0].name} is picked, and either is as good a choice")
    elif apart:
        lines.append(f"  {typed[0].name} is picked: ahead by more than two standard errors of "
                     f"the seed-to-seed spread measured here (σ {sigma:.4f})")
    return lines


def transfer_lines(summary: Summary) -> list[str]:
    """With ``--prior-from``: where the search started from, and how the points it took scored
    here (the trials that trained them)."""
    transfer = summary.study.transfer
    if not transfer:
        return []
    lines = []
    for source in transfer.get("sources", []):
        lines.append(f"Prior from {source['folder']} ({source['space']} on {source['dataset']}, "
                     f"{source['trials']} trials; shared: {', '.join(source['shared'])}).")
    for pick in transfer.get("points", []):
        here = next((t for t in summary.trials if all(
            t.config.get(k) == v for k, v in pick["point"].items())), None)
        there = "" if pick.get("score") is None else f" {pick['score']:.4f}"
        fared = ("not trained here" if here is None
                 else f"here {here.name}, {here.state.value}: {score_text(here)}")
        if pick["source"] == "space":  # the target's own warm starts, kept
            choice = ", ".join(f"{k}={v}" for k, v in pick["point"].items()
                               if isinstance(v, str))
            why = ("its published defaults, kept beside the transferred points"
                   if pick["trial"] == PUBLISHED
                   else "a branch the sources did not search")
            lines.append(f"  the space's own warm start{' ' + choice if choice else ''} ({why}), "
                         f"tried first; {fared}")
            continue
        to_end = ", trained to its end" if pick.get("to_end") else ""
        lines.append(f"  its {pick['trial']} ({there.strip() or 'no score'} there), tried "
                     f"first{to_end}; {fared}")
    return lines


def budget_lines(summary: Summary) -> list[str]:
    lines = [states_text(summary)]
    budget = summary.budget
    if budget is not None:
        lines += [f"epochs trained{over_fits(summary.trials)}: {budget.epochs}"
                  + budget_given(summary),
                  f"CPU-hours: {budget.cpu_hours:.3f}, GPU-hours: {budget.gpu_hours:.3f} "
                  f"(trial-hours {budget.trial_hours:.3f})"]
    else:
        lines.append(f"epochs trained{over_fits(summary.trials)}: "
                     f"{sum(t.iterations for t in summary.trials)}")
    if summary.repeats_answered:
        lines.append(f"proposals answered from an earlier trial (repeated configurations, not "
                     f"trained): {summary.repeats_answered}")
    if summary.seconds is not None:
        lines.append(f"wall time: {summary.seconds:.0f} s")
    return lines


def leaderboard(summary: Summary, *, top: int | None = None, params: bool = True,
                unscored: bool = False) -> Table:
    """The trials that trained to their end, best first (``top`` of them, numbered), then the
    ones stopped early (deepest first, not numbered: their scores are of smaller budgets), with
    the searched parameters when ``params``; ``unscored`` adds the trials without a score
    (failed ones with their reason) at the end."""
    study = summary.study
    ranked = rank(summary.trials, study.mode)
    rows_of = ranked[:top] if top is not None else ranked
    if top is None or len(rows_of) < top:
        partial = rank_partial(summary.trials, study.mode)
        rows_of += partial[:None if top is None else top - len(rows_of)]
    if unscored:
        rows_of = [*rows_of, *(t for t in summary.trials if not t.scored)]
    keys = list(study.searched) if params else []
    header = ["#", "trial", "state", f"val {study.metric}", "best epoch", "epochs",
              "time [s]", *keys]
    if unscored:
        header.append("reason")
    rows = []
    for i, t in enumerate(rows_of, 1):
        row = [str(i) if t.full_budget else "-", t.name, t.state.value, score_text(t),
               fmt(t.best_epoch) if t.scored else "-", str(t.iterations), f"{t.seconds:.1f}",
               *(fmt(t.config.get(k)) for k in keys)]
        if unscored:
            row.append(t.reason or "")
        rows.append(row)
    return Table(header, rows)


def pareto_line(summary: Summary) -> str | None:
    if summary.pareto is None:
        return None
    front = [t for t in (summary.trial(i) for i in summary.pareto.trial_ids) if t is not None]
    return (f"Pareto front (val {summary.study.metric} against {summary.pareto.cost}): "
            + ", ".join(f"{t.name} ({t.score:.4f}, {t.cost:g})" for t in front)
            + "; the retrain takes the best by the metric.")


def _name(summary: Summary, trial_id: str) -> str:
    """A trial's one name (``t07``), as the search's trial list says it."""
    trial = summary.trial(trial_id)
    return trial_id if trial is None else trial.name


def best_line(summary: Summary) -> str:
    best = summary.trial(summary.best_trial) or next(iter(rank(summary.trials,
                                                               summary.study.mode)), None)
    if best is None:
        return "No trial produced a validation score: nothing to retrain or export."
    searched = {k: best.config.get(k) for k in summary.study.searched if k in best.config}
    on = ("" if summary.validation_set is None
          else f" (validation set: {set_text(summary.validation_set)})")
    line = (f"Best trial {best.name}: val {summary.study.metric} {best.score:.4f}{on}"
            + (f" with {kv(searched)}" if searched else ""))
    if not best.full_budget:
        line += (f" (no trial trained to its end: the best of those that reached epoch "
                 f"{best.iterations})")
    return line


def early_stopping_lines(summary: Summary) -> list[str]:
    """Whether stopping trials early was safe on this data: the rank correlation (Spearman)
    between the scores at the scheduler's first decision and the final scores, over the trials
    that trained to their end."""
    rung = summary.study.first_rung
    if rung is None:
        return []
    pairs = [(t.score_at(rung), t.score) for t in rank(summary.trials, summary.study.mode)
             if t.score_at(rung) is not None]
    head = f"Early stopping ({summary.study.scheduler}, first decision at epoch {rung}): "
    if len(pairs) < MIN_RANK_PAIRS:
        return [head + f"only {counted(len(pairs), 'trial')} trained to the end; at least "
                f"{MIN_RANK_PAIRS} are needed to judge whether the scores at epoch {rung} "
                "predict the final ones, so this search cannot tell whether stopping trials "
                "early was safe."]
    early, final = [a for a, _ in pairs], [b for _, b in pairs]
    for scores, when in ((early, f"at epoch {rung}"), (final, "at their end")):
        if len(set(scores)) == 1:  # no ranking to correlate (Spearman's ρ is undefined)
            return [head + f"the {len(pairs)} trials that trained to their end all scored "
                    f"{scores[0]:.4f} {when}, so their ranks cannot be compared."]
    from scipy.stats import spearmanr

    rho, p = spearmanr(early, final)
    evidence = (f"rank correlation of the scores at epoch {rung} with the final scores, over "
                f"{len(pairs)} trials that trained to their end: Spearman ρ = {rho:.2f} "
                f"(p = {float(p):.2g}).")
    if rho >= 0.5 and p < 0.05:
        return [head + evidence + " The early scores rank trials as the final ones do: "
                "stopping early is safe on this data."]
    if rho >= 0.5:
        return [head + evidence + " The early scores tend to rank trials as the final ones "
                f"do, but {len(pairs)} trials are too few to be sure (p >= 0.05)."]
    return [head + evidence + " WARNING: the early scores rank trials unlike the final ones; "
            "early stopping may have dropped good configurations. Give trials more epochs "
            "before the first decision (--grace-period) or search with --scheduler none."]


def trust_lines(summary: Summary) -> list[str]:
    """Whether the search was large enough to trust its pick: at least
    :data:`TRUST_FULL_TRIALS` trials trained to their end (else the pick is one of a handful),
    and at least :data:`TRUST_WORTH_PER_SETTING` full trainings' worth of epochs per searched
    setting (on the benchmark tables, smaller searches' picks often lay outside the best 5%
    of the space). A grid study's pick is the best of its points: no warning."""
    study = summary.study
    if study.grid_size is not None or not summary.trials:
        return []
    full = sum(t.full_budget and t.scored for t in summary.trials)
    epochs = summary.budget.epochs if summary.budget is not None else 0
    worth = epochs / study.max_iterations if study.max_iterations else None
    settings = len(study.searched)
    needed = trusted_worth(settings)
    why = []
    if full < TRUST_FULL_TRIALS:
        why.append(f"only {counted(full, 'trial')} trained to the end, so the pick is the best of "
                   f"{full}")
    if worth is not None and worth < needed:
        why.append(f"its trials trained {counted(epochs, 'epoch')} in all, the work of "
                   f"{worth:.1f} complete trainings ({counted(study.max_iterations, 'epoch')} "
                   f"each), for {settings} "
                   f"searched settings; in the benchmarks (docs/benchmarks.md, \"Search "
                   f"efficiency\"), searches with fewer than {TRUST_WORTH_PER_SETTING:g} "
                   f"complete trainings per searched setting ({needed:.0f} here) often picked "
                   "a configuration outside the best 5% of the space")
    if not why:
        return []
    more = max(math.ceil(needed), math.ceil(worth or 0) + 1)
    return ["WARNING: this search may be too small to trust its pick: " + "; ".join(why)
            + f". Search again with --trials {more} or more, or retrain the best few with "
            "--retrain-top 3 --seeds 3 to tell them apart."]


def retrain_table(summary: Summary, *, columns: int = 6) -> Table | None:
    """``--retrain-top`` / ``--seeds``: each retrained trial's test mean ± 95% interval (the
    search's metric first); ``None`` for a single retrain with one seed."""
    retrains = summary.retrains
    if not retrains or (len(retrains) == 1 and len(retrains[0].seeds) < 2):
        return None
    metric = summary.study.metric
    keys = sorted((k for k in retrains[0].mean if k not in COUNTS and k != "precision@1"),
                  key=lambda k: k != metric)[:columns]
    rows = [[str(r.rank), _name(summary, r.trial_id), str(len(r.seeds)),
             *("–" if k not in r.mean  # e.g. a loss whose metrics the first one lacks
               else f"{r.mean[k]:.4f} ± {r.ci95[k]:.4f}" if r.ci95.get(k) is not None
               else f"{r.mean[k]:.4f}" for k in keys)] for r in retrains]
    return Table(["rank", "trial", "seeds", *keys], rows)


def seeds_text(summary: Summary) -> str:
    """What :func:`retrain_table`'s cells are: ``with 3 seeds each; test mean ± ...``."""
    seeds = len(summary.retrains[0].seeds) if summary.retrains else 0
    if seeds < 2:
        return "with one seed each; test score (one seed: no interval)"
    return (f"with {seeds} seeds each; test mean ± half-width of the 95% confidence interval "
            "(Student t)")


def model_input(summary: Summary) -> str:
    """What the study's registered model takes (images or audio features), in a few words."""
    return model_input_text(summary.trials[0].config if summary.trials else {})


def ensemble_lines(summary: Summary, sep: str = "  ") -> list[str]:
    ensemble = summary.fold_ensemble
    if ensemble is None or not ensemble.metrics:
        return []
    m = ensemble.metrics
    keys = [k[len("ensemble_"):] for k in m
            if k.startswith("ensemble_") and k[len("ensemble_"):] not in COUNTS]
    spread = ", ".join(f"{k} {m['folds_mean_' + k]:.4f} ± {m['folds_std_' + k]:.4f}"
                       for k in keys if "folds_mean_" + k in m)
    return [f"Fold models on the test classes ({len(ensemble.fold_test_metrics)} folds), "
            f"mean ± std: {spread}",
            "Their ensemble (L2-normalised embeddings concatenated): "
            + format_metrics({k: m["ensemble_" + k] for k in keys}, sep)]


def note_markdown(summary: Summary) -> str:
    """The study run's description in the MLflow UI: what was searched, the best trial and
    its test metrics, where to look."""
    study = summary.study
    lines = [f"**dmlsearch study** of space `{study.space}` on `{study.dataset}` "
             f"({study.protocol} protocol), val {study.metric}; sampler {study.sampler}, "
             f"scheduler {study.scheduler}.", "",
             f"- {states_text(summary)}{_epochs_text(summary)}",
             f"- {best_line(summary)}"]
    first = summary.retrains[0] if summary.retrains else None
    interval = None if first is None else first.ci95.get(study.metric)
    heading = test_heading(summary)
    heading = heading[0].upper() + heading[1:]
    if first is not None and interval is not None:
        lines.append(f"- {heading}, {study.metric} over {len(first.seeds)} seeds: "
                     f"{first.mean.get(study.metric, float('nan')):.4f} ± {interval:.4f} "
                     "(95% interval)")
    elif summary.test_metrics:
        lines.append(f"- {heading}, tested once: " + format_metrics(summary.test_metrics, ", "))
    lines += [f"- {line}" for line in not_comparable_lines(summary)]
    lines += [f"- {line.strip()}" for line in [*transfer_lines(summary), *intensify_lines(summary)]]
    lines += ["", "Trials are the child runs named `tNN <loss> <searched values>`; the study's "
              "plots are under Artifacts → `plots/`, the importance under `importance/`."]
    return "\n".join(lines)
