"""The Python functions: each builds the command's options from keywords, checks them as the
command line does, and runs the same code (:mod:`dmlsearch.search.cli` calls the same search,
comparison and training functions). Progress goes to the terminal only when asked
(``progress=True``); the lines a command prints go to ``echo`` (``print`` by default; pass
``echo=lambda line: None`` for silence)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch._results import ComparisonResult
from dmlsearch._results import SearchResult
from dmlsearch._results import TrainResult
from dmlsearch.search.options import CompareOptions
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.study_dir import default_out
from dmlsearch.trainables.errors import UserError

__all__ = ["compare", "importance", "results", "resume", "run", "train"]

Echo = Callable[[str], None]


def run(space: str | Path = "quickstart", *, progress: bool = False, verbose: bool = False,
        echo: Echo = print, **options: Any) -> SearchResult:
    """``dmlsearch run``: search ``space`` (a shipped space's name or a space file) and, unless
    ``retrain=False``, retrain the best configuration and test it once.

    ``options`` are ``dmlsearch run``'s: ``out``, ``trials``, ``concurrency``, ``dataset``,
    ``data_root``, ``set={"epochs": 4}``, ``sampler``, ``scheduler``, ``seed``, ``seeds``,
    ``time_budget_s``, ``plugins=["my_loss.py"]`` ... (``dmlsearch run --help`` describes
    each).
    """
    opts = SearchOptions.from_mapping({"space": str(space), **options}, caller="dmlsearch.run")
    if opts.out is None:  # the folder the command line would make, known to the result
        opts = _with_out(opts, default_out(opts.space))
    opts.check()
    from dmlsearch.search.run import run_search

    summary = run_search(opts, screen=_screen(echo, progress, verbose))
    return SearchResult(folder=Path(opts.out).expanduser().resolve(), summary=summary)


def resume(folder: str | Path, *, progress: bool = False, verbose: bool = False,
           echo: Echo = print) -> SearchResult | ComparisonResult:
    """``dmlsearch resume``: continue a search or comparison whose driver stopped."""
    from dmlsearch.search.study_dir import ComparisonDir

    path = Path(folder).expanduser().resolve()
    screen = _screen(echo, progress, verbose)
    if ComparisonDir.of_comparison(path).compare_yaml.is_file():
        from dmlsearch.search.compare.comparison import resume_comparison

        return ComparisonResult(folder=path, outcome=resume_comparison(path, screen=screen))
    from dmlsearch.search.run import resume_search

    return SearchResult(folder=path, summary=resume_search(path, screen=screen))


def compare(methods: list[str] | tuple[str, ...] = (), *, progress: bool = False,
            verbose: bool = False, echo: Echo = print, **options: Any) -> ComparisonResult:
    """``dmlsearch compare``: search each method (a loss name, or ``spaces=[...]`` files) with
    the same protocol, budget and seeds, retrain each method's pick, and test them against
    each other. ``options`` are ``dmlsearch compare``'s (``trials``, ``seeds``, ``dataset``,
    ``set``, ``out`` ...)."""
    opts = CompareOptions.from_mapping({"methods": list(methods), **options},
                                       caller="dmlsearch.compare")
    if opts.out is None:
        opts = _with_out(opts, default_out("compare"))
    opts.check()
    from dmlsearch.search.compare.comparison import run_comparison

    outcome = run_comparison(opts, screen=_screen(echo, progress, verbose))
    return ComparisonResult(folder=Path(opts.out).expanduser().resolve(), outcome=outcome)


def train(config: str | Path, *, out: str | Path | None = None, mlflow_uri: str | None = None,
          seeds: int = 1, set: Mapping[str, Any] | None = None,  # noqa: A002 - --set's name
          plugins: list[str] | tuple[str, ...] = (), echo: Echo = print) -> TrainResult:
    """``dmlsearch train``: train an exported configuration on all training classes with
    ``seeds`` seeds, and test it once."""
    from dmlsearch.search.finish.train import train_command

    folder = Path(out) if out is not None else default_out("train")
    if set is not None and not isinstance(set, Mapping):
        raise UserError(f"dmlsearch.train(set=...) must be a mapping of settings such as "
                        f"{{'epochs': 4}}, got {set!r}")
    outcome = train_command(Path(config), out=folder, mlflow_uri=mlflow_uri,
                            sets=tuple((set or {}).items()), seeds=seeds,
                            plugins=tuple(plugins), echo=echo)
    return TrainResult(folder=folder.expanduser().resolve(), outcome=outcome)


def importance(folder: str | Path, *, min_trials: int | None = None, at_epoch: int | None = None,
               echo: Echo = print) -> Path:
    """``dmlsearch importance``: which settings mattered in a search; the folder of its tables
    and pictures (``<folder>/importance``)."""
    from dmlsearch.search.reporting.importance import MIN_TRIALS
    from dmlsearch.search.reporting.importance import importance_command
    from dmlsearch.search.study_dir import StudyDir

    importance_command(Path(folder), min_trials=MIN_TRIALS if min_trials is None else min_trials,
                       at_epoch=at_epoch, echo=echo)
    return StudyDir.of_search(folder).importance


def results(folder: str | Path) -> SearchResult:
    """A search's results folder, read (a finished search's summary.json, or what the trial
    folders of a stopped one hold)."""
    from dmlsearch.search.readback import load_summary

    study_dir, summary = load_summary(folder)
    return SearchResult(folder=study_dir.path, summary=summary)


def _with_out(opts: Any, out: Path) -> Any:
    import dataclasses

    return dataclasses.replace(opts, out=out)


def _screen(echo: Echo, progress: bool, verbose: bool) -> Any:
    from dmlsearch.search.lifecycle import Screen

    return Screen(echo=echo, progress=progress, verbose=verbose)
