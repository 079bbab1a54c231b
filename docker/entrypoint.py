#!/opt/ember/bin/python
"""Container entry point: `ember-container ROLE [extra flags...]` turns the container's
environment into the service's command line, then execs it (same PID, so SIGTERM from
`docker stop` reaches the service, which stops gracefully).

Settings come as NAME=value arguments right after ROLE (how docker-compose.yml passes them, so
that they stay out of the environment of programs run with `docker compose exec`), else from the
environment. ROLE is gcs | raylet | objmgr | serve-proxy | dashboard | otlp | driver (`driver CMD...` runs CMD, a user
program, with EMBER_NODE_IP set to this container's address). Variables (default):

    all           EMBER_GCS_ADDRESS (gcs:6379)   EMBER_CLUSTER_NAME (default)   EMBER_LOG_LEVEL (INFO)
    gcs           EMBER_GCS_PORT (6379)          EMBER_GCS_STORAGE (etcd://etcd:2379)
    objmgr        EMBER_OBJMGR_PORT (8076)       EMBER_OBJECT_STORE_BYTES (268435456)
                  EMBER_SPILL_DIR (/var/lib/ember/spill)
    raylet        EMBER_RAYLET_PORT (8077)       EMBER_NUM_CPUS (the container's CPU count)
                  EMBER_NUM_GPUS (0)             EMBER_RESOURCES (extra custom resources, JSON, {})
                  EMBER_HEAD (0; 1 = head node)  EMBER_OBJMGR_PORT, EMBER_OBJECT_STORE_BYTES (as objmgr)
    raylet+objmgr EMBER_NODE_ID (derived from the node's IP, so the raylet and the objmgr of a node,
                  which share a network namespace, agree)   EMBER_NODE_IP (the IP the GCS is reached
                  from: what other nodes and drivers connect to)
    serve-proxy   EMBER_HTTP_PORT (8000)
    dashboard     EMBER_DASHBOARD_PORT (8265); its HTTP endpoints need the cluster's token, as the
                  services' gRPC ones (GET /api/healthz, the healthcheck's, is open)
    metrics       EMBER_METRICS_EXPORT_PORT (0 = off): Prometheus /metrics of the service on this
                  port plus an offset per role, the scheme of `ember start --metrics-export-port`
                  (raylet +0, objmgr +1, gcs +2, serve-proxy +3), so the raylet and the objmgr of
                  a node, which share one network namespace, never collide
    otlp          EMBER_TRACE_OUT (/var/lib/ember/traces/spans.jsonl)

The variables, their defaults and container defaults are the settings registry's
(ember_common.envvars, docs/settings.md). The object store lives in /dev/shm/ember-store/<cluster>/<node id>, which the raylet and the
objmgr of a node share through their shared IPC namespace. A bad value ends the container with
exit code 2 and one line on stderr naming the variable.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import sys

from ember_common import envvars

PORT_FILE = "/tmp/ember-service.port"  # read by ember-healthcheck
# Settings only this entry point reads: it turns them into flags and takes them out of the
# service's environment.
_CONTAINER_VARS = envvars.container_only()
METRICS_OFFSET = {"raylet": 0, "objmgr": 1, "gcs": 2, "serve-proxy": 3}


class ConfigError(Exception):
    pass


SETTINGS: dict[str, str] = {}  # NAME=value arguments (compose passes them so), then the environment


def env(name: str, default: str | None = None) -> str:
    """NAME's value: its NAME=value argument, else the environment, else `default` (not given:
    the registry's container default)."""
    fallback = envvars.container_default(name) if default is None else default
    return (SETTINGS.get(name) or envvars.get(name, "")).strip() or fallback


def env_int(name: str) -> int:
    raw = env(name)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} is negative")
    return value


def env_float(name: str, default: float | None = None) -> float:
    raw = env(name, None if default is None else str(default))
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} is negative")
    return value


def gcs_address() -> str:
    """EMBER_GCS_ADDRESS: HOST:PORT, or every GCS replica's, comma-separated."""
    addr = env("EMBER_GCS_ADDRESS")
    for part in addr.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"EMBER_GCS_ADDRESS={addr!r} is not HOST:PORT[,HOST:PORT...]")
    return addr


def node_ip(gcs: str) -> str:
    """The local address the GCS is reached from (what this node advertises)."""
    if env("EMBER_NODE_IP", ""):
        return env("EMBER_NODE_IP", "")
    host, _, port = gcs.split(",")[0].strip().rpartition(":")  # the first replica's route
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(host), int(port)))  # UDP: no packet is sent
            return s.getsockname()[0]
    except OSError as e:
        raise ConfigError(f"cannot resolve the GCS host {host!r} from EMBER_GCS_ADDRESS ({e})") from None


def node_id(ip: str) -> str:
    return env("EMBER_NODE_ID", hashlib.sha1(ip.encode()).hexdigest()[:28])


def store_dir(nid: str) -> str:
    return f"/dev/shm/ember-store/{env('EMBER_CLUSTER_NAME')}/{nid}"


# Container defaults of the services' settings, where they differ (the registry's).
CONTAINER_DEFAULTS = {v.name: v.container for v in envvars.VARS.values() if v.container is not None}


