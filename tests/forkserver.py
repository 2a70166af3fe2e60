"""The suite's ``dmlsearch`` commands started from a process that has imported them already.

Every ``dmlsearch`` command the tests start (``run_cli``, the shared search) used to pay its
imports anew: torch, Ray Tune, MLflow, Optuna and dmlsearch itself, 3-5 seconds of a 2-core
machine before the command does anything, some 45 times a suite. A fork server imports
them once; each command is then a ``fork`` of it that runs ``python -m dmlsearch.search.cli`` as
a fresh process does (``runpy`` of the module as ``__main__``, the command's own argv, working
folder, environment and standard streams, a normal interpreter exit with its ``atexit``
handlers), and the test gets its exit code, stdout and stderr as from :func:`subprocess.run`.

What a fork cannot give, a real subprocess gives: a command whose environment differs from the
server's in a variable read while those modules import (``OMP_NUM_THREADS``, ``PYTHON*``,
``TORCH_*``...) runs as ``python -m``; so does every command when ``DMLSEARCH_TEST_FORK=0``.
Tests about what a fresh interpreter imports or how it starts use subprocesses of their own.

The server is one process per pytest process (so one per ``pytest -n`` worker), started on the
first command and stopped when pytest exits. It stays single-threaded (it polls): a fork copies
only the calling thread, and no thread of its own can hold a lock at that moment.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PRELOAD = ("numpy", "torch", "torch.optim", "ray", "ray.tune", "mlflow", "mlflow.pytorch",
           "optuna", "matplotlib.pyplot", "sklearn.manifold", "dmlsearch.search.cli",
           "dmlsearch.search.lifecycle", "dmlsearch.search.tune.tuner",
           "dmlsearch.trainables.retrain")
"""What ``dmlsearch run`` imports on its way (``python -X importtime``): the bulk of its start."""

IMPORT_TIME = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO", "PYTHON", "LD_", "MALLOC",
               "TORCH", "CUDA", "MPL", "MATPLOTLIB", "NUMPY", "RAY_", "GRPC_")
"""Prefixes of variables a library may read while it imports: a command whose value of one
differs from the server's runs in a real subprocess."""

RUNTIME = frozenset({"RAY_ADDRESS", "RAY_TMPDIR", "PYTHONUNBUFFERED", "TORCHINDUCTOR_CACHE_DIR"})
"""Variables of those prefixes read only when used (Ray's address and temp folder when Ray
starts; unbuffered streams are set up for each command here; torch's compile cache, which torch
sets in the pytest process the first time it asks for it, and which a command without it
computes to the same folder)."""

CLI = "dmlsearch.search.cli"
_POLL_S = 0.05


# ---- the server (its own process) --------------------------------------------------------------
def serve(path: str, added: Mapping[str, str]) -> dict[str, Any]:
    """Answer commands on the Unix socket ``path`` until the parent process dies. Returns only
    in a forked child: the command that child is to run. ``added``: the variables the imports
    set (``os.environ.setdefault``), which the client is told."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # The client waits for this line: everything is imported.
    os.write(1, f"ready {json.dumps(dict(added))}\n".encode())
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    parent = os.getppid()
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        for _ in selector.select(_POLL_S):
            conn, _ = listener.accept()
            request = json.loads(_read_line(conn))
            pid = os.fork()
            if pid == 0:  # the command's process: none of the server's sockets
                selector.close()
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                return request
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        for pid, conn in list(children.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                try:
                    conn.sendall(f"{code}\n".encode())
                except OSError:  # the client gave up waiting (its timeout)
                    pass
                conn.close()
                del children[pid]
    for pid in children:  # the parent died: no command outlives the suite
        os.kill(pid, signal.SIGKILL)
    os._exit(0)


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-line")
        data += chunk
    return data.decode()


def run_command(request: Mapping[str, Any], added: Mapping[str, str]) -> None:
    """In the forked child: become ``python -m MODULE ARGV`` (the command line's module) in
    ``cwd`` with ``env`` and the given stdout and stderr files (stdin empty), then exit as it
    exits. What the imports set in the environment of a fresh process (``added``) is set here
    too, unless ``env`` has it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**added, **request["env"]})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    # The interpreter's own stream objects stay (handlers made while importing hold them); they
    # write to the new files now, buffered as ``python`` buffers them in this environment.
    if request["env"].get("PYTHONUNBUFFERED"):
        sys.stdout.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    sys.argv = [request["module"], *request["argv"]]  # runpy puts the module's file first
    sys.path[0] = request["cwd"]  # `python -m` puts the working folder first
    sys.modules.pop(request["module"], None)  # run as __main__ only, as `python -m` runs it
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _server_main() -> None:
    """``python tests/forkserver.py SOCKET``: import, serve; in a child, run its command (the
    interpreter then exits as after ``python -m``: ``SystemExit``, ``atexit``, flushed streams)."""
    import importlib

    before = dict(os.environ)
    for name in PRELOAD:
        importlib.import_module(name)
    added = {k: v for k, v in os.environ.items() if k not in before}
    run_command(serve(sys.argv[1], added), added)


