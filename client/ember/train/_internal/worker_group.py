"""The worker group: one `TrainWorker` actor per rank, gang-scheduled in a placement group with
one bundle per worker (the ScalingConfig's `resources_per_worker`, 1 CPU by default, 1 GPU with
`use_gpu`) and its `placement_strategy` (PACK by default), started together and killed together.

`reserve()` is the one place that decides where the workers go, as Ray Train 2.60 does:
- Outside a placement group (a plain `fit()`): a new group of `num_workers` bundles. The
  controller runs in the driver and holds nothing, so there is no trainer bundle (Ray 2.60's
  controller actor takes 0 CPUs the same way). It waits `TRAIN_PLACEMENT_GROUP_TIMEOUT_S`
  (Ray's variable, default 100 s) for the group, printing what is missing once it has waited
  10 s (Ray warns about a pending group too); past that the group is removed and the start
  fails naming what the cluster lacks. The group is removed when the group shuts down: at the
  end of the run, on failure, and before a restart (the next attempt makes a new one, as Ray does).
- Inside a placement group whose last `num_workers` bundles each hold a worker (a Tune trial
  of a `TorchTrainer`, whose group is the trainer's PlacementGroupFactory): the workers use
  those bundles and the group stays (the trial owns it), as Ray Train's workers do under Tune.
  A group that cannot hold them (a function trial with a small PGF calling `fit()`) gets the
  workers a group of their own instead.

Each worker is created with `PlacementGroupSchedulingStrategy(pg, bundle_index=offset + i)`;
once they run, ranks are ordered by node (workers of one node get consecutive ranks, node
order by first bundle), as Ray sorts its workers. Before anything is created,
`placement.infeasible_reason` checks the group against the cluster's nodes, so a request the
cluster can never place fails at once naming the resource or the strategy.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import ember
from ember.air.config import ScalingConfig
from ember.air.placement import infeasible_reason, missing_now, worker_bundle_offset
from ember.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .worker import TrainWorker

PG_TIMEOUT_ENV = "TRAIN_PLACEMENT_GROUP_TIMEOUT_S"
DEFAULT_PG_TIMEOUT_S = 100.0
WARN_AFTER_S = 10.0  # a group still pending then gets a console line saying what is missing


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
    """Raises ValueError when the cluster's nodes could never hold the worker group's placement
    group (a bundle no node fits, too few nodes for STRICT_SPREAD, no node for STRICT_PACK)."""
    bundles = [scaling.worker_resources] * scaling.num_workers
    why = infeasible_reason(bundles, scaling.placement_strategy, nodes)
    if why is not None:
        raise ValueError(f"ScalingConfig asks for {scaling.num_workers} workers with "
                         f"{scaling.worker_resources} each ({scaling.placement_strategy}), which this "
                         f"cluster can never place: {why}")


def pg_timeout_s() -> float:
    """How long a new worker group waits for its placement group (TRAIN_PLACEMENT_GROUP_TIMEOUT_S)."""
    raw = os.environ.get(PG_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_PG_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{PG_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{PG_TIMEOUT_ENV} must be > 0, got {raw!r}")
    return value


@dataclass
class Reservation:
    """The placement group the workers run in: rank bundles start at `offset`; `owned` when the
    worker group made it (and removes it at shutdown), not when it is the enclosing trial's."""

    pg: PlacementGroup
    offset: int
    owned: bool

    def release(self) -> None:
        """Removes the group if the worker group made it (idempotent)."""
        if self.owned:
            self.owned = False
            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - already gone (job ended, GCS removed it)
                pass


