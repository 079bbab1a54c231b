"""The submitting process's side of runtime envs: the env a new task or actor gets.

`resolve(options_env)` validates the task's or actor's own `runtime_env`, packages and uploads
its local `working_dir` / `py_modules` (packaging.Uploader, through the internal KV door), and
merges it over the parent's env (validation.merge): in a driver the job's env (given to
`ember.init(runtime_env=...)`, resolved there once), in a worker the env it was started in
(EMBER_RUNTIME_ENV, set by its raylet). The result is the canonical JSON that travels in
TaskSpec.serialized_runtime_env and the lease request ("" when there is none).
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from ember_common import envvars

from . import packaging, validation

_lock = threading.Lock()
_job_env: str | None = None  # a driver's resolved job env (None: not a driver, or none given)
_uploader: packaging.Uploader | None = None

WORKER_ENV_VAR = "EMBER_RUNTIME_ENV"


def _get_uploader() -> packaging.Uploader:
    global _uploader
    with _lock:
        if _uploader is None:
            from ember._private.doors import internal_kv as kv
            from ember_common import kv_parts
            from ember_common.config import get_config

            def exists(uri: str) -> bool:
                return kv._internal_kv_exists(uri, namespace=packaging.NAMESPACE)

            def put(uri: str, data: bytes) -> None:  # in parts: the GCS's message limit
                for key, part in kv_parts.split(uri.encode(), data):
                    kv._internal_kv_put(key, part, overwrite=False, namespace=packaging.NAMESPACE)

            _uploader = packaging.Uploader(
                exists, put, lambda: get_config().runtime_env_max_package_bytes)
        return _uploader


def parent_env() -> str:
    """The serialized env new tasks and actors inherit here ("" for none)."""
    if _job_env is not None:
        return _job_env
    return envvars.get(WORKER_ENV_VAR, "")


def resolve_own(env: Mapping[str, Any] | None, what: str = "runtime_env") -> dict[str, Any]:
    """A user-given env validated, its local paths packaged and uploaded (URIs in their place);
    `excludes` is consumed by the packaging."""
    v = validation.validate(env, what)
    if not v:
        return {}
    up = _get_uploader()
    excludes = v.pop("excludes", [])
    if "working_dir" in v:
        v["working_dir"] = up.package(v["working_dir"], excludes, module=False,
                                      what=f"{what}['working_dir']")
    if "py_modules" in v:
        v["py_modules"] = [up.package(p, excludes, module=True, what=f"{what}['py_modules']")
                           for p in v["py_modules"]]
    return v


def resolve(env: Mapping[str, Any] | None, what: str = "runtime_env") -> str:
    """The serialized env of a task or actor with this `runtime_env` option, merged over the
    parent's; ValueError/TypeError in the caller for a bad env (a missing directory, a package
    over the size limit, an unknown field)."""
    own = resolve_own(env, what)
    parent = parent_env()
    if not own:
        return parent
    return validation.serialize(validation.merge(validation.deserialize(parent), own))


def set_job_env(env: Mapping[str, Any] | None) -> None:
    """ember.init(runtime_env=...): the job's env, resolved (and uploaded) once."""
    global _job_env
    _job_env = None
    if env:
        _job_env = validation.serialize(resolve_own(env, "ember.init(runtime_env=...)"))


def reset() -> None:
    """ember.shutdown(): forget the job's env and the uploads (the next cluster lacks them)."""
    global _job_env, _uploader
    with _lock:
        _job_env = None
        _uploader = None


def current() -> dict[str, Any]:
    """The env this process's tasks run in (a worker) or the job's (a driver), as a dict."""
    return validation.deserialize(parent_env())
