"""Ray's job SDK (`ray.job_submission`): submit driver programs to a cluster over the
dashboard's REST API and follow them.

    from ember.job_submission import JobSubmissionClient, JobStatus
    client = JobSubmissionClient("http://127.0.0.1:8265")
    sid = client.submit_job(entrypoint="python train.py", runtime_env={"working_dir": "./"})
    client.get_job_status(sid)            # JobStatus.RUNNING ...
    async for lines in client.tail_job_logs(sid): print(lines, end="")

It speaks the same protocol as Ray's client (the two are interchangeable against either
server): a local working_dir is zipped and uploaded once as `gcs://_ray_pkg_<hash>.zip`
(GET/PUT /api/packages/...), then POST /api/jobs/ names it.
"""
from __future__ import annotations

import enum
import hashlib
import io
import json
import os
import urllib.error
import urllib.request
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from typing import Any

from ember_common import envvars

__all__ = ["JobDetails", "JobInfo", "JobStatus", "JobSubmissionClient", "JobType"]

DEFAULT_DASHBOARD_ADDRESS = "http://127.0.0.1:8265"


class JobStatus(str, enum.Enum):
    """A job's state (Ray's names)."""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return self.value

    def is_terminal(self) -> bool:
        """Whether the job has ended (it will not change again)."""
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobType(str, enum.Enum):
    """SUBMISSION: started through this API; DRIVER: a program that connected by itself."""
    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


@dataclass
class JobDetails:
    """A job as the REST API describes it (Ray's JobDetails)."""
    type: JobType
    status: JobStatus
    entrypoint: str
    job_id: str | None = None
    submission_id: str | None = None
    driver_info: dict[str, Any] | None = None
    message: str | None = None
    error_type: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    metadata: dict[str, str] | None = None
    runtime_env: dict[str, Any] | None = None
    driver_agent_http_address: str | None = None
    driver_node_id: str | None = None
    driver_exit_code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobDetails:
        """From the REST API's JSON (unknown keys kept in `extra`)."""
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        known["type"] = JobType(known.get("type", "SUBMISSION"))
        known["status"] = JobStatus(known["status"])
        return cls(**known, extra={k: v for k, v in d.items() if k not in names})


JobInfo = JobDetails  # Ray's older name for the same record


def _resolve(address: str | None) -> str:
    if address is None:
        address = os.environ.get("RAY_API_SERVER_ADDRESS") or envvars.get("EMBER_DASHBOARD_ADDRESS")
    if address is None:
        from ember._private import node

        info = node.read_current_cluster() or {}
        address = info.get("dashboard_url") or DEFAULT_DASHBOARD_ADDRESS
    if "://" not in address:
        address = "http://" + address
    return address.rstrip("/")


