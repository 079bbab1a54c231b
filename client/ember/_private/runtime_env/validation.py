"""Runtime-env validation, normalisation and merging (pure: no I/O beyond reading a
requirements file named by `pip`).

A runtime env is a dict with Ray 2.60's field names. Ember implements `env_vars`,
`working_dir`, `py_modules`, `pip`, `excludes` and `config`; Ray's other fields (`conda`,
`container`, `image_uri`, `uv`, ...) are refused with a ValueError naming them, and so is any
unknown field.

Merging (Ray's rule for a task or actor under a job or a parent task): the child's fields
replace the parent's field by field, except `env_vars`, which are merged key by key (the
child's value wins). A child without a runtime env inherits the parent's whole.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping

SUPPORTED = ("env_vars", "working_dir", "py_modules", "pip", "excludes", "config")
# Ray's fields Ember does not implement: a clear error, not a silent no-op.
RAY_ONLY = ("conda", "container", "image_uri", "uv", "py_executable", "java_jars", "nsight",
            "mpi", "worker_process_setup_hook", "_nsight", "rocprof_sys")
CONFIG_FIELDS = ("setup_timeout_seconds", "eager_install", "log_files")
PIP_FIELDS = ("packages", "pip_check", "pip_version", "pip_install_options")
DEFAULT_SETUP_TIMEOUT_S = 600
DEFAULT_PIP_OPTIONS = ["--disable-pip-version-check", "--no-cache-dir"]


def validate(env: Mapping[str, Any] | None, what: str = "runtime_env") -> dict[str, Any]:
    """Checks a runtime env given by the user and returns it normalised (pip as
    {"packages", "pip_check", "pip_install_options"}, config filled in). Paths stay local
    here; `packaging` turns them into package URIs. ValueError/TypeError name the problem."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"{what} must be a dict or ember.runtime_env.RuntimeEnv, got "
                        f"{type(env).__name__}")
    unknown = sorted(k for k in env if k not in SUPPORTED)
    if unknown:
        ray_only = [k for k in unknown if k in RAY_ONLY]
        if ray_only:
            raise ValueError(f"{what}: field(s) {ray_only} are not supported by Ember (supported: "
                             f"{', '.join(SUPPORTED)})")
        raise ValueError(f"{what}: unknown field(s) {unknown}; valid fields are: "
                         f"{', '.join(SUPPORTED)}")
    out: dict[str, Any] = {}
    for k, v in env.items():
        if v is None:
            continue
        out[k] = _FIELD_CHECKS[k](v, f"{what}[{k!r}]")
    return out


def _env_vars(v: Any, what: str) -> dict[str, str]:
    if not isinstance(v, Mapping):
        raise TypeError(f"{what} must be a dict of str to str, got {type(v).__name__}")
    for k, val in v.items():
        if not isinstance(k, str) or not isinstance(val, str):
            raise TypeError(f"{what} must be a dict of str to str; {k!r}: {val!r} is not")
    return dict(v)


def _path(v: Any, what: str) -> str:
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str) or not v:
        raise TypeError(f"{what} must be a path (str), got {v!r}")
    return v


def _py_modules(v: Any, what: str) -> list[str]:
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"{what} must be a list of paths or modules, got {type(v).__name__}")
    out = []
    for m in v:
        if hasattr(m, "__file__") and not isinstance(m, str):  # a module object: its directory
            path = list(getattr(m, "__path__", []) or [])
            out.append(path[0] if path else str(m.__file__))
        else:
            out.append(_path(m, what))
    return out


def _excludes(v: Any, what: str) -> list[str]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(p, str) for p in v):
        raise TypeError(f"{what} must be a list of gitignore-style patterns (str)")
    return list(v)