def reserve(scaling: ScalingConfig, timeout_s: float | None = None) -> Reservation:
    """The enclosing group's bundles when they hold the workers, else a new ready group."""
    current = get_current_placement_group()
    if current is not None:
        offset = worker_bundle_offset(current.bundle_specs, scaling.worker_resources, scaling.num_workers)
        if offset is not None:
            return Reservation(current, offset, owned=False)
    check_feasible(scaling, ember.nodes())
    bundles = [dict(scaling.worker_resources) for _ in range(scaling.num_workers)]
    pg = placement_group(bundles, strategy=scaling.placement_strategy)
    wait_s = pg_timeout_s() if timeout_s is None else timeout_s
    try:
        ref = pg.ready()
        ready, _ = ember.wait([ref], timeout=min(wait_s, WARN_AFTER_S))
        if not ready and wait_s > WARN_AFTER_S:
            print(f"(Train) waiting up to {wait_s:g} s for the placement group of {scaling.num_workers} workers "
                  f"({scaling.worker_resources} each, {scaling.placement_strategy}); missing now: "
                  f"{missing_now(bundles, ember.available_resources())}", flush=True)
            ready, _ = ember.wait([ref], timeout=wait_s - WARN_AFTER_S)
        if not ready:
            raise WorkerStartError(
                f"the placement group for {scaling.num_workers} training workers "
                f"({scaling.worker_resources} each, {scaling.placement_strategy}) was not placed within "
                f"{wait_s:g} s; missing now: {missing_now(bundles, ember.available_resources())}. Free "
                f"resources, add nodes, or wait longer with {PG_TIMEOUT_ENV}")
        ember.get(ready[0])
    except BaseException:
        remove_placement_group(pg)
        raise
    return Reservation(pg, 0, owned=True)


class WorkerGroup:
    """The started actors, sorted into ranks (workers of one node get consecutive ranks)."""

    def __init__(self, actors: list[Any], metas: list[WorkerMeta], reservation: Reservation | None = None) -> None:
        self.actors = actors
        self.metas = metas
        self.reservation = reservation

    @property
    def world_size(self) -> int:
        return len(self.actors)

    @classmethod
    def start(cls, scaling: ScalingConfig, env: dict[str, str] | None = None, preload: tuple[str, ...] = (),
              start_timeout_s: float = 600.0, runtime_env: dict[str, Any] | None = None) -> WorkerGroup:
        """Creates and gang-waits for the workers (each given `env` and importing `preload` in
        the background from its start; in `runtime_env`, RunConfig's `worker_runtime_env`),
        then orders them into ranks."""
        reservation = reserve(scaling)
        try:
            actors, infos = _start_actors(scaling, reservation, (env or {}, preload), start_timeout_s, runtime_env)
        except BaseException:
            reservation.release()
            raise
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
        return cls([actors[i] for i in ranked], metas, reservation)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Calls method on every rank with the same arguments; returns the results by rank."""
        results: list[Any] = ember.get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])
        return results

    def call_each(self, method: str, args_by_rank: list[tuple[Any, ...]]) -> list[Any]:
        """Calls method on each rank with its own arguments; returns the results by rank."""
        results: list[Any] = ember.get([getattr(a, method).remote(*args)
                                        for a, args in zip(self.actors, args_by_rank, strict=False)])
        return results

    def shutdown(self, graceful: bool = True) -> None:
        """Leaves the process group (when graceful), kills every worker, then removes the
        placement group when this worker group made it."""
        if graceful:
            refs = [a.shutdown.remote() for a in self.actors]
            ember.wait(refs, num_returns=len(refs), timeout=10)
        for a in self.actors:
            try:
                ember.kill(a)
            except Exception:  # noqa: BLE001 - already dead, GCS busy: nothing left to do
                pass
        if self.reservation is not None:
            self.reservation.release()


def _start_actors(scaling: ScalingConfig, reservation: Reservation, init_args: tuple[Any, ...],
                  timeout_s: float, runtime_env: dict[str, Any] | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
    """Creates one actor per bundle of the reservation and waits until all of them run
    (their `node_info`); kills them all if one cannot start."""
    opts = actor_options(scaling.worker_resources)
    if runtime_env:
        opts["runtime_env"] = runtime_env
    cls = ember.remote(TrainWorker)
    actors = [cls.options(**opts, scheduling_strategy=PlacementGroupSchedulingStrategy(
        reservation.pg, placement_group_bundle_index=reservation.offset + i)).remote(*init_args)
        for i in range(scaling.num_workers)]
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
                    f"(their placement group is ready; available: {ember.available_resources()})")
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
