"""Worker processes of a raylet and the leases on them: starting one (its environment and log files) and stopping
them all. The pool's decisions (worker_pool.py) say when; this module does the process work."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Protocol

from .resources import Allocation

# How long a worker asked to stop (SIGTERM) has before it is SIGKILLed: its handler exports its
# last spans and task events, then exits (worker_main.on_term).
KILL_GRACE_S = 2.0


class Proc(Protocol):
    """What the raylet needs of a worker process: a Popen, or a forks.ForkedProc."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class WorkerProc:
    """A worker process started by this raylet."""

    worker_id: str
    popen: Proc
    port: int = 0
    lease: Lease | None = None
    dead: bool = False
    started_at: float = field(default_factory=time.monotonic)
    kill_at: float | None = None  # when a worker told to stop gets SIGKILL (Raylet.kill_worker)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid


@dataclass
class Lease:
    """A granted lease: a worker and the resources it holds."""

    lease_id: bytes
    worker: WorkerProc
    alloc: Allocation
    name: str
    blocked: bool = False
    owner: str = ""  # worker id of the process using the lease
    actor: bool = False  # a dedicated actor worker (not counted as a running task)
    granted_at: float = field(default_factory=time.monotonic)  # the memory monitor kills the newest first


def spawn_worker(worker_id: str, logs_dir: str, env_vars: dict[str, str], *,
                 python: str = sys.executable, cwd: str | None = None,
                 runtime_env_vars: dict[str, str] | None = None) -> WorkerProc:
    """Starts `python -m ember._private.execution.worker_main` with the node's addresses in its
    environment, its output in logs_dir/worker-<id>.out/.err. A worker of a runtime env runs
    on that env's python (a pip virtualenv), in its working_dir, with its variables (which
    never override the node's addresses)."""
    env = dict(os.environ)
    env.update(runtime_env_vars or {})
    env.update(env_vars)
    env.update({"EMBER_WORKER_ID": worker_id, "PYTHONUNBUFFERED": "1"})
    os.makedirs(logs_dir, exist_ok=True)
    out = open(os.path.join(logs_dir, f"worker-{worker_id}.out"), "ab")
    err = open(os.path.join(logs_dir, f"worker-{worker_id}.err"), "ab")
    popen = subprocess.Popen([python, "-m", "ember._private.execution.worker_main"], env=env, cwd=cwd,
                             stdout=out, stderr=err, stdin=subprocess.DEVNULL, close_fds=True)
    out.close()
    err.close()
    return WorkerProc(worker_id, popen)


def err_tail(logs_dir: str, worker_id: str, lines: int = 15) -> str:
    """The last lines of a worker's stderr file ("" when there is none)."""
    try:
        with open(os.path.join(logs_dir, f"worker-{worker_id}.err"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


async def stop_all(procs: list[Proc], grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM every process, then SIGKILL those still running after grace_s."""
    for pp in procs:
        if pp.poll() is None:
            try:
                pp.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pp.poll() is None for pp in procs):
        await asyncio.sleep(0.05)
    for pp in procs:
        if pp.poll() is None:
            pp.kill()
            try:
                pp.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
