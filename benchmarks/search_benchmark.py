"""Issue 36's benchmark JSON: the runs that judge the search, in one file.

The issue asks for one JSON, committed with the recorded runs, that keeps ``default_method``
and ``tables`` and adds ``clock``, ``seeds``, ``held_out_table`` and ``transfer``. Several runs
answer it, each written by its own script, so this one puts them together and checks that they
fit:

- **within one task** (``search_efficiency.py --clock virtual --noise``, one run or more, e.g. a
  later run of a new table): ``tables``, every table's methods and measures, and ``seeds``;
- **the choice of the default** (``search_efficiency.py --held-out TABLE``, the
  leave-one-table-out rule of ``default_choice.py``): ``held_out_table`` and ``default_choice``.
  Tables that no choice saw (recorded after it) are listed in ``not_in_choice``;
- **transfer** (``search_transfer.py``, one run or more): ``transfer`` (``{pair: {source,
  target, misleading, methods: {name: {regret_at: {"0.25": {mean, low, high}, "1.0":
  ...}}}}}``) and ``transfer_seeds``.

Refused, with what was expected and what arrived: a run on Ray's clock (every run must be
replayed on the virtual clock); fewer than :data:`MIN_SEEDS` seeds; runs that disagree on the
default method, or with the product's (:data:`search_efficiency.DEFAULT_METHOD`); within-task
runs that differ in seeds, budget, concurrency or noise, transfer runs that differ in seeds or
method; a table or pair in two runs; a choice that held no table out, or held out a table no
within-task run replays; a transfer pair without ``random+asha``, the default or a method named
for transfer. ``sources`` names each file with its seeds, budget and machine.

    python benchmarks/search_benchmark.py \\
        --within benchmarks/results/search_efficiency_100_seeds_virtual_cpu_2026-11-29.json \\
                 benchmarks/results/search_efficiency_glyphs_b_virtual_cpu_2026-11-29.json \\
        --choice benchmarks/results/search_efficiency_loto_virtual_cpu_2026-11-29.json \\
        --transfer benchmarks/results/search_transfer_seed_fits_virtual_cpu_2026-11-29.json \\
                   benchmarks/results/search_transfer_glyphs_b_virtual_cpu_2026-11-29.json \\
        --out benchmarks/results/search_benchmark_virtual_cpu_2026-11-29.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.search_efficiency import DEFAULT_METHOD  # noqa: E402
from benchmarks.search_transfer import BASELINE  # noqa: E402
from benchmarks.search_transfer import FRACTIONS  # noqa: E402  (where its goals read the regret)

MIN_SEEDS = 30  # the goals are judged over at least this many seeds


class Mismatch(ValueError):
    """Runs that cannot be put together (the message says what and how to fix it)."""


def _common(runs: Mapping[str, Mapping[str, Any]], key: str) -> Any:
    values = {name: run.get(key) for name, run in runs.items()}
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) != 1:
        raise Mismatch(f"the runs must share {key!r}, got "
                       + ", ".join(f"{name} {v!r}" for name, v in values.items())
                       + "; give runs made with the same setting")
    return next(iter(values.values()))


def _source(run: Mapping[str, Any], path: str) -> dict[str, Any]:
    return {"file": path, "seeds": run.get("seeds"), "budget_trials": run.get("budget_trials"),
            "concurrency": run.get("concurrency"), "noise": run.get("noise"),
            "seconds": run.get("seconds"), "machine": run.get("machine")}


def _check_transfer(transfer: Mapping[str, Any], default: str) -> None:
    if not transfer:
        raise Mismatch("the transfer run holds no pair; give a search_transfer.py results file")
    for pair, body in transfer.items():
        methods = body.get("methods") or {}
        missing = [m for m in (BASELINE, default) if m not in methods]
        if not any("transfer" in m for m in methods):
            missing.append("a method named for transfer")
        if missing:
            raise Mismatch(f"transfer pair {pair}: expected methods {BASELINE}, {default} and "
                           f"one with transfer, got {', '.join(methods) or 'none'} (missing "
                           f"{', '.join(missing)}); rerun search_transfer.py with its defaults")
        for method, measures in methods.items():
            regret = measures.get("regret_at") or {}
            for fraction in FRACTIONS:
                cell = regret.get(fraction) or {}
                if not {"mean", "low", "high"} <= set(cell):
                    raise Mismatch(f"transfer pair {pair}, {method}: expected regret_at "
                                   f"{fraction} with mean, low and high, got {cell!r}; rerun "
                                   f"search_transfer.py at this revision")


def _merged(runs: Sequence[Mapping[str, Any]], paths: Sequence[str], key: str, what: str
            ) -> dict[str, Any]:
    """The runs' ``key`` mappings together (a name in two of them is refused)."""
    merged: dict[str, Any] = {}
    where: dict[str, str] = {}
    for run, path in zip(runs, paths, strict=True):
        for name, body in (run.get(key) or {}).items():
            if name in merged:
                raise Mismatch(f"{what} {name} is in both {where[name]} and {path}; give each "
                               f"{what} once")
            merged[name], where[name] = body, path
    return merged


