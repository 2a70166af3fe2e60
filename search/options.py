"""The options of every ``dmlsearch`` command (``run``, ``compare``, ``record-curves``,
``train``, ``resume``, ``export``, ``report``, ``importance``, ``tournament``, ``spaces``), each
stated once.

- The typed options objects (:class:`SearchOptions`, :class:`CompareOptions`,
  :class:`RecordCurvesOptions`, :class:`TrainOptions`...) own every default: a dataclass field's
  default is the only place it is written (``run`` and ``compare`` share
  :class:`SharedOptions`).
- :data:`ARGUMENTS` defines every command-line option once: its flag, the field it sets, the
  commands that take it, its help, how its text is read and the values it accepts; the parser
  (:func:`add_arguments`) and the checks (:meth:`Options.check_values`) both read it, so
  ``run`` and ``compare`` share one set of argument definitions, and a value arriving from the
  command line, from Python or from a results folder's ``search.yaml`` (``resume``) is checked
  in the same place, for its type and its range.

Importing this module imports neither torch nor Ray: a bad option fails in milliseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import TypeVar

import yaml

from dmlsearch.search.compare import DEMO_METHODS
from dmlsearch.search.compare import TESTS
from dmlsearch.search.trust import MIN_DEFAULT_TRIALS
from dmlsearch.search.tune import DEFAULT_SAMPLER
from dmlsearch.search.tune import DEFAULT_SCHEDULER
from dmlsearch.search.tune import SAMPLERS
from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.search.tune import TRANSFER_SAMPLER
from dmlsearch.spaces import parse_value
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry
from dmlsearch.trainables.values import Rule
from dmlsearch.trainables.values import check_value
from dmlsearch.trainables.values import rule_for_hint
from dmlsearch.trainables.values import shown

__all__ = [
    "ARGUMENTS", "COSTS", "STORAGE_SCHEMES", "Argument", "CompareOptions",
    "ExportOptions", "ImportanceOptions", "Options", "RecordCurvesOptions", "ReportOptions",
    "ResumeOptions", "SearchOptions", "SharedOptions", "SpacesOptions", "TournamentOptions",
    "TrainOptions", "add_arguments",
    "check_storage", "data_workers", "parse_duration", "parse_sets", "resolve_storage",
]

COSTS: dict[str, str] = {
    "embedding_size": "the embedding's dimension (index size, kNN cost)",
    "parameters": "the model's parameter count (backbone + embedding layer)",
}
"""``run --pareto``: the costs a multi-objective search minimises beside the metric."""


# ---- reading option text --------------------------------------------------------------------
def parse_sets(items: Sequence[str], option: str = "--set") -> tuple[tuple[str, Any], ...]:
    """``["epochs=3", "loss=proxy_anchor"]`` → typed pairs (values parsed as YAML scalars)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{option} expects KEY=VALUE (e.g. {option} epochs=3), got {item!r}")
        try:
            value = parse_value(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)):
            raise UserError(f"{option} {key} takes a single value, got {raw!r}")
        pairs.append((key.strip(), value))
    return tuple(pairs)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str = "--time-budget") -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1.5d"`` → seconds."""
    raw = text.strip().lower()
    unit = raw[-1:] if raw[-1:] in _UNITS else "s"
    number = raw[:-1] if raw[-1:] in _UNITS else raw
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise UserError(f"{option} expects a duration such as 90s, 30m or 2h, got {text!r}"
                        ) from None
    if not seconds > 0:
        raise UserError(f"{option} must be > 0, got {text!r}")
    return seconds


STORAGE_SCHEMES = ("s3", "gs", "gcs", "file", "hdfs", "abfs", "abfss")  # what pyarrow opens


def check_storage(storage: str) -> None:
    """``--storage``: a folder every node sees (NFS) or a bucket URI Ray Tune writes to."""
    scheme, sep, rest = storage.strip().partition("://")
    if not storage.strip() or (sep and (scheme.lower() not in STORAGE_SCHEMES
                                        or not rest.strip("/"))):
        raise UserError(
            "--storage must be a folder all nodes share (e.g. /mnt/nfs/dmlsearch) or a "
            f"{', '.join(s + '://' for s in STORAGE_SCHEMES)} URI with a bucket, got "
            f"{storage!r}; fix the path or URI")


def resolve_storage(storage: str) -> str:
    """``--storage`` as the search records it: a URI as given, a folder made absolute (trials
    on other nodes and a later ``dmlsearch resume`` from elsewhere read the same folder)."""
    if "://" in storage or not storage.strip():
        return storage
    return str(Path(storage).expanduser().resolve())


def data_workers(cpus_per_trial: float) -> int:
    """Data-loading processes of a trial that reserves ``cpus_per_trial`` CPUs: one CPU trains,
    the others decode and augment images (one CPU: load in the trial's own process)."""
    return max(0, int(cpus_per_trial) - 1)


def _absolute(text: str, option: str) -> str:
    del option
    return str(Path(text).expanduser().resolve())


def _path(text: str, option: str) -> Path:
    del option
    return Path(text)


def _storage(text: str, option: str) -> str:
    del option
    return resolve_storage(text)


def _paths(items: Sequence[str], option: str) -> tuple[Path, ...]:
    del option
    return tuple(Path(item) for item in items)


