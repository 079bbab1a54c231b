"""The GCS process: settings (GcsSettings), storage, GcsCore and its gRPC services (servicers.py), death
detection, and a graceful stop."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from ember_common import metrics, rpc, service, tracing, tracing_derived
from ember_common.config import get_config
from ember_common.proto import common_pb2
from ember_common.settings import GcsSettings

from . import servicers
from .backend import open_storage
from .core import GcsCore
from .task_events import TaskEventStore

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> GcsSettings:
    """The GCS's command line (ember_common.settings.GcsSettings)."""
    return GcsSettings.from_argv_or_exit(argv)


async def serve(ns: GcsSettings, stop: asyncio.Event) -> None:
    """Runs the GCS until stop is set."""
    cfg = get_config()
    storage = open_storage(ns.storage, ns.cluster_name)
    try:
        await storage.start()
    except rpc.Unavailable as e:  # e.g. etcd unreachable: one line and exit 1 (service.run)
        raise ConnectionError(str(e)) from None
    core = GcsCore(storage, cfg.node_death_timeout_s, cluster_id=ns.cluster_name)
    await core.load()
    core.pgs.start()
    tasks = TaskEventStore(cfg.task_events_max_num_task_in_gcs)  # memory only, as Ray's
    # execute and submit spans from owners' task events, exported as this GCS exports its own spans
    derived = (tracing_derived.make(tracing.exporter_names(), getattr(tracing.tracer(), "_instrumentation_scope", None))
               if tracing.enabled() else None)
    server, port, health = rpc.build_server([lambda s: servicers.add_all(core, s, tasks, derived)],
                                            host=ns.host, port=ns.port)
    register_metrics(core, tasks)
    await server.start()
    await rpc.mark_serving(health, [servicers.HEALTH_NAME, *servicers.SERVICE_NAMES])
    if metrics.bound_port:  # "" host: the GCS's own address (ember status fills it in)
        host = "" if ns.host in ("0.0.0.0", "::") else ns.host
        await core.kv.put(metrics.KV_NAMESPACE, b"gcs", f"{host}:{metrics.bound_port}".encode())
    # Owners read this once at start: whether they may leave their tasks' execute and submit
    # spans to this GCS, and where it sends them (cleared when it does not: the KV outlives a
    # GCS restarted with other settings).
    if derived is not None:
        await core.kv.put(tracing_derived.KV_NAMESPACE, tracing_derived.KV_KEY,
                          tracing_derived.announcement(tracing.exporter_names()))
    else:
        await core.kv.delete(tracing_derived.KV_NAMESPACE, tracing_derived.KV_KEY)
    rpc.write_port_file(ns.port_file, port)
    log.info("GCS serving on %s:%d (storage %s; task events: at most %d attempts)", ns.host, port,
             ns.storage, tasks.max_attempts)
    deaths = asyncio.ensure_future(core.detect_deaths(stop))
    await stop.wait()
    log.info("GCS stopping")
    core.close_subscriptions()
    await server.stop(1.0)
    await core.actors.close()
    await core.pgs.close()
    deaths.cancel()
    if derived is not None:  # the execute spans of the last task events (a thread: off the loop)
        await asyncio.get_running_loop().run_in_executor(None, derived.shutdown)
    await storage.close()


def register_metrics(core: GcsCore, tasks: TaskEventStore) -> None:
    """Live gauges of the cluster tables (no-op unless --metrics-export-port is set)."""
    if not metrics.enabled():
        return

    def by_state(items: Any, names: Any) -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = {(name,): 0.0 for name in names.keys()}
        for item in items:
            counts[(names.Name(item.state),)] += 1
        return counts

    metrics.gauge("ember_actors_total", "Actors by state",
                  lambda: by_state(core.actors.actors.values(), common_pb2.ActorInfo.State), ("state",))
    metrics.gauge("ember_placement_groups", "Placement groups by state",
                  lambda: {(state,): float(n) for state, n in core.pgs.manager.counts().items()}, ("state",))
    metrics.gauge("ember_task_events_stored", "Task attempts in the task-event store",
                  lambda: float(tasks.stored()))
    metrics.gauge("ember_task_events_dropped", "Task events lost (store bound, reporters' drops)",
                  lambda: float(tasks.num_dropped))
    metrics.gauge("ember_nodes_total", "Nodes by state",
                  lambda: by_state(core.nodes.values(), common_pb2.NodeInfo.State), ("state",))


def main(argv: list[str] | None = None) -> int:
    """`ember-gcs`: exit code 0 after a graceful stop, 1 on a start-up error."""
    ns = parse_args(argv)
    service.setup(ns, "gcs")
    return service.run(lambda stop: serve(ns, stop))