def _pip(v: Any, what: str) -> dict[str, Any]:
    if isinstance(v, (str, os.PathLike)):  # a requirements.txt
        packages: Any = read_requirements(os.fspath(v), what)
        spec: dict[str, Any] = {}
    elif isinstance(v, (list, tuple)):
        packages, spec = list(v), {}
    elif isinstance(v, Mapping):
        bad = sorted(set(v) - set(PIP_FIELDS))
        if bad:
            raise ValueError(f"{what}: unknown field(s) {bad}; valid: {', '.join(PIP_FIELDS)}")
        if "packages" not in v:
            raise ValueError(f"{what} needs 'packages' (a list, or a requirements.txt path)")
        spec = dict(v)
        packages = spec.pop("packages")
        if isinstance(packages, (str, os.PathLike)):
            packages = read_requirements(os.fspath(packages), what)
    else:
        raise TypeError(f"{what} must be a list of requirements, a requirements.txt path or a "
                        f"dict with 'packages', got {type(v).__name__}")
    if not all(isinstance(p, str) and p.strip() for p in packages):
        raise TypeError(f"{what}: every requirement must be a non-empty str, got {packages!r}")
    for p in packages:
        if p.strip().startswith("-"):
            raise ValueError(f"{what}: {p.strip()!r} is a pip option, not a requirement; 'packages' "
                             f"takes requirement specifiers only (options go in "
                             f"'pip_install_options')")
    opts = spec.get("pip_install_options", DEFAULT_PIP_OPTIONS)
    if not isinstance(opts, (list, tuple)) or not all(isinstance(o, str) for o in opts):
        raise TypeError(f"{what}['pip_install_options'] must be a list of str")
    if "pip_version" in spec:
        raise ValueError(f"{what}: 'pip_version' is not supported by Ember (the node's pip is used)")
    return {"packages": [p.strip() for p in packages], "pip_check": bool(spec.get("pip_check", False)),
            "pip_install_options": list(opts)}


def read_requirements(path: str, what: str) -> list[str]:
    """The requirements of a requirements.txt (comments and blank lines dropped)."""
    if not os.path.isfile(path):
        raise ValueError(f"{what}: requirements file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        lines = [ln.split(" #")[0].strip() for ln in f]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _config(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise TypeError(f"{what} must be a dict or RuntimeEnvConfig, got {type(v).__name__}")
    bad = sorted(set(v) - set(CONFIG_FIELDS))
    if bad:
        raise ValueError(f"{what}: unknown field(s) {bad}; valid: {', '.join(CONFIG_FIELDS)}")
    t = v.get("setup_timeout_seconds", DEFAULT_SETUP_TIMEOUT_S)
    if isinstance(t, bool) or not isinstance(t, int) or (t <= 0 and t != -1):
        raise ValueError(f"{what}['setup_timeout_seconds'] must be an int > 0 (or -1: no "
                         f"timeout), got {t!r}")
    eager = v.get("eager_install", True)
    if not isinstance(eager, bool):
        raise TypeError(f"{what}['eager_install'] must be a bool, got {eager!r}")
    out: dict[str, Any] = {"setup_timeout_seconds": t, "eager_install": eager}
    if v.get("log_files"):
        out["log_files"] = list(v["log_files"])
    return out


_FIELD_CHECKS = {"env_vars": _env_vars, "working_dir": _path, "py_modules": _py_modules,
                 "pip": _pip, "excludes": _excludes, "config": _config}


def merge(parent: Mapping[str, Any] | None, child: Mapping[str, Any] | None) -> dict[str, Any]:
    """Ray's inheritance: the child's fields override the parent's, env_vars merge by key."""
    out = dict(parent or {})
    for k, v in (child or {}).items():
        if k == "env_vars":
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


def serialize(env: Mapping[str, Any]) -> str:
    """Canonical JSON ("" for an empty env): equal envs give equal strings."""
    if not env:
        return ""
    return json.dumps(env, sort_keys=True, separators=(",", ":"))


def deserialize(text: str) -> dict[str, Any]:
    """The inverse of serialize."""
    if not text:
        return {}
    out = json.loads(text)
    if not isinstance(out, dict):
        raise ValueError(f"a serialized runtime env must be a JSON object, got {text[:80]!r}")
    return out


def env_hash(serialized: str) -> str:
    """A short content hash of a serialized env ("" for none): the worker pool's key."""
    return hashlib.sha1(serialized.encode()).hexdigest()[:16] if serialized else ""
