"""Issue 36's benchmark JSON: the runs that judge the search, in one file.

The issue asks for one JSON, committed with the recorded runs, that keeps ``default_method``
and ``tables`` and adds ``clock``, ``seeds``, ``held_out_table`` and ``transfer``. Three runs
answer it, each written by its own script, so this one puts them together and checks that they
fit:

- **within one task** (``search_efficiency.py --clock virtual --noise``): ``tables``, every
  table's methods and measures, and ``seeds``;
- **the choice of the default** (``search_efficiency.py --held-out TABLE``, the
  leave-one-table-out rule of ``default_choice.py``): ``held_out_table`` and ``default_choice``.
  Tables that no choice saw (recorded after it) are listed in ``not_in_choice``;
- **transfer** (``search_transfer.py``): ``transfer`` (``{pair: {source, target, misleading,
  methods: {name: {regret_at: {"0.25": {mean, low, high}, "1.0": ...}}}}}``) and
  ``transfer_seeds``.

Refused, with what was expected and what arrived: a run on Ray's clock (every run must be
replayed on the virtual clock), fewer than :data:`MIN_SEEDS` seeds, runs that disagree on the
default method or on the product's (:data:`search_efficiency.DEFAULT_METHOD`), a choice that
held no table out or held out a table the within-task run did not replay, a transfer run without
``random+asha``, the default or a method named for transfer. ``sources`` says which file gave
what, with its seeds, budget and machine.

    python benchmarks/search_benchmark.py \\
        --within benchmarks/results/search_efficiency_100_seeds_virtual_cpu_2026-11-29.json \\
        --choice benchmarks/results/search_efficiency_loto_virtual_cpu_2026-11-29.json \\
        --transfer benchmarks/results/search_transfer_seed_fits_virtual_cpu_2026-11-29.json \\
        --out benchmarks/results/search_benchmark_virtual_cpu_2026-11-29.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.search_efficiency import DEFAULT_METHOD  # noqa: E402

MIN_SEEDS = 30  # the goals are judged over at least this many seeds
FRACTIONS = ("0.25", "1.0")  # of the budget: where the transfer goals read the regret


class Mismatch(ValueError):
    """Runs that cannot be put together (the message says what and how to fix it)."""


def _common(runs: Mapping[str, Mapping[str, Any]], key: str) -> Any:
    values = {name: run.get(key) for name, run in runs.items()}
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) != 1:
        raise Mismatch(f"the runs must share {key!r}, got "
                       + ", ".join(f"{name} {v!r}" for name, v in values.items())
                       + "; give runs made with the same setting")
    return next(iter(values.values()))


def _source(name: str, run: Mapping[str, Any], path: str) -> dict[str, Any]:
    return {"file": path, "seeds": run.get("seeds"), "budget_trials": run.get("budget_trials"),
            "concurrency": run.get("concurrency"), "noise": run.get("noise"),
            "seconds": run.get("seconds"), "machine": run.get("machine"), "gives": name}


def _check_transfer(transfer: Mapping[str, Any], default: str) -> None:
    if not transfer:
        raise Mismatch("the transfer run holds no pair; give a search_transfer.py results file")
    for pair, body in transfer.items():
        methods = body.get("methods") or {}
        missing = [m for m in ("random+asha", default) if m not in methods]
        if not any("transfer" in m for m in methods):
            missing.append("a method named for transfer")
        if missing:
            raise Mismatch(f"transfer pair {pair}: expected methods random+asha, {default} and "
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


def compose(within: Mapping[str, Any], choice: Mapping[str, Any], transfer: Mapping[str, Any],
            *, paths: Mapping[str, str]) -> dict[str, Any]:
    """The issue's JSON from the three runs (``paths``: their files, by role)."""
    runs = {"within": within, "choice": choice, "transfer": transfer}
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
    held_out = choice.get("held_out_table")
    tables = within.get("tables") or {}
    if not held_out or held_out not in tables:
        raise Mismatch(f"the choice run must hold out a table the within-task run replays "
                       f"({', '.join(tables) or 'none'}), got held_out_table {held_out!r}; "
                       f"give a search_efficiency.py run made with --held-out TABLE")
    _check_transfer(transfer.get("transfer") or {}, default)
    chosen_on = set((choice.get("default_choice") or {}).get("development_tables") or ())
    return {
        "default_method": default,
        "clock": "virtual",
        "seeds": within["seeds"],
        "noise": within.get("noise"),
        "budget_trials": within.get("budget_trials"),
        "concurrency": within.get("concurrency"),
        "fractions": within.get("fractions"),
        "tables": tables,
        "held_out_table": held_out,
        "not_in_choice": [t for t in tables if t not in chosen_on and t != held_out],
        "default_choice": choice.get("default_choice"),
        "transfer_seeds": transfer["seeds"],
        "transfer_method": transfer.get("transfer_method"),
        "transfer": transfer["transfer"],
        "sources": {name: _source(name, run, paths[name]) for name, run in runs.items()},
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
    for role, what in (("within", "search_efficiency.py's run on every table"),
                       ("choice", "search_efficiency.py's run with --held-out"),
                       ("transfer", "search_transfer.py's run")):
        parser.add_argument(f"--{role}", type=Path, required=True, help=f"{what} (JSON)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = {role: _read(parser, getattr(args, role), role)
            for role in ("within", "choice", "transfer")}
    try:
        body = compose(**runs, paths={role: _relative(getattr(args, role)) for role in runs})
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
