"""The ``dmlsearch`` command line: the parser, and one handler per command that hands the parsed
arguments to the module doing the work (``run``/``resume``: :mod:`.run`; ``compare``:
:mod:`.compare.comparison`; ``record-curves``: :mod:`.replay`; ``train``, ``export``:
:mod:`.finish`; ``importance``, ``report``: :mod:`.reporting`). The options of ``run``,
``compare`` and ``record-curves`` are :mod:`.options`' (``add_arguments``, ``from_args``). User
mistakes end as one line on stderr and exit code 2, with no traceback.

Handlers import the module that does their work when they run, after the options are checked:
``dmlsearch --help``, a mistyped option and a bad value answer in a fraction of a second,
without importing torch, Ray or MLflow.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from dmlsearch.search.options import CompareOptions
from dmlsearch.search.options import RecordCurvesOptions
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import add_arguments
from dmlsearch.search.options import parse_sets
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_choices
from dmlsearch.trainables.config import setting_help
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError

__all__ = ["build_parser", "main"]

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line that points at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dmlsearch",
        description="Fair hyperparameter search for deep metric learning: Ray Tune schedules "
        "trials, Optuna proposes configurations, every trial is validated on classes it never "
        "trained on, MLflow records everything, and the best configuration is retrained on all "
        "training classes and tested once.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log more detail, and show Ray Tune's own output (by default in "
                        "<out>/ray.log)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a search (no arguments: a real search on built-in data)",
                         description="Search a space through Ray Tune with Optuna TPE proposals "
                         "guided by the space's warm starts (published defaults) and ASHA early "
                         "stopping; retrain the best configuration on all "
                         "training classes, test it once, export it, and record it in MLflow.")
    add_arguments(run, "run")

    compare = sub.add_parser(
        "compare", help="compare DML methods fairly: equal budgets, the same splits and seeds, "
        "intervals and paired tests (no arguments: 3 losses on built-in data)",
        description="Search each method (a loss, or a space file) with the same budget, class "
        "split, search seed and settings, all at once on one Ray cluster; retrain each method's "
        "best configuration on all training classes with the same S seeds and test it once; "
        "report each method's test metrics with 95% intervals, every pair's difference paired "
        "by seed with a Holm-corrected p-value, and a ranking that marks ties. Writes "
        "comparison.md, comparison.json and plots; one MLflow parent run holds every method's "
        "study.")
    add_arguments(compare, "compare")

    record = sub.add_parser(
        "record-curves", help="record a learning-curve table: every point of a grid trained",
        description="Train every point of a grid space (categorical or stepped parameters), or "
        "with --sample N a spread sample of any space, as "
        "a trial of a search would, with seed 0, and a seeded subset again with seed 1; record "
        "every epoch's validation metrics and times and the test metrics of each epoch's "
        "selected model, one JSON line per training. Resumes where it stopped. `dmlsearch run "
        "--replay TABLE` replays it.")
    add_arguments(record, "record-curves")

    resume = sub.add_parser(
        "resume", help="continue a search or comparison whose driver stopped (crash, kill, "
        "lost head node)",
        description="Continue the search (or comparison) in a results folder: completed trials "
        "are kept and "
        "never re-run, interrupted trials continue from their last checkpoint, the sampler "
        "proposes the rest of the budget; then retrain, export and summary as `run` does.")
    resume.add_argument("results", type=Path, metavar="DIR",
                        help="the --out folder of the search (holds search.yaml) or of the "
                        "comparison (compare.yaml)")

    importance = sub.add_parser(
        "importance", help="fANOVA importance of a study's parameters and pairs",
        description="Which hyperparameters mattered: fANOVA importance of each parameter "
        "(Optuna's evaluator) and of each pair, and the marginal curves of the top ones, from "
        "the study's trials at one budget (those that trained to their end, or every trial at "
        "--at-epoch); for the common parameters and for each branch of the "
        "space (trials sharing the same parameters). Works on finished and interrupted "
        "studies. Prints tables; writes importance/ (JSON, PNG) in the results folder and logs "
        "it to the study's MLflow run.")
    importance.add_argument("results", type=Path, metavar="DIR",
                            help="the results folder of a search (holds optuna.db)")
    importance.add_argument("--min-trials", type=int, default=8, metavar="N",
                            help="analyse a branch only with at least N trials (default: 8)")
    importance.add_argument("--at-epoch", type=int, default=None, metavar="E",
                            help="analyse every trial by its score at epoch E (over all folds), "
                            "pruned ones too (default: the trials that trained to their end)")

    report = sub.add_parser(
        "report", help="a Markdown report of a search's results folder",
        description="Summarise a finished (or interrupted) search: header, budget used, "
        "leaderboard, best configuration and its test metrics, importance, and for grid studies "
        "varying the loss the tournament ranking of Psomas 2020, Table 11. Prints it and writes "
        "DIR/report.md.")
    report.add_argument("results", type=Path, metavar="DIR",
                        help="the results folder of a search (holds summary.json or optuna.db)")
    report.add_argument("--top", type=int, default=10, metavar="N",
                        help="trials in the leaderboard (default: 10)")

    tournament = sub.add_parser(
        "tournament",
        help="the tournament of Psomas 2020 (Table 11) over several finished comparisons",
        description="Rank the methods of several finished `dmlsearch compare` runs (e.g. one "
        "per dataset, backbone and embedding size) within each by mean test metric, then by "
        "their average rank over all of them (Psomas 2020, 'Metric Learning: A Deep Dive', "
        "Table 11). Prints the table and writes it as Markdown.")
    tournament.add_argument("comparisons", type=Path, nargs="+", metavar="DIR",
                            help="folders of finished comparisons (hold comparison.json)")
    tournament.add_argument("--out", type=Path, default=Path("tournament.md"), metavar="FILE",
                            help="the Markdown file to write (default: ./tournament.md)")

    train = sub.add_parser("train", help="train an exported configuration (no Ray)",
                           description="Train an exported configuration on all training classes "
                           "in this process (GPU if present), evaluate it once on the test "
                           "classes, and log it to MLflow.")
    train.add_argument("config", type=Path, help="an exported YAML (best_config.yaml)")
    train.add_argument("--out", type=Path, metavar="DIR",
                       help="folder for the MLflow store and metrics (default: a new "
                       "dmlsearch-train-<time> folder here)")
    train.add_argument("--mlflow-uri", metavar="URI",
                       help="MLflow tracking URI (default: sqlite:///<out>/mlflow.db)")
    train.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a setting of the exported configuration (repeatable)")
    train.add_argument("--seeds", type=int, default=1, metavar="S",
                       help="train with the configuration's seed and the next S-1; report the "
                       "test metrics' mean ± 95%% confidence interval (default: 1)")

    export = sub.add_parser(
        "export", help="export a study's best trial(s) as YAML that `dmlsearch train` reads",
        description="From a results folder (finished or interrupted: the trials with a score), "
        "write the best trial's resolved configuration with its provenance, epochs set to its "
        "best validation epoch (as the retrain does); with --top K, the K best, one file each "
        "(FILE, then FILE-2, FILE-3... in rank order). Values of secret environment variables "
        "and paths other than data_root/pretrained are refused.")
    export.add_argument("results", type=Path, metavar="DIR",
                        help="the results folder of a search (holds summary.json or ray/)")
    export.add_argument("--top", type=int, default=1, metavar="K",
                        help="export the K best trials (default: 1)")
    export.add_argument("--out", type=Path, metavar="FILE",
                        help="where to write (default: DIR/export/best_config.yaml)")

    spaces = sub.add_parser("spaces", help="list the shipped search spaces, or show one")
    spaces.add_argument("action", nargs="?", choices=("list", "show"), default="list",
                        help="list (default) or show NAME")
    spaces.add_argument("name", nargs="?", help="with show: a space name or file to describe")
    sub.add_parser("datasets", help="list the datasets dmlsearch reads")
    sub.add_parser("settings", help="list every setting a trial accepts (keys of --set and of "
                   "a space's base), with defaults, and each loss's parameters")
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    opts = SearchOptions.from_args(args)
    opts.check()  # before the search's modules (Ray, MLflow, torch) are imported
    from dmlsearch.search.lifecycle import Screen
    from dmlsearch.search.run import run_search

    summary = run_search(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if summary.best_trial is not None else 1


def _cmd_resume(args: argparse.Namespace) -> int:
    from dmlsearch.search.lifecycle import Screen
    from dmlsearch.search.study_dir import ComparisonDir

    screen = Screen(progress=True, verbose=args.verbose)
    if ComparisonDir.of_comparison(args.results).compare_yaml.is_file():
        from dmlsearch.search.compare.comparison import resume_comparison

        return 0 if resume_comparison(args.results, screen=screen).ok else 1
    from dmlsearch.search.run import resume_search

    summary = resume_search(args.results, screen=screen)
    return 0 if summary.best_trial is not None else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    opts = CompareOptions.from_args(args)
    opts.check()  # before the comparison's modules (Ray, MLflow, torch) are imported
    from dmlsearch.search.compare.comparison import run_comparison
    from dmlsearch.search.lifecycle import Screen

    outcome = run_comparison(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if outcome.ok else 1


def _cmd_train(args: argparse.Namespace) -> int:
    from dmlsearch.search.finish.train import train_command

    train_command(args.config, out=args.out, mlflow_uri=args.mlflow_uri,
                  sets=parse_sets(args.sets), seeds=args.seeds)
    return 0


def _cmd_record_curves(args: argparse.Namespace) -> int:
    opts = RecordCurvesOptions.from_args(args)
    opts.check()
    from dmlsearch.search.replay import check_recordable
    from dmlsearch.search.replay import record_table

    space = load_space(opts.space).with_overrides(opts.overrides())
    check_recordable(space)  # the data, before any worker starts
    record_table(space, opts.out, overrides=opts.overrides(), workers=opts.workers,
                 second_seed=opts.second_seed, sample=opts.sample,
                 command="dmlsearch " + " ".join(sys.argv[1:]))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from dmlsearch.search.finish import export_study

    written = export_study(args.results, top=args.top, out=args.out)
    for path in written:
        print(f"{path}  (train it with: dmlsearch train {path})")
    if len(written) < args.top:
        print(f"only {len(written)} trial(s) trained to their end: the others were stopped early "
              f"and their scores are of fewer epochs; exported {len(written)} of the "
              f"{args.top} asked for")
    return 0


def _cmd_importance(args: argparse.Namespace) -> int:
    from dmlsearch.search.reporting.importance import importance_command

    return importance_command(args.results, min_trials=args.min_trials, at_epoch=args.at_epoch)


def _cmd_tournament(args: argparse.Namespace) -> int:
    from dmlsearch.search.compare.comparison_md import tournament_command

    print(tournament_command(args.comparisons, out=args.out), end="")
    print(f"written to {args.out}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dmlsearch.search.reporting import report_command

    return report_command(args.results, top=args.top)


def _cmd_spaces(args: argparse.Namespace) -> int:
    if args.action == "show":
        if not args.name:
            raise UserError("`dmlsearch spaces show` needs a space name or file, e.g. "
                            "`dmlsearch spaces show quickstart` (names: `dmlsearch spaces list`)")
        import shutil

        space = load_space(args.name)
        from dmlsearch.spaces import show_text  # torch: the recipe card reads the registries

        # The recipe card and the prose wrap to the terminal, at most 100 columns.
        width = min(100, max(60, shutil.get_terminal_size((100, 24)).columns))
        print(show_text(space, width=width))
        return 0
    import shutil

    names = space_names()
    indent = max(len(name) for name in names) + 2
    width = min(100, max(60, shutil.get_terminal_size((100, 24)).columns))
    for name in names:
        space = load_space(name)
        print(_listing(name, space.description or space.source, indent=indent, width=width))
    print(f"\n{len(names)} spaces; `dmlsearch spaces show NAME` prints one in full")
    return 0


#: Where a sentence ends: a full stop, then a capital; not after an abbreviation of the sources'
#: ("ch. 4", "Eq. 6.1" and "Fig. 3" are followed by a digit, so they never match).
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bal)\.\s+(?=[A-Z])")


def _listing(name: str, text: str, *, indent: int, width: int, lines: int = 2) -> str:
    """``name`` and the first sentence of ``text``, wrapped under a hanging indent in at most
    ``lines`` lines; a longer sentence is cut at a word and ends with an ellipsis (never
    mid-word)."""
    import textwrap

    flat = " ".join(text.split())
    first = _SENTENCE_END.split(flat, maxsplit=1)[0].rstrip(".") + "."
    wrapped = textwrap.wrap(first, width=width - indent, break_long_words=False,
                            break_on_hyphens=False)
    if len(wrapped) > lines:
        wrapped = textwrap.wrap(first, width=width - indent, max_lines=lines, placeholder=" …",
                                break_long_words=False, break_on_hyphens=False)
    return "\n".join((f"{name:{indent}s}" if i == 0 else " " * indent) + line
                      for i, line in enumerate(wrapped))


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dmlsearch.trainables.data import dataset_info  # torch
    from dmlsearch.trainables.data import dataset_names

    width = max(len(name) for name in dataset_names())
    for name in dataset_names():
        info = dataset_info(name)
        root = "needs --data-root" if info.needs_root else "built in"
        print(f"{name:{width}s} {root:18s} {info.description}")
    return 0


def _cmd_settings(args: argparse.Namespace) -> int:
    from dmlsearch.trainables.losses import LOSSES  # torch

    defaults = TrialConfig()
    choices = _setting_choices()
    for name in setting_names():
        text = setting_help(name)
        named = choices.get(name, ())
        if named and not all(re.search(rf"(?<![\w+]){re.escape(c)}(?![\w+])", text)
                             for c in named):
            text += f"; one of: {', '.join(named)}"
        print(f"{name:20s} {str(getattr(defaults, name)):18s} {text}")
    print("\nloss.<param> settings: each loss's own parameters and defaults (for the thesis's ten "
          "losses, Psomas 2020, Tables 4 and 5), and the papers and code they follow:")
    for loss in LOSSES.names():
        info = LOSSES.get(loss)
        params = ", ".join(f"loss.{k}={v:g}" for k, v in info.defaults.items())
        print(f"  {loss:18s} {params}   [{info.source}]")
    return 0


def _setting_choices() -> dict[str, tuple[str, ...]]:
    """The names each setting that picks a part by name accepts: the registries' and the fixed
    words' (:func:`setting_choices`), so that `dmlsearch settings` lists what is there."""
    from dmlsearch.trainables.models import BACKBONES  # torch
    from dmlsearch.trainables.optim import LR_SCHEDULES
    from dmlsearch.trainables.optim import OPTIMIZERS
    from dmlsearch.trainables.sampling import BATCH_SAMPLERS

    named = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "backbone": BACKBONES,
             "batch_sampler": BATCH_SAMPLERS}
    choices = {key: tuple(registry.names()) for key, registry in named.items()}
    choices.update({key: setting_choices(key) for key in setting_names() if setting_choices(key)})
    return choices


_COMMANDS = {"run": _cmd_run, "resume": _cmd_resume, "compare": _cmd_compare,
             "importance": _cmd_importance,
             "record-curves": _cmd_record_curves,
             "report": _cmd_report,
             "export": _cmd_export, "tournament": _cmd_tournament,
             "train": _cmd_train, "spaces": _cmd_spaces,
             "datasets": _cmd_datasets, "settings": _cmd_settings}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        return _COMMANDS[args.command](args)
    except UserError as exc:
        print(f"dmlsearch: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("dmlsearch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
