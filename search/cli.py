"""The ``dmlsearch`` command line: the parser, and one handler per command that hands the parsed
arguments to the module doing the work (``run``/``resume``: :mod:`.run`; ``train``, ``export``:
:mod:`.finish`; ``importance``, ``report``: :mod:`.reporting`). User mistakes end as one line on
stderr and exit code 2, with no traceback.

Handlers import the module that does their work when they run: ``dmlsearch --help``, a mistyped
option and a bad value answer in a fraction of a second, without importing torch, Ray or MLflow.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from dmlsearch.search.options import COSTS
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import parse_duration
from dmlsearch.search.options import parse_sets
from dmlsearch.search.options import resolve_storage
from dmlsearch.search.tune import SAMPLERS
from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_help
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry

__all__ = ["build_parser", "main"]

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line that points at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _choices(described: dict[str, str]) -> str:
    return "; ".join(f"{name} ({text})" for name, text in described.items())


def _described(registry: Registry) -> dict[str, str]:
    return {name: registry.get(name).description for name in registry}


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
                         description="Search a space with Optuna TPE proposals and ASHA early "
                         "stopping through Ray Tune; retrain the best configuration on all "
                         "training classes, test it once, export it, and record it in MLflow.")
    run.add_argument("--space", default="quickstart", metavar="NAME|FILE",
                     help="a shipped space name (see `dmlsearch spaces`) or a space YAML file "
                     "(default: quickstart)")
    run.add_argument("--dataset", metavar="NAME",
                     help="dataset name, overriding the space's (see `dmlsearch datasets`)")
    run.add_argument("--data-root", metavar="DIR",
                     help="folder (or .zip) holding the dataset in its official layout")
    run.add_argument("--protocol", choices=("fixed", "kfold"),
                     help="fixed: one class-disjoint validation split; kfold: class-disjoint "
                     "folds (default: the space's, usually fixed)")
    run.add_argument("--trials", type=int, default=None, metavar="N",
                     help="number of trials (default: 10; with --sampler grid, the whole grid)")
    run.add_argument("--sampler", default="tpe", metavar="NAME",
                     help="how Optuna proposes configurations: " + _choices(_described(SAMPLERS))
                     + " (default: tpe)")
    run.add_argument("--scheduler", default="asha", metavar="NAME",
                     help="early stopping: " + _choices(_described(SCHEDULERS))
                     + " (default: asha)")
    run.add_argument("--pareto", default=None, metavar="COST",
                     help="multi-objective: maximise the metric and minimise COST, one of "
                     + _choices(COSTS) + "; the summary lists the Pareto front")
    run.add_argument("--time-budget", default=None, metavar="DURATION",
                     help="start no trial after this long (e.g. 90m, 2h); running trials "
                     "finish")
    run.add_argument("--time-limit", default=None, metavar="DURATION",
                     help="a hard stop: after this long running trials are stopped too (they "
                     "end pruned) and the search finishes")
    run.add_argument("--epoch-budget", type=int, default=None, metavar="N",
                     help="start no trial once N epochs (over all trials, folds and repeats) "
                     "were trained; running trials finish")
    run.add_argument("--concurrency", type=int, default=2, metavar="N",
                     help="trials running at once (default: 2)")
    run.add_argument("--out", type=Path, metavar="DIR",
                     help="folder for all results, MLflow store included (default: a new "
                     "dmlsearch-<space>-<time> folder here)")
    run.add_argument("--seed", type=int, default=0, metavar="N",
                     help="seed of the sampler and of every trial (default: 0)")
    run.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                     help="override a base setting or fix a searched one, e.g. --set epochs=3 "
                     "(repeatable)")
    run.add_argument("--mlflow-uri", metavar="URI",
                     help="MLflow tracking URI (default: sqlite:///<out>/mlflow.db)")
    run.add_argument("--cpus-per-trial", type=float, default=1.0, metavar="N",
                     help="CPUs reserved per trial; N-1 of them load data unless --set workers "
                     "says otherwise (default: 1)")
    run.add_argument("--gpus-per-trial", type=float, default=None, metavar="N",
                     help="GPUs per trial, fractions allowed (default: 1 if a GPU is visible)")
    run.add_argument("--max-failures", type=int, default=2, metavar="N",
                     help="retry a trial whose process or node died up to N times, from its "
                     "last checkpoint (default: 2)")
    run.add_argument("--storage", default=None, metavar="DIR|URI",
                     help="where Ray Tune keeps trial results and checkpoints: a folder all "
                     "nodes share or s3://, gs:// (default: <out>/ray, for one machine)")
    run.add_argument("--grace-period", type=int, default=None, metavar="EPOCHS",
                     help="ASHA: epochs before a trial may be stopped (default: max/4)")
    run.add_argument("--reduction-factor", type=int, default=3, metavar="N",
                     help="ASHA: keep 1/N of the trials at each rung (default: 3)")
    run.add_argument("--no-retrain", action="store_true",
                     help="skip retraining the best configuration and the test evaluation")
    run.add_argument("--retrain-top", type=int, default=1, metavar="K",
                     help="retrain the K best configurations, each tested once (default: 1)")
    run.add_argument("--seeds", type=int, default=1, metavar="S",
                     help="retrain each with S seeds (the trial's and the next S-1) and report "
                     "the test metrics' mean ± 95%% confidence interval (default: 1)")
    run.add_argument("--no-register", action="store_true",
                     help="do not register the retrained best model in the MLflow Model Registry")
    run.add_argument("--preview", action="store_true",
                     help="run the space on the built-in glyphs data, sized for a CPU (small "
                     "backbone, at most 3 epochs, smaller batches and embeddings): its searched "
                     "parameters, branches and warm starts stay; prints what changed")
    run.add_argument("--replay", default=None, metavar="TABLE",
                     help="train nothing: each trial replays its configuration's learning curve "
                     "from a table `dmlsearch record-curves` wrote, through the same searcher, "
                     "scheduler and records (compare search methods before spending GPU-hours)")
    run.add_argument("--replay-speedup", type=float, default=100.0, metavar="X",
                     help="with --replay: a replayed epoch lasts its recorded CPU time / X "
                     "(default: 100)")

    compare = sub.add_parser(
        "compare", help="compare DML methods fairly: equal budgets, the same splits and seeds, "
        "intervals and paired tests (no arguments: 3 losses on built-in data)",
        description="Search each method (a loss, or a space file) with the same budget, class "
        "split, search seed and settings, all at once on one Ray cluster; retrain each method's "
        "best configuration on all training classes with the same S seeds and test it once; "
        "report each method's test metrics with 95%% intervals, every pair's difference paired "
        "by seed with a Holm-corrected p-value, and a ranking that marks ties. Writes "
        "comparison.md, comparison.json and plots; one MLflow parent run holds every method's "
        "study.")
    compare.add_argument("--methods", nargs="+", default=[], metavar="LOSS",
                         help="losses to compare (see `dmlsearch settings`): each searched over "
                         "the thesis's Table 15 grid where it has one, else the learning rate "
                         "and its Table 4 parameters around their defaults (default on the "
                         "built-in data: multi_similarity proxy_anchor contrastive)")
    compare.add_argument("--space", dest="spaces", action="append", default=[],
                         metavar="NAME|FILE",
                         help="a space file as one more method, named after its `name` "
                         "(repeatable); its base may not change the shared settings")
    compare.add_argument("--dataset", metavar="NAME",
                         help="dataset (default: glyphs, built in); cub200, cars196 and sop get "
                         "the thesis's search setting (BNInception, 512-d, Table 3 training)")
    compare.add_argument("--data-root", metavar="DIR",
                         help="folder (or .zip) holding the dataset in its official layout")
    compare.add_argument("--protocol", choices=("fixed", "kfold"),
                         help="fixed: one class-disjoint validation split; kfold: class-disjoint "
                         "folds (the same for every method)")
    compare.add_argument("--trials", type=int, default=None, metavar="N",
                         help="each method's budget: N trials' worth of epochs, which early "
                         "stopping spreads over more trials (default: 8)")
    compare.add_argument("--budget", default=None, metavar="DURATION",
                         help="instead of --trials: each method's budget in device time (GPU "
                         "time × GPUs per trial; a trial without GPU counts its time once), "
                         "e.g. 2h")
    compare.add_argument("--seeds", type=int, default=None, metavar="S",
                         help="retrain each method's best with the seeds N..N+S-1, the same for "
                         "every method (default: 3; at least 2)")
    compare.add_argument("--test", default="t", choices=("t", "permutation"),
                         help="the paired test of every pair of methods: t (paired t-test) or "
                         "permutation (sign-flip test of the mean difference, exact up to 16 "
                         "seeds) (default: t)")
    compare.add_argument("--sampler", default="tpe", metavar="NAME",
                         help="how Optuna proposes each method's configurations (default: tpe)")
    compare.add_argument("--scheduler", default="asha", metavar="NAME",
                         help="early stopping within each method's own trials (default: asha)")
    compare.add_argument("--concurrency", type=int, default=2, metavar="N",
                         help="trials running at once, all methods together (default: 2)")
    compare.add_argument("--out", type=Path, metavar="DIR",
                         help="folder for all results (default: a new dmlsearch-compare-<time> "
                         "folder here)")
    compare.add_argument("--seed", type=int, default=0, metavar="N",
                         help="seed of every method's sampler and trials, and the first retrain "
                         "seed (default: 0)")
    compare.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                         help="a setting for every method, e.g. --set epochs=20 (repeatable)")
    compare.add_argument("--mlflow-uri", metavar="URI",
                         help="MLflow tracking URI (default: sqlite:///<out>/mlflow.db)")
    compare.add_argument("--cpus-per-trial", type=float, default=1.0, metavar="N",
                         help="CPUs reserved per trial (default: 1)")
    compare.add_argument("--gpus-per-trial", type=float, default=None, metavar="N",
                         help="GPUs per trial (default: 1 if a GPU is visible)")
    compare.add_argument("--max-failures", type=int, default=2, metavar="N",
                         help="retry a trial whose process or node died up to N times "
                         "(default: 2)")
    compare.add_argument("--storage", default=None, metavar="DIR|URI",
                         help="where Ray Tune keeps trials on a multi-node cluster (default: "
                         "<out>/ray)")
    compare.add_argument("--grace-period", type=int, default=None, metavar="EPOCHS",
                         help="ASHA: epochs before a trial may be stopped (default: max/4)")
    compare.add_argument("--reduction-factor", type=int, default=3, metavar="N",
                         help="ASHA: keep 1/N of a method's trials at each rung (default: 3)")
    compare.add_argument("--register", action="store_true",
                         help="register each method's retrained model in the MLflow Model "
                         "Registry")

    record = sub.add_parser(
        "record-curves", help="record a learning-curve table: every point of a grid trained",
        description="Train every point of a grid space (categorical or stepped parameters), or "
        "with --sample N a spread sample of any space, as "
        "a trial of a search would, with seed 0, and a seeded subset again with seed 1; record "
        "every epoch's validation metrics and times and the test metrics of each epoch's "
        "selected model, one JSON line per training. Resumes where it stopped. `dmlsearch run "
        "--replay TABLE` replays it.")
    record.add_argument("--space", required=True, metavar="NAME|FILE",
                        help="the grid to train (every point)")
    record.add_argument("--out", type=Path, required=True, metavar="TABLE",
                        help="the table file (.jsonl); an existing one is continued")
    record.add_argument("--data-root", metavar="DIR",
                        help="folder (or .zip) holding the dataset in its official layout")
    record.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a base setting of the space (repeatable)")
    record.add_argument("--workers", type=int, default=1, metavar="N",
                        help="trainings at once, one CPU thread each (default: 1)")
    record.add_argument("--second-seed", type=int, default=0, metavar="N",
                        help="train N grid points again with seed 1, to measure the noise "
                        "between two trainings (default: 0)")
    record.add_argument("--sample", type=int, default=None, metavar="N",
                        help="instead of every grid point: the space's warm starts and N "
                        "configurations spread over it (a seeded Sobol sample), for a space "
                        "with continuous ranges; replayed through a surrogate fitted on them")

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
        "varying the loss the thesis's tournament ranking. Prints it and writes DIR/report.md.")
    report.add_argument("results", type=Path, metavar="DIR",
                        help="the results folder of a search (holds summary.json or optuna.db)")
    report.add_argument("--top", type=int, default=10, metavar="N",
                        help="trials in the leaderboard (default: 10)")

    tournament = sub.add_parser(
        "tournament", help="the thesis's tournament over several finished comparisons",
        description="Rank the methods of several finished `dmlsearch compare` runs (e.g. one "
        "per dataset, backbone and embedding size) within each by mean test metric, then by "
        "their average rank over all of them (the thesis's Table 11). Prints the table and "
        "writes it as Markdown.")
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
    from dmlsearch.search.run import Screen
    from dmlsearch.search.run import run_search

    opts = SearchOptions(
        space=args.space, dataset=args.dataset, data_root=args.data_root,
        protocol=args.protocol, trials=args.trials, concurrency=args.concurrency, out=args.out,
        sampler=args.sampler, scheduler=args.scheduler, pareto=args.pareto,
        time_budget_s=None if args.time_budget is None else parse_duration(args.time_budget),
        time_limit_s=None if args.time_limit is None else parse_duration(args.time_limit,
                                                                          "--time-limit"),
        epoch_budget=args.epoch_budget,
        seed=args.seed, sets=parse_sets(args.sets), mlflow_uri=args.mlflow_uri,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        max_failures=args.max_failures,
        storage=None if args.storage is None else resolve_storage(args.storage),
        grace_period=args.grace_period, reduction_factor=args.reduction_factor,
        retrain=not args.no_retrain, retrain_top=args.retrain_top, seeds=args.seeds,
        register=not args.no_register,
        replay=None if args.replay is None else str(Path(args.replay).expanduser().resolve()),
        replay_speedup=args.replay_speedup,
        preview=args.preview,
    )
    summary = run_search(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if summary.best_trial is not None else 1


def _cmd_resume(args: argparse.Namespace) -> int:
    from dmlsearch.search.run import Screen
    from dmlsearch.search.study_dir import ComparisonDir

    screen = Screen(progress=True, verbose=args.verbose)
    if ComparisonDir.of_comparison(args.results).compare_yaml.is_file():
        from dmlsearch.search.compare.run import resume_comparison

        return 0 if resume_comparison(args.results, screen=screen).ok else 1
    from dmlsearch.search.run import resume_search

    summary = resume_search(args.results, screen=screen)
    return 0 if summary.best_trial is not None else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    from dmlsearch.search.compare.options import DEFAULT_COMPARE_SEEDS
    from dmlsearch.search.compare.options import DEFAULT_COMPARE_TRIALS
    from dmlsearch.search.compare.options import CompareOptions

    if args.budget is not None and args.trials is not None:
        raise UserError("--budget and --trials both set each method's budget; give one")
    methods = tuple(args.methods)
    if not methods and not args.spaces and args.dataset in (None, "glyphs"):
        from dmlsearch.search.compare.methods import DEMO_METHODS

        methods = DEMO_METHODS  # the built-in demo
    opts = CompareOptions(
        methods=methods, spaces=tuple(args.spaces), dataset=args.dataset,
        data_root=args.data_root, protocol=args.protocol,
        trials=DEFAULT_COMPARE_TRIALS if args.trials is None else args.trials,
        budget_s=None if args.budget is None else parse_duration(args.budget, "--budget"),
        seeds=DEFAULT_COMPARE_SEEDS if args.seeds is None else args.seeds,
        concurrency=args.concurrency, out=args.out, seed=args.seed,
        sets=parse_sets(args.sets), mlflow_uri=args.mlflow_uri,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        sampler=args.sampler, scheduler=args.scheduler, grace_period=args.grace_period,
        reduction_factor=args.reduction_factor, max_failures=args.max_failures,
        storage=None if args.storage is None else resolve_storage(args.storage),
        register=args.register, test=args.test)
    from dmlsearch.search.compare.run import run_comparison
    from dmlsearch.search.run import Screen

    outcome = run_comparison(opts, screen=Screen(progress=True, verbose=args.verbose))
    return 0 if outcome.ok else 1


def _cmd_train(args: argparse.Namespace) -> int:
    from dmlsearch.search.finish.train import train_command

    train_command(args.config, out=args.out, mlflow_uri=args.mlflow_uri,
                  sets=parse_sets(args.sets), seeds=args.seeds)
    return 0


def _cmd_record_curves(args: argparse.Namespace) -> int:
    from dmlsearch.search.replay import check_recordable
    from dmlsearch.search.replay import record_table

    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    if args.second_seed < 0:
        raise UserError(f"--second-seed must be >= 0, got {args.second_seed}")
    overrides = dict(parse_sets(args.sets))
    if args.data_root:
        overrides["data_root"] = args.data_root
    space = load_space(args.space).with_overrides(overrides)
    check_recordable(space)  # the data, before any worker starts
    record_table(space, args.out, overrides=overrides,
                 workers=args.workers, second_seed=args.second_seed, sample=args.sample,
                 command="dmlsearch " + " ".join(sys.argv[1:]))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from dmlsearch.search.finish.export import export_study

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
    from dmlsearch.search.compare.report import tournament_command

    print(tournament_command(args.comparisons, out=args.out), end="")
    print(f"written to {args.out}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dmlsearch.search.reporting.markdown import report_command

    return report_command(args.results, top=args.top)


def _cmd_spaces(args: argparse.Namespace) -> int:
    if args.action == "show":
        if not args.name:
            raise UserError("`dmlsearch spaces show` needs a space name or file, e.g. "
                            "`dmlsearch spaces show quickstart` (names: `dmlsearch spaces list`)")
        print(load_space(args.name).describe())
        return 0
    for name in space_names():
        space = load_space(name)
        summary = (space.description or space.source).strip().splitlines()[0]
        print(f"{name:24s} {summary[:100]}")
    return 0


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dmlsearch.trainables.data import dataset_info  # torch
    from dmlsearch.trainables.data import dataset_names

    for name in dataset_names():
        info = dataset_info(name)
        root = "needs --data-root" if info.needs_root else "built in"
        print(f"{name:12s} {root:18s} {info.description}")
    return 0


def _cmd_settings(args: argparse.Namespace) -> int:
    from dmlsearch.trainables.losses import LOSSES  # torch

    defaults = TrialConfig()
    for name in setting_names():
        print(f"{name:18s} {str(getattr(defaults, name)):18s} {setting_help(name)}")
    print("\nloss.<param> settings (defaults: SPEC §4 Table 4):")
    for loss in LOSSES.names():
        info = LOSSES.get(loss)
        params = ", ".join(f"loss.{k}={v:g}" for k, v in info.defaults.items())
        print(f"  {loss:18s} {params}   [{info.source}]")
    return 0


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
