"""Job submission behind the REST API and `ember job`: one detached JobSupervisor actor per job
(namespace `_ember_jobs`, named by the submission id) runs the entrypoint as a shell command on
its node, with EMBER_ADDRESS pointing at the GCS, so the program is a driver on a cluster node.

Each job's record is Ray's JobInfo/JobDetails as JSON in the internal KV (namespace
`_ember_jobs`, key `job_info:<submission id>`): written PENDING by the submitter, RUNNING and
then SUCCEEDED / FAILED / STOPPED by the supervisor, so a finished job stays listed after its
supervisor is gone. The output goes to `<session>/logs/job-driver-<submission id>.log` on the
supervisor's node (Ray's file name), is kept in the supervisor's memory for `logs()` while the
job runs and in the KV (`job_logs:<submission id>`, last 8 MiB) once it ends. A supervisor ends
itself when its job ends (as Ray's does), so a finished job holds no worker process and none of
its entrypoint resources.

Working directories arrive as zip packages: `ember job submit --working-dir` zips the
directory itself; Ray's JobSubmissionClient uploads `gcs://_ray_pkg_<hash>.zip` through
`PUT /api/packages/gcs/<name>` first, kept in the KV (namespace `_ember_packages`).
"""
from __future__ import annotations

import io
import json
import os
import sys
import time
import uuid
import zipfile
from typing import Any

from ember_common import envvars, kv_parts

from .._private.doors.internal_kv import _internal_kv_del as kv_del
from .._private.doors.internal_kv import _internal_kv_exists as kv_exists
from .._private.doors.internal_kv import _internal_kv_get as kv_get
from .._private.doors.internal_kv import _internal_kv_list as kv_list
from .._private.doors.internal_kv import _internal_kv_put as kv_put
from .._private.doors.state import JOB_KV_NAMESPACE, JOB_KV_PREFIX

NAMESPACE = JOB_KV_NAMESPACE
PACKAGE_NAMESPACE = "_ember_packages"
MAX_PACKAGE_BYTES = 100 * 2**20
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# A finished job's output kept in the KV (its last 8 MiB; the full log stays in the log file).
MAX_KEPT_LOG_BYTES = 8 * 2**20
SUPPORTED_RUNTIME_ENV = ("working_dir", "env_vars")


def _key(submission_id: str) -> bytes:
    return JOB_KV_PREFIX + submission_id.encode()


def _logs_key(submission_id: str) -> bytes:
    return b"job_logs:" + submission_id.encode()


def read_info(submission_id: str) -> dict[str, Any] | None:
    """A job's record, or None."""
    raw = kv_get(_key(submission_id), namespace=NAMESPACE)
    return json.loads(raw) if raw else None


def write_info(info: dict[str, Any]) -> None:
    """Stores a job's record."""
    kv_put(_key(info["submission_id"]), json.dumps(info).encode(), namespace=NAMESPACE)


# EMBER_ variables a job's driver keeps: its node's IP, log level, trace dir, and the cluster's
# auth/TLS set-up.
_PASSED_ENV = ("EMBER_NODE_IP", "EMBER_LOG_LEVEL", "EMBER_TRACE_DIR", "EMBER_AUTH_MODE",
               "EMBER_AUTH_TOKEN", "EMBER_AUTH_TOKEN_PATH", "EMBER_USE_TLS", "EMBER_TLS_SERVER_CERT",
               "EMBER_TLS_SERVER_KEY", "EMBER_TLS_CA_CERT")