def _absolute_paths(items: Sequence[str], option: str) -> tuple[str, ...]:
    return tuple(_absolute(item, option) for item in items)


def check_distinct_folders(folders: Sequence[str | Path], option: str) -> None:
    """Each folder once, as it resolves: the same search given twice (``res ./res/``) would
    count as two searches that agree."""
    resolved = [Path(f).expanduser().resolve() for f in folders]
    for folder in resolved:
        if resolved.count(folder) > 1:
            raise UserError(f"{option} names {folder} {resolved.count(folder)} times; give "
                            "each search once")


def _tuple(items: Sequence[str], option: str) -> tuple[str, ...]:
    del option
    return tuple(items)


def _choices(described: Mapping[str, str]) -> str:
    return "; ".join(f"{name} ({text})" for name, text in described.items())


def _described(registry: Registry[Any]) -> dict[str, str]:
    return {name: registry.get(name).description for name in registry}


# ---- the arguments --------------------------------------------------------------------------
RUN, COMPARE, RECORD, TRAIN = "run", "compare", "record-curves", "train"
RESUME, IMPORTANCE, REPORT, TOURNAMENT, EXPORT, SPACES = (
    "resume", "importance", "report", "tournament", "export", "spaces")
SEARCHES = (RUN, COMPARE)


@dataclasses.dataclass(frozen=True)
class Argument:
    """One command-line option: the field it sets, the commands that take it, its help, how its
    text is read (argparse's ``int``/``float`` from the field's type, else ``parse``) and the
    values it accepts (``at_least``, ``above``, ``choices``): with the field's type, its
    :class:`~dmlsearch.trainables.values.Rule`, checked by the one checker trial settings use
    too (a value out of range: ``<flag> must be an integer >= <at_least> (<what>), got
    <value><unit>; <fix>``). A flag without a leading ``-`` is a positional argument."""

    field: str
    flag: str
    help: str
    commands: tuple[str, ...] = SEARCHES
    metavar: str | None = None
    parse: Callable[[Any, str], Any] | None = None  # (text or list of texts, flag) -> value
    action: str | None = None  # "store_true", "store_false", "append"
    nargs: str | None = None
    choices: tuple[str, ...] | None = None  # argparse's choices (and checked as values)
    values: tuple[str, ...] | None = None  # checked only (the error names them)
    at_least: float | None = None
    above: float | None = None
    what: str = ""
    fix: str = ""
    unit: str = ""
    default_text: str | None = None  # the help's default, when the field's says too little
    required: bool = False
    compare_help: str = ""  # compare's wording of the help, where a comparison differs
    helps: tuple[tuple[str, str], ...] = ()  # (command, its wording), where another differs

    def rule(self, hint: Any) -> Rule:
        """What a value of this option must be: the field's type (``hint``) and its range."""
        low = self.at_least if self.at_least is not None else self.above
        return rule_for_hint(hint, choices=tuple(self.choices or self.values or ()), low=low,
                             low_open=self.above is not None, what=self.what, unit=self.unit)

    def help_for(self, command: str) -> str:
        if command in dict(self.helps):
            return dict(self.helps)[command]
        return self.compare_help if command == COMPARE and self.compare_help else self.help


