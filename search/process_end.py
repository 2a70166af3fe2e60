"""How a dmlsearch process ends: without Python's last garbage collection.

At exit the interpreter collects every object torch, Ray and MLflow made (hundreds of thousands)
before the process may end: 1.5-3.5 s of a core on 2 cores after every command, and after every
trial worker Ray ends, while the driver retrains (docs/benchmarks.md, "a command ends without
Python's last collection"). :func:`freeze_at_exit` registers ``gc.freeze`` as an exit handler;
registered first, it runs last, after MLflow's, Ray's and logging's handlers have flushed and
closed what they own. Modules are still cleared and reference counting still finalises what it
frees; only reference cycles alive at exit stay uncollected, whose finalisers Python never
promised to run. ``DMLSEARCH_EXIT_GC=collect`` lets Python collect as usual (a plug-in that
needs a finaliser of such a cycle; the benchmark's baseline); trial workers inherit it from the
driver.

The command line (``search/cli.py``) and the trial functions (``search/tune/trainable.py``)
call it: processes of dmlsearch's own. The Python API leaves its caller's process alone.

A command whose reader left (``dmlsearch settings | head``) ends as other command-line tools
do: quietly, with the shell's code for SIGPIPE (:data:`EXIT_PIPE`, :func:`end_on_closed_output`),
whether the command line or the search's progress lines met the closed pipe.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys

__all__ = ["EXIT_GC", "EXIT_PIPE", "end_on_closed_output", "freeze_at_exit"]

EXIT_GC = "DMLSEARCH_EXIT_GC"
EXIT_PIPE = 128 + signal.SIGPIPE  # 141: the reader of the output left
_registered = False


def freeze_at_exit() -> None:
    """Freeze what is alive when this process ends instead of collecting it (module docstring);
    once per process (tests run many commands in one)."""
    global _registered
    if _registered or os.environ.get(EXIT_GC, "").strip().lower() == "collect":
        return
    atexit.register(gc.freeze)
    _registered = True


def end_on_closed_output() -> int:
    """After a write to a closed standard output: what is still buffered for it goes nowhere
    (else flushing it at exit fails again, and Python prints that); returns :data:`EXIT_PIPE`,
    the process's exit code."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE
