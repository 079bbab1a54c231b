"""Tunables shared by the client and the services, read from EMBER_* environment variables.

Each field's unit is in its name; its variable (`EMBER_<FIELD_NAME_UPPER>`), default and one line
of doc are in the settings registry (envvars_table.py, docs/settings.md). `Config.from_env()`
reads them and warns about EMBER_* variables the registry does not know (a typo should not pass
silently).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import envvars


def tunable(name: str) -> Any:
    """A Config field: its default from the registry entry of variable `name`."""
    return dataclasses.field(default=envvars.VARS[name].default, metadata={"env": name})


@dataclasses.dataclass(frozen=True)
class Config:
    """The tunables (docs/settings.md has each one's doc; Ray's equivalent is named there)."""

    max_inline_bytes: int = tunable("EMBER_MAX_INLINE_BYTES")
    heartbeat_period_s: float = tunable("EMBER_HEARTBEAT_PERIOD_S")
    node_death_timeout_s: float = tunable("EMBER_NODE_DEATH_TIMEOUT_S")
    infeasible_timeout_s: float = tunable("EMBER_INFEASIBLE_TIMEOUT_S")
    lease_linger_s: float = tunable("EMBER_LEASE_LINGER_S")
    max_pending_lease_requests: int = tunable("EMBER_MAX_PENDING_LEASE_REQUESTS")
    # Pipelining: the worker gives back what it has not started when its task blocks, idle
    # workers steal a backlog. Only tasks of functions known to be short are pipelined: a task
    # goes behind others on a busy worker only while the estimated run time of all it holds
    # (per-function averages of the workers' reported run times) stays within
    # pipeline_budget_s; a function with no finished run yet is not pipelined, so a burst of
    # long tasks right after start-up spreads over workers and nodes.
    max_tasks_in_flight_per_worker: int = tunable("EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER")
    pipeline_budget_s: float = tunable("EMBER_PIPELINE_BUDGET_S")
    scheduler_spread_threshold: float = tunable("EMBER_SCHEDULER_SPREAD_THRESHOLD")
    worker_fork_server: int = tunable("EMBER_WORKER_FORK_SERVER")
    task_max_retries: int = tunable("EMBER_TASK_MAX_RETRIES")
    worker_startup_timeout_s: float = tunable("EMBER_WORKER_STARTUP_TIMEOUT_S")
    worker_idle_timeout_s: float = tunable("EMBER_WORKER_IDLE_TIMEOUT_S")
    max_lineage_bytes: int = tunable("EMBER_MAX_LINEAGE_BYTES")
    object_store_prefault_bytes: int = tunable("EMBER_OBJECT_STORE_PREFAULT_BYTES")
    # A pull's source may be unreachable without a reset (a stopped process, a vanished container IP).
    pull_stall_timeout_s: float = tunable("EMBER_PULL_STALL_TIMEOUT_S")
    # A peer whose host vanished sends no reset. Ray pings every 10 s and waits 20 s.
    grpc_keepalive_s: float = tunable("EMBER_GRPC_KEEPALIVE_S")
    start_timeout_s: float = tunable("EMBER_START_TIMEOUT_S")
    # Log files: rotation (Ray's RAY_ROTATION_MAX_BYTES / RAY_ROTATION_BACKUP_COUNT) and the
    # worker output streamed to drivers, per worker file and per driver (Ray has no such bound).
    log_max_bytes: int = tunable("EMBER_LOG_MAX_BYTES")
    log_backup_count: int = tunable("EMBER_LOG_BACKUP_COUNT")
    log_to_driver_max_lines_per_s: float = tunable("EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S")
    driver_log_max_lines_per_s: float = tunable("EMBER_DRIVER_LOG_MAX_LINES_PER_S")
    object_store_memory_fraction: float = tunable("EMBER_OBJECT_STORE_MEMORY_FRACTION")
    runtime_env_max_package_bytes: int = tunable("EMBER_RUNTIME_ENV_MAX_PACKAGE_BYTES")
    # Big objects travel through the object store, not in one message; a message over its limit
    # is refused from its length prefix (rpc.py's Limits).
    max_message_bytes: int = tunable("EMBER_MAX_MESSAGE_BYTES")
    # A request to one of rpc.LARGE_CONTROL_METHODS, in chunks (ember_common.chunked); at most
    # max_message_bytes. Pickled functions and runtime-env packages reach the GCS KV in 1 MiB
    # parts (ember_common.kv_parts).
    max_control_message_bytes: int = tunable("EMBER_MAX_CONTROL_MESSAGE_BYTES")
    # What the GCS and raylets receive in one message (their gRPC receive limit).
    max_control_request_bytes: int = tunable("EMBER_MAX_CONTROL_REQUEST_BYTES")
    # The framed TCP connection is the client's wire.py.
    direct_task_transport: int = tunable("EMBER_DIRECT_TASK_TRANSPORT")
    task_events_enabled: bool = tunable("EMBER_TASK_EVENTS_ENABLED")
    task_events_report_interval_s: float = tunable("EMBER_TASK_EVENTS_REPORT_INTERVAL_S")
    task_events_max_buffer_size: int = tunable("EMBER_TASK_EVENTS_MAX_BUFFER_SIZE")
    task_events_max_num_task_in_gcs: int = tunable("EMBER_TASK_EVENTS_MAX_NUM_TASK_IN_GCS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The tunables from `environ` (default: the process environment); ValueError naming the
        variable for a malformed value; a RuntimeWarning per unknown EMBER_* variable."""
        env = envvars.environ() if environ is None else environ
        kwargs = {}
        for f in dataclasses.fields(cls):
            name = f.metadata["env"]
            if name in env:
                kwargs[f.name] = envvars.parse(name, env[name])
        envvars.warn_unknown(env)
        return cls(**kwargs)


parse_flag = envvars.parse_flag


def known_env_vars() -> set[str]:
    """Every registered EMBER_* variable (ember_common.envvars)."""
    return set(envvars.known())


_config: Config | None = None


def get_config() -> Config:
    """This process's tunables, read from its environment once."""
    global _config
    if _config is None:
        _config = Config.from_env()
    return _config
