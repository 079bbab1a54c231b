"""`ember job submit`: run a driver program inside the cluster, as Ray's job submission does.

    ember job submit --address HOST:PORT [--working-dir DIR] [--no-wait] -- python my_program.py

The CLI connects as a driver, zips the working directory (if any) and starts the job through
`ember._private.job_manager` (a detached JobSupervisor actor, 0 CPUs, in namespace
`_ember_jobs`, and the job's record in the internal KV, as the dashboard's REST API does). The
CLI prints the job's output as it comes and exits with the job's exit code (the supervisor ends
with the job; its record and output stay, so the dashboard and `ember list jobs` show it); with
--no-wait it prints the submission id, and `ember job logs|status|stop ID` follow it (`stop`
also removes the job, as `ray job stop` + `ray job delete`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from . import job_manager
from .job_manager import NAMESPACE, JobSupervisor

__all__ = ["JobSupervisor", "NAMESPACE", "add_parser", "main"]


def _follow(sid: str, out: Any = sys.stdout) -> int:
    """Prints the job's output as it comes; its exit code (1 for a job without one) at the end."""
    offset = 0
    while True:
        rec = job_manager.info(sid) or {}
        text, offset = job_manager.logs(sid, offset)
        if text:
            out.write(text)
            out.flush()
        if rec.get("status") in job_manager.TERMINAL:
            text, offset = job_manager.logs(sid, offset)
            out.write(text)
            out.flush()
            if rec.get("status") == "FAILED" and rec.get("driver_exit_code") is None:
                print(f"error: {rec.get('message')}", file=sys.stderr)
            rc = rec.get("driver_exit_code")
            return 0 if rc == 0 else (rc if isinstance(rc, int) and 0 < rc < 256 else 1)
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

            try:
                payload = job_manager.zip_dir(ns.working_dir) if ns.working_dir else None
                sid, _ = job_manager.start(shlex.join(entry), submission_id=ns.submission_id,
                                             working_dir_zip=payload)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            print(f"Job '{sid}' submitted", file=sys.stderr)
            if ns.no_wait:
                return 0
            rc = _follow(sid)
            print(f"Job '{sid}' {'succeeded' if rc == 0 else f'failed (exit code {rc})'}",
                  file=sys.stderr)
            return rc
        rec = job_manager.info(ns.submission_id)
        if rec is None:
            print(f"error: no job {ns.submission_id!r}", file=sys.stderr)
            return 1
        if ns.action == "status":
            rc = rec.get("driver_exit_code")
            print(rec["status"] if rc is None else f"{rec['status']} (exit code {rc})")
            return 0
        if ns.action == "logs":
            print(job_manager.logs(ns.submission_id)[0], end="")
            return 0
        # stop, then remove the job (its supervisor and record), as `ember job stop` always did
        job_manager.stop(ns.submission_id)
        deadline = time.monotonic() + 15
        while (job_manager.info(ns.submission_id) or {}).get("status") not in job_manager.TERMINAL:
            if time.monotonic() > deadline:
                print(f"error: job {ns.submission_id!r} did not stop within 15 s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        job_manager.delete(ns.submission_id)
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
