"""Placement groups, server side, through the kit's typed clients against real processes (a GCS,
raylets, object managers; a real etcd for the restart): STRICT_SPREAD over 3 nodes, STRICT_PACK
on one with leases into its bundles, pending until a node joins, rescheduling after a node dies,
removal freeing resources and killing the bundles' workers, and a GCS restart keeping every
group and its placement."""
from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from ember.testing import EtcdProcess, LocalCluster, process_gone, wait_for
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


def raylet(address: str, fn: Callable[[RayletClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = RayletClient(address)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(main())


def stats(address: str) -> raylet_pb2.GetNodeStatsReply:
    return raylet(address, lambda r: r.get_node_stats())


def create(c: LocalCluster, bundles: list[dict[str, float]], strategy: str, **kw: Any) -> PG:
    return gcs(c, lambda g: g.create_placement_group(spec(bundles, strategy, **kw)))


def ready(c: LocalCluster, pg: PG, wait_s: float) -> tuple[bool, PG]:
    return gcs(c, lambda g: g.wait_placement_group_until_ready(pg.placement_group_id, wait_s))


def node_of(c: LocalCluster, node_id: str) -> Any:
    return next(n for n in c.nodes if n.node_id == node_id)


@pytest.fixture()
def fast(monkeypatch):
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    monkeypatch.setenv("EMBER_INFEASIBLE_TIMEOUT_S", "5")


def test_strict_spread_over_three_nodes_and_an_infeasible_group_says_why(fast):
    with LocalCluster() as c:
        for _ in range(3):
            c.add_node({"CPU": 2}, num_prestart_workers=0)
        pg = create(c, [{"CPU": 1}] * 3, "STRICT_SPREAD", name="spread", namespace="ns")
        ok, got = ready(c, pg, 60)
        assert ok, got.state_message
        assert sorted(b.node_id for b in got.bundles) == sorted(n.node_id for n in c.nodes)
        gid = pg.placement_group_id.hex()
        for n in c.nodes:
            s = stats(n.record.raylet_address)
            assert [b.committed for b in s.bundles] == [True]
            assert s.total_resources[f"CPU_group_{gid}"] == 1
            assert s.available_resources["CPU"] == 1
        too_many = create(c, [{"CPU": 1}] * 4, "STRICT_SPREAD")
        ok, got = ready(c, too_many, 1.5)
        assert not ok and got.state == PG.PENDING
        assert "STRICT_SPREAD needs 4 different nodes" in got.state_message
        named = gcs(c, lambda g: g.get_named_placement_group("spread", "ns"))
        assert named.placement_group_id == pg.placement_group_id
        assert len(gcs(c, lambda g: g.get_all_placement_groups())) == 2


def test_strict_pack_on_one_node_leases_into_its_bundles_and_removal_frees_them(fast):
    with LocalCluster() as c:
        a = c.add_node({"CPU": 2}, num_prestart_workers=0)
        b = c.add_node({"CPU": 2}, num_prestart_workers=0)
        pg = create(c, [{"CPU": 1}, {"CPU": 1}], "STRICT_PACK")
        ok, got = ready(c, pg, 60)
        assert ok, got.state_message
        (home,) = {bb.node_id for bb in got.bundles}
        home_node = node_of(c, home)
        other = b if home_node is a else a
        assert stats(home_node.record.raylet_address).available_resources["CPU"] == 0

        async def lease_in_bundle(r: RayletClient) -> Any:
            req = raylet_pb2.RequestWorkerLeaseRequest(
                lease_id=os.urandom(16), resources={"CPU": 1}, name="in-bundle",
                placement_group_id=pg.placement_group_id, placement_group_bundle_index=1)
            for _ in range(100):  # the other node learns the bundle's resources from the GCS feed
                try:
                    return await r.request_worker_lease(req, address=other.record.raylet_address)
                except Exception as e:  # infeasible for a moment: asked again
                    last = e
                    await asyncio.sleep(0.2)
                    req.lease_id = os.urandom(16)
            raise AssertionError(f"no lease: {last}")

        grant = raylet(other.record.raylet_address, lease_in_bundle)
        assert grant is not None and grant.grant.worker_address.node_id == home
        pid = grant.grant.pid
        # The bundles hold the node's CPUs: a plain request there goes elsewhere.
        plain = raylet(home_node.record.raylet_address, lambda r: r.request_worker_lease(
            raylet_pb2.RequestWorkerLeaseRequest(lease_id=os.urandom(16), resources={"CPU": 1}),
            address=home_node.record.raylet_address))
        assert plain is not None and plain.grant.worker_address.node_id == other.node_id

        gcs(c, lambda g: g.remove_placement_group(pg.placement_group_id))
        assert gcs(c, lambda g: g.get_placement_group(pg.placement_group_id)).state == PG.REMOVED
        wait_for(lambda: process_gone(pid),
                 timeout_s=20, what="the bundle's worker to be killed")
        s = stats(home_node.record.raylet_address)
        assert s.available_resources["CPU"] == 2 and not s.bundles
        assert not any("_group_" in k for k in s.total_resources)
        gcs(c, lambda g: g.remove_placement_group(pg.placement_group_id))  # idempotent


def test_pending_until_a_node_joins(fast):
    with LocalCluster() as c:
        c.add_node({"CPU": 1}, num_prestart_workers=0)
        pg = create(c, [{"CPU": 2}], "PACK")
        ok, got = ready(c, pg, 1.5)
        assert not ok and got.state == PG.PENDING and "{'CPU': 2.0}" in got.state_message
        big = c.add_node({"CPU": 2}, num_prestart_workers=0)
        ok, got = ready(c, pg, 60)
        assert ok and [bb.node_id for bb in got.bundles] == [big.node_id]


def test_node_death_reschedules_the_lost_bundles(fast):
    with LocalCluster() as c:
        for _ in range(3):
            c.add_node({"CPU": 1}, num_prestart_workers=0)
        pg = create(c, [{"CPU": 1}, {"CPU": 1}], "STRICT_SPREAD")
        ok, got = ready(c, pg, 60)
        assert ok, got.state_message
        lost, kept = got.bundles[0].node_id, got.bundles[1].node_id
        c.kill_raylet(node_of(c, lost))

        def moved() -> PG | None:
            g = gcs(c, lambda cl: cl.get_placement_group(pg.placement_group_id))
            return g if g.state == PG.CREATED and g.placement_version == 2 else None

        g = wait_for(moved, timeout_s=60, what="the group to be rescheduled")
        spare = ({n.node_id for n in c.nodes} - {lost, kept}).pop()
        assert [bb.node_id for bb in g.bundles] == [spare, kept]
        assert [b.bundle.index for b in stats(node_of(c, spare).record.raylet_address).bundles] == [0]


@pytest.mark.etcd
@pytest.mark.chaos
def test_gcs_restart_keeps_every_group_and_its_placement(fast):
    with EtcdProcess() as etcd, LocalCluster(gcs_storage=etcd.url) as c:
        c.add_node({"CPU": 2}, num_prestart_workers=0)
        c.add_node({"CPU": 2}, num_prestart_workers=0)
        pg = create(c, [{"CPU": 1}, {"CPU": 1}], "STRICT_SPREAD", name="kept", detached=True)
        ok, before = ready(c, pg, 60)
        assert ok, before.state_message
        waiting = create(c, [{"CPU": 3}], "PACK")
        c.kill_gcs()
        c.restart_gcs()
        after = gcs(c, lambda g: g.get_named_placement_group("kept", ""))
        assert after.state == PG.CREATED
        assert [b.node_id for b in after.bundles] == [b.node_id for b in before.bundles]
        assert gcs(c, lambda g: g.get_placement_group(waiting.placement_group_id)).state == PG.PENDING
        for n in c.nodes:  # the raylets kept their reservations
            assert [b.committed for b in stats(n.record.raylet_address).bundles] == [True]
        big = c.add_node({"CPU": 4}, num_prestart_workers=0)
        ok, got = ready(c, waiting, 60)
        assert ok and [b.node_id for b in got.bundles] == [big.node_id]
        gcs(c, lambda g: g.remove_placement_group(pg.placement_group_id))
        wait_for(lambda: all(not stats(n.record.raylet_address).bundles for n in c.nodes[:2]),
                 timeout_s=20, what="bundles released after the restart")


def test_gauge_of_groups_by_state():
    import socket
    import urllib.request

    from ember._private import node as node_mod

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    session = node_mod.new_session_dir()
    gcs_proc = node_mod.start_gcs(session, port=0, host="127.0.0.1", metrics_export_port=port)
    procs = [gcs_proc]
    try:
        address = f"127.0.0.1:{gcs_proc.port}"
        _, node_procs = node_mod.start_node(session, address, resources={"CPU": 1},
                                            object_store_memory=64 * 2**20, is_head=True,
                                            num_prestart_workers=0)
        procs += node_procs

        async def scenario(g: GcsClient) -> None:
            done = await g.create_placement_group(spec([{"CPU": 1}]))
            assert (await g.wait_placement_group_until_ready(done.placement_group_id, 60))[0]
            await g.create_placement_group(spec([{"CPU": 8}]))
            gone = await g.create_placement_group(spec([{"CPU": 9}]))
            await g.remove_placement_group(gone.placement_group_id)

        asyncio.run(_with_gcs(address, scenario))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        values = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("ember_placement_groups{")}
        assert values == {"PENDING": 1.0, "PREPARED": 0.0, "CREATED": 1.0, "REMOVED": 1.0,
                          "RESCHEDULING": 0.0}
    finally:
        for p in reversed(procs):
            node_mod.stop_process(p.pid, popen=p.popen)
        node_mod.remove_session_store(session)


async def _with_gcs(address: str, fn: Callable[[GcsClient], Awaitable[None]]) -> None:
    client = GcsClient(address, timeout_s=20)
    try:
        await fn(client)
    finally:
        await client.close()
