"""The driver: what ``dmlsearch`` does on the machine that runs the search, along the flow

    cli → options → prepare → lifecycle (study_dir, tune/ (Ray Tune, Optuna), finish/)
        → results → reporting/,   with tracking (MLflow) listening throughout.

- :mod:`.cli` — the parser and one handler per command; :mod:`.options` — every option of
  ``run``, ``compare``, ``resume`` and ``record-curves``, stated once (defaults, help, checks);
- :mod:`.prepare` — every check of the user's input;
- :mod:`.lifecycle` — a search's life on the driver, for ``run`` and ``compare`` alike;
  :mod:`.run` — ``run`` and ``resume``, top to bottom (``compare``: :mod:`.compare.comparison`);
- :mod:`.study_dir` — the results folder (every file name in it);
- :mod:`.tune` — everything Ray, and the Optuna study (the only subpackage importing Ray);
- :mod:`.replay` — learning-curve tables and replayed searches;
- :mod:`.finish` — retrain, export, the retrained model's views, ``dmlsearch train``;
- :mod:`.results` — trial records, ranking, budget, the ``summary.json`` schema;
  :mod:`.readback` — a results folder read back;
- :mod:`.reporting` — terminal summary, ``report.md``, plots, importance, tournament;
- :mod:`.compare` — fair comparisons of methods;
- :mod:`.tracking` — MLflow only; :mod:`.provenance` — code revision and version.

Each subpackage's ``__init__`` is its public face (imported without torch, Ray, MLflow or
matplotlib); the modules that need one of those are imported from their own path.
"""
