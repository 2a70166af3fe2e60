"""The choice of the search benchmark's default method by docs/benchmarks.md's rule, with
leave-one-table-out on the development tables and one table held out (issue 36).

**The rule** (fixed before the runs): the default is the product's method (a sampler +
scheduler, not a sweep) with the best average rank of normalised regret at 25% of the budget,
pooled over all tables × seeds; within 0.1 of each other, the better average rank at 100%
decides. Ranks are those among every method that ran on every table the rule is applied to
(sweeps included, as in the recorded runs), on the seeds every one of them ran; the candidates
are the product's methods among them. :func:`apply_rule` also gives Friedman's test and the
Nemenyi critical difference of those ranks.

**Leave one table out** (:func:`default_choice`): for each development table T, the rule on
the other development tables, and how its choice does on T (:func:`evaluate_on`: mean regret at
25% and 100% with bootstrap intervals, the regret at 25% in σ units of one retraining, its
average rank among the methods on T, the best method on T and the gap to it in σ units). The
rule on all development tables gives the choice that would be the default; a held-out table
(``--held-out``) is in no choice, and the report evaluates that choice on it.

**The goals** (issue 36, within one task; :func:`goal_checks`), per table, held-out included,
for the product's default: at 100% of the budget better than random search, the paired
bootstrap interval of the per-seed difference of regrets excluding zero; at 25% within 0.5σ of
the best method's mean regret (σ the table's ``sigma_val``, one retraining's σ of the best
validation score) and not the last by mean regret; the pick's test score (the median over
seeds of the seed-mean test score of each search's pick) within one σ of the best-validation
configuration's test score, σ the table's ``sigma_test`` (one retraining's σ of the test score,
``search/replay/noise.py``).

A table's summary is ``summarise_table``'s (``benchmarks/search_efficiency.py``): ``blocks``
(method → seed → regret at each of :data:`FRACTIONS`), ``methods`` (``regret_at``,
``regret_in_sigma_at``, ``median_test_of_pick``, ...), ``average_rank``, ``reference`` and
``sigma_val``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from benchmarks.hpo_measures import average_ranks
from benchmarks.hpo_measures import bootstrap_mean
from benchmarks.hpo_measures import friedman
from benchmarks.hpo_measures import nemenyi_cd

__all__ = ["FRACTIONS", "RULE", "apply_rule", "default_choice", "default_choice_markdown",
           "evaluate_on", "goal_checks", "paired_difference"]

FRACTIONS = (0.1, 0.25, 0.5, 1.0)  # of the budget, the order of a table's blocks
AT, DECIDER = "0.25", "1.0"
TIE = 0.1  # average ranks this close at 25% are decided at 100%
WITHIN_SIGMA = 0.5  # the goal at 25%: within 0.5σ of the best method
RULE = ("the product's method (a sampler + scheduler, not a sweep) with the best average rank "
        "of normalised regret at 25% of the budget, pooled over all tables x seeds; within 0.1 "
        "of each other, the better average rank at 100% decides")

Table = Mapping[str, Any]


def _index(fraction: str) -> int:
    return [str(f) for f in FRACTIONS].index(fraction)


def common_methods(tables: Mapping[str, Table]) -> list[str]:
    """The methods that ran on every one of ``tables``, in the first table's order."""
    first = next(iter(tables.values()))["blocks"]
    return [m for m in first if all(m in t["blocks"] for t in tables.values())]


def pooled_blocks(tables: Mapping[str, Table], methods: Sequence[str], fraction: str
                  ) -> list[dict[str, float]]:
    """One block per table × seed (the seeds every one of ``methods`` ran on that table): each
    method's normalised regret at ``fraction`` of the budget."""
    i = _index(fraction)
    blocks = []
    for table in tables.values():
        seeds = set.intersection(*(set(table["blocks"][m]) for m in methods))
        blocks += [{m: table["blocks"][m][s][i] for m in methods}
                   for s in sorted(seeds, key=_seed_order)]
    return blocks


