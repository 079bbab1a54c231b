"""Prometheus metrics for Ember's services (GCS, raylet, object manager, serve-proxy).

Off unless a service is started with `--metrics-export-port N` (N > 0; 0 or absent = off). Then
the service serves the Prometheus text format at `http://<host>:N/metrics` from its own asyncio
loop, so every value is read from the service's live state at scrape time (gauges are callbacks,
no polling loop and no locks), and the task hot path is untouched: the only per-call cost is the
server-side RPC latency histogram (one `observe` per unary RPC, in the interceptor chain of
`rpc.build_server`).

Metrics (names as Ray's, `ember_` instead of `ray_`):

    every service   ember_rpc_server_latency_seconds{grpc_service,method}  histogram, unary RPCs
                    process_* (CPU seconds, RSS, open fds) of the service process
    raylet          ember_node_cpu_utilization{node_id}      percent, whole machine (psutil)
                    ember_node_gpu_utilization{node_id,gpu}  percent per GPU: NVML's utilization
                        when `pynvml` imports and finds devices; otherwise the share of each
                        logical GPU the raylet has leased out (100 = fully allocated). On a
                        node without GPUs there are no samples.
                    ember_node_mem_used / ember_node_mem_total{node_id}  bytes, whole machine
                    ember_tasks_running{node_id}     workers leased to tasks (one task at a time each)
                    ember_tasks_queued{node_id}      lease requests waiting for resources or a worker
                    ember_workers{node_id,state}     worker processes: idle, leased, starting
    objmgr          ember_object_store_used_bytes / _capacity_bytes / _spilled_bytes{node_id}
                    ember_object_store_num_objects{node_id,state}
    GCS             ember_actors_total{state}        actors by state (ALIVE, RESTARTING, DEAD, ...)
                    ember_nodes_total{state}, ember_jobs_total{state}

Hook for other services (serve-proxy): their settings (ember_common.settings) have
`--metrics-export-port` and `service.setup` calls `configure(port, name)`; `service.run` then serves the endpoint on the
service's loop. A service that runs its own server instead (serve-proxy under uvicorn) calls
`await start_server(host)` on its loop or `start_in_thread(host)`, adds its own metrics with
`gauge(...)` / `histogram(...)` (e.g. HTTP request latencies by route), and may publish the
address with `await service.advertise_metrics(gcs_address, "serve-proxy/<id>", host)`: the GCS
internal KV (namespace `metrics`) is where `ember status` finds every endpoint. This module
imports nothing else of the kit (rpc imports it for the server interceptor).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger(__name__)

KV_NAMESPACE = "metrics"
# Buckets for RPC latencies: 100 µs .. 10 s.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_port = 0
_service = ""
_registry: Any = None
_rpc_latency: Any = None
_server: asyncio.AbstractServer | None = None
bound_port = 0


def enabled() -> bool:
    return _registry is not None


def configure(port: int | None, service: str) -> bool:
    """Turns metrics on for this process when port > 0 (call once, before build_server)."""
    global _port, _service, _registry, _rpc_latency
    if not port or port <= 0:
        return False
    from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    _port, _service = int(port), service
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: less to scrape, as most exporters do
    _registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=_registry)
    PlatformCollector(registry=_registry)
    _rpc_latency = Histogram("ember_rpc_server_latency_seconds",
                             "Server-side latency of unary gRPC calls, by service and method",
                             ["grpc_service", "method"], registry=_registry, buckets=LATENCY_BUCKETS)
    return True


def registry() -> Any:
    return _registry


class _CallbackCollector:
    """One gauge family whose samples come from fn() at scrape time."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...],
                 fn: Callable[[], float | Mapping[tuple[str, ...], float]]) -> None:
        self.name, self.doc, self.labels, self.fn = name, doc, labels, fn

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        fam = GaugeMetricFamily(self.name, self.doc, labels=list(self.labels))
        try:
            value = self.fn()
        except Exception:  # a broken callback must not break the whole scrape
            log.exception("metric %s failed", self.name)
            return [fam]
        if isinstance(value, Mapping):
            for key, v in value.items():
                fam.add_metric(list(key), float(v))
        else:
            fam.add_metric([], float(value))
        return [fam]

    def describe(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        return [GaugeMetricFamily(self.name, self.doc, labels=list(self.labels))]


def gauge(name: str, doc: str, fn: Callable[[], float | Mapping[tuple[str, ...], float]],
          labels: tuple[str, ...] = ()) -> None:
    """A live gauge: fn() is called at each scrape and returns a number, or a mapping from
    label-value tuples (in the order of `labels`) to numbers. No-op when metrics are off."""
    if _registry is not None:
        _registry.register(_CallbackCollector(name, doc, labels, fn))


def histogram(name: str, doc: str, labels: tuple[str, ...] = (),
              buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Any:
    """A histogram in this process's registry (None when metrics are off)."""
    if _registry is None:
        return None
    from prometheus_client import Histogram

    return Histogram(name, doc, list(labels), registry=_registry, buckets=buckets)


def node_gauges(node_id: str, logical_gpu_use: Callable[[], list[float]] | None = None) -> None:
    """ember_node_* gauges of this machine (registered by the raylet, one per node).
    logical_gpu_use() gives the allocated share (0..1) of each logical GPU, used when NVML is not
    available."""
    import psutil

    psutil.cpu_percent(None)  # primes the counter: each scrape reports use since the last one
    key = (node_id,)
    gauge("ember_node_cpu_utilization", "CPU use of the machine in percent since the last scrape",
          lambda: {key: psutil.cpu_percent(None)}, ("node_id",))
    gauge("ember_node_mem_used", "Memory used on the machine, bytes",
          lambda: {key: psutil.virtual_memory().used}, ("node_id",))
    gauge("ember_node_mem_total", "Memory of the machine, bytes",
          lambda: {key: psutil.virtual_memory().total}, ("node_id",))
    nvml = _nvml_handles()

    def gpus() -> dict[tuple[str, ...], float]:
        if nvml:
            import pynvml  # type: ignore[import-not-found]

            return {(node_id, str(i)): float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    for i, h in enumerate(nvml)}
        use = logical_gpu_use() if logical_gpu_use is not None else []
        return {(node_id, str(i)): 100.0 * u for i, u in enumerate(use)}

    gauge("ember_node_gpu_utilization",
          "GPU use in percent: NVML utilization when available, else the share of each logical "
          "GPU leased to workers", gpus, ("node_id", "gpu"))


def _nvml_handles() -> list[Any]:
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # not installed, no driver, no devices
        return []


class ServerInterceptor:
    """Observes the latency of every unary RPC into ember_rpc_server_latency_seconds. The wrapped
    handler is built once per method (the registered handler object is reused)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        cached = self._cache.get(details.method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, details.method)
        self._cache[details.method] = (handler, wrapped)
        return wrapped

    @staticmethod
    def _wrap(handler: Any, full_method: str) -> Any:
        import grpc

        svc, _, method = full_method.lstrip("/").rpartition("/")
        observe = _rpc_latency.labels(svc, method).observe
        inner = handler.unary_unary
        clock = time.perf_counter

        async def timed(request: Any, context: Any) -> Any:
            t0 = clock()
            try:
                return await inner(request, context)
            finally:
                observe(clock() - t0)

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


async def start_server(host: str = "0.0.0.0", port: int | None = None) -> int:
    """Serves /metrics over HTTP on the running loop; returns the bound port. OSError names the
    port when it is taken."""
    global _server, bound_port
    if _registry is None:
        return 0
    port = _port if port is None else port
    if not 0 <= port <= 65535:
        raise OSError(f"--metrics-export-port must be a TCP port (1..65535), got {port}")
    try:
        _server = await asyncio.start_server(_handle, host, port, reuse_address=True)
    except OSError as e:
        raise OSError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
    bound_port = int(_server.sockets[0].getsockname()[1])
    log.info("metrics at http://%s:%d/metrics", host, bound_port)
    return bound_port


def start_in_thread(host: str = "0.0.0.0", port: int | None = None) -> int:
    """Serves /metrics from a daemon thread (for processes whose loop Ember does not run, e.g.
    serve-proxy under uvicorn); returns the bound port. Gauge callbacks then run on that thread,
    so they must only read state that is safe to read from another thread."""
    global bound_port
    if _registry is None:
        return 0
    from prometheus_client import start_http_server

    port = _port if port is None else port
    try:
        server, _thread = start_http_server(port, host, registry=_registry)
    except OSError as e:
        raise OSError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
    bound_port = server.server_port
    return bound_port


async def stop_server() -> None:
    global _server
    if _server is not None:
        _server.close()
        await _server.wait_closed()
        _server = None


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        parts = head.split(b"\r\n", 1)[0].split()
        path = parts[1].split(b"?", 1)[0] if len(parts) >= 2 else b""
        if len(parts) < 2 or parts[0] not in (b"GET", b"HEAD"):
            status, ctype, body = b"405 Method Not Allowed", b"text/plain", b"GET /metrics\n"
        elif path in (b"/metrics", b"/"):
            status, ctype, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(_registry)
        else:
            status, ctype, body = b"404 Not Found", b"text/plain", b"see /metrics\n"
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype +
                     b"\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\nConnection: close\r\n\r\n" + (body if parts[0] != b"HEAD" else b""))
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
            ConnectionError):
        pass
    finally:
        writer.close()


def advertise_host(host: str, peer: str = "") -> str:
    """The IP others reach this service at: host when it is a specific address, else the local
    address used to reach peer (HOST:PORT, e.g. the GCS, or a GCS's comma-separated replicas), else loopback."""
    if host and host not in ("0.0.0.0", "::"):
        return host
    peer_host = peer.split(",")[0].strip().rsplit(":", 1)[0] if peer else ""  # GCS replicas: the first
    if peer_host:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((peer_host, 9))  # UDP: no packet is sent
                return str(s.getsockname()[0])
        except OSError:
            pass
    return "127.0.0.1"
