"""The suite's fork server (tests/forkserver.py) stands in for ``python -m``: a command forked
from it gets the argv, working folder, environment, streams, exit code and interpreter exit of a
fresh process; a command past its timeout is killed; a command whose environment differs in a
variable read at import time goes to a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forkserver
from tests.helpers import cli_command
from tests.helpers import cli_env
from tests.helpers import run_cli
from tests.helpers import user_environ

PROBE = """
import atexit, json, os, sys, time
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:], "name": __name__,
                  "var": os.environ.get("PROBE_VAR"), "path0": sys.path[0],
                  "stdin": sys.stdin.read(), "preloaded": "torch" in sys.modules}))
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["sleep"]:
    time.sleep(120)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def server() -> forkserver.ForkServer:
    started = forkserver.server(user_environ())
    if started is None:
        pytest.skip("the fork server is off here (DMLSEARCH_TEST_FORK=0, or not Linux)")
    return started


def _probe(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "probe.py").write_text(PROBE)
    return {**user_environ(), "PROBE_VAR": "from the test"}


def test_a_forked_command_sees_what_a_fresh_process_sees(server: forkserver.ForkServer,
                                                         tmp_path: Path) -> None:
    env = _probe(tmp_path)
    fresh = subprocess.run([sys.executable, "-m", "probe", "3", "x y"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    forked = server.run(["3", "x y"], env=env, cwd=tmp_path, timeout=60, module="probe")
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) == (
        3, "to stderr\n")
    shown, atexit_line = forked.stdout.splitlines()
    assert atexit_line == "atexit ran" and fresh.stdout.splitlines()[-1] == atexit_line
    got, want = json.loads(shown), json.loads(fresh.stdout.splitlines()[0])
    assert got.pop("preloaded") and not want.pop("preloaded")  # the fork did run it
    assert got == want == {"cwd": str(tmp_path.resolve()), "argv": ["3", "x y"],
                           "name": "__main__", "var": "from the test",
                           "path0": str(tmp_path.resolve()), "stdin": ""}


def test_a_command_past_its_timeout_is_killed_and_the_server_goes_on(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    env = _probe(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["sleep"], env=env, cwd=tmp_path, timeout=3, module="probe")
    assert server.run(["0"], env=env, cwd=tmp_path, timeout=60, module="probe").returncode == 0


def test_variables_read_at_import_send_a_command_to_a_subprocess(
        server: forkserver.ForkServer) -> None:
    env = dict(server.env)
    assert server.forks(env)
    assert server.forks({**env, "RAY_ADDRESS": "127.0.0.1:6379", "DMLSEARCH_CACHE": "/x"})
    assert not server.forks({**env, "OMP_NUM_THREADS": "7"})
    assert not server.forks({**env, "PYTHONPATH": f"/elsewhere:{env.get('PYTHONPATH', '')}"})
    for name, value in server.added.items():  # what the imports set: absent or the same is one
        assert server.forks({k: v for k, v in env.items() if k != name})
        assert server.forks({**env, name: value})


def test_the_suites_commands_still_fork_this_late_in_the_session(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    """The tests before this file (it runs after most of them) changed no variable that sends
    the commands of ``run_cli`` to subprocesses (that would cost about 3 s each, silently)."""
    env = cli_env(tmp_path)
    keys = {k for k in {*env, *server.env} if k.startswith(forkserver.IMPORT_TIME)}
    assert server.forks(env), {k: (server.env.get(k), env.get(k)) for k in keys
                               if server.env.get(k) != env.get(k)}


@pytest.mark.parametrize("args", [("settings",), ("run", "--trials", "0")],
                         ids=["settings", "bad input"])
def test_the_command_line_forked_prints_what_it_prints_in_a_subprocess(
        server: forkserver.ForkServer, args: tuple[str, ...], tmp_path: Path) -> None:
    fresh = subprocess.run(cli_command(*args), env=cli_env(tmp_path), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    forked = run_cli(*args, cache=tmp_path, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == (0 if args == ("settings",) else 2)
