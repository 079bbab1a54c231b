"""PlacementGroups: the GCS driver of the placement group state machine (`pg_manager`) and
policy (`placement_policy`). It persists every record (table `placement_groups`), runs the
two-phase commit over the raylets through the kit's RayletClient, and wakes waiters.

One loop takes the waiting groups through prepare/commit, deciding them one at a time (oldest
first, each decision taking its bundles from the loop's view of the nodes) and overlapping
their RPCs; it runs when
a group is created or removed, a node joins or dies, and every second while some group waits
(resources free up as tasks end). After a restart every record is reloaded: a PREPARED group is
committed again (idempotent on the raylets; a raylet that lost the reservation fails the
commit, which rolls back and reschedules), and a waiting group first cancels, on every alive
node, reservations an interrupted attempt may have left.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ember_common import rpc
from ember_common.proto import common_pb2
from ember_common.raylet_client import RayletClient

from .pg_manager import PG, Cancel, PgManager, Prepare
from .storage import Storage

log = logging.getLogger(__name__)
TABLE = "placement_groups"
RETRY_PERIOD_S = 1.0


class PlacementGroups:
    """The PlacementGroupInfoGcsService core."""

    def __init__(self, storage: Storage, nodes: dict[str, common_pb2.NodeInfo],
                 clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.nodes = nodes  # the GCS node table (shared with GcsCore)
        self.manager = PgManager(clock)
        self._changed = asyncio.Condition()
        self._wake = asyncio.Event()
        self._channels = rpc.ChannelPool()
        self.raylets = RayletClient(channel_for=self._channels.get)
        self._loop: asyncio.Task[None] | None = None
        self._cleanup: set[bytes] = set()  # loaded waiting groups: cancel leftovers first

    async def load(self) -> None:
        """Reads every group back after a restart."""
        for blob in (await self.storage.get_all(TABLE)).values():
            g = common_pb2.PlacementGroupInfo.FromString(blob)
            self.manager.load(g)
            if g.state in (PG.PENDING, PG.RESCHEDULING):
                self._cleanup.add(g.placement_group_id)
        log.info("loaded %d placement groups from storage", len(self.manager.groups))

    def start(self) -> None:
        """Starts the scheduling loop (on the running event loop)."""
        self._loop = asyncio.ensure_future(self._run())
        self._wake.set()

    async def close(self) -> None:
        """Stops the loop and closes channels."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        await self._channels.close()

    def wake(self) -> None:
        """Something changed (a node joined, resources freed): try the waiting groups."""
        self._wake.set()

    async def _save(self, g: common_pb2.PlacementGroupInfo) -> None:
        await self.storage.put(TABLE, g.placement_group_id, g.SerializeToString())
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ API
    async def create(self, spec: common_pb2.PlacementGroupInfo) -> common_pb2.PlacementGroupInfo:
        """CreatePlacementGroup (idempotent by id)."""
        g, new = self.manager.create(spec)
        if new:
            await self._save(g)
            log.info("placement group %s (%s, %d bundles) created", g.placement_group_id.hex()[:8],
                     PG.Strategy.Name(g.strategy), len(g.bundles))
            self.wake()
        return g

    async def remove(self, pg_id: bytes, why: str = "removed by remove_placement_group()") -> None:
        """RemovePlacementGroup: REMOVED, then every bundle released on its raylet."""
        g = self.manager.get(pg_id)
        if g.state == PG.REMOVED:
            return
        placed = [b.index for b in g.bundles if b.node_id]
        self._adjust_view(g, placed, +1)
        cancels = self.manager.remove(pg_id, why)
        log.info("placement group %s REMOVED: %s", pg_id.hex()[:8], why)
        await self._save(g)
        await self._cancel(cancels)
        self.wake()

    async def wait_ready(self, pg_id: bytes, timeout_s: float) -> tuple[bool, common_pb2.PlacementGroupInfo]:
        """Blocks until CREATED (True) or REMOVED (False), at most timeout_s."""
        g = self.manager.get(pg_id)

        def done() -> bool:
            return g.state in (PG.CREATED, PG.REMOVED)

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(done), timeout_s if timeout_s > 0 else None)
            except asyncio.TimeoutError:
                pass
        return g.state == PG.CREATED, g

    async def on_node_dead(self, node_id: str) -> None:
        """The node's bundles are placed again elsewhere."""
        for pg_id in self.manager.node_dead(node_id):
            await self._save(self.manager.get(pg_id))
        self.wake()

    async def on_job_finished(self, job_id: bytes) -> None:
        """Non-detached groups go with their job."""
        for pg_id in self.manager.job_finished(job_id):
            await self.remove(pg_id, "its job finished")

    # ------------------------------------------------------------------ scheduling
    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), RETRY_PERIOD_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._recommit()
                # Every waiting group at once: each is decided (and its resources taken from
                # the view) before the next one is, then their RPCs overlap.
                await asyncio.gather(*(self._attempt(g.placement_group_id)
                                       for g in self.manager.waiting()))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # storage down: next round
                log.warning("placement group scheduling round failed: %s", e)

    def _view(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        alive = [n for n in self.nodes.values() if n.state == common_pb2.NodeInfo.ALIVE]
        return ({n.node_id: dict(n.available_resources) for n in alive},
                {n.node_id: dict(n.total_resources) for n in alive})

    def _adjust_view(self, g: common_pb2.PlacementGroupInfo, indexes: list[int], sign: int) -> None:
        """Takes (-1) or gives back (+1) bundles' resources in the GCS's copy of the nodes'
        availability until their next heartbeats report it themselves, so the next group is
        placed on what is really left without waiting for a heartbeat."""
        for i in indexes:
            b = g.bundles[i]
            node = self.nodes.get(b.node_id)
            if node is None:
                continue
            for k, v in b.resources.items():
                node.available_resources[k] = node.available_resources.get(k, 0.0) + sign * v

    def _adjust_plan(self, g: common_pb2.PlacementGroupInfo, plan: dict[str, list[int]],
                     sign: int) -> None:
        """_adjust_view for bundles chosen but not placed yet (plan: node -> indexes)."""
        for node_id, indexes in plan.items():
            node = self.nodes.get(node_id)
            if node is None:
                continue
            for i in indexes:
                for k, v in g.bundles[i].resources.items():
                    node.available_resources[k] = node.available_resources.get(k, 0.0) + sign * v

    async def _recommit(self) -> None:
        for g in [g for g in self.manager.groups.values() if g.state == PG.PREPARED]:
            plan: dict[str, list[int]] = {}
            for b in g.bundles:
                plan.setdefault(b.node_id, []).append(b.index)
            await self._commit(g.placement_group_id, plan)

    async def _attempt(self, pg_id: bytes) -> None:
        g = self.manager.get(pg_id)
        if pg_id in self._cleanup:
            self._cleanup.discard(pg_id)
            unplaced = [b.index for b in g.bundles if not b.node_id]
            await self._cancel([Cancel(pg_id, n, unplaced) for n in self._view()[0]])
        before = g.state_message
        d = self.manager.schedule(pg_id, *self._view())
        if not isinstance(d, Prepare):
            if g.state_message != before:
                log.info("placement group %s waits: %s", pg_id.hex()[:8], d.reason)
                await self._save(g)
            return
        # Taken from the view now, before any await: groups attempted concurrently see it.
        self._adjust_plan(g, d.plan, -1)
        results = await asyncio.gather(*(self._prepare(pg_id, node, ix) for node, ix in d.plan.items()))
        failed = [why for why in results if why]
        if g.state == PG.REMOVED:  # removed meanwhile: undo what this attempt reserved
            self._adjust_plan(g, d.plan, +1)
            await self._cancel([Cancel(pg_id, n, ix) for n, ix in d.plan.items()])
            return
        if failed:
            self._adjust_plan(g, d.plan, +1)
            await self._rollback(pg_id, d.plan, "; ".join(failed))
            return
        self.manager.prepared(pg_id, d.plan)
        await self._save(g)
        await self._commit(pg_id, d.plan)

    async def _prepare(self, pg_id: bytes, node_id: str, indexes: list[int]) -> str:
        """'' on success, else why not."""
        node = self.nodes.get(node_id)
        if node is None or node.state != common_pb2.NodeInfo.ALIVE:
            return f"node {node_id[:8]} is gone"
        g = self.manager.get(pg_id)
        bundles = [common_pb2.Bundle(index=i, resources=g.bundles[i].resources) for i in indexes]
        try:
            ok = await self.raylets.prepare_bundle_resources(pg_id, bundles, address=node.raylet_address)
        except rpc.ServiceError as e:
            return f"prepare on node {node_id[:8]} failed: {e}"
        return "" if ok else f"bundles {indexes} no longer fit on node {node_id[:8]}"

    async def _commit(self, pg_id: bytes, plan: dict[str, list[int]]) -> None:
        errors = []
        for node_id, indexes in plan.items():
            node = self.nodes.get(node_id)
            if node is None or node.state != common_pb2.NodeInfo.ALIVE:
                errors.append(f"node {node_id[:8]} is gone")
                continue
            try:
                await self.raylets.commit_bundle_resources(pg_id, indexes, address=node.raylet_address)
            except rpc.ServiceError as e:
                errors.append(f"commit on node {node_id[:8]} failed: {e}")
        g = self.manager.get(pg_id)
        if g.state == PG.REMOVED:
            await self._cancel([Cancel(pg_id, n, ix) for n, ix in plan.items()])
            return
        if errors:
            await self._rollback(pg_id, plan, "; ".join(errors))
            return
        self.manager.committed(pg_id)
        log.info("placement group %s CREATED on %s", pg_id.hex()[:8],
                 sorted({b.node_id[:8] for b in g.bundles}))
        await self._save(g)

    async def _rollback(self, pg_id: bytes, plan: dict[str, list[int]], reason: str) -> None:
        log.info("placement group %s: rolling back (%s)", pg_id.hex()[:8], reason)
        cancels = self.manager.failed(pg_id, plan, reason)
        await self._save(self.manager.get(pg_id))
        await self._cancel(cancels)

    async def _cancel(self, cancels: list[Cancel]) -> None:
        async def one(c: Cancel) -> None:
            node = self.nodes.get(c.node_id)
            if node is None or node.state != common_pb2.NodeInfo.ALIVE:
                return  # its reservations died with it
            try:
                await self.raylets.cancel_resource_reserve(c.pg_id, c.indexes, address=node.raylet_address)
            except rpc.ServiceError as e:
                log.warning("releasing bundles %s of group %s on node %s failed: %s", c.indexes,
                            c.pg_id.hex()[:8], c.node_id[:8], e)

        await asyncio.gather(*(one(c) for c in cancels))
