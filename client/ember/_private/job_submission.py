"""`ember job submit`: run a driver program inside the cluster, as Ray's job submission does.

    ember job submit --address HOST:PORT [--working-dir DIR] [--no-wait] -- python my_program.py

The CLI connects as a driver, zips the working directory (if any) and creates a detached
JobSupervisor actor (0 CPUs) in namespace `_ember_jobs`. The supervisor unpacks the directory on
its node and runs the entrypoint there with a shell, its own EMBER_ADDRESS pointing at the GCS,
so the program is a driver on a cluster node (its objects in that node's shared memory). The
CLI prints the job's output as it comes and exits with the job's exit code, then removes the
supervisor; with --no-wait it prints the submission id, and `ember job logs|status|stop ID`
follow it.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import time
import uuid
import zipfile
from typing import Any

NAMESPACE = "_ember_jobs"
MAX_WORKING_DIR_BYTES = 100 * 2**20
# EMBER_ variables a job's driver keeps: its node's IP, log level, and the cluster's auth/TLS set-up.
_PASSED_ENV = ("EMBER_NODE_IP", "EMBER_LOG_LEVEL", "EMBER_AUTH_MODE", "EMBER_AUTH_TOKEN",
               "EMBER_AUTH_TOKEN_PATH", "EMBER_USE_TLS", "EMBER_TLS_SERVER_CERT",
               "EMBER_TLS_SERVER_KEY", "EMBER_TLS_CA_CERT")


class JobSupervisor:
    """Runs one entrypoint as a subprocess on its node; keeps its output in memory."""

    def __init__(self, submission_id: str, entrypoint: str, working_dir_zip: bytes | None) -> None:
        import subprocess
        import tempfile
        import threading

        import ember

        self.dir = tempfile.mkdtemp(prefix=f"ember-job-{submission_id}-")
        if working_dir_zip:
            with zipfile.ZipFile(io.BytesIO(working_dir_zip)) as z:
                z.extractall(self.dir)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EMBER_") or k in _PASSED_ENV}
        env["EMBER_ADDRESS"] = ember.get_runtime_context().gcs_address
        env["PYTHONUNBUFFERED"] = "1"
        # `python` in the entrypoint is the one running this worker (its venv)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        self.lines: list[str] = []
        self.proc = subprocess.Popen(entrypoint, shell=True, cwd=self.dir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def status(self) -> tuple[str, int | None]:
        rc = self.proc.poll()
        if rc is None or self._reader.is_alive():
            return "RUNNING", None
        return ("SUCCEEDED" if rc == 0 else "FAILED"), rc

    def logs(self, offset: int = 0) -> tuple[str, int]:
        lines = self.lines[offset:]
        return "".join(lines), offset + len(lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def cleanup(self) -> None:
        import shutil

        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _zip_dir(path: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in (".git", ".venv", "__pycache__")]
            for f in files:
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, path))
    data = buf.getvalue()
    if len(data) > MAX_WORKING_DIR_BYTES:
        raise ValueError(f"--working-dir {path} is {len(data) / 2**20:.0f} MiB zipped; the limit is "
                         f"{MAX_WORKING_DIR_BYTES / 2**20:.0f} MiB")
    return data


def _follow(ember: Any, sup: Any, out: Any = sys.stdout) -> int:
    offset = 0
    while True:
        state, rc = ember.get(sup.status.remote())
        text, offset = ember.get(sup.logs.remote(offset))
        if text:
            out.write(text)
            out.flush()
        if state != "RUNNING":
            text, offset = ember.get(sup.logs.remote(offset))
            out.write(text)
            out.flush()
            return 0 if not rc else (rc if 0 < rc < 256 else 1)
        time.sleep(0.3)


def main(ns: argparse.Namespace) -> int:
    import ember

    address = ns.address or os.environ.get("EMBER_ADDRESS") or "auto"
    ember.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    try:
        if ns.action == "submit":
            entry = list(ns.entrypoint)
            if entry and entry[0] == "--":
                entry = entry[1:]
            if not entry:
                print("error: no entrypoint (ember job submit -- python my_program.py)", file=sys.stderr)
                return 2
            import shlex

            sid = ns.submission_id or f"ember_job_{uuid.uuid4().hex[:12]}"
            payload = _zip_dir(ns.working_dir) if ns.working_dir else None
            sup = ember.remote(JobSupervisor).options(
                name=sid, namespace=NAMESPACE, lifetime="detached", num_cpus=0,
                max_concurrency=4).remote(sid, shlex.join(entry), payload)
            ember.get(sup.status.remote())  # surfaces a failed start here
            print(f"Job '{sid}' submitted", file=sys.stderr)
            if ns.no_wait:
                return 0
            rc = _follow(ember, sup)
            print(f"Job '{sid}' {'succeeded' if rc == 0 else f'failed (exit code {rc})'}",
                  file=sys.stderr)
            ember.get(sup.cleanup.remote())
            ember.kill(sup)
            return rc
        try:
            sup = ember.get_actor(ns.submission_id, namespace=NAMESPACE)
        except ValueError:
            print(f"error: no job {ns.submission_id!r} (finished jobs are removed once followed "
                  "or stopped)", file=sys.stderr)
            return 1
        if ns.action == "status":
            state, rc = ember.get(sup.status.remote())
            print(state if rc is None else f"{state} (exit code {rc})")
            return 0
        if ns.action == "logs":
            print(ember.get(sup.logs.remote(0))[0], end="")
            return 0
        ember.get(sup.cleanup.remote())  # stop
        ember.kill(sup)
        return 0
    finally:
        ember.shutdown()


def add_parser(sub: Any) -> None:
    j = sub.add_parser("job", help="submit a driver program to run in the cluster")
    jsub = j.add_subparsers(dest="action", required=True)
    s = jsub.add_parser("submit", help="run ENTRYPOINT on a cluster node: ember job submit -- python x.py")
    s.add_argument("--address", default=None, help="GCS HOST:PORT (default $EMBER_ADDRESS / auto)")
    s.add_argument("--working-dir", default=None, help="directory shipped to the job and its cwd")
    s.add_argument("--submission-id", default=None)
    s.add_argument("--no-wait", action="store_true", help="print the id and return at once")
    s.add_argument("entrypoint", nargs=argparse.REMAINDER)
    for name in ("status", "logs", "stop"):
        q = jsub.add_parser(name)
        q.add_argument("submission_id")
        q.add_argument("--address", default=None)
