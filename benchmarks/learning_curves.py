"""Record a learning-curve table: every point of a grid space trained for real, every epoch's
validation metrics, epoch times, and the test metrics of the best validation epoch so far.

The table is what the replay backend (``dmlsearch run --replay TABLE``) and the search benchmark
(``benchmarks/search_efficiency.py``) read instead of training: a search method can then be
compared with others over many seeds in minutes, on curves of real DML trainings.

    python benchmarks/learning_curves.py [--space benchmarks/curves/omniglot_grid.yaml]
        [--data ../shared/data/omniglot_background_small1.zip] [--workers 2]
        [--second-seed-subset 60] [--out benchmarks/curves/omniglot.jsonl] [--small]

Every grid point is trained with seed 0; a fixed random subset of them is trained again with
seed 1 (the noise between two trainings of one configuration). Each training is exactly one trial
of ``dmlsearch run`` with that configuration (``trainables.trial.fold_fitter`` on the space's
fixed class-disjoint split), plus one evaluation on the test classes after every epoch whose
validation score is the best so far: so for any epoch e, the test metrics of the model a trial
stopped at e would select are in the table.

The recording is the package's own (``dmlsearch record-curves``, :mod:`dmlsearch.search.replay`),
with this benchmark's defaults: the output is JSON lines, a ``header`` line (the space file, the
base settings, the data file's SHA-256, the code revision, the machine), then one ``run`` line per
training, appended as each finishes, so the command **resumes**: run it again with the same
``--out`` and it trains only what is missing. ``--workers`` trainings run at once, one CPU thread
each (run it under ``nice`` beside other work: each run records its CPU seconds as well as wall
seconds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPACE = REPO / "benchmarks" / "curves" / "omniglot_grid.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "omniglot_background_small1.zip"
DEFAULT_OUT = REPO / "benchmarks" / "curves" / "omniglot.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", type=Path, default=DEFAULT_SPACE)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--second-seed-subset", type=int, default=60)
    parser.add_argument("--small", action="store_true",
                        help="smoke test: 6 points, 2 epochs, 2 of them with a second seed")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from dmlsearch.search.replay import check_recordable
    from dmlsearch.search.replay import record_table
    from dmlsearch.spaces import load_space

    if not args.data.is_file():
        print(f"learning_curves: no data file {args.data}; give --data with the Omniglot "
              "sample (omniglot_background_small1.zip)", file=sys.stderr)
        return 2
    overrides: dict[str, object] = {"data_root": str(args.data.resolve())}
    if args.small:
        overrides["epochs"] = 2
    space = load_space(args.space).with_overrides(overrides)
    check_recordable(space)
    record_table(space, args.out, overrides=overrides, workers=args.workers,
                 second_seed=2 if args.small else args.second_seed_subset,
                 limit=6 if args.small else None,
                 command="python benchmarks/learning_curves.py "
                 + " ".join(argv if argv is not None else sys.argv[1:]),
                 echo=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