ARGUMENTS: tuple[Argument, ...] = (
    # what is searched
    Argument("space", "--space", "a shipped space name (see `dmlsearch spaces`) or a space YAML "
             "file", commands=(RUN,), metavar="NAME|FILE"),
    Argument("methods", "--methods", "losses to compare (see `dmlsearch settings`): each "
             "searched over its Table 15 grid in Psomas 2020 where it has one, else the learning "
             "rate and its Table 4 parameters around their defaults", commands=(COMPARE,),
             metavar="LOSS", nargs="+", parse=_tuple,
             default_text="on the built-in data: " + " ".join(DEMO_METHODS)),
    Argument("spaces", "--space", "a space file as one more method, named after its `name` "
             "(repeatable); its base may not change the shared settings", commands=(COMPARE,),
             metavar="NAME|FILE", action="append", parse=_tuple),
    Argument("space", "--space", "the space to train: every point of its grid, or a sample of "
             "it with --sample", commands=(RECORD,),
             metavar="NAME|FILE", required=True),
    Argument("out", "--out", "the table file (.jsonl); an existing one is continued",
             commands=(RECORD,), metavar="TABLE", parse=_path, required=True),
    Argument("dataset", "--dataset", "dataset name, overriding the space's (see `dmlsearch "
             "datasets`)", commands=(RUN,), metavar="NAME"),
    Argument("dataset", "--dataset", "dataset; cub200, cars196 and sop get the search setting "
             "of Psomas 2020 (BNInception, 512-d, Table 3 training)", commands=(COMPARE,),
             metavar="NAME", default_text="glyphs, built in"),
    Argument("data_root", "--data-root", "folder (or .zip) holding the dataset in its official "
             "layout (--dataset table: the .csv or .parquet table)",
             commands=(*SEARCHES, RECORD), metavar="DIR"),
    Argument("protocol", "--protocol", "fixed: one class-disjoint validation split; kfold: "
             "class-disjoint folds", choices=("fixed", "kfold"),
             default_text="the space's, usually fixed",
             compare_help="fixed: one class-disjoint validation split; kfold: class-disjoint "
             "folds (the same for every method)"),
    Argument("config", "config", "an exported YAML (best_config.yaml)", commands=(TRAIN,),
             parse=_path),
    Argument("sets", "--set", "override a base setting or fix a searched one, e.g. --set "
             "epochs=3 (repeatable; `dmlsearch settings` lists them)",
             commands=(*SEARCHES, RECORD, TRAIN), metavar="KEY=VALUE", action="append",
             parse=parse_sets,
             compare_help="a setting for every method, e.g. --set epochs=20 (repeatable)",
             helps=((TRAIN, "override a setting of the exported configuration (repeatable)"),)),
    Argument("plugins", "--plugin", "your own losses, miners, backbones, batch samplers or "
             "datasets: a .py file or an importable module that registers them with "
             "dmlsearch.register_loss(...) and the like (repeatable; docs/guide/plugins.md)",
             commands=(*SEARCHES, RECORD, TRAIN), metavar="PATH", action="append",
             helps=((TRAIN, "the plug-ins the exported configuration needs, where they are on "
                     "this machine (default: the paths the export recorded; repeatable)"),)),
    Argument("seed", "--seed", "seed of the sampler and of every trial", metavar="N",
             at_least=0, compare_help="seed of every method's sampler and trials, and the first "
             "retrain seed"),
    # the budget
    Argument("trials", "--trials", "the budget: N full trainings' worth of epochs; early "
             "stopping spreads it over more, shorter trials (with --scheduler none: N trials)",
             commands=(RUN,), metavar="N",
             at_least=1, default_text=f"2 per searched setting, at least {MIN_DEFAULT_TRIALS} (what "
             "the summary trusts; the quick start: 14); with --sampler grid, the whole grid"),
    Argument("trials", "--trials", "each method's budget: N trials' worth of epochs, which early "
             "stopping spreads over more trials", commands=(COMPARE,), metavar="N",
             at_least=1, what="trials per method"),
    Argument("budget_s", "--budget", "instead of --trials: each method's budget in device time "
             "(GPU time × GPUs per trial; a trial without GPU counts its time once), e.g. 2h",
             commands=(COMPARE,), metavar="DURATION", parse=parse_duration, above=0, unit=" s"),
    Argument("time_budget_s", "--time-budget", "start no trial after this long (e.g. 90m, 2h); "
             "running trials finish", commands=(RUN,), metavar="DURATION",
             parse=parse_duration, above=0, unit=" s"),
    Argument("time_limit_s", "--time-limit", "a hard stop: after this long running trials are "
             "stopped too (they end pruned) and the search finishes", commands=(RUN,),
             metavar="DURATION", parse=parse_duration, above=0, unit=" s"),
    Argument("epoch_budget", "--epoch-budget", "start no trial once N epochs (over all trials, "
             "folds and repeats) were trained; running trials finish", commands=(RUN,),
             metavar="N", at_least=1),
    Argument("concurrency", "--concurrency", "trials running at once", metavar="N", at_least=1,
             compare_help="trials running at once, all methods together"),
    # how configurations are proposed and stopped
    Argument("sampler", "--sampler", "how Optuna proposes configurations: "
             + _choices(_described(SAMPLERS)), metavar="NAME",
             default_text=f"{DEFAULT_SAMPLER}; {TRANSFER_SAMPLER} with --prior-from",
             compare_help="how Optuna proposes each method's configurations (see `dmlsearch run "
             "--help`; not grid)"),
    Argument("scheduler", "--scheduler", "early stopping: " + _choices(_described(SCHEDULERS)),
             metavar="NAME", compare_help="early stopping within each method's own trials (see "
             "`dmlsearch run --help`)"),
    Argument("grace_period", "--grace-period", "ASHA: epochs before a trial may be stopped",
             metavar="EPOCHS", at_least=1, what="epochs before a trial may be stopped",
             default_text="max/4"),
    Argument("reduction_factor", "--reduction-factor", "ASHA: keep 1/N of the trials at each "
             "rung", metavar="N", at_least=2,
             compare_help="ASHA: keep 1/N of a method's trials at each rung"),
    Argument("pareto", "--pareto", "multi-objective: maximise the metric and minimise COST, one "
             "of " + _choices(COSTS) + "; the summary lists the Pareto front", commands=(RUN,),
             metavar="COST", values=tuple(COSTS)),
    # where it runs
    Argument("cpus_per_trial", "--cpus-per-trial", "CPUs reserved per trial; N-1 of them load "
             "data unless --set workers says otherwise", metavar="N", above=0),
    Argument("gpus_per_trial", "--gpus-per-trial", "GPUs per trial, fractions allowed",
             metavar="N", at_least=0, default_text="1 if a GPU is visible"),
    Argument("max_failures", "--max-failures", "retry a trial whose process or node died up to "
             "N times, from its last checkpoint", metavar="N", at_least=0,
             what="retries of a trial whose node died", fix="use 0 to never retry"),
    Argument("storage", "--storage", "where Ray Tune keeps trial results and checkpoints: a "
             "folder all nodes share or s3://, gs://", metavar="DIR|URI", parse=_storage,
             default_text="<out>/ray, for one machine"),
    Argument("workers", "--workers", "trainings at once, one CPU thread each",
             commands=(RECORD,), metavar="N", at_least=1),
    Argument("second_seed", "--second-seed", "train N grid points again with seed 1, to measure "
             "the noise between two trainings", commands=(RECORD,), metavar="N", at_least=0),
    Argument("repeat_seeds", "--repeat-seeds", "train every configuration the table already "
             "holds with two or more seeds again until it has K (seeds 0 to K-1), to measure "
             "the noise better; nothing else is trained", commands=(RECORD,), metavar="K",
             at_least=2),
    Argument("allow_code_change", "--allow-code-change", "add to a table recorded by other "
             "training code (each line records the code that trained it)", commands=(RECORD,),
             action="store_true"),
    Argument("sample", "--sample", "instead of every grid point: the space's warm starts and N "
             "configurations spread over it (a seeded Sobol sample), for a space with continuous "
             "ranges; replayed through a surrogate fitted on them", commands=(RECORD,),
             metavar="N", at_least=1, default_text="the whole grid"),
    # where the results go
    Argument("out", "--out", "folder for all results, MLflow store included", commands=(RUN,),
             metavar="DIR", parse=_path,
             default_text="a new dmlsearch-<space>-<time> folder here"),
    Argument("out", "--out", "folder for all results", commands=(COMPARE,), metavar="DIR",
             parse=_path, default_text="a new dmlsearch-compare-<time> folder here"),
    Argument("out", "--out", "folder for the MLflow store and metrics", commands=(TRAIN,),
             metavar="DIR", parse=_path, default_text="a new dmlsearch-train-<time> folder here"),
    Argument("mlflow_uri", "--mlflow-uri", "MLflow tracking URI", metavar="URI",
             commands=(*SEARCHES, TRAIN),
             default_text="$MLFLOW_TRACKING_URI when set, else sqlite:///<out>/mlflow.db"),
    # after the search
    Argument("retrain", "--no-retrain", "skip retraining the best configuration and the test "
             "evaluation", commands=(RUN,), action="store_false"),
    Argument("intensify", "--intensify", "before the retrain, train the K best configurations "
             "again with a second seed on the same classes and pick the best mean (SMAC's "
             "intensification); K trainings' worth of the --trials budget is kept for it",
             commands=(RUN,), metavar="K", at_least=0, what="0: no second seed"),
    Argument("retrain_top", "--retrain-top", "retrain the K best configurations, each tested "
             "once", commands=(RUN,), metavar="K", at_least=1),
    Argument("seeds", "--seeds", "retrain each with S seeds (the trial's and the next S-1) and "
             "report the test metrics' mean ± 95%% confidence interval", commands=(RUN,),
             metavar="S", at_least=1, what="1: the trial's own seed"),
    Argument("seeds", "--seeds", "retrain each method's best with the seeds N..N+S-1, the same "
             "for every method", commands=(COMPARE,), metavar="S", at_least=2,
             what="each method's best is retrained with S seeds, and intervals and paired "
             "tests need at least two"),
    Argument("seeds", "--seeds", "train with the configuration's seed and the next S-1; report "
             "the test metrics' mean ± 95%% confidence interval", commands=(TRAIN,),
             metavar="S", at_least=1, what="1: the configuration's seed"),
    Argument("test", "--test", "the paired test of every pair of methods: t (paired t-test) or "
             "permutation (sign-flip test of the mean difference, exact up to 16 seeds)",
             commands=(COMPARE,), choices=tuple(TESTS)),
    Argument("register", "--no-register", "do not register the retrained best model in the "
             "MLflow Model Registry", commands=(RUN,), action="store_false"),
    Argument("register", "--register", "register each method's retrained model in the MLflow "
             "Model Registry", commands=(COMPARE,), action="store_true"),
    # another kind of search
    Argument("preview", "--preview", "run the space on the built-in glyphs data, sized for a "
             "CPU (small backbone, at most 3 epochs, smaller batches and embeddings): its "
             "searched parameters, branches and warm starts stay; prints what changed",
             commands=(RUN,), action="store_true"),
    Argument("replay", "--replay", "train nothing: each trial replays its configuration's "
             "learning curve from a table `dmlsearch record-curves` wrote, through the same "
             "searcher, scheduler and records (compare search methods before spending "
             "GPU-hours)", commands=(RUN,), metavar="TABLE", parse=_absolute),
    Argument("prior_from", "--prior-from", "start from finished searches (their --out "
             "folders; other datasets or backbones too): their best few diverse configurations "
             "of the parameters this space shares are tried first, then the space's published "
             "defaults, and the prior sampler draws around these points; what they did not "
             "search keeps the space's warm starts", commands=(RUN,), metavar="DIR", nargs="+",
             parse=_absolute_paths),
    Argument("replay_speedup", "--replay-speedup", "with --replay: a replayed epoch lasts its "
             "recorded CPU time / X", commands=(RUN,), metavar="X", above=0),
    # the commands that read a results folder, and the shipped spaces
    Argument("results", "results", "the --out folder of the search (holds search.yaml) or of "
             "the comparison (compare.yaml)", commands=(RESUME,), metavar="DIR", parse=_path),
    Argument("results", "results", "the results folder of a search (holds optuna.db)",
             commands=(IMPORTANCE,), metavar="DIR", parse=_path),
    Argument("min_trials", "--min-trials", "analyse a branch only with at least N trials",
             commands=(IMPORTANCE,), metavar="N", at_least=2),
    Argument("at_epoch", "--at-epoch", "analyse every trial by its score at epoch E (over all "
             "folds), pruned ones too", commands=(IMPORTANCE,), metavar="E", at_least=1,
             what="epochs over all folds",
             default_text="the trials that trained to their end"),
    Argument("results", "results", "the results folder of a search (holds summary.json or "
             "optuna.db)", commands=(REPORT,), metavar="DIR", parse=_path),
    Argument("top", "--top", "trials in the leaderboard", commands=(REPORT,), metavar="N",
             at_least=1),
    Argument("comparisons", "comparisons", "folders of finished comparisons (hold "
             "comparison.json)", commands=(TOURNAMENT,), metavar="DIR", nargs="+",
             parse=_paths),
    Argument("out", "--out", "the Markdown file to write", commands=(TOURNAMENT,),
             metavar="FILE", parse=_path, default_text="./tournament.md"),
    Argument("results", "results", "the results folder of a search (holds summary.json or "
             "ray/)", commands=(EXPORT,), metavar="DIR", parse=_path),
    Argument("top", "--top", "export the K best trials", commands=(EXPORT,), metavar="K",
             at_least=1),
    Argument("out", "--out", "where to write", commands=(EXPORT,), metavar="FILE", parse=_path,
             default_text="DIR/export/best_config.yaml"),
    Argument("action", "action", "list or show NAME", commands=(SPACES,), nargs="?",
             metavar="list|show", values=("list", "show")),
    Argument("name", "name", "with show: a space name or file to describe", commands=(SPACES,),
             nargs="?"),
)


