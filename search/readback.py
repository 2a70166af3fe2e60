"""A results folder read back, for ``report``, ``export`` and ``importance``: the summary of a
finished search, or, for a search whose driver stopped, a summary of what its trial folders
hold (``finished`` False), with the study described by ``search.yaml``."""

from __future__ import annotations

from pathlib import Path

from dmlsearch.search.results import StudyInfo
from dmlsearch.search.results import Summary
from dmlsearch.search.results import read_summary
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tune import read_trial_folders
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics import metric_mode

__all__ = ["load_summary"]


def load_summary(folder: Path | str) -> tuple[StudyDir, Summary]:
    """The results folder and its summary; a folder with neither ``summary.json`` nor Ray trial
    folders, or a comparison's folder, is a :class:`UserError`."""
    study_dir = StudyDir.of_search(folder)
    _refuse_a_comparison(study_dir)
    summary = read_summary(study_dir)
    if summary is not None:
        return study_dir, summary
    trials = read_trial_folders(study_dir.ray_trial_folders())
    if not trials:
        where = study_dir.path if study_dir.path.is_dir() else f"{study_dir.path} (no such folder)"
        raise UserError(
            f"no search results in {where}: expected summary.json (written when a search "
            "finishes) or Ray Tune's trial folders under ray/ (written while it runs); give the "
            "--out folder of a `dmlsearch run`")
    resolved = study_dir.read_resolved()
    base = resolved.get("base") or {}
    options = resolved.get("options") or {}
    metric = base.get("metric") or trials[0].config.get("metric") or "recall@1"
    searched = resolved.get("searched") or _varying([t.config for t in trials])
    study = StudyInfo(
        name=study_dir.name, space=str(resolved.get("space", "-")),
        dataset=str(base.get("dataset", trials[0].config.get("dataset", "-"))),
        protocol=str(base.get("protocol", trials[0].config.get("protocol", "-"))),
        metric=metric, mode=metric_mode(metric), sampler=str(options.get("sampler", "-")),
        scheduler=str(options.get("scheduler", "-")),
        searched=tuple(dict.fromkeys(searched)))
    return study_dir, Summary(study=study, trials=trials, finished=False)


def _refuse_a_comparison(study_dir: StudyDir) -> None:
    """A ``dmlsearch compare`` folder holds one search per method, each in a folder of its own;
    its shared Ray experiment read as one search would mix the methods' trials."""
    path = study_dir.path
    if not ComparisonDir(path).compare_yaml.is_file() or study_dir.search_yaml.is_file():
        return
    methods = sorted(p.name for p in path.iterdir() if StudyDir(p).search_yaml.is_file())
    which = (f"give one of its methods' searches ({', '.join(methods)}: e.g. "
             f"{path / methods[0]})" if methods else "none of its methods' searches has begun")
    raise UserError(f"{path} is a comparison (compare.yaml), not one search: {which}, or read "
                    f"its report, {ComparisonDir(path).comparison_md}")


def _varying(configs: list[dict]) -> list[str]:
    """With no search.yaml: the keys whose values differ between trials."""
    keys = dict.fromkeys(k for c in configs for k in c)
    return [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
