"""The ``dmlsearch`` command line: the parser, and one handler per command that hands the parsed
arguments to the module doing the work (``run``/``resume``: :mod:`.run`; ``compare``:
:mod:`.compare.comparison`; ``record-curves``: :mod:`.replay`; ``train``, ``export``:
:mod:`.finish`; ``importance``, ``report``: :mod:`.reporting`). The options of ``run``,
``compare``, ``record-curves`` and ``train`` are :mod:`.options`' (``add_arguments``,
``from_args``: defined and checked once); the other commands' few arguments are declared beside
their parsers' table (:data:`_ABOUT`). User mistakes end as one line on stderr and exit code 2,
with no traceback.

Handlers import the module that does their work when they run, after the options are checked:
``dmlsearch --help``, a mistyped option and a bad value answer in a fraction of a second,
without importing torch, Ray or MLflow.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from typing import NoReturn
from typing import TypeVar

from dmlsearch.search.options import CompareOptions
from dmlsearch.search.options import ExportOptions
from dmlsearch.search.options import ImportanceOptions
from dmlsearch.search.options import Options
from dmlsearch.search.options import RecordCurvesOptions
from dmlsearch.search.options import ReportOptions
from dmlsearch.search.options import ResumeOptions
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import SpacesOptions
from dmlsearch.search.options import TournamentOptions
from dmlsearch.search.options import TrainOptions
from dmlsearch.search.options import add_arguments
from dmlsearch.search.process_end import end_on_closed_output
from dmlsearch.search.process_end import freeze_at_exit
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.config import setting_choices
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError

__all__ = ["build_parser", "main"]

EXIT_USER_ERROR = 2
O = TypeVar("O", bound=Options)


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line that points at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


#: Each command's one-line help and its description (``None``: the help says it all).
_ABOUT: dict[str, tuple[str, str | None]] = {
    "run": (
        "run a search (no arguments: a real search on built-in data)",
        ("Search a space through Ray Tune with Optuna TPE proposals guided by the space's warm "
         "starts (published defaults) and ASHA early stopping; retrain the best configuration on "
         "all training classes, test it once, export it, and record it in MLflow.")),
    "compare": (
        ("compare DML methods fairly: equal budgets, the same splits and seeds, intervals and "
         "paired tests (no arguments: 3 losses on built-in data)"),
        ("Search each method (a loss, or a space file) with the same budget, class split, search "
         "seed and settings, all at once on one Ray cluster; retrain each method's best "
         "configuration on all training classes with the same S seeds and test it once; report "
         "each method's test metrics with 95% intervals, every pair's difference paired by seed "
         "with a Holm-corrected p-value, and a ranking that marks ties. Writes comparison.md, "
         "comparison.json and plots; one MLflow parent run holds every method's study.")),
    "record-curves": (
        "record a learning-curve table: every point of a grid trained",
        ("Train every point of a grid space (categorical or stepped parameters), or with "
         "--sample N a spread sample of any space, as a trial of a search would, with seed 0, "
         "and a seeded subset again with seed 1; record every epoch's validation metrics and "
         "times and the test metrics of each epoch's selected model, one JSON line per training. "
         "Resumes where it stopped. `dmlsearch run --replay TABLE` replays it.")),
    "resume": (
        "continue a search or comparison whose driver stopped (crash, kill, lost head node)",
        ("Continue the search (or comparison) in a results folder: completed trials are kept and "
         "never re-run, interrupted trials continue from their last checkpoint, the sampler "
         "proposes the rest of the budget; then retrain, export and summary as `run` does.")),
    "importance": (
        "fANOVA importance of a study's parameters and pairs",
        ("Which hyperparameters mattered: fANOVA importance of each parameter (Optuna's "
         "evaluator) and of each pair, and the marginal curves of the top ones, from the study's "
         "trials at one budget (those that trained to their end, or every trial at --at-epoch); "
         "for the common parameters and for each branch of the space (trials sharing the same "
         "parameters). Works on finished and interrupted studies. Prints tables; writes "
         "importance/ (JSON, PNG) in the results folder and logs it to the study's MLflow run.")),
    "report": (
        "a Markdown report of a search's results folder",
        ("Summarise a finished (or interrupted) search: header, budget used, leaderboard, best "
         "configuration and its test metrics, importance, and for grid studies varying the loss "
         "the tournament ranking of Psomas 2020, Table 11. Prints it and writes DIR/report.md.")),
    "tournament": (
        "the tournament of Psomas 2020 (Table 11) over several finished comparisons",
        ("Rank the methods of several finished `dmlsearch compare` runs (e.g. one per dataset, "
         "backbone and embedding size) within each by mean test metric, then by their average "
         "rank over all of them (Psomas 2020, 'Metric Learning: A Deep Dive', Table 11). Prints "
         "the table and writes it as Markdown.")),
    "train": (
        "train an exported configuration (no Ray)",
        ("Train an exported configuration on all training classes in this process (GPU if "
         "present), evaluate it once on the test classes, and log it to MLflow.")),
    "export": (
        "export a study's best trial(s) as YAML that `dmlsearch train` reads",
        ("From a results folder (finished or interrupted: the trials with a score), write the "
         "best trial's resolved configuration with its provenance, epochs set to its best "
         "validation epoch (as the retrain does); with --top K, the K best, one file each (FILE, "
         "then FILE-2, FILE-3... in rank order), with the settings of its input kind. Values of "
         "secret environment variables, and paths in other settings than "
         + ", ".join(name for name, setting in SETTINGS.items() if setting.path)
         + ", are refused.")),
    "spaces": (
        "list the shipped search spaces, or show one",
        None),
    "datasets": (
        "list the datasets dmlsearch reads",
        None),
    "settings": (
        ("list every setting a trial accepts (keys of --set and of a space's base), with "
         "defaults, and each loss's parameters"),
        None),
}


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
    for name, (short, description) in _ABOUT.items():
        add_arguments(sub.add_parser(name, help=short, description=description), name)
    return parser


def _options(cls: type[O], args: argparse.Namespace) -> O:
    """A command's options from its parsed arguments, checked before its work's modules (torch,
    Ray, MLflow) are imported."""
    opts = cls.from_args(args)
    opts.check()
    return opts


def _cmd_run(args: argparse.Namespace) -> int:
    opts = _options(SearchOptions, args)
    from dmlsearch.search.lifecycle import Screen
    from dmlsearch.search.run import run_search

    summary = run_search(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if summary.best_trial is not None else 1


def _cmd_resume(args: argparse.Namespace) -> int:
    opts = _options(ResumeOptions, args)
    from dmlsearch.search.lifecycle import Screen
    from dmlsearch.search.study_dir import ComparisonDir

    screen = Screen(progress=True, verbose=args.verbose)
    if ComparisonDir.of_comparison(opts.results).compare_yaml.is_file():
        from dmlsearch.search.compare.comparison import resume_comparison

        return 0 if resume_comparison(opts.results, screen=screen).ok else 1
    from dmlsearch.search.run import resume_search

    summary = resume_search(opts.results, screen=screen)
    return 0 if summary.best_trial is not None else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    opts = _options(CompareOptions, args)
    from dmlsearch.search.compare.comparison import run_comparison
    from dmlsearch.search.lifecycle import Screen

    outcome = run_comparison(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if outcome.ok else 1


def _cmd_train(args: argparse.Namespace) -> int:
    opts = _options(TrainOptions, args)
    from dmlsearch.search.finish.train import train_command

    train_command(opts.config, out=opts.out, mlflow_uri=opts.mlflow_uri, sets=opts.sets,
                  seeds=opts.seeds, plugins=opts.plugins)
    return 0


def _cmd_record_curves(args: argparse.Namespace) -> int:
    opts = _options(RecordCurvesOptions, args)
    from dmlsearch.search.prepare import check_kinds
    from dmlsearch.search.prepare import with_plugins
    from dmlsearch.search.replay import check_recordable
    from dmlsearch.search.replay import record_table

    space = with_plugins(load_space(opts.space).with_overrides(opts.overrides()), opts.plugins)
    check_kinds(space)  # a setting of the other input kind: refused, as run refuses it
    check_recordable(space)  # the data, before any worker starts
    record_table(space, opts.out, overrides=opts.overrides(), workers=opts.workers,
                 second_seed=opts.second_seed, sample=opts.sample,
                 repeat_seeds=opts.repeat_seeds, allow_code_change=opts.allow_code_change,
                 command="dmlsearch " + " ".join(sys.argv[1:]))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    opts = _options(ExportOptions, args)
    from dmlsearch.search.finish import export_study

    written = export_study(opts.results, top=opts.top, out=opts.out)
    for path in written:
        print(f"{path}  (train it with: dmlsearch train {path})")
    if len(written) < opts.top:
        print(f"only {len(written)} trial(s) trained to their end: the others were stopped early "
              f"and their scores are of fewer epochs; exported {len(written)} of the "
              f"{opts.top} asked for")
    return 0


def _cmd_importance(args: argparse.Namespace) -> int:
    opts = _options(ImportanceOptions, args)
    from dmlsearch.search.reporting.importance import importance_command

    return importance_command(opts.results, min_trials=opts.min_trials, at_epoch=opts.at_epoch)


def _cmd_tournament(args: argparse.Namespace) -> int:
    opts = _options(TournamentOptions, args)
    from dmlsearch.search.compare.comparison_md import tournament_command

    print(tournament_command(list(opts.comparisons), out=opts.out), end="")
    print(f"written to {opts.out}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    opts = _options(ReportOptions, args)
    from dmlsearch.search.reporting import report_command

    return report_command(opts.results, top=opts.top)


def _cmd_spaces(args: argparse.Namespace) -> int:
    opts = _options(SpacesOptions, args)
    if opts.action == "show":
        if not opts.name:
            raise UserError("`dmlsearch spaces show` needs a space name or file, e.g. "
                            "`dmlsearch spaces show quickstart` (names: `dmlsearch spaces list`)")
        import shutil

        space = load_space(opts.name)
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

    choices = _setting_choices()
    for kind, heading in _KIND_HEADINGS.items():
        if heading:
            print(f"\n{heading}")
        for setting in (s for s in SETTINGS.values() if s.kind == kind):
            text = setting.help
            named = choices.get(setting.name, ())
            if named and not all(re.search(rf"(?<![\w+]){re.escape(c)}(?![\w+])", text)
                                 for c in named):
                text += f"; one of: {', '.join(named)}"
            print(f"{setting.name:20s} {setting.default!s:18s} {text}")
    print("\nloss.<param> settings: each loss's own parameters and defaults (for the thesis's ten "
          "losses, Psomas 2020, Tables 4 and 5), and the papers and code they follow:")
    for loss in LOSSES.names():
        info = LOSSES.get(loss)
        params = ", ".join(f"loss.{k}={v:g}" for k, v in info.defaults.items())
        print(f"  {loss:18s} {params}   [{info.source}]")
    for family in LOSSES.families():  # pml:<ClassName>: its constructor's numbers as loss.<arg>
        print(f"  {family}: its constructor's numeric arguments as loss.<arg> with PML's "
              "defaults; one with trainable parameters adds loss.lr_mult=100, loss.lr=0")
    return 0


#: The settings of each input kind, under a heading (the common ones first, with none).
_KIND_HEADINGS = {"common": "", "image": "image datasets only (refused on audio):",
                  "audio": "audio datasets only (refused on images):"}


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
    freeze_at_exit()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return _COMMANDS[args.command](args)
    except UserError as exc:
        print(f"dmlsearch: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as exc:  # a search's says how to continue it
        print(f"dmlsearch: interrupted{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `dmlsearch settings | head`: quietly, no traceback
        return end_on_closed_output()


if __name__ == "__main__":
    sys.exit(main())