def _seed_order(seed: Any) -> tuple[int, Any]:
    text = str(seed)
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def apply_rule(tables: Mapping[str, Table], candidates: Collection[str]) -> dict[str, Any]:
    """The rule (module docstring) on ``tables``: the chosen method and what it rests on (the
    pooled average ranks at 25% and 100% of every method, Friedman's test and the Nemenyi
    critical difference at both, the candidates within 0.1 of the best at 25%)."""
    if not tables:
        raise ValueError("the rule needs at least one table")
    methods = common_methods(tables)
    eligible = [m for m in methods if m in candidates]
    if not eligible:
        raise ValueError("no candidate (a product method, not a sweep) ran on every table")
    ranks, tests = {}, {}
    for fraction in (AT, DECIDER):
        blocks = pooled_blocks(tables, methods, fraction)
        ranks[fraction] = average_ranks(blocks)
        tests[fraction] = friedman(blocks)
    leader = min(eligible, key=lambda m: (ranks[AT][m], m))
    tied = [m for m in eligible if ranks[AT][m] <= ranks[AT][leader] + TIE + 1e-12]
    chosen = min(tied, key=lambda m: (ranks[DECIDER][m], ranks[AT][m], m))
    n = len(pooled_blocks(tables, methods, AT))
    return {"chosen": chosen, "tables": list(tables), "methods": methods,
            "candidates": eligible, "blocks": n, "leader_at_25": leader, "within_tie": tied,
            "average_rank": {f: {m: ranks[f][m] for m in methods} for f in ranks},
            "friedman": tests,
            "nemenyi_cd": _critical_difference(len(methods), n)}


@functools.lru_cache(maxsize=None)
def _critical_difference(k: int, n: int) -> float | None:
    """The Nemenyi critical difference at α = 0.05 (None below 2 methods or 1 block)."""
    return nemenyi_cd(k, n) if k >= 2 and n >= 1 else None