def _arguments(command: str) -> list[Argument]:
    return [a for a in ARGUMENTS if command in a.commands]


# ---- the options objects ----------------------------------------------------------------------
O = TypeVar("O", bound="Options")


@dataclasses.dataclass(frozen=True)
class Options:
    """A command's options: built from the command line (:meth:`from_args`), from Python, or
    read back from a results folder (:meth:`from_json`), and checked in one place
    (:meth:`check`)."""

    COMMAND: ClassVar[str] = ""

    @classmethod
    def from_args(cls: type[O], args: argparse.Namespace) -> O:
        """The options the command line gave (argparse leaves out what was not given, so the
        fields' defaults apply), each option's text read by its :class:`Argument`."""
        given = {}
        for argument in _arguments(cls.COMMAND):
            if hasattr(args, argument.field):
                value = getattr(args, argument.field)
                given[argument.field] = (value if argument.parse is None
                                         else argument.parse(value, argument.flag))
        cls.check_given(given)
        return cls(**given)

    @classmethod
    def from_mapping(cls: type[O], given: Mapping[str, Any], *, caller: str) -> O:
        """The options a Python caller gave as keywords (:mod:`dmlsearch`'s functions): field
        names (``time_budget_s``), ``set`` (or ``sets``) as a mapping of trial settings, lists
        for tuples, strings for paths; unknown names are a :class:`UserError` naming the valid
        ones. The values are checked by :meth:`check`, as the command line's are."""
        hints = typing.get_type_hints(cls)
        fields = {f.name for f in dataclasses.fields(cls)}
        known: dict[str, Any] = {}
        for name, value in given.items():
            field = "sets" if name == "set" else name
            if field not in fields:
                valid = ", ".join(sorted((fields - {"sets"}) | {"set"}))
                raise UserError(f"{caller}() got an unknown option {name!r}; expected one of: "
                                f"{valid} (a command-line flag --time-budget is time_budget_s)")
            kind = rule_for_hint(hints[field]).type
            if kind == "pairs" and isinstance(value, Mapping):
                value = tuple(value.items())
            elif isinstance(value, list) and kind in ("list", "pairs"):
                value = tuple(value)
            elif isinstance(value, str) and kind == "path":
                value = Path(value)
            known[field] = value
        cls.check_given(known)
        return cls(**known)

    @classmethod
    def check_given(cls, given: Mapping[str, Any]) -> None:
        """Options that cannot be given together (none, unless a command says so)."""

    def check_values(self) -> None:
        """Every field read as its annotation's type, and every option's range checked, by the
        one checker trial settings use too (``trainables.values.check_value``)."""
        hints = typing.get_type_hints(type(self))
        flags = {a.field: a for a in _arguments(self.COMMAND)}
        for field in dataclasses.fields(self):
            argument = flags.get(field.name)
            hint = hints[field.name]
            rule = argument.rule(hint) if argument is not None else rule_for_hint(hint)
            value = check_value(rule, getattr(self, field.name),
                                name=argument.flag if argument is not None else field.name,
                                fix=argument.fix if argument is not None else "")
            object.__setattr__(self, field.name, value)  # read as its type: "2" is 2

    def check(self) -> None:
        self.check_values()

    def to_json(self) -> dict[str, Any]:
        """The options as the results folder records them (``resume`` reads them back)."""
        hints = typing.get_type_hints(type(self))
        body = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = dict(value) if _is_pairs(hints[field.name]) else list(value)
            body[field.name] = value
        return body

    @classmethod
    def from_json(cls: type[O], body: Mapping[str, Any], *, out: Path) -> O:
        """The options ``to_json`` recorded, in the results folder ``out`` (fields this version
        does not know are left out; their types are checked by :meth:`check`)."""
        hints = typing.get_type_hints(cls)
        known: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name not in body:
                continue
            value = body[field.name]
            if _is_pairs(hints[field.name]) and isinstance(value, Mapping | None):
                value = tuple((value or {}).items())
            elif isinstance(value, list):
                value = tuple(value)
            known[field.name] = value
        known["out"] = out
        return cls(**known)


