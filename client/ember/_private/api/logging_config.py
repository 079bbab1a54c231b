"""`ember.LoggingConfig`: how a job's processes log (Ray's `ray.LoggingConfig`).

Given to `ember.init(logging_config=...)`, it sets the root logger of the driver and of every
worker that runs the job's tasks and actors: one handler on stderr at `log_level`, in TEXT or JSON.
The driver hands it to its workers in the job's runtime env, as the environment variable
EMBER_LOGGING_CONFIG (a JSON object); a worker applies it when it starts. Worker stderr reaches the
driver's console as every worker line does.

Each record carries the context of the call that logged it — job_id, worker_id, node_id, and in a
task or actor call task_id, task_name, task_func_name and actor_id — and timestamp_ns, plus the
standard LogRecord attributes named in `additional_log_standard_attrs` and the user's `extra`
fields. TEXT writes them after the message as `key=value`; JSON writes one object per line.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

ENV_VAR = "EMBER_LOGGING_CONFIG"
ENCODINGS = ("TEXT", "JSON")
# The attributes every LogRecord has (Python's documented list), which are not user context.
STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}
CONTEXT_KEYS = ("job_id", "worker_id", "node_id", "actor_id", "task_id", "task_name", "task_func_name")


@dataclass
class LoggingConfig:
    """The encoding (TEXT or JSON), the level of the root logger's handler, and which standard
    LogRecord attributes to add to each line (e.g. ["name"])."""

    encoding: str = "TEXT"
    log_level: str = "INFO"
    additional_log_standard_attrs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"LoggingConfig: invalid encoding {self.encoding!r}; valid encodings "
                             f"are {', '.join(ENCODINGS)}")
        if not isinstance(logging.getLevelName(self.log_level), int):
            raise ValueError(f"LoggingConfig: invalid log_level {self.log_level!r}; give a logging "
                             "level name such as 'DEBUG' or 'INFO'")
        unknown = sorted(set(self.additional_log_standard_attrs) - STANDARD_ATTRS)
        if unknown:
            raise ValueError(f"LoggingConfig: {', '.join(map(repr, unknown))} in "
                             "additional_log_standard_attrs are not standard LogRecord attributes "
                             f"(they are: {', '.join(sorted(STANDARD_ATTRS))})")

    def _to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def _from_json(cls, text: str) -> LoggingConfig:
        return cls(**json.loads(text))


def configure(config: LoggingConfig) -> None:
    """This process's root logger: only the config's handler, at its level."""
    level = logging.getLevelName(config.log_level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(_Formatter(config.encoding, tuple(config.additional_log_standard_attrs)))
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def _context() -> dict[str, str]:
    """The job, worker, node and current call of this process; {} before `init`."""
    import ember  # the public API, as a user's filter would ask it

    if not ember.is_initialized():
        return {}
    ctx = ember.get_runtime_context()  # a driver, or a worker between calls, has no task or actor
    out = {"job_id": ctx.get_job_id(), "worker_id": ctx.get_worker_id(), "node_id": ctx.get_node_id(),
           "actor_id": ctx.get_actor_id(), "task_id": ctx.get_task_id(), "task_name": ctx.get_task_name(),
           "task_func_name": ctx.get_task_function_name()}
    return {k: v for k, v in out.items() if v}


class _ContextFilter(logging.Filter):
    """Puts the context and timestamp_ns on each record (a record's own `extra` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            ctx = _context()
        except Exception:  # a record logged while the worker is being set up or torn down
            ctx = {}
        for key, value in ctx.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        if not hasattr(record, "timestamp_ns"):
            record.timestamp_ns = time.time_ns()
        return True


class _Formatter(logging.Formatter):
    def __init__(self, encoding: str, standard_attrs: tuple[str, ...]) -> None:
        super().__init__()
        self.encoding = encoding
        self.standard_attrs = standard_attrs

    def _fields(self, record: logging.LogRecord) -> dict[str, Any]:
        out = {a: getattr(record, a, None) for a in self.standard_attrs}
        extra = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS and not k.startswith("_")}
        out.update((k, extra.pop(k)) for k in CONTEXT_KEYS if k in extra)
        out.update(sorted(extra.items()))  # the user's `extra`, then timestamp_ns last
        out["timestamp_ns"] = out.pop("timestamp_ns", time.time_ns())
        return out

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        asctime = self.formatTime(record)
        exc = self.formatException(record.exc_info) if record.exc_info else ""
        fields = self._fields(record)
        if self.encoding == "JSON":
            obj: dict[str, Any] = {"asctime": asctime, "levelname": record.levelname, "message": message,
                                   "filename": record.filename, "lineno": record.lineno}
            if exc:
                obj["exc_text"] = exc
            obj.update(fields)
            return json.dumps(obj, default=str)
        line = f"{asctime}\t{record.levelname} {record.filename}:{record.lineno} -- {message}"
        if exc:
            line += "\n" + exc
        return line + "".join(f" {k}={v}" for k, v in fields.items())


def from_environment() -> LoggingConfig | None:
    """The job's config this worker was started with (None: the job gave none)."""
    from ember_common import envvars

    text = envvars.get(ENV_VAR)
    return LoggingConfig._from_json(text) if text else None


def apply_to_job(config: LoggingConfig | None, runtime_env: dict[str, Any] | None) -> dict[str, Any] | None:
    """`ember.init(logging_config=...)`: applies the config to this driver and returns the job's
    runtime env carrying it to every worker."""
    if config is None:
        return runtime_env
    if not isinstance(config, LoggingConfig):
        raise TypeError(f"logging_config must be an ember.LoggingConfig, got {type(config).__name__}")
    configure(config)
    env = dict(runtime_env or {})
    env["env_vars"] = {**(env.get("env_vars") or {}), ENV_VAR: config._to_json()}
    return env
