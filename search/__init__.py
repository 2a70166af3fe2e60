"""The driver: what ``dmlsearch`` does on the machine that runs the search, along the flow

    cli → options → prepare → study_dir → run → tune/ (Ray Tune, Optuna) → finish/ → record
        → reporting/,   with tracking (MLflow) listening throughout.

- :mod:`.cli` — the parser and one handler per command;
- :mod:`.options` — ``SearchOptions``, typed; :mod:`.prepare` — every check of the user's input;
- :mod:`.study_dir` — the results folder (every file name in it);
- :mod:`.run` — ``run`` and ``resume``, top to bottom;
- :mod:`.tune` — everything Ray, and the Optuna study (the only subpackage importing Ray);
- :mod:`.finish` — retrain, export, the retrained model's views, ``dmlsearch train``;
- :mod:`.record` — trial records, ranking, budget, the ``summary.json`` schema;
  :mod:`.readback` — a results folder read back;
- :mod:`.reporting` — terminal summary, ``report.md``, plots, importance, tournament;
- :mod:`.tracking` — MLflow only; :mod:`.provenance` — code revision and version.
"""