def _is_pairs(hint: Any) -> bool:
    return rule_for_hint(hint).type == "pairs"


@dataclasses.dataclass(frozen=True)
class SharedOptions(Options):
    """What ``run`` and ``compare`` both take, with its defaults."""

    dataset: str | None = None  # None: the space's (compare: the built-in glyphs)
    data_root: str | None = None
    protocol: str | None = None  # None: the space's
    concurrency: int = 2
    out: Path | None = None  # None: a new folder here
    seed: int = 0
    sets: tuple[tuple[str, Any], ...] = ()
    plugins: tuple[str, ...] = ()  # the user's .py files or modules (absolute once checked)
    mlflow_uri: str | None = None  # None: MLFLOW_TRACKING_URI, else <out>/mlflow.db
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None  # None: 1 when a GPU is visible, else 0
    sampler: str | None = None  # None: DEFAULT_SAMPLER; TRANSFER_SAMPLER with --prior-from
    scheduler: str = DEFAULT_SCHEDULER
    grace_period: int | None = None  # None: a quarter of the epochs (tune_settings)
    reduction_factor: int = 3
    max_failures: int = 2  # retries of a trial whose process or node died (from its checkpoint)
    storage: str | None = None  # Ray Tune's results and checkpoints; None: <out>/ray

    def overrides(self) -> dict[str, Any]:
        """The trial settings the options give (``seed``; ``dataset``, ``data_root``,
        ``protocol`` when set; every ``--set``): what beats a space file's values."""
        out: dict[str, Any] = {"seed": self.seed}
        for key in ("dataset", "data_root", "protocol"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(dict(self.sets))
        return out

    def check(self) -> None:
        self.check_values()
        _load_plugins(self)  # before the names they register are checked
        SAMPLERS.get(self.sampler)  # unknown names: an error listing the valid ones
        SCHEDULERS.get(self.scheduler)
        if self.storage is not None:
            check_storage(self.storage)


def _load_plugins(opts: Options) -> None:
    """The options' plug-ins as absolute paths (or module names), imported in this process."""
    from dmlsearch.trainables.plugins import load_plugins
    from dmlsearch.trainables.plugins import plugin_specs

    specs = plugin_specs(getattr(opts, "plugins", ()), where="--plugin")
    object.__setattr__(opts, "plugins", specs)
    load_plugins(specs)


def tracking_uri_from_environment() -> str | None:
    """MLflow's own convention: ``MLFLOW_TRACKING_URI``, when set and not empty."""
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def _tracking_uri_from_environment(opts: SharedOptions) -> None:
    """``--mlflow-uri`` when given, else ``MLFLOW_TRACKING_URI`` (recorded with the options,
    so a resume writes to the same store whatever its environment says)."""
    if opts.mlflow_uri is None:
        object.__setattr__(opts, "mlflow_uri", tracking_uri_from_environment())


@dataclasses.dataclass(frozen=True)
class SearchOptions(SharedOptions):
    """``dmlsearch run`` (and each method's search in a comparison)."""

    COMMAND: ClassVar[str] = RUN

    space: str = "quickstart"
    trials: int | None = None  # None: search.trust.default_trials, or the grid with sampler grid
    time_budget_s: float | None = None  # soft: no trial starts after this; running ones finish
    time_limit_s: float | None = None  # hard: running trials are stopped too
    epoch_budget: int | None = None  # soft: no trial starts once this many epochs were trained
    pareto: str | None = None  # a cost to minimise beside the metric (multi-objective)
    retrain: bool = True
    retrain_top: int = 1  # retrain the K best configurations
    seeds: int = 1  # each retrained with S seeds: mean ± 95% interval of the test metrics
    register: bool = True  # the best retrained model into the MLflow Model Registry
    replay: str | None = None  # a learning-curve table: trials replay it instead of training
    replay_speedup: float = 100.0  # a replayed epoch lasts its recorded CPU time / this
    preview: bool = False  # the space on the built-in glyphs data, sized for a CPU
    prior_from: tuple[str, ...] = ()  # finished searches to start from (search/transfer.py)
    intensify: int = 0  # the K best trained again with a second seed before the retrain

    def __post_init__(self) -> None:
        _tracking_uri_from_environment(self)
        if self.sampler is None:  # the benchmark's choice; with --prior-from, the sampler that
            transfer = self.prior_from and self.pareto is None  # draws around what came over
            object.__setattr__(self, "sampler", TRANSFER_SAMPLER if transfer else DEFAULT_SAMPLER)

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        if Path(self.space).is_file():  # a space file: found again from anywhere by resume
            body["space"] = str(Path(self.space).resolve())
        return body

    def check(self) -> None:
        super().check()
        sampler = SAMPLERS.get(self.sampler)
        if self.pareto is not None and sampler.single_objective:
            multi = [n for n in SAMPLERS.names() if not SAMPLERS.get(n).single_objective]
            raise UserError(
                f"--sampler {self.sampler} optimises one objective, but --pareto asks for two; "
                f"use --sampler {', '.join(multi)}"
            )
        if sampler.multi_objective_only and self.pareto is None:
            raise UserError(f"--sampler {self.sampler} is for multi-objective searches; add "
                            f"--pareto {'|'.join(COSTS)} or use --sampler tpe")
        if (self.time_limit_s is not None and self.time_budget_s is not None
                and self.time_limit_s < self.time_budget_s):
            raise UserError(
                f"--time-limit ({self.time_limit_s:g} s) stops everything before --time-budget "
                f"({self.time_budget_s:g} s) stops starting trials; give a longer --time-limit "
                "or leave one out")
        if self.preview and self.replay is not None:
            raise UserError("--preview trains the space on the built-in data, --replay trains "
                            "nothing; leave out one of them")
        if self.intensify:
            self._check_intensify()
        check_distinct_folders(self.prior_from, "--prior-from")
        if self.prior_from and self.sampler == "grid":
            raise UserError("--prior-from gives the points a search starts from, but --sampler "
                            "grid tries every point of the grid in its order; use a sampler "
                            f"(--sampler {TRANSFER_SAMPLER}, its default) or leave out "
                            "--prior-from")
        if self.replay is not None and self.pareto is not None:
            raise UserError("--pareto needs each trial's model (its size), which a replay does "
                            "not build; leave out --pareto or --replay")

    def _check_intensify(self) -> None:
        """--intensify K needs trials trained to their end, a budget above K trainings, and a
        configuration that training can repeat (a grid trains each point once; a replay and
        a Pareto search pick otherwise)."""
        if self.intensify < 2:
            raise UserError(f"--intensify {self.intensify}: one configuration has nothing to be "
                            "compared with; give --intensify 2 or more, or 0 for none")
        if self.trials is not None and self.trials <= self.intensify:
            raise UserError(f"--intensify {self.intensify} keeps {self.intensify} trainings' "
                            f"worth of the budget, but --trials is {self.trials}; give --trials "
                            f"above {self.intensify} or a smaller --intensify")
        for given, why in ((self.sampler == "grid", "--sampler grid trains every point once"),
                           (self.replay is not None, "--replay trains nothing"),
                           (self.pareto is not None, "--pareto picks a front, not one best")):
            if given:
                raise UserError(f"--intensify trains the best configurations again, but {why}; "
                                "leave out one of them")


@dataclasses.dataclass(frozen=True)
class CompareOptions(SharedOptions):
    """``dmlsearch compare``; each method's search options derive from them
    (:meth:`search_options`: one place decides what the methods share)."""

    COMMAND: ClassVar[str] = COMPARE

    methods: tuple[str, ...] = ()  # loss names; none (and no --space) on glyphs: DEMO_METHODS
    spaces: tuple[str, ...] = ()  # space files (or shipped space names), one method each
    trials: int = 8  # per method: the budget is this many trials' worth of epochs
    budget_s: float | None = None  # instead: device-seconds per method (--budget, GPU-hours)
    seeds: int = 3  # retrain seeds per method: the fewest that give a useful interval
    register: bool = False  # each method's retrained model into the Model Registry
    test: str = "t"  # the paired test: "t" (paired t-test) or "permutation" (sign flips)

    def __post_init__(self) -> None:
        _tracking_uri_from_environment(self)
        if not self.methods and not self.spaces and self.dataset in (None, "glyphs"):
            object.__setattr__(self, "methods", DEMO_METHODS)  # the built-in demo
        if self.sampler is None:
            object.__setattr__(self, "sampler", DEFAULT_SAMPLER)

    @classmethod
    def check_given(cls, given: Mapping[str, Any]) -> None:
        if "budget_s" in given and "trials" in given:
            raise UserError("--budget and --trials both set each method's budget; give one")

    def search_options(self, space: str) -> SearchOptions:
        """One method's search, as ``dmlsearch run`` would take it (the comparison sets its
        budget and runs it beside the others)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(SharedOptions)}
        return SearchOptions(**shared, space=space, trials=self.trials, seeds=self.seeds,
                             register=self.register)

    def check(self) -> None:
        super().check()
        if self.sampler == "grid":
            raise UserError("--sampler grid trains a space's whole grid, which differs by method "
                            "and cannot be given equal budgets; use tpe or random")
        self.search_options("quickstart").check()  # what a method's search checks

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        body["spaces"] = [str(Path(s).resolve()) if Path(s).is_file() else s
                          for s in self.spaces]  # found again from anywhere by resume
        return body


@dataclasses.dataclass(frozen=True)
class RecordCurvesOptions(Options):
    """``dmlsearch record-curves``: a learning-curve table of a grid space, or of a sample of
    any space."""

    COMMAND: ClassVar[str] = RECORD

    space: str
    out: Path
    data_root: str | None = None
    sets: tuple[tuple[str, Any], ...] = ()
    workers: int = 1  # trainings at once
    second_seed: int = 0  # grid points trained again with seed 1
    repeat_seeds: int | None = None  # None: the design; K: the table's repeats topped up to K
    allow_code_change: bool = False  # add to a table recorded by other training code
    sample: int | None = None  # None: the whole grid; N: warm starts + N Sobol points
    plugins: tuple[str, ...] = ()  # the user's .py files or modules (absolute once checked)

    def check(self) -> None:
        self.check_values()
        if self.repeat_seeds is not None and (self.sample is not None or self.second_seed):
            given = "--sample" if self.sample is not None else "--second-seed"
            raise UserError(f"--repeat-seeds adds seeds to the configurations {self.out} already "
                            f"repeats and trains nothing else, but {given} asks for the table's "
                            f"design too; run the two as separate commands")
        _load_plugins(self)

    def overrides(self) -> dict[str, Any]:
        """The settings that replace the space's base (``--set``, ``--data-root``)."""
        out = dict(self.sets)
        if self.data_root:
            out["data_root"] = self.data_root
        return out


@dataclasses.dataclass(frozen=True)
class TrainOptions(Options):
    """``dmlsearch train``: an exported configuration trained on all training classes, tested
    once; ``--set``, ``--out``, ``--mlflow-uri`` and ``--seeds`` are the searches' flags, read
    and checked as theirs are."""

    COMMAND: ClassVar[str] = TRAIN

    config: Path
    out: Path | None = None  # None: a new dmlsearch-train-<time> folder here
    mlflow_uri: str | None = None  # None: MLFLOW_TRACKING_URI, else <out>/mlflow.db
    sets: tuple[tuple[str, Any], ...] = ()
    seeds: int = 1  # the configuration's seed and the next S-1
    plugins: tuple[str, ...] = ()  # given: where the export's plug-ins are on this machine

    def check(self) -> None:
        self.check_values()
        _load_plugins(self)


@dataclasses.dataclass(frozen=True)
class ResumeOptions(Options):
    """``dmlsearch resume``: the results folder of a search or comparison whose driver
    stopped (its own options are read back from it)."""

    COMMAND: ClassVar[str] = RESUME

    results: Path


@dataclasses.dataclass(frozen=True)
class ImportanceOptions(Options):
    """``dmlsearch importance``: which settings mattered in a search."""

    COMMAND: ClassVar[str] = IMPORTANCE

    results: Path
    min_trials: int = 8  # a branch is analysed with at least this many trials
    at_epoch: int | None = None  # None: the trials that trained to their end


@dataclasses.dataclass(frozen=True)
class ReportOptions(Options):
    """``dmlsearch report``: a search's results folder as Markdown."""

    COMMAND: ClassVar[str] = REPORT

    results: Path
    top: int = 10  # trials in the leaderboard


@dataclasses.dataclass(frozen=True)
class TournamentOptions(Options):
    """``dmlsearch tournament``: the methods of finished comparisons, ranked over all."""

    COMMAND: ClassVar[str] = TOURNAMENT

    comparisons: tuple[Path, ...]
    out: Path = Path("tournament.md")


@dataclasses.dataclass(frozen=True)
class ExportOptions(Options):
    """``dmlsearch export``: a search's best trial(s) as files ``train`` reads."""

    COMMAND: ClassVar[str] = EXPORT

    results: Path
    top: int = 1  # the K best trials, one file each
    out: Path | None = None  # None: <results>/export/best_config.yaml


@dataclasses.dataclass(frozen=True)
class SpacesOptions(Options):
    """``dmlsearch spaces [list | show NAME]``."""

    COMMAND: ClassVar[str] = SPACES

    action: str = "list"
    name: str | None = None  # with show: a space name or file


_OPTIONS: dict[str, type[Options]] = {
    RUN: SearchOptions, COMPARE: CompareOptions, RECORD: RecordCurvesOptions,
    TRAIN: TrainOptions, RESUME: ResumeOptions, IMPORTANCE: ImportanceOptions,
    REPORT: ReportOptions, TOURNAMENT: TournamentOptions, EXPORT: ExportOptions,
    SPACES: SpacesOptions}


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``command``'s options, from :data:`ARGUMENTS`, each with its field's default in its
    help. Options left out are absent from the parsed arguments (:meth:`Options.from_args`
    then takes the field's default)."""
    if command not in _OPTIONS:  # a command without options (datasets, settings)
        return
    cls = _OPTIONS[command]
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for argument in _arguments(command):
        kwargs: dict[str, Any] = {"help": _help(argument, defaults, command),
                                  "default": argparse.SUPPRESS}
        if argument.flag.startswith("-"):  # an option; a positional's name is its field
            kwargs["dest"] = argument.field
        if argument.required:
            kwargs["required"] = True
        if argument.action is not None:
            kwargs["action"] = argument.action
        if argument.action in (None, "append"):
            kwargs["metavar"] = argument.metavar
            if argument.nargs is not None:
                kwargs["nargs"] = argument.nargs
            if argument.choices is not None:
                kwargs["choices"] = argument.choices
            elif argument.parse is None:
                kwargs["type"] = _argparse_type(hints[argument.field])
        parser.add_argument(argument.flag, **kwargs)


def _argparse_type(hint: Any) -> Callable[[str], Any]:
    """argparse's reading of an option's text: ``int`` or ``float`` as the field's type says."""
    return {"int": int, "float": float}.get(rule_for_hint(hint).type, str)


def _help(argument: Argument, defaults: Mapping[str, Any], command: str) -> str:
    text = argument.help_for(command)
    default = defaults.get(argument.field, dataclasses.MISSING)
    if argument.default_text is not None:
        default_text = argument.default_text
    elif argument.action is not None or default in (None, (), dataclasses.MISSING):
        return text
    else:
        default_text = shown(default).strip("'")
    return f"{text} (default: {default_text})"
