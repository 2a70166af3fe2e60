"""Benchmark: one transfer rule against another, seed by seed, on the same pairs
(``benchmarks/search_transfer.py``'s runs logs of the two rules).

Both logs hold the same searches without transfer (the sources' and the baselines': the rule
does not touch them; checked, event for event, on every search both hold) and each its own
searches with transfer. Per pair, for the transfer method: the mean normalised regret at 25% and
100% of the budget under each rule, the paired gain (before − after, per seed: positive, the new
rule better) with a bootstrap 95% interval, and the share of seeds within one σ of the target's
best after 5 trainings under each. A rule is chosen on some pairs (``--chosen-on``) and reported
on the others: the report says which is which.

    python benchmarks/transfer_paired.py --before OLD.runs.jsonl [...] --after NEW.runs.jsonl \\
        [--chosen-on SOURCE->TARGET ...] --out FILE.json [--markdown FILE.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import replay_machine  # noqa: E402
from benchmarks.search_transfer import BASELINE  # noqa: E402
from benchmarks.search_transfer import DEFAULT_METHOD  # noqa: E402
from benchmarks.search_transfer import EARLY_TRAININGS  # noqa: E402
from benchmarks.search_transfer import TRANSFER_METHOD  # noqa: E402
from benchmarks.search_transfer import job_of  # noqa: E402
from benchmarks.search_transfer import judging  # noqa: E402
from benchmarks.search_transfer import pair_name  # noqa: E402
from benchmarks.search_transfer import parse_pair  # noqa: E402
from benchmarks.search_transfer import within_sigma  # noqa: E402

FRACTIONS = {"0.25": 1, "1.0": 3}  # summarise_table's per-seed blocks: (10%, 25%, 50%, 100%)


def read_runs(paths: list[Path]) -> dict[tuple, dict[str, Any]]:
    """Every search of the logs, by its job (table, method, seed, source)."""
    runs: dict[tuple, dict[str, Any]] = {}
    for path in paths:
        with open(path) as handle:
            for line in handle:
                if line.strip():
                    run = json.loads(line)
                    runs[job_of(run)] = run
    return runs


class Mismatch(ValueError):
    """Logs that cannot be compared (one line: what was expected, what arrived, the fix)."""


def check_same_baselines(before: dict[tuple, Any], after: dict[tuple, Any]) -> int:
    """The searches without transfer both logs hold are the same, event for event (a rule that
    changed them would not be compared on equal ground); how many were compared."""
    shared = [job for job in before if job in after and job[1] != TRANSFER_METHOD]
    for job in shared:
        if before[job]["events"] != after[job]["events"]:
            table, method, seed, _ = job
            raise Mismatch(f"the {method} search of {table}, seed {seed}, differs between the "
                           "logs, where the searches without transfer must be the same; give "
                           "runs logs written by the same code apart from the transfer rule")
    if not shared:
        raise Mismatch("the logs share no search without transfer, where both rules' searches "
                       "need the same sources and baselines; give runs logs of the same pairs "
                       "and seeds")
    return len(shared)


def compare_pair(source: str, target: str, before: dict[tuple, Any], after: dict[tuple, Any],
                 *, budget: int) -> dict[str, Any]:
    """The pair's measures under both rules (module docstring)."""
    from benchmarks.hpo_measures import bootstrap_mean
    from benchmarks.search_efficiency import summarise_table

    ref = judging(target)
    out: dict[str, Any] = {"source": source, "target": target}
    blocks = {}
    for name, runs in (("before", before), ("after", after)):
        mine = [r for job, r in runs.items() if job[0] == target and job[1] == TRANSFER_METHOD
                and job[3] == source]
        body = summarise_table(mine, ref, budget=budget)
        blocks[name] = body["blocks"][TRANSFER_METHOD]
        early = [within_sigma(r, ref, EARLY_TRAININGS) for r in mine]
        out[name] = {"seeds": len(mine),
                     "regret_at": {f: body["methods"][TRANSFER_METHOD]["regret_at"][f]["mean"]
                                   for f in FRACTIONS},
                     "within_sigma_5": sum(early) / len(early) if early else None}
    seeds = sorted(set(blocks["before"]) & set(blocks["after"]), key=int)
    out["paired_seeds"] = len(seeds)
    out["paired_gain"] = {f: bootstrap_mean([blocks["before"][s][i] - blocks["after"][s][i]
                                             for s in seeds], seed=i)
                          for f, i in FRACTIONS.items()}
    baseline = [r for job, r in after.items() if job[0] == target
                and job[1] in (BASELINE, DEFAULT_METHOD)]
    base = summarise_table(baseline, ref, budget=budget)["methods"]
    lower = min(base[m]["regret_at"]["0.25"]["mean"] for m in (BASELINE, DEFAULT_METHOD))
    out["ratio_at_25"] = {name: out[name]["regret_at"]["0.25"] / lower if lower > 0 else None
                          for name in ("before", "after")}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = ["| pair | chosen on | regret at 25%: before → after (ratio to the lower baseline) "
             "| paired gain at 25% [95%] | at 100% | within σ in 5 |", "|---|---|---|---|---|---|"]
    for p in result["pairs"]:
        g25, g100 = p["paired_gain"]["0.25"], p["paired_gain"]["1.0"]
        lines.append(
            f"| {pair_name(p['source'], p['target'])} | {'yes' if p['chosen_on'] else 'no'} | "
            f"{p['before']['regret_at']['0.25']:.3f} → {p['after']['regret_at']['0.25']:.3f} "
            f"({p['ratio_at_25']['before']:.2f}× → {p['ratio_at_25']['after']:.2f}×) | "
            f"{g25['mean']:+.3f} [{g25['low']:+.3f}, {g25['high']:+.3f}] | "
            f"{g100['mean']:+.3f} [{g100['low']:+.3f}, {g100['high']:+.3f}] | "
            f"{p['before']['within_sigma_5']:.0%} → {p['after']['within_sigma_5']:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--chosen-on", nargs="*", type=parse_pair, default=[])
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args(argv)
    before, after = read_runs(args.before), read_runs(args.after)
    try:
        compared = check_same_baselines(before, after)
    except Mismatch as exc:
        print(f"transfer_paired: {exc}", file=sys.stderr)
        return 2
    pairs = list(dict.fromkeys((job[3], job[0]) for job in after
                               if job[1] == TRANSFER_METHOD and job in before))
    result = {
        "benchmark": "transfer_paired",
        "date": datetime.date.today().isoformat(),
        "machine": replay_machine(),
        "before": [p.name for p in args.before], "after": [p.name for p in args.after],
        "budget": args.budget,
        "same_searches_without_transfer": compared,
        "pairs": [{**compare_pair(s, t, before, after, budget=args.budget),
                   "chosen_on": (s, t) in set(args.chosen_on)} for s, t in pairs],
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    if args.markdown:
        args.markdown.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