# ---- the client (the pytest process) -----------------------------------------------------------
class ForkServer:
    """A started server; :meth:`run` is :func:`subprocess.run` of one ``dmlsearch`` command."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.folder = Path(tempfile.mkdtemp(prefix="dsfork"))
        self.path = str(self.folder / "socket")
        log = self.folder / "server.log"
        with open(log, "wb") as errors:
            self.proc = subprocess.Popen([sys.executable, __file__, self.path], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=errors, cwd=self.folder)
        assert self.proc.stdout is not None
        word, _, added = self.proc.stdout.readline().decode().partition(" ")
        if word != "ready":
            raise RuntimeError(f"the fork server did not start (exit {self.proc.wait()}): "
                               f"{log.read_text()[-2000:]}")
        self.added: dict[str, str] = json.loads(added)

    def forks(self, env: Mapping[str, str]) -> bool:
        """Whether a command with ``env`` runs as a fork (no import-time variable differs)."""
        keys = {k for k in {*env, *self.env} if k.startswith(IMPORT_TIME) and k not in RUNTIME}
        return all(env.get(k) == self.env.get(k)
                   or (k in self.added and env.get(k) in (None, self.added[k])) for k in keys)

    def run(self, args: Sequence[str], *, env: Mapping[str, str], cwd: Path | str | None,
            timeout: float, module: str = CLI) -> subprocess.CompletedProcess[str]:
        out = self.folder / f"{time.monotonic_ns()}"
        argv = [sys.executable, "-m", module, *args]  # what it stands for
        request = {"module": module, "argv": list(args), "env": dict(env),
                   "cwd": str(Path(cwd or os.getcwd()).resolve()),
                   "stdout": f"{out}.out", "stderr": f"{out}.err"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            conn.sendall((json.dumps(request) + "\n").encode())
            pid = int(_read_line(conn))
            conn.settimeout(timeout)
            try:
                code = int(_read_line(conn))
            except BaseException as exc:  # its timeout, Ctrl-C: as subprocess.run, kill it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if isinstance(exc, TimeoutError):
                    raise subprocess.TimeoutExpired(argv, timeout) from None
                raise
        try:
            return subprocess.CompletedProcess(
                argv, code, Path(f"{out}.out").read_text(errors="replace"),
                Path(f"{out}.err").read_text(errors="replace"))
        finally:
            for suffix in (".out", ".err"):
                Path(f"{out}{suffix}").unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for name in os.listdir(self.folder):
            os.unlink(self.folder / name)
        os.rmdir(self.folder)


_SERVER: ForkServer | None = None


def server(env: Mapping[str, str] | None = None) -> ForkServer | None:
    """This pytest process's server, started on first use with ``env`` (default: this
    process's); ``None`` when ``DMLSEARCH_TEST_FORK=0`` or where ``fork`` is not the way
    processes start (not Linux)."""
    global _SERVER
    if os.environ.get("DMLSEARCH_TEST_FORK", "1") == "0" or not sys.platform.startswith("linux"):
        return None
    if _SERVER is None:
        _SERVER = ForkServer(os.environ if env is None else env)
        atexit.register(_SERVER.stop)
    return _SERVER


if __name__ == "__main__":
    _server_main()