class JobSupervisor:
    """Runs one entrypoint as a subprocess on its node; keeps its output and its record."""

    def __init__(self, submission_id: str, entrypoint: str, working_dir_zip: bytes | None,
                 env_vars: dict[str, str] | None = None) -> None:
        import subprocess
        import tempfile
        import threading

        import ember

        self.submission_id = submission_id
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
        env.update(env_vars or {})
        logs = os.path.join(envvars.get("EMBER_SESSION_DIR", self.dir), "logs")
        os.makedirs(logs, exist_ok=True)
        self.log_path = os.path.join(logs, f"job-driver-{submission_id}.log")
        self.lines: list[str] = []
        self.stopped = False
        self.proc = subprocess.Popen(entrypoint, shell=True, cwd=self.dir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, errors="replace",
                                     start_new_session=True)
        self._update(status="RUNNING", message="Job is currently running.",
                     driver_node_id=ember.get_runtime_context().get_node_id())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _update(self, **fields: Any) -> None:
        info = read_info(self.submission_id) or {}
        info.update(fields)
        write_info(info)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a") as f:
            for line in self.proc.stdout:
                self.lines.append(line)
                f.write(line)
                f.flush()
        rc = self.proc.wait()
        if self.stopped:
            status, message = "STOPPED", "Job was intentionally stopped."
        elif rc == 0:
            status, message = "SUCCEEDED", "Job finished successfully."
        else:
            status, message = "FAILED", f"Job entrypoint command failed with exit code {rc}"
        kv_put(_logs_key(self.submission_id), "".join(self.lines).encode()[-MAX_KEPT_LOG_BYTES:],
               namespace=NAMESPACE)
        self._update(status=status, message=message, end_time=int(time.time() * 1000),
                     driver_exit_code=rc, error_type=None if status != "FAILED" else "JOB_ENTRYPOINT_COMMAND_ERROR")
        self._end_self()

    def _end_self(self) -> None:
        """Ends this supervisor once its job has ended (as Ray's does): its worker process and
        the entrypoint resources it holds are released; the record and the logs stay in the KV."""
        import shutil

        import ember

        shutil.rmtree(self.dir, ignore_errors=True)
        time.sleep(1.0)  # let a creation reply or a logs() call in flight finish first
        try:
            ember.kill(ember.get_actor(self.submission_id, namespace=NAMESPACE), no_restart=True)
        except Exception:  # already killed by delete()
            pass

    def status(self) -> tuple[str, int | None]:
        """(RUNNING|SUCCEEDED|FAILED|STOPPED, exit code or None)."""
        rc = self.proc.poll()
        if rc is None or self._reader.is_alive():
            return "RUNNING", None
        return ("STOPPED" if self.stopped else "SUCCEEDED" if rc == 0 else "FAILED"), rc

    def logs(self, offset: int = 0) -> tuple[str, int]:
        """Output lines from `offset` on, and the next offset."""
        lines = self.lines[offset:]
        return "".join(lines), offset + len(lines)

    def stop(self) -> bool:
        """SIGTERM to the entrypoint's process group (SIGKILL after 3 s); True if it was running."""
        import signal

        if self.proc.poll() is not None:
            return False
        self.stopped = True
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(3)
        except ProcessLookupError:
            pass
        except Exception:
            os.killpg(self.proc.pid, signal.SIGKILL)
        return True

    def cleanup(self) -> None:
        """Stops the job and removes its directory."""
        import shutil

        self.stop()
        self._reader.join(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def zip_dir(path: str) -> bytes:
    """A directory as zip bytes (.git, .venv and __pycache__ left out); ValueError past 100 MiB."""
    if not os.path.isdir(path):
        raise ValueError(f"working_dir {path!r} is not a directory")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in (".git", ".venv", "__pycache__")]
            for f in files:
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, path))
    data = buf.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise ValueError(f"working_dir {path} is {len(data) / 2**20:.0f} MiB zipped; the limit is "
                         f"{MAX_PACKAGE_BYTES / 2**20:.0f} MiB")
    return data


def package_key(uri: str) -> bytes:
    """The KV key of an uploaded package URI (gcs://_ray_pkg_<hash>.zip); ValueError otherwise."""
    protocol, sep, name = uri.partition("://")
    if not sep or protocol != "gcs" or not name.endswith(".zip") or "/" in name:
        raise ValueError(f"working_dir {uri!r}: expected an uploaded package gcs://<name>.zip "
                         "(Ray's JobSubmissionClient uploads local directories first)")
    return name.encode()


def package_exists(uri: str) -> bool:
    """Whether a package was uploaded."""
    return bool(kv_exists(package_key(uri), namespace=PACKAGE_NAMESPACE))


