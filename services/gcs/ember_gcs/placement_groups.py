"""PlacementGroups: the GCS driver of the placement group state machine (`pg_manager`) and
policy (`placement_policy`). It persists every record (table `placement_groups`), runs the
two-phase commit over the raylets through the kit's RayletClient, and wakes waiters.

One loop works in rounds; a round runs when a group is created or removed, a node joins or
dies, and every second while some group waits (resources free up as tasks end):

1. release: the bundles of removed groups and of rolled-back attempts are cancelled, one RPC
   per raylet for all of them, before anything new is prepared there; only once a raylet has
   answered are their resources given back to the GCS's view of the node, so they are never
   promised twice;
2. decide: every waiting group, oldest first, each taking its bundles from what the earlier
   ones left (`PgManager.schedule_round`);
3. prepare: one PrepareBundleResources per raylet carrying every group of the round; a group
   is prepared when every raylet of its plan reserved its bundles, else it is rolled back; a
   group whose plan is on one node is committed by that same call (nothing to agree on across
   raylets);
4. commit: one CommitBundleResources per raylet for the other prepared groups, then the
   CREATED records are written (concurrently) and their waiters answered.

Writes: a creation is written before it is answered, a removal likewise, and a group is written
again when it is CREATED or waits for a new reason; PREPARED is kept in memory only: after a
restart a group read back as waiting first cancels, on every alive node, the reservations an
interrupted attempt may have left, and a record read back as PREPARED (older GCS) is committed
again (idempotent on the raylets; a raylet that lost the reservation fails the commit, which
rolls back and reschedules). Removal answers once REMOVED is written; its bundles are released
by the next round, which starts at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Iterable

from ember_common import rpc
from ember_common.proto import common_pb2
from ember_common.raylet_client import RayletClient

from .pg_manager import PG, Cancel, PgManager, Prepare, by_node
from .storage import Storage

log = logging.getLogger(__name__)
TABLE = "placement_groups"
RETRY_PERIOD_S = 1.0
# REMOVED groups kept (table, GetAll, wait answers); older ones are forgotten and deleted.
MAX_REMOVED_KEPT = 10_000
Plan = dict[str, list[int]]


class PlacementGroups:
    """The PlacementGroupInfoGcsService core."""

    def __init__(self, storage: Storage, nodes: dict[str, common_pb2.NodeInfo],
                 clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.nodes = nodes  # the GCS node table (shared with GcsCore)
        self.manager = PgManager(clock)
        self._waiters: dict[bytes, list[asyncio.Future[None]]] = {}
        self._wake = asyncio.Event()
        self._channels = rpc.ChannelPool()
        self.raylets = RayletClient(channel_for=self._channels.get)
        self._loop: asyncio.Task[None] | None = None
        self._cleanup: set[bytes] = set()  # loaded waiting groups: cancel leftovers first
        # Bundles to release on their raylets: (what, give its resources back to the view after).
        self._releases: list[tuple[Cancel, bool]] = []
        self._evicted: list[bytes] = []  # forgotten REMOVED groups, to delete from storage
        self._writes = asyncio.Lock()

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

    async def _save(self, groups: Iterable[common_pb2.PlacementGroupInfo]) -> None:
        """Writes the records (concurrently within a call; calls one after another, so a
        group's later state is never overwritten by an earlier one), then answers the waiters
        of those now decided."""
        todo = list(groups)
        blobs = [(g.placement_group_id, g.SerializeToString()) for g in todo]
        async with self._writes:
            await asyncio.gather(*(self.storage.put(TABLE, k, v) for k, v in blobs))
        for g in todo:
            if g.state in (PG.CREATED, PG.REMOVED):
                for f in self._waiters.pop(g.placement_group_id, []):
                    if not f.done():
                        f.set_result(None)

    # ------------------------------------------------------------------ API
    async def create(self, spec: common_pb2.PlacementGroupInfo) -> common_pb2.PlacementGroupInfo:
        """CreatePlacementGroup (idempotent by id)."""
        g, new = self.manager.create(spec)
        if new:
            await self._save([g])
            log.info("placement group %s (%s, %d bundles) created", g.placement_group_id.hex()[:8],
                     PG.Strategy.Name(g.strategy), len(g.bundles))
            self.wake()
        return g

    async def create_many(self, specs: Iterable[common_pb2.PlacementGroupInfo]) -> list[str]:
        """CreatePlacementGroups: per spec '' (recorded now or before) or why it was refused.
        The new records are written before the answer."""
        errors, new = [], []
        for spec in specs:
            try:
                g, is_new = self.manager.create(spec)
            except rpc.ServiceError as e:
                errors.append(str(e))
                continue
            errors.append("")
            if is_new:
                new.append(g)
        if new:
            await self._save(new)
            log.info("%d placement groups created", len(new))
            self.wake()
        return errors

    async def remove(self, pg_id: bytes, why: str = "removed by remove_placement_group()") -> None:
        """RemovePlacementGroup: REMOVED (written), then the next round releases its bundles.
        NotFound if unknown."""
        self.manager.get(pg_id)
        await self.remove_many([pg_id], why)

    async def remove_many(self, pg_ids: Iterable[bytes],
                          why: str = "removed by remove_placement_group()") -> list[bytes]:
        """RemovePlacementGroups; returns the unknown ids."""
        unknown, changed = [], []
        for pg_id in pg_ids:
            g = self.manager.groups.get(pg_id)
            if g is None:
                unknown.append(pg_id)
                continue
            if g.state == PG.REMOVED:
                continue
            self._releases += [(c, True) for c in self.manager.remove(pg_id, why)]
            changed.append(g)
        if changed:
            log.info("%d placement groups REMOVED: %s", len(changed), why)
            await self._save(changed)
            self._evicted += self.manager.evict_removed(MAX_REMOVED_KEPT)
            self.wake()
        return unknown

    async def wait_ready(self, pg_id: bytes, timeout_s: float, also_report: Iterable[bytes] = ()
                         ) -> tuple[bool, common_pb2.PlacementGroupInfo, list[bytes]]:
        """Blocks until CREATED (True) or REMOVED (False), at most timeout_s; with the ids of
        also_report that are CREATED by then."""
        g = self.manager.get(pg_id)
        if g.state not in (PG.CREATED, PG.REMOVED):
            f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(pg_id, []).append(f)
            try:
                await asyncio.wait_for(f, timeout_s if timeout_s > 0 else None)
            except asyncio.TimeoutError:
                pass
            finally:
                waiting = self._waiters.get(pg_id)
                if waiting and f in waiting:
                    waiting.remove(f)
                    if not waiting:
                        del self._waiters[pg_id]
        groups = self.manager.groups
        ready = [i for i in also_report if i in groups and groups[i].state == PG.CREATED]
        return g.state == PG.CREATED, g, ready

    async def on_node_dead(self, node_id: str) -> None:
        """The node's bundles are placed again elsewhere."""
        await self._save([self.manager.get(pg_id) for pg_id in self.manager.node_dead(node_id)])
        self.wake()

    async def on_job_finished(self, job_id: bytes) -> None:
        """Non-detached groups go with their job."""
        await self.remove_many(self.manager.job_finished(job_id), "its job finished")

    # ------------------------------------------------------------------ scheduling
    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), RETRY_PERIOD_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # storage down: next round
                log.warning("placement group scheduling round failed: %s", e)

    async def _round(self) -> None:
        await self._release()
        await self._recommit()
        for pg_id in [g.placement_group_id for g in self.manager.waiting() if g.placement_group_id in self._cleanup]:
            self._cleanup.discard(pg_id)
            unplaced = [b.index for b in self.manager.get(pg_id).bundles if not b.node_id]
            self._releases += [(Cancel(pg_id, n, unplaced), False) for n in self._view()[0]]
        await self._release()
        before = {g.placement_group_id: g.state_message for g in self.manager.waiting()}
        prepares: list[Prepare] = []
        labels = {n.node_id: dict(n.labels) for n in self.nodes.values() if n.state == common_pb2.NodeInfo.ALIVE}
        for d in self.manager.schedule_round(*self._view(), labels):
            if isinstance(d, Prepare):
                # Taken from the view now: decisions until the next heartbeat see it.
                self._adjust(d.pg_id, d.plan, -1)
                prepares.append(d)
        waits = [g for pg_id, msg in before.items()
                 if (g := self.manager.get(pg_id)).state_message != msg and g.state in (PG.PENDING, PG.RESCHEDULING)]
        for g in waits:
            log.info("placement group %s waits: %s", g.placement_group_id.hex()[:8], g.state_message)
        if waits:
            await self._save(waits)
        if prepares:
            prepared, changed = await self._prepare([(d.pg_id, d.plan) for d in prepares])
            await self._commit(prepared, changed)
            await self._release()

    def _view(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        alive = [n for n in self.nodes.values() if n.state == common_pb2.NodeInfo.ALIVE]
        return ({n.node_id: dict(n.available_resources) for n in alive},
                {n.node_id: dict(n.total_resources) for n in alive})

    def _adjust(self, pg_id: bytes, plan: Plan, sign: int) -> None:
        """Takes (-1) or gives back (+1) bundles' resources in the GCS's copy of the nodes'
        availability until their next heartbeats report it themselves, so the next round
        places groups on what is really left without waiting for a heartbeat."""
        g = self.manager.groups.get(pg_id)
        if g is None:
            return
        for node_id, indexes in plan.items():
            node = self.nodes.get(node_id)
            if node is None:
                continue
            for i in indexes:
                for k, v in g.bundles[i].resources.items():
                    node.available_resources[k] = node.available_resources.get(k, 0.0) + sign * v

    def _alive_address(self, node_id: str) -> str | None:
        node = self.nodes.get(node_id)
        return node.raylet_address if node is not None and node.state == common_pb2.NodeInfo.ALIVE else None

    async def _per_node(self, items: list[tuple[bytes, Plan]],
                        call: Callable[[list[tuple[bytes, list[int]]], str], Awaitable[list[str]]]
                        ) -> dict[bytes, list[str]]:
        """One call per node (its groups, its address -> per group '' or why not) for every
        group of items; returns why each failing group failed."""
        failed: dict[bytes, list[str]] = {}

        async def one(node_id: str, groups: list[tuple[bytes, list[int]]]) -> None:
            address = self._alive_address(node_id)
            if address is None:
                whys = [f"node {node_id[:8]} is gone"] * len(groups)
            else:
                try:
                    got = await call(groups, address)
                    whys = ([f"{why} (node {node_id[:8]})" if why else "" for why in got] if len(got) == len(groups)
                            else [f"node {node_id[:8]} answered {len(got)} of {len(groups)} groups"] * len(groups))
                except rpc.ServiceError as e:
                    whys = [f"node {node_id[:8]} failed: {e}"] * len(groups)
            for (pg_id, _), why in zip(groups, whys, strict=True):
                if why:
                    failed.setdefault(pg_id, []).append(why)

        await asyncio.gather(*(one(n, gs) for n, gs in by_node(items).items()))
        return failed

    async def _prepare(self, items: list[tuple[bytes, Plan]]
                       ) -> tuple[list[tuple[bytes, Plan]], list[common_pb2.PlacementGroupInfo]]:
        """Phase one for the round. A group whose plan is on one node is committed by the same
        call (two phases agree across raylets; one raylet's reservation is all or none by
        itself). Returns the groups now PREPARED, and those CREATED or rolled back (to write)."""
        groups = {pg_id: self.manager.get(pg_id) for pg_id, _ in items}  # kept if forgotten meanwhile
        one_node = {pg_id for pg_id, plan in items if len(plan) == 1}

        async def call(gs: list[tuple[bytes, list[int]]], address: str) -> list[str]:
            oks = await self.raylets.prepare_bundle_resources(
                [(pg, [common_pb2.Bundle(index=i, resources=groups[pg].bundles[i].resources) for i in ix])
                 for pg, ix in gs], commit_now=one_node, address=address)
            if len(oks) != len(gs):
                return [f"answered {len(oks)} of {len(gs)} groups"] * len(gs)
            return ["" if ok else f"bundles {ix} no longer fit" for (_, ix), ok in zip(gs, oks, strict=True)]

        failed = await self._per_node(items, call)
        out, changed = [], []
        for pg_id, plan in items:
            g = groups[pg_id]
            if g.state == PG.REMOVED:  # removed meanwhile: undo what this attempt reserved
                self._releases += [(Cancel(pg_id, n, ix), True) for n, ix in plan.items()]
            elif pg_id in failed:
                self._rollback(pg_id, plan, "prepare: " + "; ".join(failed[pg_id]))
                changed.append(g)
            else:
                self.manager.prepared(pg_id, plan)
                if pg_id in one_node:
                    self._created(pg_id)
                    changed.append(g)
                else:
                    out.append((pg_id, plan))
        return out, changed

    def _created(self, pg_id: bytes) -> None:
        self.manager.committed(pg_id)
        log.info("placement group %s CREATED on %s", pg_id.hex()[:8],
                 sorted({b.node_id[:8] for b in self.manager.groups[pg_id].bundles}))

    async def _commit(self, items: list[tuple[bytes, Plan]],
                      changed: list[common_pb2.PlacementGroupInfo] | None = None) -> None:
        """Phase two; the CREATED groups (and `changed`) are written, then their waiters
        answered."""
        changed = list(changed or [])
        if not items:
            if changed:
                await self._save(changed)
            return

        async def call(gs: list[tuple[bytes, list[int]]], address: str) -> list[str]:
            return await self.raylets.commit_bundle_resources(gs, address=address)

        failed = await self._per_node(items, call)
        for pg_id, plan in items:
            g = self.manager.get(pg_id) if pg_id in self.manager.groups else None
            if g is None or g.state == PG.REMOVED:
                continue  # remove() queued the release of its bundles
            if pg_id in failed:
                self._rollback(pg_id, plan, "commit: " + "; ".join(failed[pg_id]))
            else:
                self._created(pg_id)
            changed.append(g)
        await self._save(changed)

    async def _recommit(self) -> None:
        """Commits the groups read back as PREPARED (rounds run one at a time, so no other
        group is PREPARED when a round starts)."""
        items = []
        for g in [g for g in self.manager.groups.values() if g.state == PG.PREPARED]:
            plan: Plan = {}
            for b in g.bundles:
                plan.setdefault(b.node_id, []).append(b.index)
            items.append((g.placement_group_id, plan))
        await self._commit(items)

    def _rollback(self, pg_id: bytes, plan: Plan, reason: str) -> None:
        log.info("placement group %s: rolling back (%s)", pg_id.hex()[:8], reason)
        self._releases += [(c, True) for c in self.manager.failed(pg_id, plan, reason)]

    async def _release(self) -> None:
        """Cancels the queued bundles, one RPC per raylet; gives their resources back to the
        view once the raylet has released them. Deletes the records of forgotten groups."""
        if self._evicted:
            gone, self._evicted = self._evicted, []
            async with self._writes:
                await asyncio.gather(*(self.storage.delete(TABLE, pg_id) for pg_id in gone))
        if not self._releases:
            return
        todo, self._releases = self._releases, []
        per_node: dict[str, list[tuple[Cancel, bool]]] = {}
        for c, give_back in todo:
            per_node.setdefault(c.node_id, []).append((c, give_back))

        async def one(node_id: str, items: list[tuple[Cancel, bool]]) -> None:
            address = self._alive_address(node_id)
            if address is None:
                return  # its reservations died with it
            try:
                await self.raylets.cancel_resource_reserve([(c.pg_id, c.indexes) for c, _ in items],
                                                           address=address)
            except rpc.ServiceError as e:
                log.warning("releasing %d groups' bundles on node %s failed: %s", len(items), node_id[:8], e)
                return
            for c, give_back in items:
                if give_back:
                    self._adjust(c.pg_id, {c.node_id: c.indexes}, +1)

        await asyncio.gather(*(one(n, items) for n, items in per_node.items()))
