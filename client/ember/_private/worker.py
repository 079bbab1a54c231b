"""Process-global state behind the public API: init/shutdown, get/put/wait, cluster queries."""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ember_common import backoff, envvars, rpc, tracing
from ember_common import resources as kit_resources
from ember_common.config import Config, get_config
from ember_common.gcs_client import SyncGcsClient
from ember_common.proto import common_pb2

from . import client_mode
from . import node as node_mod
from .api import init_args
from .api import logging_config as logging_config_mod
from .core_worker import CoreWorker, WorkerMode
from .execution.function_manager import FunctionManager
from .objects import object_ref
from .objects.object_ref import ObjectRef
from .objects.serialization import serialize

if TYPE_CHECKING:
    from .log_printer import LogPrinter

log = logging.getLogger(__name__)


class Worker:
    """One per process: the driver's or the worker's connection to the cluster."""

    def __init__(self, core: CoreWorker, mode: str, cluster: EmbeddedCluster | None,
                 namespace: str = "") -> None:
        self.core = core
        self.mode = WorkerMode(mode)
        self.cluster = cluster
        self.functions = FunctionManager(core)
        self.namespace = namespace
        # Called (in order) by shutdown() before the job is marked finished: modules with work
        # still in flight on the core's loop register here (placement_groups.flush).
        self.before_shutdown: list[Callable[[], None]] = []
        self.log_printer: LogPrinter | None = None

    def current_namespace(self) -> str:
        """The driver's namespace, or (in a worker) that of the job of the running task/actor."""
        ex = self.core.executor
        if ex is None:
            return self.namespace
        spec = ex.actor_spec or ex.running
        return self.functions.job_namespace(spec.job_id) if spec is not None else self.namespace


_global_worker: Worker | None = None
_init_lock = threading.RLock()


def client_connection() -> Any:
    """The client-mode connection (ember.init("ember://...")), or None: a driver or a worker."""
    return client_mode.active


def global_worker() -> Worker:
    w = _global_worker
    if w is None:
        if client_mode.active is not None:  # the API that got here has no client-mode path
            client_mode.unsupported_here()
        init()
        w = _global_worker
    assert w is not None
    return w


def global_worker_or_none() -> Worker | None:
    return _global_worker


def _current_core() -> CoreWorker | None:
    w = _global_worker
    return w.core if w is not None else None


object_ref.set_core_resolver(_current_core)


def set_global_worker(w: Worker | None) -> None:
    global _global_worker
    _global_worker = w


class EmbeddedCluster:
    """GCS (memory storage) + one raylet + one objmgr as child processes of the driver."""

    def __init__(self, resources: dict[str, float], object_store_memory: int,
                 config: Config, metrics_export_port: int = 0,
                 labels: dict[str, str] | None = None) -> None:
        self.session_dir = node_mod.new_session_dir()
        self.procs: list[node_mod.ServiceProcess] = []
        try:
            gcs = node_mod.start_gcs(self.session_dir, port=0, storage="memory", host="127.0.0.1",
                                     die_with_parent=True,
                                     metrics_export_port=node_mod.metrics_ports(metrics_export_port)["gcs"])
            self.procs.append(gcs)
            self.gcs_address = f"127.0.0.1:{gcs.port}"
            self.node, procs = node_mod.start_node(
                self.session_dir, self.gcs_address, resources=resources,
                object_store_memory=object_store_memory, is_head=True, die_with_parent=True,
                metrics_export_port=metrics_export_port, labels=labels)
            self.procs.extend(procs)
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        # Raylet first (it stops its workers), then objmgr (removes the store), then GCS.
        for p in self.procs[1:] + self.procs[:1]:
            node_mod.stop_process(p.pid, popen=p.popen)
        self.procs = []
        node_mod.remove_session_store(self.session_dir)


def _default_resources(num_cpus: float | None, num_gpus: float | None,
                       resources: dict[str, float] | None, memory: int | None) -> dict[str, float]:
    import psutil

    res = {"CPU": float(num_cpus if num_cpus is not None else os.cpu_count() or 1)}
    gpus = num_gpus if num_gpus is not None else _detect_gpus()
    if gpus:
        res["GPU"] = float(gpus)
    res["memory"] = float(memory if memory is not None else int(psutil.virtual_memory().total * 0.7))
    res = kit_resources.validate(res, source="init()")
    res.update(kit_resources.validate(resources or {}, source="resources", reserved=("CPU", "GPU"),
                                      reserved_hint="num_cpus/num_gpus"))
    for name, amount in res.items():  # a node has whole units; tasks may ask for fractions of them
        if name != "memory" and amount != int(amount):
            arg = {"CPU": "num_cpus", "GPU": "num_gpus"}.get(name, f"resources[{name!r}]")
            raise ValueError(f"{arg}={amount}: a node's resources must be whole numbers "
                             "(tasks and actors may ask for fractions of them)")
    return res


