"""Record the reference traces: run the authors' code on the tiny fixed setup, write fixtures.

    python -m benchmarks.reference_traces.record \\
        --thesis PATH --proxy-anchor PATH --ms PATH [--memvir PATH --e2e PATH] --out DIR

Each PATH is a checkout of the authors' repository at the commit its recipe module names
(``COMMIT``; README.md says how to fetch them). Writes ``DIR/setup.npz`` (the shared setup; kept
as it is when DIR already holds one, so that traces recorded apart share it, unless
``--new-setup``) and one ``DIR/<trace>.json`` per trace. The tests read
``tests/trainables/fixtures/reference_traces/`` (:data:`common.FIXTURES`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from types import ModuleType

from benchmarks.reference_traces import common

#: The recipe modules, in recording order; modules not (yet) written are skipped.
RECIPES = ("_proxy_anchor", "_thesis_proxy", "_multi_similarity", "_memvir", "_e2e")
#: Options of recipes whose module may not exist yet (their module defines OPTION).
KNOWN_OPTIONS = {"_proxy_anchor": "--proxy-anchor", "_thesis_proxy": "--thesis",
                 "_multi_similarity": "--ms", "_memvir": "--memvir", "_e2e": "--e2e"}


def _modules() -> dict[str, ModuleType | None]:
    out: dict[str, ModuleType | None] = {}
    for name in RECIPES:
        try:
            out[name] = importlib.import_module(f"benchmarks.reference_traces.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"benchmarks.reference_traces.{name}":
                raise
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    modules = _modules()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reference_traces.record",
        description="Run the authors' code on the tiny fixed setup and write the reference "
                    "traces (fixtures of tests/trainables/test_reference_traces.py).")
    for name in RECIPES:
        module = modules[name]
        option = module.OPTION if module is not None else KNOWN_OPTIONS[name]
        where = (f"{module.REPOSITORY} at {module.COMMIT}" if module is not None
                 else "module not written yet")
        parser.add_argument(option, type=Path, metavar="PATH", dest=name,
                            help=f"checkout of {where}")
    parser.add_argument("--out", type=Path, default=common.FIXTURES,
                        help=f"fixture folder (default: {common.FIXTURES})")
    parser.add_argument("--new-setup", action="store_true",
                        help="draw and write setup.npz even when --out holds one (every "
                             "trace must then be recorded again)")
    args = parser.parse_args(argv)
    chosen = [n for n in RECIPES if getattr(args, n) is not None]
    if not chosen:
        parser.error("name at least one checkout (" +
                     ", ".join(KNOWN_OPTIONS[n] for n in RECIPES) + ")")
    for name in chosen:
        if modules[name] is None:
            parser.error(f"{KNOWN_OPTIONS[name]}: benchmarks/reference_traces/{name}.py does "
                         "not exist yet")
        if not getattr(args, name).is_dir():
            parser.error(f"{KNOWN_OPTIONS[name]} {getattr(args, name)}: no such folder")

    common.deterministic()
    if args.new_setup or not (args.out / common.SETUP_FILE).is_file():
        path = common.save_setup(common.make_setup(), args.out)
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    setup = common.load_setup(args.out)  # every trace starts from the stored (fp16) values
    command = "python -m benchmarks.reference_traces.record " + " ".join(
        argv if argv is not None else sys.argv[1:])
    for name in chosen:
        module = modules[name]
        assert module is not None
        started = time.perf_counter()
        for trace in module.record(getattr(args, name).resolve(), setup):
            trace.provenance["recorded_with"] = command
            trace.provenance["setup_sha256"] = common.file_sha256(args.out / common.SETUP_FILE)
            path = common.save_trace(trace, args.out)
            print(f"wrote {path}: {len(trace.steps)} steps, losses "
                  + ", ".join(f"{x:.4f}" for x in trace.losses())
                  + f" ({time.perf_counter() - started:.1f} s)")
            for note in trace.notes:
                print(f"  note: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
