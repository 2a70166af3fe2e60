"""After the search: the best configurations retrained on all training classes and tested once
(:mod:`.retrain`), what the retrained model looks like (:mod:`.views`), the exported
configuration (:mod:`.export`), and ``dmlsearch train`` of an export (:mod:`.train`)."""