def _detect_gpus() -> int:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([d for d in vis.split(",") if d.strip()])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


def _resolve_address(address: str | None) -> str | None:
    if address is None:
        address = envvars.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS") or None
    if address in ("local", ""):
        return None
    if address == "auto":
        info = node_mod.read_current_cluster()
        if info is None:
            raise ConnectionError("address='auto' but no running Ember cluster was found "
                                  "(start one with `ember start --head`)")
        return str(info["gcs_address"])
    if address is not None and address.startswith("ember://"):
        address = address[len("ember://"):]
    return address


def _pick_node(gcs_address: str) -> common_pb2.NodeInfo:
    """The alive node on this machine that a connecting driver attaches to (head first)."""
    with SyncGcsClient(gcs_address, retry=backoff.NO_RETRY, timeout_s=10) as gcs:
        try:
            nodes = gcs.get_all_node_info()
        except rpc.AuthenticationError:
            raise  # reached, but refused: ember.exceptions.AuthenticationError says how to fix it
        except rpc.ServiceError as e:
            raise ConnectionError(f"cannot reach the Ember GCS at {gcs_address}: {e}") from None
    alive = [n for n in nodes if n.state == common_pb2.NodeInfo.ALIVE]
    local = [n for n in alive if os.path.isdir(n.store_dir)]
    pool = local or alive
    if not pool:
        raise ConnectionError(f"the Ember cluster at {gcs_address} has no alive node")
    pool.sort(key=lambda n: (not n.is_head, n.start_time))
    return pool[0]


def _advertised_ip(node_address: str, gcs_address: str, same_machine: bool) -> str:
    """The address a driver joining a running cluster gives out for calls back to it (owners of
    objects are called by borrowers on other nodes): EMBER_NODE_IP when set; else the address of
    the node it joined when that node is on this machine (as Ray's drivers take their local
    raylet's); else the local address on the route to the GCS. Never loopback on a cluster
    reached over the network."""
    if ip := envvars.get("EMBER_NODE_IP"):
        return ip
    host = node_address.rsplit(":", 1)[0].strip("[]")
    if same_machine and not init_args.is_loopback(host):
        return host
    from ember_common.metrics import advertise_host

    return advertise_host("", gcs_address)  # the local address on the route to the GCS


