"""The GCS process: settings (GcsSettings), storage, GcsCore and its gRPC services (servicers.py), death
detection, and a graceful stop."""
from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any, cast

import grpc
from grpc_health.v1 import health_pb2

from ember_common import envvars, metrics, rpc, service, tracing
from ember_common.config import get_config
from ember_common.proto import common_pb2
from ember_common.settings import GcsSettings

from . import servicers
from .backend import open_storage
from .core import GcsCore
from .gate import Gate
from .storage import ETCD_PASSWORD_ENV
from .task_events import TaskEventStore

if TYPE_CHECKING:
    from .leader import Leadership

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> GcsSettings:
    """The GCS's command line (ember_common.settings.GcsSettings)."""
    return GcsSettings.from_argv_or_exit(argv)


async def serve(ns: GcsSettings, stop: asyncio.Event) -> None:
    """Runs the GCS until stop is set. With --ha it is one replica of several: it serves only
    once elected (leader.py; gate.py answers for it until then) and exits with an error when it
    loses the leadership."""
    cfg = get_config()
    # etcd's password: from the environment only (never argv, which `ps` shows, nor the logged URL)
    storage = open_storage(ns.storage, ns.cluster_name, password=envvars.get(ETCD_PASSWORD_ENV) or None)
    if ns.ha and not ns.storage.startswith("etcd://"):
        raise ValueError(f"--ha needs etcd storage (--storage etcd://HOST:PORT), not {ns.storage!r}")
    try:
        await storage.start()
    except rpc.Unavailable as e:  # e.g. etcd unreachable: one line and exit 1 (service.run)
        raise ConnectionError(str(e)) from None
    core = GcsCore(storage, cfg.node_death_timeout_s, cluster_id=ns.cluster_name)
    tasks = TaskEventStore(cfg.task_events_max_num_task_in_gcs)  # memory only, as Ray's
    core.on_job_end.append(tasks.end_job)
    # execute and submit spans from owners' task events, exported as this GCS exports its own spans
    derived = tracing.derived_spans()
    gate = Gate("")
    server, port, health = rpc.build_server(
        [lambda s: servicers.add_all(core, cast(grpc.aio.Server, gate.registrar(s)), tasks, derived)],
        host=ns.host, port=ns.port)
    gate.address = advertised_address(ns, port)
    leadership: Leadership | None = None
    if ns.ha:  # etcd only (checked above); imported here: a GCS without --ha needs no election
        from .etcd_storage import EtcdStorage
        from .leader import Leadership

        assert isinstance(storage, EtcdStorage)
        leadership = Leadership(storage, gate.address, ns.leader_lease_s)
        storage.on_fenced = functools.partial(leadership.lose, "etcd refused a write guarded by its leadership")
        gate.serving = leadership.leading
        gate.leader = functools.partial(_leader_of, leadership)
        leadership.on_serving = functools.partial(_health_says, health)
    register_metrics(core, tasks)
    await server.start()
    await rpc.mark_serving(health, [servicers.REPLICA_HEALTH_NAME])
    if leadership is not None:
        rpc.write_port_file(ns.port_file, port)  # a replica is up (and follows) from here
        log.info("GCS replica %s following the election (storage %s)", gate.address, ns.storage)
        if not await leadership.campaign(stop):
            await _shut_down(server, storage)
            return
    await take_office(core, ns, derived)
    gate.open = True
    await rpc.mark_serving(health, [servicers.HEALTH_NAME, *servicers.SERVICE_NAMES])
    if leadership is None:
        rpc.write_port_file(ns.port_file, port)
    log.info("GCS serving on %s:%d (storage %s; task events: at most %d attempts)", ns.host, port,
             ns.storage, tasks.max_attempts)
    deaths = asyncio.ensure_future(core.detect_deaths(stop))
    ended: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
    if leadership is not None:
        ended += [asyncio.ensure_future(leadership.keep(stop)), asyncio.ensure_future(leadership.lost.wait())]
    await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
    for waiter in ended:
        if leadership is not None and waiter.done() and not waiter.cancelled() and waiter.exception():
            leadership.lose(f"its lease keeper failed: {waiter.exception()!r}")  # never a silent stop
        waiter.cancel()
    lost = leadership is not None and leadership.lost.is_set()
    log.info("GCS stopping%s", " (deposed)" if lost else "")
    if lost:  # the gate refuses already; the health service says so too from now on
        await health.set(servicers.HEALTH_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    core.close_subscriptions()
    await server.stop(1.0)
    await core.actors.close()
    await core.pgs.close()
    deaths.cancel()
    if derived is not None:  # the execute spans of the last task events (a thread: off the loop)
        await asyncio.get_running_loop().run_in_executor(None, derived.shutdown)
    if leadership is not None:
        await leadership.resign()  # a graceful stop hands over at once
    await storage.close()
    if lost:
        assert leadership is not None
        raise ConnectionError(f"GCS replica {gate.address} stepped down: {leadership.why_lost}")


async def take_office(core: GcsCore, ns: GcsSettings, derived: Any) -> None:
    """What a GCS does once it serves: reloads its tables from storage and records what
    processes read from its KV at start."""
    await core.load()
    core.pgs.start()
    if metrics.bound_port:  # "" host: the GCS's own address (ember status fills it in)
        host = "" if ns.host in ("0.0.0.0", "::") else ns.host
        await core.kv.put(metrics.KV_NAMESPACE, b"gcs", f"{host}:{metrics.bound_port}".encode())
    # Owners read this once at start: whether they may leave their tasks' execute and submit
    # spans to this GCS, and where it sends them (cleared when it does not: the KV outlives a
    # GCS restarted with other settings).
    if derived is not None:
        await core.kv.put(tracing.DERIVED_KV_NAMESPACE, tracing.DERIVED_KV_KEY,
                          tracing.announcement(tracing.exporter_names()))
    else:
        await core.kv.delete(tracing.DERIVED_KV_NAMESPACE, tracing.DERIVED_KV_KEY)


def advertised_address(ns: GcsSettings, port: int) -> str:
    """HOST:PORT other processes reach this GCS at: --advertise-address, else its bind host
    (the node's IP for "" or a wildcard) and the bound port."""
    if ns.advertise_address:
        return ns.advertise_address
    host = ns.host if ns.host not in ("", "0.0.0.0", "::") else rpc.default_bind_host()
    return rpc.host_port(host, port)


async def _health_says(health: Any, serving: bool) -> None:
    """ember.Gcs follows the gate while a leader past its lease clock asks etcd (leader.py)."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await health.set(servicers.HEALTH_NAME, status)


def _leader_of(leadership: Leadership) -> str:
    return leadership.leader_address


async def _shut_down(server: Any, storage: Any) -> None:
    await server.stop(1.0)
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
