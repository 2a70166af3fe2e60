"""`dmlsearch compare`: fair comparisons of DML methods."""
