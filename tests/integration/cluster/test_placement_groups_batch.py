"""Placement groups in batches, against real processes (a GCS, two raylets, object managers):
many groups created in one CreatePlacementGroups call (a bad one refused alone), placed by
rounds that never give a CREATED group a bundle its raylet does not hold, removed in one
RemovePlacementGroups call whose freed bundles go to the groups that waited, and a wait that
reports which other groups are CREATED."""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, TypeVar

from ember.testing import LocalCluster, wait_for
from ember_common.gcs_client import GcsClient
from ember_common.gcs_pg_client import spec
from ember_common.proto import common_pb2, raylet_pb2
from ember_common.raylet_client import RayletClient

PG = common_pb2.PlacementGroupInfo
T = TypeVar("T")


def gcs(c: LocalCluster, fn: Callable[[GcsClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = GcsClient(c.gcs_address, timeout_s=20)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(main())


def stats(address: str) -> raylet_pb2.GetNodeStatsReply:
    async def main() -> raylet_pb2.GetNodeStatsReply:
        client = RayletClient(address)
        try:
            return await client.get_node_stats()
        finally:
            await client.close()

    return asyncio.run(main())


def states(c: LocalCluster, ids: list[bytes]) -> dict[bytes, PG]:
    groups = gcs(c, lambda g: g.get_all_placement_groups())
    return {g.placement_group_id: g for g in groups if g.placement_group_id in ids}


def check_reservations(c: LocalCluster, ids: list[bytes]) -> list[bytes]:
    """The CREATED groups among ids, each checked against the raylets: its bundle is committed on
    the node the GCS recorded, and no node holds more than its 2 CPUs."""
    now = states(c, ids)  # first: a group CREATED here must be committed on the raylet after
    held = {n.node_id: stats(n.record.raylet_address).bundles for n in c.nodes}
    for node_id, bundles in held.items():
        assert sum(b.bundle.resources["CPU"] for b in bundles) <= 2.0, (node_id, bundles)
    created = []
    for pg_id, g in now.items():
        if g.state == PG.CREATED:
            mine = [b for b in held[g.bundles[0].node_id] if b.placement_group_id == pg_id]
            assert len(mine) == 1 and mine[0].committed, (g, held)
            created.append(pg_id)
    return created


def test_batched_creation_placement_removal_and_wait_reports():
    with LocalCluster() as c:
        c.add_node({"CPU": 2}, num_prestart_workers=0)
        c.add_node({"CPU": 2}, num_prestart_workers=0)
        groups = [spec([{"CPU": 1}]) for _ in range(10)]
        bad = spec([{"CPU": 1}])
        del bad.bundles[:]
        errors = gcs(c, lambda g: g.create_placement_groups(groups[:5] + [bad] + groups[5:]))
        assert errors[:5] == [""] * 5 and errors[6:] == [""] * 5
        assert "at least one bundle" in errors[5]
        ids = [g.placement_group_id for g in groups]
        # Again: idempotent by id, nothing new.
        assert gcs(c, lambda g: g.create_placement_groups(groups)) == [""] * 10

        wait_for(lambda: len(check_reservations(c, ids)) == 4, timeout_s=30, what="4 groups placed")
        first = check_reservations(c, ids)
        time.sleep(1.5)  # a retry round or two: still 4, the other 6 wait saying why
        now = states(c, ids)
        assert sorted(i for i, g in now.items() if g.state == PG.CREATED) == sorted(first)
        assert all(g.state == PG.PENDING and "waiting for resources" in g.state_message
                   for i, g in now.items() if i not in first)

        # A wait reports which of the others are CREATED.
        async def report(g: GcsClient) -> tuple[bool, list[bytes]]:
            ok, _, seen = await g.wait_placement_group_and_report(first[0], 5, ids)
            return ok, seen

        ok, seen = gcs(c, report)
        assert ok and sorted(seen) == sorted(first)

        unknown = b"\x07" * 18
        assert gcs(c, lambda g: g.remove_placement_groups(first + [unknown])) == [unknown]
        assert all(g.state == PG.REMOVED for i, g in states(c, first).items())
        # The freed CPUs go to 4 of the groups that waited, never to more than fit.
        deadline = time.monotonic() + 30
        while True:
            second = [i for i in check_reservations(c, ids) if i not in first]
            if len(second) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(second) == 4, states(c, ids)
        gcs(c, lambda g: g.remove_placement_groups(ids))
        wait_for(lambda: all(not stats(n.record.raylet_address).bundles for n in c.nodes),
                 timeout_s=20, what="every bundle released")


def test_many_groups_in_flight_from_one_client():
    """A client's own batches: 40 creations in flight at once, then waits, then removals."""
    with LocalCluster() as c:
        c.add_node({"CPU": 2, "custom": 100}, num_prestart_workers=0)

        async def scenario(g: GcsClient) -> None:
            groups = [spec([{"custom": 1}]) for _ in range(40)]
            results = await asyncio.gather(*(g.create_placement_groups(groups[i:i + 10])
                                             for i in range(0, 40, 10)))
            assert all(r == [""] * 10 for r in results)
            ids = [s.placement_group_id for s in groups]
            oks = await asyncio.gather(*(g.wait_placement_group_until_ready(i, 30) for i in ids))
            assert all(ok for ok, _ in oks)
            assert await g.remove_placement_groups(ids) == []

        gcs(c, lambda g: scenario(g))
        wait_for(lambda: not stats(c.nodes[0].record.raylet_address).bundles, timeout_s=20,
                 what="every bundle released")
