"""Ray's `ray.job_config.JobConfig`, for `ember.init(job_config=...)`: Ember honours its
runtime_env and ray_namespace; `init` refuses, by name, every other field that is set."""
from __future__ import annotations

from typing import Any


class JobConfig:
    """A job's settings, as Ray's JobConfig takes them (see `ember.init` for which apply)."""

    def __init__(self, jvm_options: list[str] | None = None, code_search_path: list[str] | None = None,
                 runtime_env: dict[str, Any] | None = None, _client_job: bool = False,
                 metadata: dict[str, str] | None = None, ray_namespace: str | None = None,
                 default_actor_lifetime: str = "non_detached",
                 _disable_job_level_lineage_reconstruction: bool = False,
                 _py_driver_sys_path: list[str] | None = None) -> None:
        if _disable_job_level_lineage_reconstruction:
            raise ValueError("JobConfig(_disable_job_level_lineage_reconstruction=True) is not implemented "
                             "by Ember")
        self.jvm_options = jvm_options or []
        self.code_search_path = code_search_path or []
        self.runtime_env = runtime_env
        self.client_job = _client_job
        self.metadata = metadata or {}
        self.ray_namespace = ray_namespace
        self.default_actor_lifetime = default_actor_lifetime
        self.py_driver_sys_path = _py_driver_sys_path or []

    def set_runtime_env(self, runtime_env: dict[str, Any] | None) -> None:
        self.runtime_env = runtime_env

    def set_ray_namespace(self, ray_namespace: str) -> None:
        self.ray_namespace = ray_namespace
