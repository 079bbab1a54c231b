"""What every service's main() shares: logging, tracing and metrics set-up, dying
with the parent, a graceful stop on SIGTERM, and recording the metrics endpoint in the GCS."""
from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any, Awaitable, Callable

from . import backoff, metrics, rpc, tracing
from .gcs_client import GcsClient

log = logging.getLogger(__name__)


def listen_http(host: str, port: int, backlog: int) -> socket.socket | None:
    """A listening TCP socket for an HTTP service (uvicorn serves on it), or None after one
    line on stderr saying why it cannot listen."""
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as e:
        print(f"error: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return None
    return sock


def disable_core_dumps() -> None:
    """No core files from this process or its children: a core of a process that holds the
    cluster token (every service and worker does) would write the token to disk."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass


def setup(ns: Any, name: str) -> None:
    """Logging, tracing and metrics for service `name` from its flags; dies with its parent
    when asked to; core dumps off (disable_core_dumps)."""
    disable_core_dumps()
    logging.basicConfig(level=getattr(logging, str(ns.log_level).upper(), logging.INFO),
                        stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s {name} %(name)s: %(message)s")
    tracing.setup(f"ember-{name}", node_id=getattr(ns, "node_id", "") or "")
    metrics.configure(getattr(ns, "metrics_export_port", 0), name)
    global _metrics_host
    # the same interface as the gRPC port: its host setting, else the node's IP
    host, node_ip = getattr(ns, "host", ""), getattr(ns, "node_ip", "")
    _metrics_host = host or (rpc.bind_host(node_ip) if node_ip else rpc.default_bind_host())
    if ns.die_with_parent:
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


_metrics_host = "127.0.0.1"


def run(main: Callable[[asyncio.Event], Awaitable[Any]]) -> int:
    """Runs an async main(stop_event); SIGTERM/SIGINT set the event. Start-up errors become a
    one-line message and exit code 1. Serves metrics (when configured) on the same loop."""
    async def runner() -> Any:
        stop = asyncio.Event()
        rpc.install_signal_stop(asyncio.get_running_loop(), stop)
        await metrics.start_server(_metrics_host)
        try:
            return await main(stop)
        finally:
            await metrics.stop_server()

    try:
        asyncio.run(runner())
    except (OSError, ValueError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        tracing.shutdown()  # flush spans before exiting
    return 0


async def advertise_metrics(gcs_address: str, key: str, host: str) -> None:
    """Records HOST:PORT of this process's metrics endpoint in the GCS KV (namespace `metrics`,
    key e.g. `raylet/<node_id>`), for `ember status`. Best effort: failures are logged."""
    if not metrics.enabled() or not metrics.bound_port or not gcs_address:
        return
    gcs = GcsClient(gcs_address, retry=backoff.NO_RETRY, timeout_s=5)
    try:
        await gcs.internal_kv_put(metrics.KV_NAMESPACE, key.encode(),
                                  f"{host}:{metrics.bound_port}".encode(), overwrite=True)
    except rpc.ServiceError as e:  # the GCS may be down; metrics still work
        log.warning("could not record the metrics address in the GCS: %s", e)
    finally:
        await gcs.close()
