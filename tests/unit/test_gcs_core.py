"""GcsCore's node table on in-memory storage: death after silence, and the grace a restarted GCS
gives the nodes it reloads (so a slow raylet reconnect does not kill its actors)."""
from __future__ import annotations

import asyncio

import pytest

from ember_common.proto import common_pb2
from ember_common.rpc import NotFound
from ember_gcs.core import GcsCore
from ember_gcs.storage import MemoryStorage


async def _run_detector(core: GcsCore, seconds: float) -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(core.detect_deaths(stop))
    await asyncio.sleep(seconds)
    stop.set()
    await task


def _state(core: GcsCore, node_id: str) -> int:
    return core.nodes[node_id].state


def test_silent_node_is_marked_dead():
    async def main() -> None:
        core = GcsCore(MemoryStorage(), node_death_timeout_s=0.2)
        await core.register_node(common_pb2.NodeInfo(node_id="n1", total_resources={"CPU": 1}))
        await _run_detector(core, 0.6)
        assert _state(core, "n1") == common_pb2.NodeInfo.DEAD
        assert "no heartbeat" in core.nodes["n1"].death_reason
        with pytest.raises(NotFound):  # a dead node must re-register
            core.heartbeat("n1", {}, {})

    asyncio.run(main())


def test_restarted_gcs_gives_reloaded_nodes_a_grace_period():
    async def main() -> None:
        storage = MemoryStorage()
        first = GcsCore(storage, node_death_timeout_s=0.2)
        await first.register_node(common_pb2.NodeInfo(node_id="n1", total_resources={"CPU": 1}))

        restarted = GcsCore(storage, node_death_timeout_s=0.2)
        restarted.RESTART_GRACE_S = 1.0
        await restarted.load()
        # Silent for well past the death timeout, but within the restart grace: still alive.
        await _run_detector(restarted, 0.6)
        assert _state(restarted, "n1") == common_pb2.NodeInfo.ALIVE
        restarted.heartbeat("n1", {"CPU": 1}, {"CPU": 1})  # known: no NotFound
        # Once it heartbeats, the normal timeout applies again.
        await _run_detector(restarted, 0.6)
        assert _state(restarted, "n1") == common_pb2.NodeInfo.DEAD

    asyncio.run(main())