def paired_difference(values: Mapping[Any, float], baseline: Mapping[Any, float], *,
                      resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """The mean of ``values[s] − baseline[s]`` over the seeds ``s`` both have (paired by seed)
    and its percentile-bootstrap 95% interval, with the number of pairs."""
    seeds = sorted(set(values) & set(baseline), key=_seed_order)
    diffs = [values[s] - baseline[s] for s in seeds]
    return {**bootstrap_mean(diffs, resamples=resamples, seed=seed), "pairs": len(seeds)}


def _sigma_scale(table: Table) -> float | None:
    """Normalised regret → σ units of one retraining: (best − worst) / σ_val (None when the
    table has no σ)."""
    sigma = table.get("sigma_val")
    ref = table["reference"]
    return (ref["best"] - ref["worst"]) / sigma if sigma else None


def _regret(table: Table, method: str, fraction: str) -> dict[str, float]:
    return dict(table["methods"][method]["regret_at"][fraction])


def _position(table: Table, method: str, fraction: str) -> int:
    """1 + how many methods have a lower mean regret at ``fraction`` than ``method``."""
    mean = table["methods"][method]["regret_at"][fraction]["mean"]
    return 1 + sum(m["regret_at"][fraction]["mean"] < mean for m in table["methods"].values())


def evaluate_on(table: Table, method: str, candidates: Collection[str] = ()
                ) -> dict[str, Any]:
    """How ``method`` does on one table: mean regret at 25% and 100% (bootstrap intervals),
    the regret at 25% in σ units, its average rank among the table's methods at both (and the
    number of methods), the best method by mean regret at 25% (sweeps included; ties: the first
    by name) and the gap to it in σ units, and the same for the best of ``candidates`` (the
    product's methods) when given."""
    scale = _sigma_scale(table)
    means = {m: v["regret_at"][AT]["mean"] for m, v in table["methods"].items()}
    in_sigma = table["methods"][method].get("regret_in_sigma_at", {}).get(AT)
    out = {"method": method, "regret_at": {f: _regret(table, method, f) for f in (AT, DECIDER)},
           "regret_in_sigma_at_25": dict(in_sigma) if in_sigma else None,
           "average_rank": {f: table["average_rank"][f][method] for f in (AT, DECIDER)},
           "position_at_25": _position(table, method, AT), "methods": len(means)}
    for label, pool in (("best", list(means)), ("best_product", [m for m in means
                                                                 if m in candidates])):
        if not pool:
            continue
        best = min(pool, key=lambda m: (means[m], m))
        gap = means[method] - means[best]
        out.update({f"{label}_at_25": best, f"{label}_regret_at_25": means[best],
                    f"gap_to_{label}_at_25": gap,
                    f"gap_in_sigma_to_{label}_at_25": gap * scale if scale is not None
                    else None})
    return out


def goal_checks(table: Table, method: str, *, baseline: str = "random",
                candidates: Collection[str] = ()) -> dict[str, Any]:
    """Issue 36's goals within one task for ``method`` on one table (module docstring; the
    best method at 25% is the best of all, sweeps included; the gap to the best of
    ``candidates`` is reported beside it); a goal the table cannot judge (no σ, no baseline)
    is None, never met."""
    measured = evaluate_on(table, method, candidates)
    blocks = table["blocks"]
    i = _index(DECIDER)
    vs = None
    if baseline in blocks:
        vs = paired_difference({s: r[i] for s, r in blocks[method].items()},
                               {s: r[i] for s, r in blocks[baseline].items()}, seed=i)
    last = measured["position_at_25"] == measured["methods"] and measured["methods"] > 1
    gap_sigma = measured["gap_in_sigma_to_best_at_25"]
    noise = table["reference"].get("seed_noise") or {}
    sigma_test = noise.get("sigma_test")
    pick = table["methods"][method].get("median_test_of_pick")
    best_test = table["reference"]["best_test"]
    shortfall = best_test - pick if pick is not None else None
    pick_ok = (shortfall <= sigma_test if sigma_test and shortfall is not None else None)
    checks = {
        "better_than_random_at_100": (vs["high"] < 0) if vs and vs["pairs"] else None,
        "within_half_sigma_at_25": (gap_sigma <= WITHIN_SIGMA) if gap_sigma is not None
        else None,
        "not_last_at_25": not last,
        "pick_within_one_sigma": pick_ok}
    return {"method": method, "baseline": baseline, "difference_at_100_vs_baseline": vs,
            "gap_in_sigma_at_25": gap_sigma, "best_at_25": measured["best_at_25"],
            "best_product_at_25": measured.get("best_product_at_25"),
            "gap_in_sigma_to_best_product_at_25":
                measured.get("gap_in_sigma_to_best_product_at_25"),
            "position_at_25": measured["position_at_25"], "methods": measured["methods"],
            "median_test_of_pick": pick, "best_test": best_test, "sigma_test": sigma_test,
            "test_shortfall": shortfall,
            "test_shortfall_in_sigma_test": (shortfall / sigma_test
                                             if sigma_test and shortfall is not None else None),
            "checks": checks, "met": all(v is True for v in checks.values())}


def default_choice(tables: Mapping[str, Table], *, candidates: Collection[str],
                   default_method: str, held_out: str | None = None,
                   baseline: str = "random") -> dict[str, Any]:
    """The rule on the development tables (every table but ``held_out``), leave-one-table-out
    on them, the chosen method on the held-out table, and the goal checks of
    ``default_method`` on every table (module docstring)."""
    if held_out is not None and held_out not in tables:
        raise ValueError(f"held-out table {held_out!r} is not among the tables")
    development = {n: t for n, t in tables.items() if n != held_out}
    on_development = apply_rule(development, candidates)
    leave_one_out = {}
    if len(development) >= 2:
        for name, table in development.items():
            rest = {n: t for n, t in development.items() if n != name}
            rule = apply_rule(rest, candidates)
            leave_one_out[name] = {"chosen": rule["chosen"], "rule": rule,
                                   "on_table": evaluate_on(table, rule["chosen"], candidates)}
    held = None
    if held_out is not None:
        held = {"table": held_out, "chosen": on_development["chosen"],
                "on_table": evaluate_on(tables[held_out], on_development["chosen"],
                                       candidates)}
    goals = {name: {**goal_checks(table, default_method, baseline=baseline,
                                  candidates=candidates),
                    "held_out": name == held_out}
             for name, table in tables.items() if default_method in table["methods"]}
    return {"rule": RULE, "tie": TIE, "development_tables": list(development),
            "held_out_table": held_out, "on_development": on_development,
            "leave_one_out": leave_one_out, "held_out": held,
            "goals": {"method": default_method, "baseline": baseline, "tables": goals,
                      "all_met": bool(goals) and all(g["met"] for g in goals.values())}}


def _interval(r: Mapping[str, float] | None) -> str:
    return "-" if not r else f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def _number(x: float | None, form: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, form)


def _mark(ok: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a"}[ok]


def _rule_text(rule: Mapping[str, Any]) -> str:
    ranks = rule["average_rank"]
    order = sorted(rule["candidates"], key=lambda m: ranks[AT][m])
    cells = ", ".join(f"{m} {ranks[AT][m]:.2f} / {ranks[DECIDER][m]:.2f}" for m in order)
    tests = "; ".join(f"{float(f):.0%} p = {_number(rule['friedman'][f]['p_value'], '.2g')}"
                      for f in (AT, DECIDER))
    return (f"over {', '.join(rule['tables'])} ({rule['blocks']} table-seeds, "
            f"{len(rule['methods'])} methods ranked): **{rule['chosen']}**; average ranks at "
            f"25% / 100%: {cells}; within {TIE} of the best at 25%: "
            f"{', '.join(rule['within_tie'])}; Friedman {tests}; Nemenyi critical difference "
            f"{_number(rule['nemenyi_cd'])}")


def _evaluation_row(name: str, chosen: str, e: Mapping[str, Any], note: str = "") -> str:
    return "| " + " | ".join([
        name + note, chosen, _interval(e["regret_at"][AT]), _interval(e["regret_at"][DECIDER]),
        _interval(e["regret_in_sigma_at_25"]),
        f"{e['average_rank'][AT]:.2f} / {e['average_rank'][DECIDER]:.2f}",
        f"{e['position_at_25']} of {e['methods']}",
        f"{e['best_at_25']} ({e['best_regret_at_25']:.3f})",
        _number(e["gap_in_sigma_to_best_at_25"]),
        f"{e.get('best_product_at_25', '-')} "
        f"({_number(e.get('gap_in_sigma_to_best_product_at_25'))})"]) + " |"


def default_choice_markdown(choice: Mapping[str, Any]) -> str:
    """The choice of the default as docs/benchmarks.md's tables: the rule on the development
    tables, leave-one-table-out and the held-out table, and the goal checks."""
    out = [f"**The choice of the default** (rule: {choice['rule']})", "",
           "On the development tables " + _rule_text(choice["on_development"]) + ".", "",
           "| evaluated on | chosen by the rule on the other development tables | regret at "
           "25% | at 100% | at 25% in σ | avg rank on the table at 25% / 100% | place at 25% "
           "(mean regret) | best at 25% | gap to it in σ | best product method at 25% (gap in σ) "
           "|", "|" + "---|" * 10]
    for name, fold in choice["leave_one_out"].items():
        out.append(_evaluation_row(name, fold["chosen"], fold["on_table"]))
    held = choice.get("held_out")
    if held:
        out.append(_evaluation_row(held["table"], held["chosen"], held["on_table"],
                                   " (held out; chosen on all development tables)"))
    out += [""]
    for name, fold in choice["leave_one_out"].items():
        out.append(f"- without {name}: " + _rule_text(fold["rule"]))
    goals = choice["goals"]
    out += ["", f"**Goals of issue 36 for {goals['method']}** (at 100% better than "
            f"{goals['baseline']}: paired bootstrap 95% interval of the per-seed difference of "
            "regrets; at 25% within 0.5σ (σ_val) of the best method's mean regret and not last; "
            "the pick's median seed-mean test score within one σ_test of the best-validation "
            "configuration's)", "",
            f"| table | regret − {goals['baseline']} at 100% [95%] (pairs) | better | gap at "
            "25% in σ (best) | within 0.5σ | place at 25% | not last | pick's test / best's "
            "(shortfall in σ_test) | within 1σ |", "|" + "---|" * 9]
    for name, g in goals["tables"].items():
        c, vs = g["checks"], g["difference_at_100_vs_baseline"]
        pick = g["median_test_of_pick"]
        out.append("| " + " | ".join([
            name + (" (held out)" if g["held_out"] else ""),
            f"{_interval(vs)} ({vs['pairs']})" if vs else "-",
            _mark(c["better_than_random_at_100"]),
            f"{_number(g['gap_in_sigma_at_25'])} ({g['best_at_25']}); to the best product "
            f"method {_number(g['gap_in_sigma_to_best_product_at_25'])} "
            f"({g['best_product_at_25']})",
            _mark(c["within_half_sigma_at_25"]), f"{g['position_at_25']} of {g['methods']}",
            _mark(c["not_last_at_25"]),
            f"{_number(pick, '.4f')} / {g['best_test']:.4f} "
            f"({_number(g['test_shortfall_in_sigma_test'])}; σ_test "
            f"{_number(g['sigma_test'], '.4f')})",
            _mark(c["pick_within_one_sigma"])]) + " |")
    out += ["", f"All goals met on every table: {'yes' if goals['all_met'] else 'no'}."]
    return "\n".join(out) + "\n"
