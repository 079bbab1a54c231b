"""GcsCore and the worker ledgers of dead nodes (ember_gcs.core._retire_ledger): a node
declared dead loses its ledger from the KV, and the ids in it are reported dead if (and only
if) a new raylet comes for the node; the same raylet registering again keeps its workers."""
from __future__ import annotations

import asyncio

from ember_common.proto import common_pb2
from ember_common.worker_ledger_kv import KV_NAMESPACE, ledger_key
from ember_gcs import core as core_mod
from ember_gcs.core import GcsCore
from ember_gcs.storage import MemoryStorage


def _node(node_id: str, start_time: float) -> common_pb2.NodeInfo:
    return common_pb2.NodeInfo(node_id=node_id, start_time=start_time, total_resources={"CPU": 1})


async def _with_ledger(core: GcsCore, node_id: str, ids: list[str]) -> None:
    await core.register_node(_node(node_id, 100.0))
    await core.kv.put(KV_NAMESPACE, ledger_key(node_id), " ".join(ids).encode())


async def _ledger(core: GcsCore, node_id: str) -> list[bytes]:
    return await core.kv.keys(KV_NAMESPACE, ledger_key(node_id))


def _deaths(core: GcsCore) -> list[str]:
    return [m.worker_death.worker_id for m in core.recent_deaths()]


def test_a_dead_nodes_ledger_is_deleted_and_its_workers_reported_when_a_new_raylet_comes():
    async def main() -> None:
        core = GcsCore(MemoryStorage(), node_death_timeout_s=30)
        await _with_ledger(core, "n1", ["w1", "w2"])
        await _with_ledger(core, "n2", ["w3"])
        await core.mark_dead("n1", "no heartbeat for 30s")
        assert await _ledger(core, "n1") == []  # gone from the KV
        assert await _ledger(core, "n2") != []  # another node's stays
        assert _deaths(core) == []  # nothing reported yet: the node may be only silent
        await core.register_node(_node("n1", 200.0))  # a new raylet (a later start)
        assert sorted(_deaths(core)) == ["w1", "w2"]
        deaths = [m.worker_death for m in core.recent_deaths()]
        assert all(d.node_id == "n1" and "raylet stopped" in d.reason for d in deaths)
        await core.mark_dead("n1", "no heartbeat for 30s")  # its new raylet wrote no ledger yet
        await core.register_node(_node("n1", 300.0))
        assert sorted(_deaths(core)) == ["w1", "w2"]  # reported once

    asyncio.run(main())


def test_the_same_raylet_registering_again_keeps_its_workers():
    """A raylet declared dead while only silent (same start time) registers again: its
    workers live, nothing is reported, and it writes its ledger again itself."""
    async def main() -> None:
        core = GcsCore(MemoryStorage(), node_death_timeout_s=30)
        await _with_ledger(core, "n1", ["w1"])
        await core.mark_dead("n1", "no heartbeat for 30s")
        await core.register_node(_node("n1", 100.0))
        assert _deaths(core) == []
        await core.mark_dead("n1", "node stopped")  # no ledger written since: nothing to do
        await core.register_node(_node("n1", 200.0))
        assert _deaths(core) == []

    asyncio.run(main())


def test_a_node_without_a_ledger_dies_quietly_and_remembered_ledgers_are_bounded(monkeypatch):
    async def main() -> None:
        monkeypatch.setattr(core_mod, "DEAD_LEDGERS_KEPT", 2)
        core = GcsCore(MemoryStorage(), node_death_timeout_s=30)
        await core.register_node(_node("bare", 100.0))
        await core.mark_dead("bare", "node stopped")
        for i in range(3):
            await _with_ledger(core, f"n{i}", [f"w{i}"])
            await core.mark_dead(f"n{i}", "node stopped")
        for i in range(3):
            await core.register_node(_node(f"n{i}", 200.0))
        assert _deaths(core) == ["w1", "w2"]  # n0's ids were the oldest: forgotten

    asyncio.run(main())
