"""`ember job submit|status|logs|stop|delete|list`: run a driver program inside the cluster, as Ray's
`ray job` CLI does.

    ember job submit [--address ADDRESS] [--working-dir DIR] [--runtime-env-json JSON]
                     [--entrypoint-num-cpus N] [--entrypoint-num-gpus N]
                     [--entrypoint-memory BYTES] [--entrypoint-resources JSON] [--metadata-json JSON]
                     [--submission-id ID] [--no-wait] -- python my_program.py
    ember job status|logs [--follow]|stop [--no-wait]|delete ID
    ember job list

ADDRESS is the GCS's HOST:PORT or the dashboard's http://HOST:PORT (cli/common.py; default
$EMBER_ADDRESS, $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS, the cluster started here). The CLI connects as a driver, zips the
working directory (if any) and starts the job through `ember._tools.job_manager` (a detached
JobSupervisor actor, 0 CPUs unless --entrypoint-num-cpus, in namespace `_ember_jobs`, and the
job's record in the internal KV, as the dashboard's REST API does). The CLI prints the job's
output as it comes and exits with the job's exit code (the supervisor ends with the job; its
record and output stay, so the dashboard and `ember list jobs` show it); with --no-wait it
prints the submission id, and `ember job logs|status|stop ID` follow it. As Ray's, `stop`
keeps the job's record and `delete` removes a job that has ended.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from . import job_manager
from .cli.common import ADDRESS_HELP, UsageError, clip, resolve_address, table
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
                print(f"ember: error: {rec.get('message')}", file=sys.stderr)
            rc = rec.get("driver_exit_code")
            return 0 if rc == 0 else (rc if isinstance(rc, int) and 0 < rc < 256 else 1)
        time.sleep(0.3)


def _json_flag(flag: str, text: str | None, kind: str) -> Any:
    """A JSON flag's value (an object); UsageError naming the flag when it is not one."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{flag} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object ({kind}), got {type(value).__name__}")
    return value


def _submit(ns: argparse.Namespace) -> int:
    import shlex

    entry = list(ns.entrypoint)
    if entry and entry[0] == "--":
        entry = entry[1:]
    if not entry:
        raise UsageError("no entrypoint (ember job submit -- python my_program.py)")
    if ns.runtime_env is not None:
        raise UsageError("--runtime-env (a YAML file) is not supported; give the runtime env as "
                         "--runtime-env-json")
    runtime_env = _json_flag("--runtime-env-json", ns.runtime_env_json, "a runtime env") or {}
    if ns.working_dir:
        if runtime_env.get("working_dir"):
            raise UsageError("give the working directory once: --working-dir or the runtime env's")
        runtime_env["working_dir"] = ns.working_dir  # job_manager zips it and ships the zip
    try:
        sid, _ = job_manager.start(
            shlex.join(entry), submission_id=ns.submission_id, runtime_env=runtime_env or None,
            metadata=_json_flag("--metadata-json", ns.metadata_json, "strings to strings"),
            entrypoint_num_cpus=ns.entrypoint_num_cpus, entrypoint_num_gpus=ns.entrypoint_num_gpus,
            entrypoint_memory=ns.entrypoint_memory,
            entrypoint_resources=_json_flag("--entrypoint-resources", ns.entrypoint_resources,
                                            "resource names to amounts"),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"Job '{sid}' submitted", file=sys.stderr)
    if ns.no_wait:
        print(sid)
        return 0
    rc = _follow(sid)
    print(f"Job '{sid}' {'succeeded' if rc == 0 else f'failed (exit code {rc})'}", file=sys.stderr)
    return rc


def _list() -> int:
    rows = []
    for rec in sorted(job_manager.list_infos(), key=lambda r: r.get("start_time") or 0):
        rc = rec.get("driver_exit_code")
        rows.append([rec["submission_id"], rec["status"] if rc is None else f"{rec['status']} ({rc})",
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((rec.get("start_time") or 0) / 1000)),
                     clip(rec.get("entrypoint") or "", 60)])
    for line in table(["SUBMISSION_ID", "STATUS", "START_TIME", "ENTRYPOINT"], rows):
        print(line)
    return 0


