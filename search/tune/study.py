"""The search's Optuna study in its storage (``optuna.db``): creating it, closing what a stopped
driver left open, loading it for analysis, and the names of the attributes dmlsearch writes on
its trials (the searcher writes them; the importance analysis and the tests read them)."""

from __future__ import annotations

from typing import Any

from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.errors import UserError

__all__ = ["DATASET", "METRIC", "NEVER_RAN", "RAY_TRIAL_ID", "REASON", "REPEATS_ANSWERED",
           "SPACE", "STOPPED_BY", "record_number", "trial_name",
           "create_storage", "load_study", "settle_study"]

# On trials:
RAY_TRIAL_ID = "ray_trial_id"  # the Ray Tune trial it ran as
REASON = "dmlsearch_reason"  # why the trial failed
STOPPED_BY = "dmlsearch_stopped_by"  # who pruned it: the scheduler, the time limit, the budget
# Why a trial still RUNNING when the search ends is FAIL (:func:`settle_study`):
NEVER_RAN = ("interrupted: never trained; asked for just before the driver stopped, and the "
             "search ended before Ray ran it")
# On the study: what it searched (the space's name, the dataset, the metric), for whoever opens
# optuna.db without the results folder (optuna-dashboard, optuna.load_study)
SPACE = "dmlsearch_space"
DATASET = "dmlsearch_dataset"
METRIC = "dmlsearch_metric"
REPEATS_ANSWERED = "dmlsearch_repeats_answered"  # proposals of trained configurations, untrained


_NUMBERS: dict[str, int] = {}  # Ray trial id -> its study trial's number (this driver's searches)


def record_number(ray_trial_id: str, number: int) -> None:
    """The searcher says which study trial a Ray trial is (the driver's searcher and its
    callbacks share this process)."""
    _NUMBERS[ray_trial_id] = number


def trial_name(ray_trial_id: str) -> str:
    """One trial's one name, in the terminal, in MLflow and in the report: ``t07`` for the
    search's Optuna trial 7 (``TrialRecord.name``); Ray's id when no searcher numbered it."""
    number = _NUMBERS.get(ray_trial_id)
    return ray_trial_id if number is None else f"t{number:02d}"


def create_storage(url: str) -> None:
    """Create the storage's tables now (about a second for a new SQLite file), so the driver can
    do it while Ray starts; the searcher then finds them."""
    import optuna

    from dmlsearch.search.store_templates import seed_store

    seed_store(url, "optuna")  # a new SQLite file: copied from the empty one of this version
    optuna.storages.RDBStorage(url).engine.dispose()


def settle_study(url: str, name: str) -> int:
    """After the search: mark the study's trials still RUNNING as FAIL, saying why (asked for by
    the searcher just before the driver stopped, they never reached Ray; a resumed search
    proposes them again first, :mod:`.restore`, so one is left only when its budget ran out
    before); return how many proposals repeated a configuration already trained and were not
    trained again."""
    import optuna

    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:  # no study yet: nothing was asked
        return 0
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_user_attr(trial._trial_id, REASON, NEVER_RAN)
        storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    repeats = int(study.user_attrs.get(REPEATS_ANSWERED, 0))
    storage.engine.dispose()
    return repeats


def load_study(study_dir: StudyDir) -> Any:
    """The Optuna study of a results folder (``optuna.db``, named after the folder)."""
    import optuna

    db = study_dir.optuna_db
    if not db.is_file():
        raise UserError(f"no Optuna study in {study_dir.path}: expected {db.name}, which "
                        "`dmlsearch run` writes; give the --out folder of a search")
    names = optuna.study.get_all_study_names(study_dir.optuna_url)
    name = study_dir.name if study_dir.name in names else (names[0] if len(names) == 1 else None)
    if name is None:
        raise UserError(f"{db} holds studies {names}, none named {study_dir.name!r}; "
                        "give the search's own results folder")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=study_dir.optuna_url)
