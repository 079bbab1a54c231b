"""The typed raylet client against real raylets: leases follow spillback to the node that has the
resources, go back home when the spilled-to raylet is gone, end with Infeasible (a status code)
when no node can run them, say how many leases of their shape the cluster holds, can be
cancelled, and an unreachable raylet is Unavailable after the backoff policy's tries."""
from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from ember.testing import LocalCluster
from ember_common import backoff, rpc
from ember_common.proto import raylet_pb2
from ember_common.raylet_client import RayletClient


def _request(resources: dict[str, float]) -> raylet_pb2.RequestWorkerLeaseRequest:
    return raylet_pb2.RequestWorkerLeaseRequest(lease_id=os.urandom(16), resources=resources,
                                                name="test")


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture()
def fast_failures(monkeypatch):
    """Services started in the test see short infeasible and node-death timeouts."""
    monkeypatch.setenv("EMBER_INFEASIBLE_TIMEOUT_S", "1")
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")


async def _lease_when_known(client: RayletClient, resources: dict[str, float],
                           hops: list[str] | None = None) -> tuple[raylet_pb2.RequestWorkerLeaseRequest, object]:
    """Leases resources that only another node has, retrying while the home raylet's cluster
    view does not list that node yet (the request is then infeasible for a moment)."""
    for _ in range(50):
        req = _request(resources)
        try:
            lease = await client.request_worker_lease(req, on_hop=hops.append if hops is not None else None)
        except rpc.Infeasible:
            await asyncio.sleep(0.2)
            continue
        assert lease is not None
        return req, lease
    raise AssertionError("the home raylet never learned about the other node")


def test_lease_follows_spillback_and_returns_there(fast_failures):
    with LocalCluster() as c:
        head = c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)
        other = c.add_node({"CPU": 1, "special": 1}, num_prestart_workers=0)

        async def body() -> None:
            client = RayletClient(head.record.raylet_address)
            hops: list[str] = []
            try:
                req, lease = await _lease_when_known(client, {"special": 1}, hops)
                assert lease.raylet_address == other.record.raylet_address
                assert hops and hops[-1] == other.record.raylet_address
                assert lease.grant.worker_address.node_id == other.node_id
                assert lease.grant.capacity == 1  # one node has "special", once
                cpu = _request({"CPU": 1})  # granted here: each node holds one such lease
                local = await client.request_worker_lease(cpu)
                assert local.raylet_address == head.record.raylet_address
                assert local.grant.capacity == 2
                await client.return_worker(cpu.lease_id)
                stats = await client.get_node_stats(address=other.record.raylet_address)
                assert any(w.leased for w in stats.workers)
                await client.return_worker(b"no-such-lease-id", address=lease.raylet_address)  # idempotent
                await client.return_worker(req.lease_id, address=lease.raylet_address)
                stats = await client.get_node_stats(address=other.record.raylet_address)
                assert not any(w.leased for w in stats.workers)
            finally:
                await client.close()

        _run(body())


def test_infeasible_is_a_status_and_cancel_answers_none(fast_failures):
    with LocalCluster() as c:
        head = c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)

        async def body() -> None:
            client = RayletClient(head.record.raylet_address)
            try:
                t0 = time.monotonic()
                with pytest.raises(rpc.Infeasible, match="nope"):
                    await client.request_worker_lease(_request({"nope": 1}))
                assert time.monotonic() - t0 < 10
                with pytest.raises(rpc.InvalidArgument, match="'CPU'"):
                    await client.request_worker_lease(_request({"CPU": -1}))

                first = _request({"CPU": 1})
                granted = await client.request_worker_lease(first)
                assert granted is not None
                second = _request({"CPU": 1})  # queued: the only CPU is leased
                pending = asyncio.ensure_future(client.request_worker_lease(second))
                await asyncio.sleep(0.3)
                assert not pending.done()
                assert await client.cancel_worker_lease(second.lease_id) is True
                assert await asyncio.wait_for(pending, 5) is None
                assert await client.cancel_worker_lease(second.lease_id) is False
                await client.return_worker(first.lease_id)
            finally:
                await client.close()

        _run(body())


def test_unreachable_raylet_is_unavailable_after_the_policy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there

    async def body() -> None:
        client = RayletClient(f"127.0.0.1:{port}",
                              lease_retry=backoff.Backoff(initial_s=0.01, max_s=0.02,
                                                          deadline_s=None, max_attempts=3))
        try:
            with pytest.raises(rpc.Unavailable):
                await client.request_worker_lease(_request({"CPU": 1}))
            t0 = time.monotonic()
            with pytest.raises(rpc.Unavailable):  # keep_trying says stop: no retries
                await client.request_worker_lease(_request({"CPU": 1}), keep_trying=lambda: False,
                                                  retry=backoff.FOREVER)
            assert time.monotonic() - t0 < 2
        finally:
            await client.close()

    _run(body())


def test_lease_goes_home_when_the_spilled_to_raylet_is_gone(fast_failures):
    with LocalCluster() as c:
        head = c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)
        other = c.add_node({"CPU": 1, "special": 1}, num_prestart_workers=0)

        async def body() -> None:
            client = RayletClient(head.record.raylet_address)
            try:
                req, lease = await _lease_when_known(client, {"special": 1})
                await client.return_worker(req.lease_id, address=lease.raylet_address)
                c.kill_raylet(other)
                hops: list[str] = []
                # The head still lists the dead node for up to the death timeout: the request
                # spills there, fails, comes home, ... until the node is declared dead; then no
                # node can run it.
                with pytest.raises(rpc.Infeasible):
                    await asyncio.wait_for(client.request_worker_lease(
                        _request({"special": 1}), on_hop=hops.append), 30)
                assert other.record.raylet_address in hops
                assert head.record.raylet_address in hops[hops.index(other.record.raylet_address):]
            finally:
                await client.close()

        _run(body())