def main(ns: argparse.Namespace) -> int:
    """Runs one job action against the cluster of --address (see the module doc)."""
    address = resolve_address(ns.address, jobs=True)
    import ember

    ember.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    try:
        if ns.action == "submit":
            return _submit(ns)
        if ns.action == "list":
            return _list()
        rec = job_manager.info(ns.submission_id)
        if rec is None:
            print(f"ember: error: no job {ns.submission_id!r}", file=sys.stderr)
            return 1
        if ns.action == "status":
            rc = rec.get("driver_exit_code")
            print(rec["status"] if rc is None else f"{rec['status']} (exit code {rc})")
            return 0
        if ns.action == "logs":
            if ns.follow:
                _follow(ns.submission_id)
                return 0
            print(job_manager.logs(ns.submission_id)[0], end="")
            return 0
        if ns.action == "delete":  # as Ray's: only a job that has ended
            if rec["status"] not in job_manager.TERMINAL:
                print(f"ember: error: job {ns.submission_id!r} is {rec['status']}: stop it before deleting it",
                      file=sys.stderr)
                return 1
            job_manager.delete(ns.submission_id)
            print(f"Job '{ns.submission_id}' deleted successfully")
            return 0
        return _stop(ns.submission_id, rec["status"], wait=not ns.no_wait)
    finally:
        ember.shutdown()


def _stop(sid: str, status: str, wait: bool) -> int:
    """`job stop`: asks the job to stop and, unless --no-wait, waits (15 s) until it has; the
    record stays (`job delete` removes it), as Ray's."""
    if status in job_manager.TERMINAL:
        print(f"Job '{sid}' has already ended ({status})")
        return 0
    job_manager.stop(sid)
    print(f"Job '{sid}': stop requested")
    deadline = time.monotonic() + 15
    while wait and (job_manager.info(sid) or {}).get("status") not in job_manager.TERMINAL:
        if time.monotonic() > deadline:
            print(f"ember: error: job {sid!r} did not stop within 15 s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


def add_parser(sub: Any) -> None:
    """`job` and its actions, with Ray's `ray job` flags."""
    j = sub.add_parser("job", help="submit a driver program to run in the cluster")
    jsub = j.add_subparsers(dest="action", required=True)
    s = jsub.add_parser("submit", help="run ENTRYPOINT on a cluster node: ember job submit -- python x.py")
    s.add_argument("--address", default=None, help=ADDRESS_HELP)
    s.add_argument("--working-dir", default=None, help="directory shipped to the job and its cwd")
    s.add_argument("--runtime-env-json", default=None, metavar="JSON",
                   help="the job's runtime env (working_dir, env_vars)")
    s.add_argument("--entrypoint-num-cpus", type=float, default=None, metavar="N",
                   help="CPUs reserved for the entrypoint")
    s.add_argument("--entrypoint-num-gpus", type=float, default=None, metavar="N",
                   help="GPUs reserved for the entrypoint")
    s.add_argument("--entrypoint-memory", type=int, default=None, metavar="BYTES",
                   help="memory reserved for the entrypoint")
    s.add_argument("--runtime-env", default=None, metavar="FILE", help="not supported: use --runtime-env-json")
    s.add_argument("--entrypoint-resources", default=None, metavar="JSON",
                   help='custom resources reserved for the entrypoint, e.g. {"disk": 1}')
    s.add_argument("--metadata-json", default=None, metavar="JSON", help="the job's metadata (strings)")
    s.add_argument("--submission-id", default=None, help="the job's id (default: a new one)")
    s.add_argument("--no-wait", action="store_true", help="print the id and return at once")
    s.add_argument("entrypoint", nargs=argparse.REMAINDER)
    for name, text in (("status", "the job's status"), ("logs", "the job's output so far"),
                       ("stop", "stop the job (waits until it has stopped)"),
                       ("delete", "remove a job that has ended, with its record and output")):
        q = jsub.add_parser(name, help=text)
        q.add_argument("submission_id")
        q.add_argument("--address", default=None, help=ADDRESS_HELP)
        if name == "logs":
            q.add_argument("--follow", "-f", action="store_true", help="follow the output until the job ends")
        if name == "stop":
            q.add_argument("--no-wait", action="store_true", help="return once the stop is asked")
    q = jsub.add_parser("list", help="every submitted job")
    q.add_argument("--address", default=None, help=ADDRESS_HELP)
