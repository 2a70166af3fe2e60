"""``dmlsearch importance DIR``: load a search's study, analyse it, print, save and log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from dmlsearch.search.export import write_atomic
from dmlsearch.search.importance import ImportanceReport
from dmlsearch.search.importance import analyse_study
from dmlsearch.search.importance import write_plots
from dmlsearch.search.summary import format_table
from dmlsearch.trainables.errors import UserError

__all__ = ["importance_command", "load_study", "render_importance"]

OUT_DIR = "importance"


def load_study(results: Path):  # type: ignore[no-untyped-def]
    """The Optuna study of a results folder (``optuna.db``, named after the folder)."""
    import optuna

    results = Path(results).expanduser().resolve()
    db = results / "optuna.db"
    if not db.is_file():
        raise UserError(f"no Optuna study in {results}: expected {db.name}, which `dmlsearch run` "
                        "writes; give the --out folder of a search")
    storage = f"sqlite:///{db}"
    names = optuna.study.get_all_study_names(storage)
    name = results.name if results.name in names else (names[0] if len(names) == 1 else None)
    if name is None:
        raise UserError(f"{db} holds studies {names}, none named {results.name!r}; "
                        "give the search's own results folder")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=storage)


def render_importance(report: ImportanceReport, *, pairs: int = 8) -> str:
    parts = [f"fANOVA importance of {report.objective} in study {report.study} "
             f"({report.trials} finished trials)"]
    for a in report.analyses:
        rows = [[p, f"{a.importance.get(p, 0.0):.3f}", f"{a.main_effects.get(p, 0.0):.3f}"]
                for p in sorted(a.params, key=lambda p: -a.importance.get(p, 0.0))]
        parts += ["", f"{a.name} ({a.trials} trials)",
                  format_table(["parameter", "importance", "main effect"], rows)]
        top = sorted(a.interactions.items(), key=lambda kv: -kv[1])[:pairs]
        if top:
            parts += ["", format_table(["pair", "interaction"],
                                       [[f"{p} x {q}", f"{v:.3f}"] for (p, q), v in top])]
    for line in report.skipped:
        parts.append(f"not analysed: {line}")
    parts += ["", "importance: Optuna's fANOVA (fractions summing to 1); main effect and "
              "interaction: fraction of the variance of a random-forest surrogate "
              "(see search/importance.py)"]
    return "\n".join(parts)


def importance_command(results: Path, *, min_trials: int = 8,
                       echo: Callable[[str], None] = print) -> int:
    if min_trials < 2:
        raise UserError(f"--min-trials must be >= 2, got {min_trials}")
    results = Path(results).expanduser().resolve()
    study = load_study(results)
    report = analyse_study(study, min_trials=min_trials)
    if not report.analyses:
        raise UserError(f"nothing to analyse in {results}: " + "; ".join(report.skipped))
    folder = results / OUT_DIR
    write_plots(report, folder)
    write_atomic(folder / "importance.json", json.dumps(report.to_json(), indent=2))
    echo(render_importance(report))
    logged = _log_to_mlflow(results, folder)
    echo(f"\nSaved in {folder}" + ("; logged to the study's MLflow run" if logged else ""))
    return 0


def _log_to_mlflow(results: Path, folder: Path) -> bool:
    """Log the folder to the study's parent run when the search's store is found."""
    from dmlsearch.search.tracking import default_tracking_uri
    from dmlsearch.search.tracking import log_to_study

    resolved = results / "search.yaml"
    if not resolved.is_file():
        return False
    options = (yaml.safe_load(resolved.read_text()) or {}).get("options") or {}
    uri = options.get("mlflow_uri") or default_tracking_uri(results)
    return log_to_study(uri, results.name, folder)
