"""A real multi-node Ray cluster on this machine, for the tests: ``ray start --head`` and
``ray start --address``, as on real machines.

Every node is a ``ray start --block`` process with its own temporary folder (short, under /tmp:
Ray's socket paths are limited), its own free ports and its own address: the head takes the
machine's address (Ray resolves 127.0.0.1 to it) and each worker a loopback address of its own
(127.0.0.2, 127.0.0.3), so the ``node_ip`` of a trial's results says which node ran it. The
cluster has its own token (token authentication, as Ray 2.60 wants for nodes that join).

Nodes are stopped by killing their processes by id (the ``ray start`` process and all its
descendants), never with ``ray stop``, which would stop every Ray instance on the machine.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from tests.helpers import free_ports

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 200 * 1024 * 1024  # the smallest sensible store: trials pass no data


def can_bind(ip: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (by parent id), parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def processes_mentioning(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry))
    return pids


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> list[int]:
    killed = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


@dataclass
class Node:
    ip: str
    proc: subprocess.Popen
    temp_dir: Path
    log: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class LoopbackCluster:
    root: Path  # logs
    env: dict[str, str] = field(default_factory=dict)
    head: Node | None = None
    workers: list[Node] = field(default_factory=list)
    jobs: list[subprocess.Popen] = field(default_factory=list)  # `ray job submit` clients
    gcs_address: str = ""
    dashboard: str = ""

    @classmethod
    def new(cls, root: Path, *, extra_env: dict[str, str]) -> LoopbackCluster:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", **extra_env})
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        return cls(root=root, env=env)

    # ---- nodes ----------------------------------------------------------------------------
    def start_head(self, *, num_cpus: int = 1, timeout: float = 180) -> Node:
        gcs, node_manager, object_manager, client, dash, agent, agent_grpc, metrics, runtime = (
            free_ports(9))
        node = self._start("head", "127.0.0.1", [
            "--head", f"--port={gcs}", f"--ray-client-server-port={client}",
            f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
        ], num_cpus=num_cpus, ports=(node_manager, object_manager, agent, agent_grpc, metrics,
                                     runtime))
        self.head = node
        self.dashboard = f"http://127.0.0.1:{dash}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"--address='([^']+)'", node.log_tail(100_000))
            if found:
                self.gcs_address = found.group(1)
                break
            self._check_alive(node)
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the head did not start in {timeout:.0f} s:\n{node.log_tail()}")
        head_ip = self.gcs_address.rsplit(":", 1)[0]
        node.ip = head_ip
        self.wait_alive(node, timeout=max(1.0, deadline - time.monotonic()))
        return node

    def start_worker(self, ip: str, *, num_cpus: int = 1, timeout: float = 180) -> Node:
        assert self.head is not None, "start the head first"
        node = self._start(f"worker-{ip}", ip, [f"--address={self.gcs_address}"],
                           num_cpus=num_cpus, ports=tuple(free_ports(6)))
        self.workers.append(node)
        self.wait_alive(node, timeout=timeout)
        return node

    def _start(self, name: str, ip: str, args: list[str], *, num_cpus: int,
               ports: tuple[int, ...]) -> Node:
        node_manager, object_manager, agent, agent_grpc, metrics, runtime = ports
        temp_dir = Path(tempfile.mkdtemp(prefix="dmlc", dir="/tmp"))
        log = self.root / f"{name}-{temp_dir.name}.log"
        cmd = [RAY, "start", "--block", *args, f"--node-ip-address={ip}",
               f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}",
               f"--object-store-memory={OBJECT_STORE_BYTES}",
               f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
               f"--dashboard-agent-listen-port={agent}",
               f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
               f"--runtime-env-agent-port={runtime}",
               "--min-worker-port=0", "--max-worker-port=0", "--disable-usage-stats"]
        with log.open("w") as handle:
            proc = subprocess.Popen(cmd, env=self.env, stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return Node(ip=ip, proc=proc, temp_dir=temp_dir, log=log)

    def _check_alive(self, node: Node) -> None:
        if node.proc.poll() is not None:
            raise RuntimeError(f"`ray start` for {node.ip} exited with {node.proc.returncode}:\n"
                               f"{node.log_tail()}")

    def nodes(self) -> list[dict]:
        """The cluster's nodes as Ray's state API lists them (``ray list nodes``)."""
        proc = subprocess.run([RAY, "list", "nodes", "--address", self.dashboard,
                               "--format", "json", "--limit", "100"],
                              env=self.env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        return json.loads(proc.stdout[proc.stdout.index("["):])

    def alive_ips(self) -> set[str]:
        return {n["node_ip"] for n in self.nodes() if n["state"] == "ALIVE"}

    def wait_alive(self, node: Node, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(node)
            try:
                if node.ip in self.alive_ips():
                    return
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                last = str(exc)  # the dashboard is still starting
            time.sleep(1)
        raise RuntimeError(f"node {node.ip} did not join in {timeout:.0f} s: {last[-1000:]}")

    def kill(self, node: Node) -> list[int]:
        """SIGKILL every process of ``node`` by id (a lost machine): its ``ray start``, raylet,
        agents and the workers running its trials."""
        pids = process_tree(node.proc.pid)
        pids += [p for p in processes_mentioning(str(node.temp_dir)) if p not in pids]
        killed = _kill(pids)
        node.proc.wait(timeout=30)
        return killed

    def stop(self) -> None:
        """Stop every node of this cluster (only its processes), then remove its folders."""
        for job in self.jobs:
            if job.poll() is None:
                job.kill()
                job.wait(timeout=30)
        nodes = [n for n in [*self.workers, self.head] if n is not None]
        trees = {id(n): process_tree(n.proc.pid) for n in nodes if n.proc.poll() is None}
        for node in nodes:  # `ray start --block` stops its children on SIGTERM
            if node.proc.poll() is None:
                _kill([node.proc.pid], signal.SIGTERM)
        for node in nodes:
            try:
                node.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        for node in nodes:
            leftovers = trees.get(id(node), []) + processes_mentioning(str(node.temp_dir))
            _kill([p for p in leftovers if Path(f"/proc/{p}").exists()])
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            shutil.rmtree(node.temp_dir, ignore_errors=True)

    # ---- jobs -----------------------------------------------------------------------------
    def submit(self, entrypoint: list[str], log: Path) -> subprocess.Popen:
        """``ray job submit`` (waits for the job and streams its output into ``log``)."""
        with log.open("w") as handle:
            job = subprocess.Popen(
                [RAY, "job", "submit", "--address", self.dashboard, "--", *entrypoint],
                env=self.env, stdout=handle, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self.jobs.append(job)
        return job
