"""A stopped driver's Ray Tune experiment, brought up to date with its studies before Ray restores
it (``dmlsearch resume``).

The searcher writes every event to its study (``optuna.db``) as it happens: a proposal, each
epoch's score, a trial's end. Ray Tune saves its experiment (its trials, and with them the
searcher's, the limiter's and the trial generator's state) only now and then: every 10 s or more,
and after a trial's checkpoint. A driver killed between two saves leaves the saved experiment
behind the study, and a restore that trusts it trains again what already ran: a trial that ended
since the save (pruned by the scheduler, or completed) is unfinished there, so Ray would train it
again from its last checkpoint (or its start); a trial started since is not there at all, so Ray
would forget it, and the searcher, restored as it was at the save, would propose its
configuration again.

:func:`align_experiment` makes the saved experiment say what the studies say:

- a trial Ray holds as unfinished that its study ended is TERMINATED, with its last result (the
  last line of its ``result.json``): Ray does not train it again;
- a trial of a study that Ray did not save but had started (its folder has ``params.json``) is
  added with its own id: TERMINATED with its last result if its study ended it, else PENDING, and
  Ray trains it again from its start (its folder, its MLflow run and its study trial stay its
  own);
- an unfinished trial whose saved checkpoint Ray has since deleted (it deletes the older as it
  registers a newer one, and saves the experiment only after) is pointed at its newest reported
  checkpoint that still exists, or starts again without one;
- the limiter's running trials and the generator's trial count follow.

A proposal Ray never started (the kill came before: no folder, or only the empty folder Ray
makes just before it starts a trial, which is removed) is no Ray trial; the searcher proposes it
again first, as the same study trial (``StudySearcher._reconcile``). Which trials
Ray started is read from the trial folders by :func:`started`, the one test both sides use.

Reads and writes Ray Tune's saved files (``experiment_state-*.json``, ``search_gen_state-*.json``)
in the layout of the Ray versions ``pyproject.toml`` allows; Ray is imported inside the functions.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dmlsearch.search.results import TrialState
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.ray_results import SCORE
from dmlsearch.search.tune.study import RAY_TRIAL_ID
from dmlsearch.search.tune.study import REASON
from dmlsearch.search.tune.study import record_number
from dmlsearch.trainables.errors import UserError

__all__ = ["Ended", "align_experiment", "aligned_folder", "last_result", "started",
           "trial_folder"]

_UNFINISHED = ("PENDING", "RUNNING", "PAUSED")
_ALIGNED: list[Path] = []  # the experiment this driver aligned last (the searchers read it)


@dataclasses.dataclass(frozen=True)
class Ended:
    """A trial whose end Ray's saved experiment did not hold (its study did): its state and
    reason as its study says, its configuration and last result as its folder does."""

    trial_id: str
    state: TrialState
    reason: str | None
    config: dict[str, Any]
    result: dict[str, Any]


def trial_folder(experiment: Path | str, trial_id: str) -> Path:
    """A trial's folder in the experiment (``tuner.trial_dirname``)."""
    return Path(experiment) / f"trial_{trial_id}"


def started(experiment: Path | str | None, trial_id: str) -> bool:
    """Whether Ray started the trial: it writes the trial's ``params.json`` as it starts it."""
    return experiment is not None and (trial_folder(experiment, trial_id) / "params.json").is_file()


def last_result(experiment: Path | str | None, trial_id: str) -> dict[str, Any] | None:
    """The trial's last result in its ``result.json`` (a line the kill cut short is skipped)."""
    if experiment is None:
        return None
    rows = _results(trial_folder(experiment, trial_id))
    return rows[-1] if rows else None


def _results(trial: Path) -> list[dict[str, Any]]:
    """The results in a trial folder's ``result.json``, in order; a line the kill cut short is
    skipped, no file is no results."""
    try:
        lines = (trial / "result.json").read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def aligned_folder() -> Path | None:
    """The experiment :func:`align_experiment` brought up to date in this driver: where a
    restored searcher reads which trials Ray started (its saved path may be an old one)."""
    return _ALIGNED[0] if _ALIGNED else None


