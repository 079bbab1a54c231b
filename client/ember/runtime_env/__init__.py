"""Ray's `ray.runtime_env`: `RuntimeEnv` and `RuntimeEnvConfig`.

    from ember.runtime_env import RuntimeEnv, RuntimeEnvConfig

    env = RuntimeEnv(working_dir="./app", env_vars={"MODE": "prod"}, pip=["mypkg==1.0"],
                     config=RuntimeEnvConfig(setup_timeout_seconds=120))
    f.options(runtime_env=env).remote()

Both are dicts (as in Ray), so a plain dict works wherever they do. Fields Ember does not
implement (conda, container, image_uri, uv, ...) and unknown fields raise ValueError naming them.
"""
from __future__ import annotations

from typing import Any

from ember._private.runtime_env import validation

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]


class RuntimeEnvConfig(dict):  # type: ignore[type-arg]
    """Options of a runtime env's set-up: `setup_timeout_seconds` (600; -1: none) and
    `eager_install` (accepted; Ember installs when a task first needs the env)."""

    def __init__(self, setup_timeout_seconds: int = validation.DEFAULT_SETUP_TIMEOUT_S,
                 eager_install: bool = True, log_files: list[str] | None = None) -> None:
        super().__init__(validation._config({"setup_timeout_seconds": setup_timeout_seconds,
                                             "eager_install": eager_install,
                                             "log_files": log_files}, "RuntimeEnvConfig"))

    @classmethod
    def parse_and_validate_runtime_env_config(cls, config: Any) -> RuntimeEnvConfig:
        """A RuntimeEnvConfig from a dict (Ray's name)."""
        return config if isinstance(config, cls) else cls(**dict(config))


class RuntimeEnv(dict):  # type: ignore[type-arg]
    """A runtime environment: validated on construction, a dict of its fields."""

    def __init__(self, *, py_modules: list[Any] | None = None, working_dir: str | None = None,
                 pip: Any = None, env_vars: dict[str, str] | None = None,
                 config: dict[str, Any] | RuntimeEnvConfig | None = None,
                 excludes: list[str] | None = None, _validate: bool = True, **kwargs: Any) -> None:
        fields = {"py_modules": py_modules, "working_dir": working_dir, "pip": pip,
                  "env_vars": env_vars, "config": config, "excludes": excludes, **kwargs}
        fields = {k: v for k, v in fields.items() if v is not None}
        if _validate:
            validation.validate(fields, "RuntimeEnv")  # raises naming the bad field
        super().__init__(fields)

    def working_dir(self) -> str:
        """The working_dir ("" when none)."""
        return str(self.get("working_dir", ""))

    def py_modules(self) -> list[str]:
        """The py_modules (paths or URIs)."""
        return list(self.get("py_modules", []))

    def env_vars(self) -> dict[str, str]:
        """The environment variables."""
        return dict(self.get("env_vars", {}))

    def pip_config(self) -> dict[str, Any]:
        """The pip field, normalised ({"packages", "pip_check", "pip_install_options"})."""
        return dict(validation.validate({"pip": self["pip"]})["pip"]) if "pip" in self else {}

    def has_working_dir(self) -> bool:
        """Whether a working_dir is set."""
        return "working_dir" in self

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of the fields."""
        return dict(self)

    def serialize(self) -> str:
        """Canonical JSON of the fields as given."""
        return validation.serialize(validation.validate(self))

    @classmethod
    def deserialize(cls, serialized: str) -> RuntimeEnv:
        """A RuntimeEnv from `serialize()`'s output (or a resolved env's JSON)."""
        return cls(_validate=False, **validation.deserialize(serialized))
