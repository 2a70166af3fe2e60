"""What a person reads and looks at, rendered from a search's summary and study: the closing
summary on the terminal (:mod:`.console`), ``report.md`` (:mod:`.markdown`) from the same
sections (:mod:`.sections`, :mod:`.tables`), the study's plots (:mod:`.plots`), the fANOVA
importance (:mod:`.importance`, :mod:`.importance_plots`) and the thesis's tournament
(:mod:`.tournament`)."""