def align_experiment(experiment: Path | str, studies: Iterable[tuple[str, str]], *,
                     resources: dict[str, float]) -> list[Ended]:
    """Bring the experiment Ray saved in ``experiment`` up to date with ``studies`` (each
    ``(storage URL, study name)``; module docstring). ``resources``: a trial's (``cpu``,
    ``gpu``), for the trials added. Returns the trials whose end only the studies held, for the
    driver's listeners (their MLflow runs). A folder that is no local one (a cluster's URI) is
    left as it is."""
    folder = Path(experiment)
    _ALIGNED[:] = [folder]
    states = sorted(folder.glob("experiment_state-*.json")) if folder.is_dir() else []
    if not states:
        return []
    state_file, data = _readable_state(states)
    by_id = _study_trials(studies)
    for trial_id, stored in by_id.items():  # the terminal names them t07 from the first line
        record_number(trial_id, stored.number)
    saved: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for entry in data["trial_data"]:
        state = json.loads(entry[0])
        saved[state["trial_id"]] = (entry, state)
    _drop_unused_folders(folder, saved)
    repaired = _repair_checkpoints(folder, saved, by_id)
    ended: list[Ended] = []
    for trial_id, (entry, state) in saved.items():
        stored = by_id.get(trial_id)
        if state["status"] in _UNFINISHED and stored is not None and stored.state.is_finished():
            state["status"] = "TERMINATED"
            entry[0] = json.dumps(state, indent=2)
            meta = json.loads(entry[1])
            meta["last_result"] = _final(folder, trial_id, meta.get("last_result"), stored)
            entry[1] = json.dumps(meta, indent=2)
            ended.append(_ended(folder, trial_id, stored, meta["last_result"]))
    missing = [(trial_id, stored) for trial_id, stored in by_id.items()
               if trial_id not in saved and started(folder, trial_id)]
    generator = _generator_state(folder)
    if missing and generator is not None:
        for trial_id, stored in missing:
            generator[1]["counter"] += 1
            entry = _new_trial(folder, trial_id, stored, generator[1], resources)
            data["trial_data"].append(entry)
            saved[trial_id] = (entry, json.loads(entry[0]))
            if stored.state.is_finished():
                ended.append(_ended(folder, trial_id, stored,
                                   _final(folder, trial_id, None, stored)))
    if not ended and not missing and not repaired:
        return []
    write_atomic(state_file, json.dumps(data))
    if generator is not None:
        running = {tid for tid, (_, state) in saved.items() if state["status"] in _UNFINISHED}
        limiter = generator[1].get("name:ConcurrencyLimiter")
        if isinstance(limiter, dict):
            limiter["live_trials"] = running
            limiter["num_unfinished_live_trials"] = len(running)
        _save_generator_state(*generator)
    return ended


def _readable_state(states: list[Path]) -> tuple[Path, dict[str, Any]]:
    """The newest of Ray's saved experiments ``states`` (oldest first) that reads whole, and
    what it holds (:func:`_newest_whole`)."""
    return _newest_whole(states, lambda path: json.loads(path.read_text()),
                         lambda data: isinstance(data.get("trial_data"), list))


def _newest_whole(files: list[Path], load: Callable[[Path], Any],
                  whole: Callable[[dict[str, Any]], bool]) -> tuple[Path, dict[str, Any]]:
    """The newest of ``files`` (one of Ray's saves, oldest first) that ``load`` reads into a
    dict that is ``whole``, and that dict. Ray writes a save in place, so a stop during one
    leaves it empty or cut short: such newer files are renamed ``*.unreadable`` (Ray restores
    the newest file its pattern matches, which is then the one read here). None whole: a
    :class:`UserError` naming the newest."""
    broken: list[Path] = []
    for path in reversed(files):
        try:
            data = load(path)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            data = None
        if isinstance(data, dict) and whole(data):
            for newer in broken:
                newer.rename(newer.with_name(newer.name + ".unreadable"))
            return path, data
        broken.append(path)
    raise UserError(
        f"{broken[0]}: Ray Tune's saved state of this search is empty or cut short (the stop "
        "came while Ray was saving it) and it kept no earlier save; the trials that finished "
        "are still in the study's optuna.db and mlflow.db; start the search again with a new "
        "--out")


def _drop_unused_folders(folder: Path, saved: dict[str, Any]) -> None:
    """Remove the empty folders of trials Ray neither started nor saved. Ray makes a trial's
    folder a moment before it starts the trial (``params.json``); a kill in between leaves an
    empty folder of a trial its saved experiment does not hold, which the restored Ray never
    uses (the searcher proposes that configuration again, as a new Ray trial). Left, the
    results would hold a folder for a trial that never ran."""
    for path in folder.glob("trial_*"):
        trial_id = path.name.removeprefix("trial_")
        if trial_id not in saved and path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _repair_checkpoints(folder: Path, saved: dict[str, tuple[list[str], dict[str, Any]]],
                        by_id: dict[str, Any]) -> bool:
    """Point each unfinished trial whose saved checkpoint is gone at its newest checkpoint that
    is still there. Ray deletes a trial's older checkpoint as it registers a newer one
    (``num_to_keep``) and saves the experiment only after: a kill in between leaves a saved
    experiment naming a deleted checkpoint, and Ray would fail that trial ("Could not recover
    from checkpoint as it does not exist on storage anymore"). The newest checkpoint a report
    named (its ``result.json`` row, whose epoch it holds) that still exists takes its place;
    with none, the trial starts again from its first epoch. Returns whether one changed."""
    changed = False
    for trial_id, (entry, state) in saved.items():
        stored = by_id.get(trial_id)
        if state["status"] not in _UNFINISHED or (stored is not None
                                                  and stored.state.is_finished()):
            continue  # an ended trial is not trained again: its checkpoint is not read
        meta = json.loads(entry[1])
        try:
            manager = _decode(meta.get("checkpoint_manager"))
        except Exception:  # noqa: BLE001 - a layout this Ray cannot read: left as saved
            continue
        latest = getattr(manager, "_latest_checkpoint_result", None)
        if latest is None or Path(latest.checkpoint.path).exists():
            continue
        _newest_existing(manager, trial_folder(folder, trial_id))
        meta["checkpoint_manager"] = _encode(manager)
        entry[1] = json.dumps(meta, indent=2)
        changed = True
    return changed


