"""Tunables shared by the client and the services, read from EMBER_* environment variables.

Each field's unit is in its name. `Config.from_env()` reads `EMBER_<FIELD_NAME_UPPER>` and warns
about EMBER_* variables it does not know (a typo should not pass silently).
"""
from __future__ import annotations

import dataclasses
import os
import warnings

# Variables that are not tunables but are read elsewhere (addresses handed to child processes).
_OTHER_VARS = {
    "EMBER_ADDRESS", "EMBER_SESSION_DIR", "EMBER_NODE_ID", "EMBER_RAYLET_ADDRESS",
    "EMBER_GCS_ADDRESS", "EMBER_OBJMGR_ADDRESS", "EMBER_STORE_DIR", "EMBER_WORKER_ID",
    "EMBER_JOB_ID", "EMBER_TEMP_DIR", "EMBER_NODE_IP", "EMBER_LOG_LEVEL", "EMBER_TRACE_DIR",
    "EMBER_TRACE_RELAY",  # 0: the driver exports its spans itself (ember_common.tracing_relay)
    "EMBER_RUNTIME_ENV",  # a worker's runtime env (JSON), set by its raylet; inherited by its children
    "EMBER_METRICS_EXPORT_PORT",  # containers: docker/entrypoint.py turns it into --metrics-export-port
    # The image build and docker-compose.yml (a shell that runs the e2e tests or a driver has them).
    "EMBER_IMAGE_TAG", "EMBER_OS_IMAGE", "EMBER_EXTRAS", "EMBER_REBUILD_OS",
    # Security (ember_common.auth, ember_common.tls).
    "EMBER_AUTH_MODE", "EMBER_AUTH_TOKEN", "EMBER_AUTH_TOKEN_PATH",
    "EMBER_USE_TLS", "EMBER_TLS_SERVER_CERT", "EMBER_TLS_SERVER_KEY", "EMBER_TLS_CA_CERT",
}


@dataclasses.dataclass(frozen=True)
class Config:
    # Values at most this big travel inline with tasks and replies; bigger ones go to shared memory.
    max_inline_bytes: int = 100 * 1024
    # How often a raylet reports to the GCS.
    heartbeat_period_s: float = 0.5
    # A node silent for this long is marked DEAD.
    node_death_timeout_s: float = 5.0
    # A lease request no node can ever satisfy fails after this long (a node may join meanwhile).
    infeasible_timeout_s: float = 10.0
    # A leased worker with no more queued tasks is kept this long for the next task of its shape.
    lease_linger_s: float = 0.002
    # Lease requests in flight per scheduling shape, at most.
    max_pending_lease_requests: int = 10
    # Tasks pushed to one leased worker before the first one returns (pipelining: the worker
    # gives back what it has not started when its task blocks, idle workers steal a backlog).
    # 1 turns pipelining off (as Ray). Only tasks of functions known to be short are pipelined:
    # a task goes behind others on a busy worker only while the estimated run time of all it
    # holds (per-function averages of the workers' reported run times) stays within
    # pipeline_budget_s; a function with no finished run yet is not pipelined, so a burst of
    # long tasks right after start-up spreads over workers and nodes. 0 turns pipelining off.
    max_tasks_in_flight_per_worker: int = 16
    pipeline_budget_s: float = 0.005
    # Ray's hybrid scheduling: a node busier than this share spreads new work to less-loaded ones.
    scheduler_spread_threshold: float = 0.5
    # 1: a raylet starts default-env workers by forking a preloaded template process; 0: fresh interpreters.
    worker_fork_server: int = 1
    # Default task retries after a worker crash (Ray's default is 3).
    task_max_retries: int = 3
    # A worker process that has not registered with its raylet this long after start is killed.
    worker_startup_timeout_s: float = 60.0
    # Workers idle this long beyond the node's prestarted ones are stopped.
    worker_idle_timeout_s: float = 10.0
    # An owner keeps at most this many bytes of task specs to rebuild lost objects (Ray's
    # max_lineage_bytes); past it the oldest lineage is evicted.
    max_lineage_bytes: int = 1024 * 1024 * 1024
    # A node-to-node pull whose stream brings nothing for this long fails (its source is
    # unreachable without a reset: a stopped process, a vanished container IP).
    pull_stall_timeout_s: float = 15.0
    # gRPC keepalive: a connection with calls in flight is pinged after this long without
    # traffic and dropped when the ping is not answered within as long again (a peer whose host
    # vanished sends no reset); 0 turns it off. Ray pings every 10 s and waits 20 s.
    grpc_keepalive_s: float = 20.0
    # Seconds to wait for a service process to come up.
    start_timeout_s: float = 30.0
    # Fraction of memory used for the object store when none is given.
    object_store_memory_fraction: float = 0.3
    # A runtime env's working_dir / py_modules package may be at most this big, zipped (Ray: 500 MiB).
    runtime_env_max_package_bytes: int = 500 * 1024 * 1024
    # A gRPC request bigger than this is refused by the server with RESOURCE_EXHAUSTED (never
    # unlimited; big objects travel through the object store, not in one message).
    max_message_bytes: int = 1024 * 1024 * 1024
    # 1: task pushes between core workers ride a framed TCP connection (client wire.py) instead
    # of the gRPC TaskStream when TLS is off; 0: always the gRPC TaskStream.
    direct_task_transport: int = 1
    # Task events (state transitions for `ember list tasks`): recorded by owners and executors
    # and sent to the GCS in batches every report interval (Ray's RAY_task_events_report_interval_ms).
    task_events_enabled: bool = True
    task_events_report_interval_s: float = 1.0
    # Events a process keeps waiting for its next batch; past it they are dropped and counted.
    task_events_max_buffer_size: int = 100_000
    # Task attempts the GCS keeps (Ray's task_events_max_num_task_in_gcs); finished ones go first.
    task_events_max_num_task_in_gcs: int = 100_000

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Config:
        env = os.environ if environ is None else environ
        kwargs = {}
        known = known_env_vars()
        for f in dataclasses.fields(cls):
            name = "EMBER_" + f.name.upper()
            if name in env:
                raw = env[name]
                try:
                    kind = type(getattr(cls, f.name))
                    kwargs[f.name] = parse_flag(raw) if kind is bool else kind(raw)
                except ValueError:
                    raise ValueError(f"{name}={raw!r} is not a valid {f.type}") from None
        for key in env:
            if key.startswith("EMBER_") and key not in known and not key.startswith("EMBER_TEST_"):
                warnings.warn(f"unknown environment variable {key} (ignored)", RuntimeWarning, stacklevel=2)
        return cls(**kwargs)


def parse_flag(raw: str) -> bool:
    """1/true/yes/on or 0/false/no/off; ValueError otherwise."""
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


_REGISTERED: set[str] = set()


def register_env_vars(names: set[str]) -> None:
    """Marks more EMBER_* variables as known (ember_common.settings registers the services')."""
    _REGISTERED.update(names)


def known_env_vars() -> set[str]:
    """The tunables' variables, the addresses handed to child processes and registered ones."""
    return set(_OTHER_VARS) | _REGISTERED | {"EMBER_" + f.name.upper() for f in dataclasses.fields(Config)}


_config: Config | None = None


def get_config() -> Config:
    global _config
    if _config is None:
        _config = Config.from_env()
    return _config
