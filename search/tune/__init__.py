"""Everything Ray, and the Optuna study's storage: the only subpackage that imports Ray.

- :mod:`.settings` — what the driver hands over (:class:`TuneSettings`) and the trial events it
  hears (:class:`TrialEvents`); plain data.
- :mod:`.samplers`, :mod:`.schedulers` — ``--sampler`` and ``--scheduler`` by name (registries).
  :mod:`.hyperband` — Ray's synchronous HyperBand, repaired.
- :mod:`.tuner` — searcher → ConcurrencyLimiter → scheduler → Tuner → fit; restore: the one
  place a searcher and a Tuner are assembled; :mod:`.multi_search` — a comparison's methods in
  one experiment (its searcher and scheduler of searchers and schedulers).
- :mod:`.searcher` — the Optuna searcher (stored study in ``optuna.db``); :mod:`.budget` — what
  a search spent; :mod:`.callbacks` — trial events to the driver, result files as they come;
  :mod:`.restore` — a stopped experiment brought up to date with its studies before a resume.
- :mod:`.trainable` — the worker side of a trial (trained or replayed), one report row;
  :mod:`.checkpoints` — when and how a trial saves its state.
- :mod:`.study` — the Optuna study in its storage; :mod:`.ray_results` — Ray's results as trial
  records; :mod:`.ray_runtime` — starting and stopping Ray.

Importing this package imports neither Ray nor Optuna (their modules import them inside their
functions): ``dmlsearch --help`` and a bad option answer at once. :mod:`.multi_search`,
:mod:`.searcher` and :mod:`.callbacks` import Ray, and are imported from their modules by the
code that runs a search.
"""

from __future__ import annotations

from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.ray_results import read_trial_folders
from dmlsearch.search.tune.ray_runtime import init_ray
from dmlsearch.search.tune.ray_runtime import ray_output_to
from dmlsearch.search.tune.ray_runtime import ray_running
from dmlsearch.search.tune.ray_runtime import shutdown_ray
from dmlsearch.search.tune.samplers import DEFAULT_SAMPLER
from dmlsearch.search.tune.samplers import SAMPLERS
from dmlsearch.search.tune.samplers import TRANSFER_SAMPLER
from dmlsearch.search.tune.schedulers import DEFAULT_SCHEDULER
from dmlsearch.search.tune.schedulers import SCHEDULERS
from dmlsearch.search.tune.schedulers import max_trials
from dmlsearch.search.tune.settings import EveryListener
from dmlsearch.search.tune.settings import TrialEvents
from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.search.tune.study import create_storage
from dmlsearch.search.tune.study import load_study
from dmlsearch.search.tune.study import settle_study
from dmlsearch.search.tune.tuner import SearchInterrupted
from dmlsearch.search.tune.tuner import can_resume
from dmlsearch.search.tune.tuner import resume_tune
from dmlsearch.search.tune.tuner import run_tune

__all__ = ["DEFAULT_SAMPLER", "DEFAULT_SCHEDULER", "SAMPLERS", "SCHEDULERS", "TRANSFER_SAMPLER",
           "EveryListener", "Limit", "SearchInterrupted", "TrialEvents", "TuneSettings",
           "can_resume", "create_storage", "init_ray", "load_study", "max_trials", "ray_output_to",
           "ray_running", "read_trial_folders", "resume_tune", "run_tune", "settle_study",
           "shutdown_ray"]