def put_package(uri: str, data: bytes) -> None:
    """Stores an uploaded package (a zip, at most 100 MiB)."""
    if len(data) > MAX_PACKAGE_BYTES:
        raise ValueError(f"package {uri} is {len(data) / 2**20:.0f} MiB; the limit is "
                         f"{MAX_PACKAGE_BYTES / 2**20:.0f} MiB")
    try:
        zipfile.ZipFile(io.BytesIO(data)).testzip()
    except zipfile.BadZipFile:
        raise ValueError(f"package {uri} is not a zip file") from None
    for key, value in kv_parts.split(package_key(uri), data):  # the GCS's message limit
        kv_put(key, value, overwrite=False, namespace=PACKAGE_NAMESPACE)  # named by content


def _get_package(uri: str) -> bytes | None:
    """An uploaded package, stored whole or in parts (ember_common.kv_parts)."""
    key = package_key(uri)
    stored = kv_get(key, namespace=PACKAGE_NAMESPACE)
    keys = None if stored is None else kv_parts.parts_of(key, stored)
    if stored is None or keys is None:
        return stored
    return kv_parts.join(stored, [kv_get(k, namespace=PACKAGE_NAMESPACE) for k in keys])


def _check_runtime_env(runtime_env: dict[str, Any] | None) -> tuple[bytes | None, dict[str, str]]:
    env = runtime_env or {}
    if not isinstance(env, dict):
        raise ValueError(f"runtime_env must be a dict, got {type(env).__name__}")
    extra = sorted(k for k, v in env.items() if k not in SUPPORTED_RUNTIME_ENV and v)
    if extra:
        raise ValueError(f"runtime_env fields {extra} are not supported by Ember's job submission "
                         f"(supported: {list(SUPPORTED_RUNTIME_ENV)})")
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in env_vars.items()):
        raise ValueError("runtime_env['env_vars'] must map strings to strings")
    payload = None
    if env.get("working_dir"):
        wd = env["working_dir"]
        if not isinstance(wd, str):
            raise ValueError("runtime_env['working_dir'] must be a string")
        if "://" in wd:
            payload = _get_package(wd)
            if payload is None:
                raise ValueError(f"working_dir package {wd} was not uploaded")
        else:
            payload = zip_dir(wd)
    return payload, env_vars


def submit(entrypoint: str, **kwargs: Any) -> str:
    """Records the job PENDING and starts its supervisor (the caller is a connected driver);
    returns the submission id. ValueError naming the problem for bad input or a taken id."""
    return start(entrypoint, **kwargs)[0]


