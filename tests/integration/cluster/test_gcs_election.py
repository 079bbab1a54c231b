"""The GCS's leader election and fencing (ember_gcs.leader, EtcdStorage.fence) against a real
etcd, in one process: replicas as Leadership objects over their own etcd clients."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ember.testing import EtcdProcess
from ember_gcs.etcd_storage import EtcdStorage
from ember_gcs.leader import Leadership
from ember_gcs.storage import NotLeader

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def etcd():
    with EtcdProcess() as proc:
        yield proc


async def _replicas(endpoint: str, n: int, ttl_s: int = 2, cluster: str = "") -> list[Leadership]:
    cluster = cluster or f"test-{uuid.uuid4().hex[:8]}"
    out = []
    for i in range(n):
        storage = EtcdStorage(endpoint, cluster_name=cluster)
        await storage.start()
        out.append(Leadership(storage, f"replica-{i}:1", ttl_s, poll_s=0.05))
    return out


async def _close(replicas: list[Leadership]) -> None:
    for r in replicas:
        await r.storage.close()


def test_one_replica_wins_and_the_others_learn_its_address(etcd):
    async def main() -> None:
        replicas = await _replicas(etcd.endpoint, 3)
        stop = asyncio.Event()
        try:
            tasks = [asyncio.ensure_future(r.campaign(stop)) for r in replicas]
            done, _ = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            await asyncio.sleep(0.3)  # the others keep polling and never win while it holds
            winners = [r for r, t in zip(replicas, tasks, strict=True) if t.done()]
            assert len(winners) == 1 and winners[0].leading()
            leader = winners[0]
            assert await leader.storage.get_raw(leader.key) == leader.address.encode()
            for r in replicas:
                if r is not leader:
                    assert not r.leading() and r.leader_address == leader.address
            stop.set()
            assert await asyncio.gather(*tasks) == [r is leader for r in replicas]
        finally:
            await _close(replicas)
    asyncio.run(main())


def test_a_leader_that_renews_keeps_the_lease_past_its_ttl(etcd):
    async def main() -> None:
        (a, b) = await _replicas(etcd.endpoint, 2, ttl_s=2)
        stop = asyncio.Event()
        try:
            assert await a.campaign(stop)
            keeper = asyncio.ensure_future(a.keep(stop))
            follower = asyncio.ensure_future(b.campaign(stop))
            await asyncio.sleep(4.5)  # more than two TTLs
            assert a.leading() and not a.lost.is_set() and not follower.done()
            await a.storage.put("t", b"k", b"v")  # the fence lets the leader's writes through
            assert await b.storage.get("t", b"k") == b"v"
            stop.set()
            await keeper
            assert await follower is False
        finally:
            await _close([a, b])
    asyncio.run(main())


def test_past_its_local_bound_a_leader_asks_etcd_and_serves_again_or_steps_down(etcd):
    """A stalled renewal (a loaded host) can end the leader's local bound while etcd still
    holds its lease: the gate closes, the leader asks etcd, and leads again (nobody else could
    take over). When etcd says the lease is gone, it steps down."""
    async def main() -> None:
        ahead = [0.0]  # the leader's clock jumps past its bound, as after a stall
        cluster = f"test-{uuid.uuid4().hex[:8]}"
        (b,) = await _replicas(etcd.endpoint, 1, cluster=cluster)
        storage = EtcdStorage(etcd.endpoint, cluster_name=cluster)
        await storage.start()
        a = Leadership(storage, "replica-a:1", 2, poll_s=0.05, clock=lambda: time.monotonic() + ahead[0])
        told: list[bool] = []  # what the health service is told (server.py)

        async def on_serving(serving: bool) -> None:
            told.append(serving)
        a.on_serving = on_serving
        stop = asyncio.Event()
        try:
            assert await a.campaign(stop)
            keeper = asyncio.ensure_future(a.keep(stop))
            follower = asyncio.ensure_future(b.campaign(stop))
            revision = a.revision
            ahead[0] += 2.5
            assert not a.leading()  # the gate is closed at once
            deadline = time.monotonic() + 3
            while not a.leading():
                assert time.monotonic() < deadline and not a.lost.is_set(), a.why_lost
                await asyncio.sleep(0.05)
            assert a.revision == revision and not follower.done() and told == [False, True]
            await a.storage.put("t", b"k", b"v")  # still fenced with its revision: accepted
            await b.storage.revoke_lease(a.lease_id)  # etcd forgets the lease (as on expiry)
            ahead[0] += 2.5
            await asyncio.wait_for(a.lost.wait(), 5)
            assert "ended before a renewal reached etcd" in a.why_lost and not a.leading()
            assert told == [False, True, False]
            await keeper
            assert await asyncio.wait_for(follower, 10)  # and then another replica leads
        finally:
            stop.set()
            await _close([a, b])
    asyncio.run(main())


def test_a_deposed_leaders_writes_are_refused_and_leave_nothing(etcd):
    """A leader that stops renewing (paused, cut off) loses the key when its lease ends; another
    replica wins; every write of the old one is then refused by etcd, nothing of it applied."""
    async def main() -> None:
        (a, b) = await _replicas(etcd.endpoint, 2, ttl_s=2)
        stop = asyncio.Event()
        try:
            assert await a.campaign(stop)
            await a.storage.put("t", b"before", b"a")
            t0 = time.monotonic()
            assert await asyncio.wait_for(b.campaign(stop), 10)  # a never renews: b wins
            assert time.monotonic() - t0 < 4.0  # the TTL plus etcd's expiry check
            assert b.leader_address == b.address and b.revision > a.revision
            assert not a.leading()  # its own clock says so too
            attempts = [a.storage.put("t", b"stale", b"a"),
                        a.storage.put("t", b"before", b"overwritten", overwrite=True),
                        a.storage.delete("t", b"before"),
                        a.storage.delete_prefix("t", b""),
                        a.storage.increment("job")]
            for attempt in attempts:
                with pytest.raises(NotLeader):
                    await attempt
            assert await b.storage.get_all("t") == {b"before": b"a"}
            assert await b.storage.increment("job") == 1  # a's increment never happened
            await b.storage.put("t", b"new", b"b")
            assert await a.storage.get("t", b"new") == b"b"  # reads are not fenced
        finally:
            stop.set()
            await _close([a, b])
    asyncio.run(main())


def test_a_fenced_write_marks_the_leadership_lost(etcd):
    async def main() -> None:
        (a, b) = await _replicas(etcd.endpoint, 2, ttl_s=2)
        stop = asyncio.Event()
        a.storage.on_fenced = lambda: a.lose("fenced")
        try:
            assert await a.campaign(stop)
            await a.storage.revoke_lease(a.lease_id)  # the key goes with the lease
            assert await asyncio.wait_for(b.campaign(stop), 5)
            with pytest.raises(NotLeader):
                await a.storage.put("t", b"k", b"v")
            assert a.lost.is_set() and a.why_lost == "fenced" and not a.leading()
            assert await b.storage.get("t", b"k") is None
        finally:
            stop.set()
            await _close([a, b])
    asyncio.run(main())


def test_resigning_hands_over_at_once(etcd):
    async def main() -> None:
        (a, b) = await _replicas(etcd.endpoint, 2, ttl_s=10)
        stop = asyncio.Event()
        try:
            assert await a.campaign(stop)
            follower = asyncio.ensure_future(b.campaign(stop))
            await asyncio.sleep(0.2)
            assert not follower.done()
            t0 = time.monotonic()
            await a.resign()
            assert await asyncio.wait_for(follower, 5)
            assert time.monotonic() - t0 < 1.0  # not the 10 s TTL
        finally:
            stop.set()
            await _close([a, b])
    asyncio.run(main())
