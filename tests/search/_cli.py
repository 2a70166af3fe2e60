"""Run the real ``dmlsearch`` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, cache: Path, timeout: float = 900,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DMLSEARCH_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "dmlsearch.search.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)