def start(entrypoint: str, *, submission_id: str | None = None, runtime_env: dict[str, Any] | None = None,
           metadata: dict[str, str] | None = None, entrypoint_num_cpus: float | None = None,
           entrypoint_num_gpus: float | None = None, entrypoint_memory: int | None = None,
           entrypoint_resources: dict[str, float] | None = None,
           working_dir_zip: bytes | None = None) -> tuple[str, Any]:
    """`submit`, also returning the supervisor's actor handle."""
    import ember

    if not isinstance(entrypoint, str) or not entrypoint.strip():
        raise ValueError("entrypoint must be a non-empty shell command")
    sid = submission_id or f"ember_job_{uuid.uuid4().hex[:12]}"
    if not isinstance(sid, str) or not sid.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise ValueError(f"submission_id {sid!r}: use letters, digits, '_', '-' and '.'")
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ValueError("metadata must map strings to strings")
    payload, env_vars = _check_runtime_env(runtime_env)
    payload = working_dir_zip or payload
    resources = dict(entrypoint_resources or {})
    for name, value in (("entrypoint_num_cpus", entrypoint_num_cpus), ("entrypoint_num_gpus", entrypoint_num_gpus),
                        ("entrypoint_memory", entrypoint_memory)):
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    info = {"type": "SUBMISSION", "job_id": None, "submission_id": sid, "driver_info": None,
            "status": "PENDING", "entrypoint": entrypoint, "message": "Job has not started yet.",
            "error_type": None, "start_time": int(time.time() * 1000), "end_time": None,
            "metadata": metadata or {}, "runtime_env": runtime_env or {},
            "driver_agent_http_address": None, "driver_node_id": None, "driver_exit_code": None,
            "entrypoint_num_cpus": entrypoint_num_cpus, "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory, "entrypoint_resources": entrypoint_resources}
    existed = kv_put(_key(sid), json.dumps(info).encode(), overwrite=False, namespace=NAMESPACE)
    if existed:
        raise ValueError(f"Job with submission_id {sid} already exists. Please use a different submission_id.")
    try:
        handle = ember.remote(JobSupervisor).options(
            name=sid, namespace=NAMESPACE, lifetime="detached", num_cpus=entrypoint_num_cpus or 0,
            num_gpus=entrypoint_num_gpus or 0, memory=entrypoint_memory or None, resources=resources or None,
            max_concurrency=4).remote(sid, entrypoint, payload, env_vars)
    except Exception as e:
        kv_del(_key(sid), namespace=NAMESPACE)
        raise ValueError(f"cannot start job {sid}: {e}") from None
    return sid, handle


def _supervisor(sid: str) -> Any:
    import ember

    try:
        return ember.get_actor(sid, namespace=NAMESPACE)
    except ValueError:
        return None


def info(sid: str) -> dict[str, Any] | None:
    """The job's record; a PENDING/RUNNING job whose supervisor died without writing an end is
    reported FAILED with the supervisor's death cause."""
    rec = read_info(sid)
    if rec is None or rec["status"] in TERMINAL or _supervisor(sid) is not None:
        return rec
    from .._private.doors import state

    actors, _ = state.fetch("actors", state.resolve_address(None), 10.0)
    dead = [a for a in actors if a["name"] == sid and a["ray_namespace"] == NAMESPACE and a["state"] == "DEAD"]
    rec = read_info(sid)  # the supervisor may have written the end meanwhile
    if dead and rec is not None and rec["status"] not in TERMINAL:
        cause = (dead[-1]["death_cause"] or {}).get("error_message", "")
        rec.update(status="FAILED", error_type="JOB_SUPERVISOR_ACTOR_DIED",
                   message=f"Job supervisor actor died: {cause.splitlines()[-1] if cause else 'unknown cause'}")
    return rec


def list_infos() -> list[dict[str, Any]]:
    """Every submitted job's record."""
    out = []
    for key in kv_list(JOB_KV_PREFIX, namespace=NAMESPACE):
        rec = info(key[len(JOB_KV_PREFIX):].decode())
        if rec:
            out.append(rec)
    return out


def logs(sid: str, offset: int = 0) -> tuple[str, int]:
    """Output from line `offset` on and the next offset: from the running supervisor, else what
    it kept in the KV when the job ended."""
    import ember

    sup = _supervisor(sid)
    if sup is not None:
        try:
            text, nxt = ember.get(sup.logs.remote(offset), timeout=30)
            return str(text), int(nxt)
        except Exception:  # it ended meanwhile: the KV has the output
            pass
    raw = kv_get(_logs_key(sid), namespace=NAMESPACE)
    if raw is None:
        return "", offset
    lines = raw.decode(errors="replace").splitlines(keepends=True)
    return "".join(lines[offset:]), max(offset, len(lines))


def stop(sid: str) -> bool:
    """Stops a running job; False when it already ended."""
    import ember

    sup = _supervisor(sid)
    if sup is None:
        return False
    return bool(ember.get(sup.stop.remote(), timeout=30))


def delete(sid: str) -> bool:
    """Deletes a finished job's record and supervisor. ValueError when it is still running."""
    import ember

    rec = info(sid)
    if rec is None:
        return False
    if rec["status"] not in TERMINAL:
        raise ValueError(f"Attempted to delete job '{sid}', but it is in a non-terminal state "
                         f"{rec['status']}. Stop the job first.")
    sup = _supervisor(sid)
    if sup is not None:
        try:
            ember.get(sup.cleanup.remote(), timeout=30)
            ember.kill(sup)
        except Exception:  # it ended by itself meanwhile
            pass
    kv_del(_logs_key(sid), namespace=NAMESPACE)
    kv_del(_key(sid), namespace=NAMESPACE)
    return True