def settings_env() -> dict[str, str]:
    """The environment the services' settings are read from: container defaults, then the
    environment, then NAME=value arguments."""
    merged = dict(CONTAINER_DEFAULTS)
    merged.update({k: v.strip() for k, v in os.environ.items() if v.strip()})
    merged.update({k: v.strip() for k, v in SETTINGS.items() if v.strip()})
    return merged


def metrics_port(role: str) -> int:
    base = env_int("EMBER_METRICS_EXPORT_PORT")
    if not base or role not in METRICS_OFFSET:
        return 0
    if base + METRICS_OFFSET[role] > 65535:
        raise ConfigError(f"EMBER_METRICS_EXPORT_PORT={base} is too large (ports end at 65535)")
    return base + METRICS_OFFSET[role]


def command(role: str) -> list[str]:
    """The command line of ROLE's service, from the container's settings."""
    from ember_common.settings import SettingsError

    try:
        return _command(role)
    except SettingsError as e:
        raise ConfigError(str(e)) from None


def _command(role: str) -> list[str]:
    from ember_common import resources as kit_resources  # the one resource check
    from ember_common.settings import DashboardSettings, GcsSettings, ObjmgrSettings, RayletSettings, ServeProxySettings

    common = {"port_file": PORT_FILE, "host": "0.0.0.0", "metrics_export_port": metrics_port(role)}
    known = _CONTAINER_VARS
    if role == "gcs":
        return ["ember-gcs", *GcsSettings.from_env(settings_env(), known, session_dir="/var/lib/ember",
                                                   **common).to_argv()]
    if role == "objmgr":
        gcs = gcs_address()
        nid = node_id(node_ip(gcs))
        return ["ember-objmgr", *ObjmgrSettings.from_env(settings_env(), known, node_id=nid,
                                                         store_dir=store_dir(nid), **common).to_argv()]
    if role == "raylet":
        gcs = gcs_address()
        ip = node_ip(gcs)
        nid = node_id(ip)
        env_map = settings_env()
        objmgr_port = env_int("EMBER_OBJMGR_PORT")
        resources = {"CPU": env_float("EMBER_NUM_CPUS", float(os.cpu_count() or 1))}
        gpus = env_float("EMBER_NUM_GPUS")
        if gpus:
            resources["GPU"] = gpus
        try:
            resources.update(kit_resources.parse_json(env("EMBER_RESOURCES", "{}"),
                                                      source="EMBER_RESOURCES"))
            resources = kit_resources.validate(resources, source="EMBER_NUM_CPUS/EMBER_NUM_GPUS")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        head = env("EMBER_HEAD", "0") not in ("0", "false", "no")
        return ["ember-raylet", *RayletSettings.from_env(
            env_map, known, node_id=nid, node_ip=ip, gcs_address=gcs, objmgr_address=f"{ip}:{objmgr_port}",
            store_dir=store_dir(nid), session_dir="/var/lib/ember", resources=resources, head=head,
            **common).to_argv()]
    if role == "serve-proxy":  # a cluster client: workers must reach it at this container's IP
        os.environ["EMBER_NODE_IP"] = node_ip(gcs_address())
        return [sys.executable, "-m", "ember_serve_proxy", *ServeProxySettings.from_env(
            settings_env(), known, gcs_address=gcs_address(), port=env_int("EMBER_HTTP_PORT"),
            **{**common, "port_file": None}).to_argv()]
    if role == "dashboard":  # a driver of the cluster too (the web UI and the job REST API)
        os.environ["EMBER_NODE_IP"] = node_ip(gcs_address())
        return [sys.executable, "-m", "ember_dashboard", *DashboardSettings.from_env(
            settings_env(), known, gcs_address=gcs_address(), port=env_int("EMBER_DASHBOARD_PORT"),
            **common).to_argv()]
    if role == "driver":  # a user program in its own container: advertise the container's IP
        os.environ["EMBER_NODE_IP"] = node_ip(env("EMBER_ADDRESS"))
        return []
    if role == "otlp":
        return ["ember-otlp-sink", "--out", env("EMBER_TRACE_OUT"),
                "--port-file", PORT_FILE]
    raise ConfigError(f"unknown role {role!r} (gcs | raylet | objmgr | serve-proxy | dashboard | otlp | driver)")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ember-container gcs|raylet|objmgr|serve-proxy|dashboard|otlp [extra flags]", file=sys.stderr)
        return 2
    role, extra = argv[0], argv[1:]
    while extra and re.match(r"^EMBER_[A-Z0-9_]+=", extra[0]):
        name, _, value = extra.pop(0).partition("=")
        SETTINGS[name] = value
    try:
        cmd = command(role) + extra
        if not cmd:
            raise ConfigError("driver needs a command, e.g. driver python my_program.py")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if role == "driver":
        os.execvp(cmd[0], cmd)
    if os.path.exists(PORT_FILE):  # left by this container's previous run
        os.unlink(PORT_FILE)
    with open("/tmp/ember-service.role", "w") as f:
        f.write(role)
    for name in _CONTAINER_VARS:  # container-level settings; the services do not know them
        os.environ.pop(name, None)
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
