"""A raylet's heartbeats with many placement-group bundles stay small (resources.HeartbeatReport
against GcsCore.heartbeat_report on in-memory storage): the first heartbeat carries the whole
maps, each later one only what changed, and the GCS's node record stays equal to the raylet's
resources throughout; a delta the GCS cannot apply (after a restart, a lost heartbeat or a
registration anew) is answered resend_full and the next heartbeat is whole again. The nodes
feed publishes a delta as it came (NodeResourcesDelta), and a raylet's cluster view applied
those (scheduler.with_delta) equals the node's resources."""
from __future__ import annotations

import asyncio

from ember_common.proto import common_pb2, gcs_pb2
from ember_gcs.core import GcsCore
from ember_gcs.storage import MemoryStorage
from ember_raylet import bundles
from ember_raylet.resources import HeartbeatReport, NodeResources
from ember_raylet.scheduler import RemoteNode, with_delta

BUNDLES = 20_000  # 40,000 named resources: a whole heartbeat is about 5 MB


def _node(res: NodeResources) -> common_pb2.NodeInfo:
    available, total = res.snapshot()
    return common_pb2.NodeInfo(node_id="n1", raylet_address="127.0.0.1:1", total_resources=total,
                               available_resources=available)


def _beat(core: GcsCore, report: HeartbeatReport, res: NodeResources) -> tuple[int, bool]:
    request = report.build(*res.snapshot())
    resend = core.heartbeat_report(request)
    report.taken(gcs_pb2.ReportHeartbeatReply(resend_full=resend))
    return request.ByteSize(), resend


def _same(core: GcsCore, res: NodeResources) -> bool:
    available, total = res.snapshot()
    info = core.nodes["n1"]
    return dict(info.available_resources) == available and dict(info.total_resources) == total


def test_the_nodes_feed_carries_deltas_a_view_can_apply():
    async def main() -> None:
        res = NodeResources({"CPU": 4, "tiny": BUNDLES})
        core = GcsCore(MemoryStorage(), node_death_timeout_s=60)
        await core.register_node(_node(res))
        feed = core.subscribe({"nodes"}, b"")
        first = await _next(feed)
        view = RemoteNode("n1", "127.0.0.1:1", dict(first.node.total_resources), dict(first.node.available_resources))
        report = HeartbeatReport("n1")
        _beat(core, report, res)  # whole, as registered: nothing published
        pg = b"\x02" * 18
        for i in range(BUNDLES):
            res.add_named(bundles.named({"tiny": 1.0}, pg, i))
        _beat(core, report, res)  # a delta of every new name, once
        view = _apply(view, await _next(feed))
        _beat(core, report, res)  # nothing changed: nothing published
        alloc = res.allocate({"CPU": 1.0})
        _beat(core, report, res)
        msg = await _next(feed)  # the next message is this change's alone
        assert msg.HasField("node_resources") and dict(msg.node_resources.available_resources) == {"CPU": 3.0}
        view = _apply(view, msg)
        res.remove_named(bundles.named({"tiny": 1.0}, pg, 3))
        _beat(core, report, res)
        view = _apply(view, await _next(feed))
        available, total = res.snapshot()
        assert view.available == available and view.total == total and alloc is not None
        await feed.aclose()

    asyncio.run(main())


async def _next(feed):
    return await asyncio.wait_for(anext(feed), 10)


def _apply(view: RemoteNode, msg: gcs_pb2.PubMessage) -> RemoteNode:
    if msg.HasField("node"):
        return RemoteNode("n1", "", dict(msg.node.total_resources), dict(msg.node.available_resources))
    d = msg.node_resources
    return with_delta(view, d.total_resources, d.available_resources, d.removed_resources)


def test_heartbeats_carry_only_what_changed():
    async def main() -> None:
        res = NodeResources({"CPU": 4, "tiny": BUNDLES})
        core = GcsCore(MemoryStorage(), node_death_timeout_s=60)
        await core.register_node(_node(res))
        report = HeartbeatReport("n1")
        pg = b"\x01" * 18
        committed = [bundles.named({"tiny": 1.0}, pg, i) for i in range(BUNDLES)]
        for named in committed:
            res.add_named(named)
        full, resend = _beat(core, report, res)
        assert not resend and full > 4_000_000 and _same(core, res)  # the whole maps, once

        steady, resend = _beat(core, report, res)  # nothing changed
        assert not resend and steady < 100 and _same(core, res)

        alloc = res.allocate(bundles.translate({"CPU": 0}, pg, 7) | {"CPU": 1.0})
        assert alloc is not None
        used, _ = _beat(core, report, res)  # a lease inside bundle 7: four names change
        assert used < 500 and _same(core, res), used
        res.release(alloc)
        for named in committed[:10]:
            res.remove_named(named)
        removed, _ = _beat(core, report, res)  # ten bundles go: their names are removed
        assert removed < 2_000 and _same(core, res), removed

        core._resource_seq.clear()  # as after a GCS restart: a delta on maps it does not hold
        size, resend = _beat(core, report, res)
        assert resend and size < 100
        size, resend = _beat(core, report, res)
        assert not resend and size > 4_000_000 and _same(core, res)

        report.forget()  # a failed call: whole again
        size, _ = _beat(core, report, res)
        assert size > 4_000_000 and _same(core, res)

        await core.register_node(_node(NodeResources({"CPU": 4})))  # registered anew
        _, resend = _beat(core, report, res)
        assert resend
        _beat(core, report, res)
        assert _same(core, res)

    asyncio.run(main())