def _named(role: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    if len(runs) == 1:
        return {role: runs[0]}
    return {f"{role} {i + 1}": run for i, run in enumerate(runs)}


def compose(within: Sequence[Mapping[str, Any]], choice: Mapping[str, Any],
            transfer: Sequence[Mapping[str, Any]], *, paths: Mapping[str, Any]
            ) -> dict[str, Any]:
    """The issue's JSON from the runs: ``within`` and ``transfer`` one run or more each (a
    later run of new tables or pairs); ``paths``: their files by role (lists for those two)."""
    if not within or not transfer:
        raise Mismatch("expected one or more within-task runs and transfer runs, got "
                       f"{len(within)} and {len(transfer)}; give their results files")
    withins, transfers = _named("within", within), _named("transfer", transfer)
    runs = {**withins, "choice": choice, **transfers}
    for name, run in runs.items():
        if run.get("clock") != "virtual":
            raise Mismatch(f"the {name} run must be replayed on the virtual clock, got clock "
                           f"{run.get('clock')!r}; rerun it with --clock virtual")
        if not isinstance(run.get("seeds"), int) or run["seeds"] < MIN_SEEDS:
            raise Mismatch(f"the {name} run must have at least {MIN_SEEDS} seeds, got "
                           f"{run.get('seeds')!r}; rerun it with --seeds {MIN_SEEDS} or more")
    default = _common(runs, "default_method")
    if default != DEFAULT_METHOD:
        raise Mismatch(f"the runs judge {default!r} as the default, but the product's is "
                       f"{DEFAULT_METHOD!r}; rerun them at this revision")
    setting = {key: _common(withins, key)
               for key in ("seeds", "noise", "budget_trials", "concurrency", "fractions")}
    tables = _merged(within, paths["within"], "tables", "table")
    held_out = choice.get("held_out_table")
    if not held_out or held_out not in tables:
        raise Mismatch(f"the choice run must hold out a table the within-task run replays "
                       f"({', '.join(tables) or 'none'}), got held_out_table {held_out!r}; "
                       f"give a search_efficiency.py run made with --held-out TABLE")
    pairs = _merged(transfer, paths["transfer"], "transfer", "transfer pair")
    _check_transfer(pairs, default)
    chosen_on = set((choice.get("default_choice") or {}).get("development_tables") or ())
    return {
        "default_method": default,
        "clock": "virtual",
        **setting,
        "tables": tables,
        "held_out_table": held_out,
        "not_in_choice": [t for t in tables if t not in chosen_on and t != held_out],
        "default_choice": choice.get("default_choice"),
        "transfer_seeds": _common(transfers, "seeds"),
        "transfer_method": _common(transfers, "transfer_method"),
        "transfer": pairs,
        "sources": {
            "within": [_source(run, path) for run, path in zip(within, paths["within"],
                                                               strict=True)],
            "choice": _source(choice, paths["choice"]),
            "transfer": [_source(run, path) for run, path in zip(transfer, paths["transfer"],
                                                                 strict=True)]},
    }


def _read(parser: argparse.ArgumentParser, path: Path, role: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        parser.error(f"--{role}: no file at {path}; give a results JSON from benchmarks/results")
    except ValueError as exc:
        parser.error(f"--{role}: {path} is not JSON ({exc}); give a results JSON a benchmark "
                     "wrote")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="search_benchmark.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--within", type=Path, nargs="+", required=True,
                        help="search_efficiency.py's runs (JSON), each table in one of them")
    parser.add_argument("--choice", type=Path, required=True,
                        help="search_efficiency.py's run with --held-out (JSON)")
    parser.add_argument("--transfer", type=Path, nargs="+", required=True,
                        help="search_transfer.py's runs (JSON), each pair in one of them")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    within = [_read(parser, path, "within") for path in args.within]
    choice = _read(parser, args.choice, "choice")
    transfer = [_read(parser, path, "transfer") for path in args.transfer]
    paths = {"within": [_relative(path) for path in args.within],
             "choice": _relative(args.choice),
             "transfer": [_relative(path) for path in args.transfer]}
    try:
        body = compose(within, choice, transfer, paths=paths)
    except Mismatch as exc:
        parser.error(str(exc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(body, default=str, separators=(",", ":")))
    partial.replace(args.out)
    print(f"search_benchmark: {args.out}: default {body['default_method']}, {len(body['tables'])} "
          f"tables x {body['seeds']} seeds (held out: {body['held_out_table']}; in no choice: "
          f"{', '.join(body['not_in_choice']) or 'none'}), {len(body['transfer'])} transfer "
          f"pairs x {body['transfer_seeds']} seeds")
    return 0


def _relative(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


if __name__ == "__main__":
    raise SystemExit(main())