def init(address: str | None = None, *, num_cpus: float | None = None, num_gpus: float | None = None,
         resources: dict[str, float] | None = None, object_store_memory: int | None = None,
         memory: int | None = None, namespace: str | None = None, ignore_reinit_error: bool = False,
         include_dashboard: bool | None = None, log_to_driver: bool = True,
         runtime_env: dict[str, Any] | None = None, logging_level: int | str = logging.INFO,
         configure_logging: bool = True, logging_config: logging_config_mod.LoggingConfig | None = None,
         **kwargs: Any) -> RuntimeContextInfo:
    """Connects to a cluster, or starts an embedded one (GCS, raylet, objmgr as child processes)."""
    global _global_worker
    unknown = [k for k in kwargs if k not in init_args.PRIVATE_INIT_ARGS]
    if unknown:  # Ray's error for them (a RuntimeError)
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    target = address if address is not None else (envvars.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS"))
    if client_mode.is_client_address(target):  # returns a ClientInfo: the same keys
        return _init_client(target, ignore_reinit_error, dict(  # type: ignore[no-any-return]
            kwargs, num_cpus=num_cpus, num_gpus=num_gpus, resources=resources, memory=memory,
            object_store_memory=object_store_memory, include_dashboard=include_dashboard,
            logging_config=logging_config, namespace=namespace, runtime_env=runtime_env))
    connecting = _resolve_address(address) is not None
    include_dashboard, namespace, runtime_env = init_args.check_extras(kwargs, connecting, include_dashboard, namespace,
                                                             runtime_env)
    runtime_env = logging_config_mod.apply_to_job(logging_config, runtime_env)
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(f"namespace must be None or a string, got {type(namespace).__name__}")
    from .runtime_env import context as runtime_env_context
    from .runtime_env import validation as runtime_env_validation

    runtime_env_validation.validate(runtime_env, "ember.init(runtime_env=...)")  # before any start
    with _init_lock:
        if _global_worker is not None:
            if ignore_reinit_error:
                return RuntimeContextInfo(_global_worker)
            raise RuntimeError("Maybe you called ember.init twice by accident? Call ember.shutdown() "
                               "first, or pass ignore_reinit_error=True.")
        config = get_config()
        from ember_common import tracing

        tracing.setup("ember-driver")
        gcs_address = _resolve_address(address)
        cluster = None
        advertised_ip: str | None = None  # the embedded cluster: node_ip() (loopback)
        if gcs_address is None:
            import psutil

            res = _default_resources(num_cpus, num_gpus, resources, memory)
            store = object_store_memory or int(psutil.virtual_memory().total *
                                               config.object_store_memory_fraction)
            # Ray's private _metrics_export_port: raylet N, objmgr N+1, GCS N+2.
            cluster = EmbeddedCluster(res, store, config, int(kwargs.get("_metrics_export_port") or 0),
                                      labels=kwargs.get("labels"))
            if include_dashboard:  # Ray's include_dashboard / dashboard_host / dashboard_port
                node_mod.start_embedded_dashboard(cluster, kwargs)
            if kwargs.get("_ray_client_server_port") is not None:  # the client proxy, for tests
                client_mode.start_embedded_proxy(cluster, int(kwargs["_ray_client_server_port"]))
            gcs_address = cluster.gcs_address
            node = cluster.node
            node_id, raylet, objmgr, store_dir, session_dir = (
                node.node_id, node.raylet_address, node.objmgr_address, node.store_dir, cluster.session_dir)
        else:
            if num_cpus is not None or num_gpus is not None or resources:
                raise ValueError("num_cpus/num_gpus/resources describe a new cluster; they cannot be "
                                 "given when connecting to an existing one (set them in `ember start`)")
            n = _pick_node(gcs_address)
            node_id, raylet, objmgr, store_dir = n.node_id, n.raylet_address, n.objmgr_address, n.store_dir
            advertised_ip = kwargs.get("_node_ip_address") or _advertised_ip(raylet, gcs_address,
                                                                             os.path.isdir(store_dir))
            session_dir = os.path.dirname(os.path.dirname(store_dir))
        try:
            from ember_common.ids import new_worker_id

            worker_id = new_worker_id()
            job_id = _add_job(gcs_address, worker_id, namespace or "")
            core = CoreWorker(WorkerMode.DRIVER, gcs_address=gcs_address, raylet_address=raylet,
                              objmgr_address=objmgr, node_id=node_id, store_dir=store_dir,
                              job_id=job_id, session_dir=session_dir, config=config, ip=advertised_ip,
                              worker_id=worker_id)
        except Exception:
            if cluster is not None:
                cluster.stop()
            raise
        import uuid

        w = Worker(core, WorkerMode.DRIVER, cluster, namespace or f"anonymous-{uuid.uuid4()}")
        _global_worker = w
        w.functions.export_job_paths(w.namespace)
        try:  # the job's runtime env, its packages uploaded once; every task and actor inherits it
            runtime_env_context.set_job_env(runtime_env)
        except Exception:
            shutdown()
            raise
        from .log_printer import LogPrinter

        w.log_printer = LogPrinter(core, print_logs=log_to_driver)
        atexit.register(_shutdown_at_exit)
        return RuntimeContextInfo(w)


def _init_client(address: str, ignore_reinit_error: bool, given: dict[str, Any]) -> Any:
    with _init_lock:  # client mode: the client proxy runs this program's driver on the head
        if client_mode.active is not None or _global_worker is not None:
            if ignore_reinit_error:
                return RuntimeContextInfo(_global_worker) if _global_worker is not None else client_mode.info()
            raise RuntimeError("Maybe you called ember.init twice by accident? Call ember.shutdown() "
                               "first, or pass ignore_reinit_error=True.")
        info = client_mode.connect(address, given)
        atexit.register(shutdown)
        return info


def _add_job(gcs_address: str, worker_id: str, namespace: str) -> bytes:
    with SyncGcsClient(gcs_address) as gcs:
        job = common_pb2.JobInfo(driver_pid=os.getpid(), start_time=time.time(),
                                 entrypoint=" ".join(sys.argv)[:1000], driver_worker_id=worker_id,
                                 ray_namespace=namespace)
        return gcs.add_job(job, timeout_s=30)


class RuntimeContextInfo(dict[str, Any]):
    """What init() returns (Ray returns a context with address info)."""

    def __init__(self, w: Worker) -> None:
        super().__init__(address=w.core.gcs_address, node_id=w.core.node_id,
                         session_dir=w.core.session_dir,
                         dashboard_url=getattr(w.cluster, "dashboard_url", None))
        if addr := getattr(w.cluster, "client_server_address", None):  # _ray_client_server_port
            self["client_server_address"] = addr
        self.address_info = dict(self)

    def __enter__(self) -> RuntimeContextInfo:
        return self

    def __exit__(self, *a: Any) -> None:
        shutdown()


def _shutdown_at_exit() -> None:
    """At interpreter exit the job ends as the program did: an uncaught KeyboardInterrupt is
    STOPPED, another uncaught exception FAILED (Python sets sys.last_value before atexit runs)."""
    exc = getattr(sys, "last_value", None)
    if isinstance(exc, KeyboardInterrupt):
        shutdown(_end=("STOPPED", "the driver was interrupted (KeyboardInterrupt)"))
    elif exc is not None:
        shutdown(_end=("FAILED", f"the driver exited on {type(exc).__name__}: {exc}"[:2000]))
    else:
        shutdown()


def shutdown(*, wait_for_processes: bool = False, _end: tuple[str, str] = ("SUCCEEDED", "")) -> None:
    """Disconnects; stops the embedded cluster if this driver started it. Ember always waits
    for that cluster's processes to exit, so Ray's wait_for_processes=True holds either way."""
    global _global_worker
    with _init_lock:
        if client_mode.disconnect():  # client mode: the session's driver ends the job
            return
        w = _global_worker
        if w is None:
            return
        _global_worker = None
        try:
            for hook in list(w.before_shutdown):  # e.g. pipelined placement group RPCs
                try:
                    hook()
                except Exception as e:
                    log.debug("shutdown hook %r failed: %s", hook, e)
            # The job's end is reported while the driver stream is still open: once the stream
            # closes, the GCS ends the job FAILED by itself if no end came within its grace.
            try:
                w.core.run(lambda: w.core.gcs.mark_job_finished(
                    w.core.job_id, *_end, timeout_s=5, retry=backoff.NO_RETRY), timeout=6)
            except Exception as e:  # the GCS may be gone already
                log.debug("MarkJobFinished failed: %s", e)
            if w.log_printer is not None:
                w.log_printer.stop()
            w.core.shutdown()
            from ember_common import tracing

            tracing.flush()
        finally:
            from .runtime_env import context as runtime_env_context

            runtime_env_context.reset()
            if w.cluster is not None:
                w.cluster.stop()


def is_initialized() -> bool:
    return _global_worker is not None or client_mode.active is not None


def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    if isinstance(value, ObjectRef):
        raise TypeError("Calling put() on an ObjectRef is not allowed: it is already a reference. "
                        "Pass the ObjectRef itself, or get() its value first.")
    if client_mode.active is not None:
        return client_mode.active.call("put", value)  # type: ignore[no-any-return]
    w = global_worker()
    if tracing.enabled():
        with tracing.span("put") as sp:
            ser = serialize(value)
            ref = w.core.put_serialized(ser)
            sp.set_attributes({"ember.object_id": ref.hex(), "ember.object.size": ser.size,
                               "ember.node_id": w.core.node_id})
            return ref
    return w.core.put_serialized(serialize(value))


def get(object_refs: ObjectRef | Sequence[ObjectRef], *, timeout: float | None = None) -> Any:
    if client_mode.active is not None:
        return client_mode.active.get(object_refs, timeout)
    if tracing.enabled():
        n = 1 if isinstance(object_refs, ObjectRef) else len(object_refs) if isinstance(
            object_refs, (list, tuple)) else None
        attrs: dict[str, Any] = {"ember.get.num_refs": n, "ember.get.timeout_s": timeout}
        with tracing.span("get", **attrs):
            return _get(object_refs, timeout)
    return _get(object_refs, timeout)


def _get(object_refs: ObjectRef | Sequence[ObjectRef], timeout: float | None) -> Any:
    w = global_worker()
    if isinstance(object_refs, ObjectRef):
        return w.core.get([object_refs], timeout)[0]
    if not isinstance(object_refs, list):  # as Ray: a tuple is refused too
        raise ValueError(f"'object_refs' must either be an ObjectRef or a list of ObjectRefs, got "
                         f"{type(object_refs).__name__}")
    for r in object_refs:
        if not isinstance(r, ObjectRef):
            raise ValueError(f"'object_refs' must be ObjectRefs, got an element of type {type(r).__name__}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    return w.core.get(list(object_refs), timeout)


def wait(ray_waitables: Sequence[ObjectRef], *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
    if isinstance(ray_waitables, ObjectRef) or not isinstance(ray_waitables, (list, tuple)):
        raise TypeError(f"wait() expects a list of ObjectRefs, got {type(ray_waitables).__name__}")
    refs = list(ray_waitables)
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"wait() expects ObjectRefs, got an element of type {type(r).__name__}")
    if len(set(refs)) != len(refs):
        raise ValueError("wait() expects a list of unique ObjectRefs")
    if num_returns <= 0 or num_returns > len(refs):
        if not refs and num_returns == 1:
            return [], []
        raise ValueError(f"num_returns must be between 1 and len(ray_waitables)={len(refs)}, got {num_returns}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    if client_mode.active is not None:
        return client_mode.active.wait(refs, num_returns, timeout, fetch_local)  # type: ignore[no-any-return]
    w = global_worker()
    return w.core.wait(refs, num_returns, timeout, fetch_local)


def cancel(ray_waitable: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task behind ray_waitable (see Ray's ray.cancel). A running task is
    interrupted (KeyboardInterrupt in it, even while it waits in get/wait; force=True: its
    worker exits). An actor call that has not started never runs; a running async actor call
    is cancelled; force=True is a ValueError for actor calls. recursive=True also cancels the
    tasks and actor calls the cancelled one submitted, and theirs. `get` then raises
    TaskCancelledError."""
    if not isinstance(ray_waitable, ObjectRef):
        raise TypeError(f"cancel() expects an ObjectRef, got {type(ray_waitable).__name__}")
    if client_mode.active is not None:
        client_mode.active.call("cancel", ray_waitable, bool(force), bool(recursive))
        return
    core = global_worker().core
    core.run(_cancel(core, ray_waitable.task_id(), bool(force), bool(recursive)))


async def _cancel(core: CoreWorker, task_id: bytes, force: bool, recursive: bool) -> None:
    # On the loop: the call's submission (posted there) has been handled by now.
    entry = core.submitter.tasks.get(task_id)
    if entry is not None and entry.spec.actor_id:
        if force:
            raise ValueError("force=True is not supported for actor tasks.")
        await core.actor_submitter.cancel(task_id, recursive)
    else:
        await core.submitter.cancel(task_id, force, recursive)


def _gcs_nodes() -> list[common_pb2.NodeInfo]:
    w = global_worker()
    return list(w.core.run(lambda: w.core.gcs.get_all_node_info(timeout_s=10)))


def nodes() -> list[dict[str, Any]]:
    """Every node the GCS knows, in Ray's format."""
    if client_mode.active is not None:
        return client_mode.active.call("nodes")  # type: ignore[no-any-return]
    out = []
    for n in _gcs_nodes():
        alive = n.state == common_pb2.NodeInfo.ALIVE
        out.append({
            "NodeID": n.node_id, "Alive": alive, "NodeManagerAddress": n.ip,
            "NodeManagerHostname": n.hostname, "NodeManagerPort": int(n.raylet_address.rsplit(":", 1)[1]),
            "ObjectManagerPort": int(n.objmgr_address.rsplit(":", 1)[1]),
            "ObjectStoreSocketName": n.store_dir,
            "Resources": {**n.total_resources, "object_store_memory": float(n.object_store_memory)} if alive else {},
            "IsHead": n.is_head, "state": "ALIVE" if alive else "DEAD", "DeathReason": n.death_reason,
            "Labels": dict(n.labels),
        })
    return out


def _sum(field: str) -> dict[str, float]:
    """Adds up a resource map over the alive nodes, with each node's object store capacity as
    `object_store_memory` (as Ray reports it: a capacity, not a count of free bytes)."""
    if client_mode.active is not None:
        return client_mode.active.call("resources", field)  # type: ignore[no-any-return]
    total: dict[str, float] = {}
    for n in _gcs_nodes():
        if n.state != common_pb2.NodeInfo.ALIVE:
            continue
        for k, v in getattr(n, field).items():
            total[k] = total.get(k, 0.0) + v
        if n.object_store_memory:
            total["object_store_memory"] = total.get("object_store_memory", 0.0) + float(n.object_store_memory)
    return total


def cluster_resources() -> dict[str, float]:
    return _sum("total_resources")


def available_resources() -> dict[str, float]:
    return {k: v for k, v in _sum("available_resources").items() if v > 0}


def get_gpu_ids() -> list[int]:
    w = global_worker()
    ex = w.core.executor
    if ex is not None and ex.actor_spec is not None:
        return list(ex.actor_gpu_ids)
    if ex is not None and ex.running is not None:
        return list(ex.running.gpu_ids)
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(x) for x in vis.split(",") if x.strip().isdigit()] if w.mode is WorkerMode.WORKER else []

