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


def test_node_registered_again_by_a_new_raylet_loses_its_actors():
    """In containers a restarted raylet keeps its node id (it comes from the node's address):
    the GCS sees a later start_time and treats the old raylet's actors as on a dead node."""
    async def main() -> None:
        core = GcsCore(MemoryStorage(), node_death_timeout_s=30)
        await core.register_node(common_pb2.NodeInfo(node_id="n1", start_time=100.0,
                                                     total_resources={"CPU": 1}))
        a = common_pb2.ActorInfo(actor_id=b"a1", state=common_pb2.ActorInfo.ALIVE,
                                 class_name="Replica")
        a.address.node_id = "n1"
        core.actors.actors[a.actor_id] = a          # max_restarts 0: it dies with its node
        # the same raylet registering again (a retried call, a GCS restart): nothing happens
        await core.register_node(common_pb2.NodeInfo(node_id="n1", start_time=100.0,
                                                     total_resources={"CPU": 1}))
        assert a.state == common_pb2.ActorInfo.ALIVE
        # a new raylet under the same node id: the actor died with the old one
        await core.register_node(common_pb2.NodeInfo(node_id="n1", start_time=160.0,
                                                     total_resources={"CPU": 1}))
        assert a.state == common_pb2.ActorInfo.DEAD
        assert "its node n1 died" in a.death_cause, a.death_cause
        assert _state(core, "n1") == common_pb2.NodeInfo.ALIVE  # the node itself is back

    asyncio.run(main())


def test_a_new_workers_subscriber_hears_of_recent_deaths():
    """A subscriber that was reconnecting when a death was published (an object manager whose
    stream broke when the GCS restarted) still learns of it: recent deaths are replayed."""
    async def first_messages(core: GcsCore, n: int) -> list[str]:
        gen = core.subscribe({"workers"}, b"")
        out = [(await gen.__anext__()).worker_death.worker_id for _ in range(n)]
        await gen.aclose()
        return out

    async def main() -> None:
        core = GcsCore(MemoryStorage(), node_death_timeout_s=10)
        core.publish_worker_death("w1", "n1", "exit code -9")
        core.publish_worker_death("w2", "n1", "its raylet stopped")
        assert await first_messages(core, 2) == ["w1", "w2"]
        live = core.subscribe({"workers"}, b"")
        assert (await live.__anext__()).worker_death.worker_id == "w1"  # replay first
        core.publish_worker_death("w3", "n1", "exit code 1")
        got = [(await live.__anext__()).worker_death.worker_id for _ in range(2)]
        assert got == ["w2", "w3"]  # then what is published while subscribed
        await live.aclose()

    asyncio.run(main())


def test_recent_deaths_are_bounded_in_count_and_age(monkeypatch):
    from ember_gcs import core as core_mod

    core = GcsCore(MemoryStorage(), node_death_timeout_s=10)
    for i in range(core_mod.RECENT_DEATHS + 10):
        core.publish_worker_death(f"w{i}", "n1", "exit")
    deaths = core.recent_deaths()
    assert len(deaths) == core_mod.RECENT_DEATHS
    assert deaths[0].worker_death.worker_id == "w10"
    monkeypatch.setattr(core_mod, "RECENT_DEATHS_S", -1.0)  # all of them are now too old
    assert core.recent_deaths() == []
