"""The raylet's side of the worker template (`ember._private.execution.fork_server`): start it, ask it
to fork workers, follow their exits.

A forked worker is the template's child, not the raylet's, so the raylet cannot wait for it;
`ForkedProc` is the Popen-like handle the raylet keeps instead (pid, poll, kill, send_signal,
returncode, wait): the template reaps its children and reports each exit over its stdout,
where a reader thread fills in the handle. If the template dies, every worker it forked dies
with it (PR_SET_PDEATHSIG), their handles read -9, and the raylet starts fresh interpreters
from then on (`ForkServer.alive` is False).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)


class ForkedProc:
    """A worker forked by the template, with the part of Popen's interface the raylet uses."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.pid = 0  # known once the template answers (or the worker registers)
        self.returncode: int | None = None
        self._pending: int | None = None  # a signal asked for before the pid was known

    def poll(self) -> int | None:
        """The exit code once the process ended (as the template reported it), else None."""
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signals the process (later, as soon as its pid is known, if it is not yet)."""
        if self.returncode is not None:
            return
        if not self.pid:
            self._pending = sig
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the exit the template reports; subprocess.TimeoutExpired after timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.worker_id}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode

    def _started(self, pid: int) -> None:
        self.pid = pid
        if self._pending is not None:
            sig, self._pending = self._pending, None
            self.send_signal(sig)


class ForkServer:
    """One template process for the node's default-env workers."""

    def __init__(self, env: dict[str, str], logs_dir: str, python: str = sys.executable) -> None:
        os.makedirs(logs_dir, exist_ok=True)
        err = open(os.path.join(logs_dir, "fork-server.err"), "ab")
        full = dict(os.environ)
        full.update(env)
        full["PYTHONUNBUFFERED"] = "1"
        self.logs_dir = logs_dir
        self.popen = subprocess.Popen([python, "-m", "ember._private.execution.fork_server"], env=full,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                      close_fds=True)
        err.close()
        self.ready = False
        self.dead = False
        self._lock = threading.Lock()
        self._by_id: dict[str, ForkedProc] = {}
        self._by_pid: dict[int, ForkedProc] = {}
        self._reader = threading.Thread(target=self._read, name="ember-fork-server", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the template runs (requests may still be queued while it preloads)."""
        return not self.dead and self.popen.poll() is None

    @property
    def pid(self) -> int:
        """The template's process id."""
        return self.popen.pid

    def fork(self, worker_id: str) -> ForkedProc:
        """Asks for one worker (its output in logs_dir/worker-<id>.out/.err)."""
        h = ForkedProc(worker_id)
        line = json.dumps({"worker_id": worker_id,
                           "out": os.path.join(self.logs_dir, f"worker-{worker_id}.out"),
                           "err": os.path.join(self.logs_dir, f"worker-{worker_id}.err")})
        with self._lock:
            self._by_id[worker_id] = h
        try:
            assert self.popen.stdin is not None
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            log.warning("worker template is gone (%s); starting fresh interpreters", e)
            self.dead = True
            with self._lock:
                self._by_id.pop(worker_id, None)
            h.returncode = 1
        return h

    def registered(self, worker_id: str, pid: int) -> None:
        """The worker told its pid itself (it may do so before the template's answer is read)."""
        with self._lock:
            h = self._by_id.get(worker_id)
            if h is not None and not h.pid:
                self._by_pid[pid] = h
                h._started(pid)

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            parts = raw.decode(errors="replace").split()
            if not parts:
                continue
            with self._lock:
                if parts[0] == "ready":
                    self.ready = True
                elif parts[0] == "started" and len(parts) == 3:
                    h = self._by_id.get(parts[1])
                    if h is not None:
                        self._by_pid[int(parts[2])] = h
                        if not h.pid:
                            h._started(int(parts[2]))
                elif parts[0] == "exit" and len(parts) == 3:
                    h = self._by_pid.pop(int(parts[1]), None)
                    if h is not None:
                        self._by_id.pop(h.worker_id, None)
                        h.returncode = int(parts[2])
                elif parts[0] == "error":
                    h = self._by_id.pop(parts[1], None)
                    if h is not None:
                        h.returncode = 1
                    log.warning("worker template could not fork: %s", " ".join(parts[2:]))
        # The template exited: its children died with it (PR_SET_PDEATHSIG); make sure.
        self.dead = True
        with self._lock:
            for h in self._by_id.values():
                if h.returncode is None:
                    if h.pid:
                        try:
                            os.kill(h.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    h.returncode = -signal.SIGKILL
            self._by_id.clear()
            self._by_pid.clear()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stops the template (its stdin closes; SIGKILL after timeout_s)."""
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        except OSError:
            pass
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._reader.join(timeout_s)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