def _zip_dir(path: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in (".git", ".venv", "__pycache__"))
            for f in sorted(files):
                full = os.path.join(root, f)
                info = zipfile.ZipInfo(os.path.relpath(full, path), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(full, "rb") as fh:
                    z.writestr(info, fh.read())
    return buf.getvalue()


def _auth_headers() -> dict[str, str]:
    """The cluster token as `Authorization: Bearer` (ember_common.auth: EMBER_AUTH_TOKEN, its
    path, ~/.ember/auth_token), as Ray's client sends RAY_AUTH_TOKEN; {} when there is none."""
    from ember_common import auth

    try:
        return auth.http_headers()
    except auth.AuthConfigError:
        return {}


class JobSubmissionClient:
    """Submits and follows jobs through a dashboard (Ray's JobSubmissionClient)."""

    def __init__(self, address: str | None = None, create_cluster_if_needed: bool = False,
                 cookies: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
                 headers: dict[str, Any] | None = None, verify: str | bool | None = True) -> None:
        self._address = _resolve(address)
        self._headers = {**_auth_headers(), **{str(k): str(v) for k, v in (headers or {}).items()}}
        self._default_metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        self.server_ray_version = self._call("GET", "/api/version")["ray_version"]

    def _call(self, method: str, path: str, body: bytes | None = None) -> Any:
        return json.loads(self._request(method, path, body) or b"null")

    def _request(self, method: str, path: str, body: bytes | None = None, *, ok404: bool = False,
                 content_type: str = "application/json") -> bytes | None:
        req = urllib.request.Request(self._address + path, data=body, method=method,
                                     headers={**self._headers, "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if ok404 and e.code == 404:
                return None
            raise RuntimeError(f"Request failed with status code {e.code}: {text}") from None
        except urllib.error.URLError as e:
            raise ConnectionError(f"Failed to connect to the Ember dashboard at {self._address}: {e.reason}") from None

    def _upload_working_dir(self, runtime_env: dict[str, Any]) -> None:
        wd = runtime_env.get("working_dir")
        if not wd or (isinstance(wd, str) and "://" in wd):
            return
        if not isinstance(wd, str) or not os.path.isdir(wd):
            raise ValueError(f"working_dir {wd!r} is not a local directory")
        data = _zip_dir(wd)
        uri = f"gcs://_ray_pkg_{hashlib.sha1(data).hexdigest()[:16]}.zip"
        path = "/api/packages/gcs/" + uri.split("://", 1)[1]
        if self._request("GET", path, ok404=True) is None:  # not uploaded yet
            self._request("PUT", path, data, content_type="application/octet-stream")
        runtime_env["working_dir"] = uri

    def submit_job(self, *, entrypoint: str, job_id: str | None = None, runtime_env: dict[str, Any] | None = None,
                   metadata: dict[str, str] | None = None, submission_id: str | None = None,
                   entrypoint_num_cpus: float | None = None, entrypoint_num_gpus: float | None = None,
                   entrypoint_memory: int | None = None, entrypoint_resources: dict[str, float] | None = None,
                   entrypoint_label_selector: dict[str, str] | None = None) -> str:
        """Starts `entrypoint` (a shell command) on the cluster; returns its submission id."""
        env = json.loads(json.dumps(runtime_env or {}))
        self._upload_working_dir(env)
        req = {"entrypoint": entrypoint, "submission_id": submission_id or job_id, "runtime_env": env,
               "metadata": {**(metadata or {}), **self._default_metadata},
               "entrypoint_num_cpus": entrypoint_num_cpus, "entrypoint_num_gpus": entrypoint_num_gpus,
               "entrypoint_memory": entrypoint_memory, "entrypoint_resources": entrypoint_resources,
               "entrypoint_label_selector": entrypoint_label_selector}
        body = json.dumps({k: v for k, v in req.items() if v is not None}).encode()
        return str(self._call("POST", "/api/jobs/", body)["submission_id"])

    def stop_job(self, job_id: str) -> bool:
        """Stops a running job; False when it had already ended."""
        return bool(self._call("POST", f"/api/jobs/{job_id}/stop")["stopped"])

    def delete_job(self, job_id: str) -> bool:
        """Deletes a finished job's record (RuntimeError while it runs)."""
        return bool(self._call("DELETE", f"/api/jobs/{job_id}")["deleted"])

    def get_job_info(self, job_id: str) -> JobDetails:
        """A job's details (by submission id or job id)."""
        return JobDetails.from_json(self._call("GET", f"/api/jobs/{job_id}"))

    def list_jobs(self) -> list[JobDetails]:
        """Every job of the cluster, submitted or not."""
        return [JobDetails.from_json(d) for d in self._call("GET", "/api/jobs/")]

    def get_job_status(self, job_id: str) -> JobStatus:
        """A job's status."""
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id: str) -> str:
        """Everything the job printed so far."""
        return str(self._call("GET", f"/api/jobs/{job_id}/logs")["logs"])

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """The job's output as it grows, until the job ends (a websocket, as Ray's)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosedOK

        url = "ws" + self._address[len("http"):] + f"/api/jobs/{job_id}/logs/tail"
        async with connect(url, additional_headers=self._headers or None) as ws:
            while True:
                try:
                    msg = await ws.recv()
                except ConnectionClosedOK:
                    return
                yield msg if isinstance(msg, str) else msg.decode(errors="replace")
