"""The worker group: one `TrainWorker` actor per rank, with the ScalingConfig's per-worker
resources, started together (gang) and killed together.

`_reserve()` is the one place that decides where the workers go. Placement groups do not exist
in Ember yet, so it creates the actors with their per-worker resources directly and waits until
every one of them is running; once `ember.util.placement_group` exists it becomes: create a
placement group of `num_workers` bundles with the ScalingConfig's `placement_strategy`, wait for
`pg.ready()`, and create each actor with `placement_group=pg, placement_group_bundle_index=i`.

Before anything starts, `check_feasible` compares each worker's resources with the nodes the
cluster has, so a request no node can satisfy fails at once naming the resource.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ember

from ..config import ScalingConfig
from .worker import TrainWorker


@dataclass
class WorkerMeta:
    """Where one rank runs."""

    rank: int
    node_id: str
    node_ip: str
    pid: int
    gpu_ids: list[int]
    interfaces: dict[str, list[str]]
    free_port: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0


def interface_of(meta: WorkerMeta) -> str | None:
    """The interface that holds the worker's node address on its machine (GLOO_SOCKET_IFNAME)."""
    return next((name for name, ips in meta.interfaces.items() if meta.node_ip in ips), None)


class WorkerStartError(RuntimeError):
    """The group could not be started (infeasible or unschedulable resources)."""


def actor_options(resources: dict[str, float]) -> dict[str, Any]:
    """ember actor options for one worker's resources."""
    opts: dict[str, Any] = {"num_cpus": resources.get("CPU", 0.0), "max_concurrency": 4}
    if resources.get("GPU"):
        opts["num_gpus"] = resources["GPU"]
    if resources.get("memory"):
        opts["memory"] = resources["memory"]
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        opts["resources"] = custom
    return opts


def check_feasible(scaling: ScalingConfig, nodes: list[dict[str, Any]]) -> None:
    """Raises ValueError when no node could ever hold one worker, or the cluster as a whole
    could never hold num_workers of them."""
    need = scaling.worker_resources
    alive = [n for n in nodes if n.get("Alive")]
    fits = 0
    for n in alive:
        have = n.get("Resources") or {}
        per_node = min((int(have.get(k, 0.0) / v + 1e-9) for k, v in need.items() if v > 0), default=scaling.num_workers)
        fits += per_node
    if fits == 0:
        largest = {k: max((n.get("Resources") or {}).get(k, 0.0) for n in alive) if alive else 0.0 for k in need}
        missing = ", ".join(f"{k}={v:g} (largest node has {largest[k]:g})" for k, v in need.items()
                            if largest[k] < v)
        raise ValueError(f"ScalingConfig asks for {need} per worker, but no node in the cluster has "
                         f"that: {missing or 'no node fits all of them at once'}")
    if fits < scaling.num_workers:
        raise ValueError(f"ScalingConfig asks for {scaling.num_workers} workers with {need} each, but "
                         f"the cluster's nodes can hold at most {fits} of them")


class WorkerGroup:
    """The started actors, sorted into ranks (workers of one node get consecutive ranks)."""

    def __init__(self, actors: list[Any], metas: list[WorkerMeta]) -> None:
        self.actors = actors
        self.metas = metas

    @property
    def world_size(self) -> int:
        return len(self.actors)

    @classmethod
    def start(cls, scaling: ScalingConfig, env: dict[str, str] | None = None, preload: tuple[str, ...] = (),
              start_timeout_s: float = 600.0) -> WorkerGroup:
        """Creates and gang-waits for the workers (each given `env` and importing `preload` in
        the background from its start), then orders them into ranks."""
        check_feasible(scaling, ember.nodes())
        actors, infos = _reserve(scaling, (env or {}, preload), start_timeout_s)
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ember.nodes()}
        order: dict[str, int] = {}
        for info in infos:
            order.setdefault(info["node_id"], len(order))
        ranked = sorted(range(len(actors)), key=lambda i: (order[infos[i]["node_id"]], infos[i]["gpu_ids"], i))
        metas = []
        for rank, i in enumerate(ranked):
            info = infos[i]
            metas.append(WorkerMeta(rank, info["node_id"], ips.get(info["node_id"], "127.0.0.1"),
                                    info["pid"], info["gpu_ids"], info["interfaces"], info["free_port"]))
        for m in metas:
            same = [x for x in metas if x.node_id == m.node_id]
            m.local_rank = same.index(m)
            m.local_world_size = len(same)
            m.node_rank = order[m.node_id]
        return cls([actors[i] for i in ranked], metas)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Calls method on every rank with the same arguments; returns the results by rank."""
        return ember.get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])

    def call_each(self, method: str, args_by_rank: list[tuple]) -> list[Any]:
        """Calls method on each rank with its own arguments; returns the results by rank."""
        return ember.get([getattr(a, method).remote(*args) for a, args in zip(self.actors, args_by_rank, strict=False)])

    def shutdown(self, graceful: bool = True) -> None:
        """Leaves the process group (when graceful), then kills every worker."""
        if graceful:
            refs = [a.shutdown.remote() for a in self.actors]
            ember.wait(refs, num_returns=len(refs), timeout=10)
        for a in self.actors:
            try:
                ember.kill(a)
            except Exception:  # noqa: BLE001 - already dead, GCS busy: nothing left to do
                pass


def _reserve(scaling: ScalingConfig, init_args: tuple, timeout_s: float) -> tuple[list[Any], list[dict[str, Any]]]:
    """Creates num_workers actors with the per-worker resources and waits until all of them run
    (their `node_info`). The gang step: replaced by a placement group once Ember has them."""
    cls = ember.remote(TrainWorker).options(**actor_options(scaling.worker_resources))
    actors = [cls.remote(*init_args) for _ in range(scaling.num_workers)]
    refs = [a.node_info.remote() for a in actors]
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ready, pending = ember.wait(refs, num_returns=len(refs), timeout=min(30.0, max(deadline - time.monotonic(), 0.1)))
            if not pending:
                return actors, ember.get(refs)
            if time.monotonic() >= deadline:
                raise WorkerStartError(
                    f"{len(pending)} of {scaling.num_workers} training workers with "
                    f"{scaling.worker_resources} each did not start within {timeout_s:g} s "
                    f"(available: {ember.available_resources()})")
            ember.get(ready)  # raises if a worker could not be created
    except BaseException as e:
        for a in actors:
            try:
                ember.kill(a)
            except Exception:  # noqa: BLE001
                pass
        if isinstance(e, ember.exceptions.RayActorError):
            raise WorkerStartError(f"a training worker could not be started: {e}") from e
        raise