def _newest_existing(manager: Any, trial: Path) -> None:
    """Make ``trial``'s newest reported checkpoint that still exists its only one (none: it
    has no checkpoint)."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    kept = None
    for row in _results(trial):
        name = row.get("checkpoint_dir_name")
        if name and (trial / name).is_dir():
            kept = _TrainingResult(checkpoint=Checkpoint(str(trial / name)), metrics=row)
    manager._checkpoint_results = [kept] if kept is not None else []
    manager._latest_checkpoint_result = kept


def _decode(value: Any) -> Any:
    from ray.tune.utils.serialization import TuneFunctionDecoder

    # the experiment file this driver's own search wrote (a trusted source)
    return json.loads(json.dumps(value), cls=TuneFunctionDecoder, allow_cloudpickle=True)


def _encode(value: Any) -> Any:
    from ray.tune.utils.serialization import TuneFunctionEncoder

    return json.loads(json.dumps(value, cls=TuneFunctionEncoder))


def _study_trials(studies: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Every study's trials by the Ray trial they ran as."""
    import optuna

    by_id: dict[str, Any] = {}
    for url, name in studies:
        storage = optuna.storages.RDBStorage(url)
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:  # no study yet: nothing was asked
            continue
        finally:
            storage.engine.dispose()
        for trial in study.get_trials(deepcopy=False):
            if RAY_TRIAL_ID in trial.user_attrs:
                by_id[trial.user_attrs[RAY_TRIAL_ID]] = trial
    return by_id


def _ended(folder: Path, trial_id: str, stored: Any, result: dict[str, Any]) -> Ended:
    import optuna

    states = {optuna.trial.TrialState.COMPLETE: TrialState.COMPLETED,
              optuna.trial.TrialState.PRUNED: TrialState.PRUNED}
    try:
        config = json.loads((trial_folder(folder, trial_id) / "params.json").read_text())
    except (OSError, ValueError):
        config = {}
    return Ended(trial_id, states.get(stored.state, TrialState.FAILED),
                 stored.user_attrs.get(REASON), config, result)


def _final(folder: Path, trial_id: str, saved: dict[str, Any] | None,
           stored: Any) -> dict[str, Any]:
    """A trial's last result as Ray keeps it for an ended trial: its ``result.json``'s last
    line (newer than what the experiment saved), marked done; where the study holds a later
    epoch (a storage Ray writes the files to only when it saves), that epoch's score."""
    import optuna

    result = last_result(folder, trial_id) or saved or {}
    steps = stored.intermediate_values
    if steps and max(steps) > int(result.get("training_iteration") or 0):
        result = {**result, "training_iteration": max(steps), SCORE: steps[max(steps)],
                  "trial_finished": int(stored.state == optuna.trial.TrialState.COMPLETE)}
    return {**result, "trial_id": trial_id, "done": True}


def _generator_state(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest saved state of Ray's trial generator (its count, the limiter's trials)."""
    from ray import cloudpickle

    files = sorted(folder.glob("search_gen_state-*.json"))
    if not files:
        return None
    return _newest_whole(files, lambda path: cloudpickle.loads(path.read_bytes()),
                         lambda state: True)


def _save_generator_state(path: Path, state: dict[str, Any]) -> None:
    from ray import cloudpickle

    write_atomic(path, cloudpickle.dumps(state))


def _new_trial(folder: Path, trial_id: str, stored: Any, generator: dict[str, Any],
               resources: dict[str, float]) -> list[str]:
    """A saved trial entry for a trial Ray started but did not save, made as Ray makes its
    trials (the experiment's spec, the configuration it ran with: its ``params.json``)."""
    from ray.tune.execution.placement_groups import resource_dict_to_pg_factory
    from ray.tune.experiment.config_parser import _create_trial_from_spec
    from ray.tune.experiment.config_parser import _make_parser
    from ray.tune.utils import flatten_dict

    config = json.loads((trial_folder(folder, trial_id) / "params.json").read_text())
    spec = copy.deepcopy(generator["experiment"].spec)
    spec["config"] = config
    # A stub: the trainable is registered only when Ray restores the experiment, and Ray then
    # sets the trial's resources from it (these are the same, for the saved state's checks).
    trial = _create_trial_from_spec(
        spec, _make_parser(), evaluated_params=flatten_dict(config),
        experiment_tag=str(generator["counter"]), trial_id=trial_id, stub=True)
    trial.placement_group_factory = resource_dict_to_pg_factory(dict(resources))
    trial.relative_logdir = trial.custom_dirname  # its folder, as it is (not a new one beside)
    trial.storage.trial_dir_name = trial.relative_logdir
    if stored.state.is_finished():
        trial.set_status("TERMINATED")
        trial.run_metadata.last_result = _final(folder, trial_id, None, stored)
    state_json, meta_json = trial.get_json_state()
    state = json.loads(state_json)
    state["stub"] = False
    return [json.dumps(state, indent=2), meta_json]
