"""EtcdStorage against a real etcd server (started by ember.testing._etcd.EtcdProcess)."""
from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from typing import Any, Awaitable, Callable

import pytest

from ember.testing._etcd import EtcdProcess
from ember_gcs.backend import open_storage
from ember_gcs.etcd_storage import EtcdStorage
from ember_gcs.storage import StorageUnavailable

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def etcd():
    with EtcdProcess() as proc:
        yield proc


def _cluster() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def run_with(endpoint: str, body: Callable[[EtcdStorage], Awaitable[Any]], cluster: str | None = None) -> Any:
    """Runs body(storage) on a started storage in a fresh event loop, closing it afterwards."""

    async def main() -> Any:
        storage = EtcdStorage(endpoint, cluster_name=cluster or _cluster())
        await storage.start()
        try:
            return await body(storage)
        finally:
            await storage.close()

    return asyncio.run(main())


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_put_get_overwrite(etcd):
    async def body(s: EtcdStorage) -> None:
        assert await s.get("nodes", b"n1") is None
        assert await s.put("nodes", b"n1", b"v1") is True
        assert await s.get("nodes", b"n1") == b"v1"
        assert await s.put("nodes", b"n1", b"v2") is False  # overwritten, not new
        assert await s.get("nodes", b"n1") == b"v2"
        assert await s.put("nodes", b"n1", b"v3", overwrite=False) is False  # kept
        assert await s.get("nodes", b"n1") == b"v2"
        assert await s.put("nodes", b"n2", b"x", overwrite=False) is True
        assert await s.get("nodes", b"n2") == b"x"
        assert await s.get("jobs", b"n1") is None  # tables are separate
        await s.put("nodes", b"\x00\xff bin", b"\x00\x01")
        assert await s.get("nodes", b"\x00\xff bin") == b"\x00\x01"
        await s.put("nodes", b"empty", b"")
        assert await s.get("nodes", b"empty") == b""

    run_with(etcd.endpoint, body)


def test_delete_and_delete_prefix(etcd):
    async def body(s: EtcdStorage) -> None:
        for k in (b"a1", b"a2", b"a3", b"b1"):
            await s.put("t", k, b"v")
        await s.put("t2", b"a9", b"other table")
        assert await s.delete("t", b"a1") is True
        assert await s.delete("t", b"a1") is False
        assert await s.delete("t", b"zz") is False
        assert await s.delete_prefix("t", b"a") == 2
        assert await s.delete_prefix("t", b"a") == 0
        assert await s.keys("t") == [b"b1"]
        assert await s.keys("t2") == [b"a9"]
        assert await s.delete_prefix("t", b"") == 1
        assert await s.get_all("t") == {}
        assert await s.get_all("t2") == {b"a9": b"other table"}

    run_with(etcd.endpoint, body)


def test_keys_sorted_prefix_and_get_all(etcd):
    async def body(s: EtcdStorage) -> None:
        keys = [b"job:3", b"job:1", b"actor:9", b"job:2", b"\xff\xff", b"job:10"]
        for i, k in enumerate(keys):
            await s.put("kv:ns", k, str(i).encode())
        await s.put("kv:ns2", b"job:0", b"neighbour table")  # same name prefix, other table
        await s.put("kv", b"ns/job:0", b"table whose key looks like ours")
        assert await s.keys("kv:ns") == sorted(keys)
        assert await s.keys("kv:ns", b"job:") == [b"job:1", b"job:10", b"job:2", b"job:3"]
        assert await s.keys("kv:ns", b"\xff") == [b"\xff\xff"]
        assert await s.keys("kv:ns", b"nope") == []
        assert await s.get_all("kv:ns") == {k: str(i).encode() for i, k in enumerate(keys)}
        assert await s.get_all("missing") == {}

    run_with(etcd.endpoint, body)


def test_increment(etcd):
    async def body(s: EtcdStorage) -> None:
        assert [await s.increment("job_id") for _ in range(3)] == [1, 2, 3]
        assert await s.increment("other") == 1
        values = await asyncio.gather(*(s.increment("concurrent") for _ in range(20)))
        assert sorted(values) == list(range(1, 21))

    run_with(etcd.endpoint, body)


def test_concurrent_increments_from_two_clients(etcd):
    cluster = _cluster()

    async def body(s1: EtcdStorage) -> None:
        s2 = EtcdStorage(etcd.endpoint, cluster_name=cluster)
        try:
            values = await asyncio.gather(*(st.increment("c") for _ in range(10) for st in (s1, s2)))
        finally:
            await s2.close()
        assert sorted(values) == list(range(1, 21))

    run_with(etcd.endpoint, body, cluster=cluster)


def test_clusters_do_not_see_each_other(etcd):
    async def main() -> None:
        a = EtcdStorage(etcd.endpoint, cluster_name="alpha-" + _cluster())
        b = EtcdStorage(etcd.endpoint, cluster_name="beta-" + _cluster())
        await a.start()
        await b.start()
        try:
            await a.put("nodes", b"n1", b"from a")
            assert await b.get("nodes", b"n1") is None
            assert await b.keys("nodes") == []
            assert await b.put("nodes", b"n1", b"from b", overwrite=False) is True
            assert await a.get("nodes", b"n1") == b"from a"
            assert await a.increment("c") == 1
            assert await b.increment("c") == 1
            assert await b.delete_prefix("nodes", b"") == 1
            assert await a.get_all("nodes") == {b"n1": b"from a"}
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_open_storage_etcd_url(etcd):
    async def main() -> None:
        s = open_storage(etcd.url, _cluster())
        assert isinstance(s, EtcdStorage)
        await s.start()
        try:
            await s.put("t", b"k", b"v")
            assert await s.get("t", b"k") == b"v"
        finally:
            await s.close()

    asyncio.run(main())


def test_first_reachable_endpoint_is_used(etcd):
    async def body(s: EtcdStorage) -> None:
        await s.put("t", b"k", b"v")
        assert await s.get("t", b"k") == b"v"

    run_with(f"{_dead_endpoint()}, {etcd.endpoint}", body)


def test_unreachable_endpoint_raises_quickly():
    dead = _dead_endpoint()

    async def main() -> None:
        s = EtcdStorage(dead, cluster_name="x")
        try:
            t0 = time.monotonic()
            with pytest.raises(StorageUnavailable, match=dead):
                await s.start()
            with pytest.raises(StorageUnavailable, match=dead):
                await s.get("t", b"k")  # without start() too
            assert time.monotonic() - t0 < 10
        finally:
            await s.close()

    asyncio.run(main())


def test_data_survives_etcd_restart():
    with EtcdProcess() as proc:

        async def main() -> None:
            s = EtcdStorage(proc.endpoint, cluster_name="restart")
            await s.start()
            try:
                await s.put("nodes", b"n1", b"alive")
                assert await s.increment("c") == 1
                proc.kill()
                t0 = time.monotonic()
                with pytest.raises(StorageUnavailable, match=proc.endpoint):
                    await s.get("nodes", b"n1")
                with pytest.raises(StorageUnavailable, match=proc.endpoint):
                    await s.put("nodes", b"n2", b"lost")
                assert time.monotonic() - t0 < 10
                proc.restart()
                # The same storage object works again, and the data is still there.
                assert await s.get("nodes", b"n1") == b"alive"
                assert await s.get("nodes", b"n2") is None
                assert await s.increment("c") == 2
                assert await s.put("nodes", b"n2", b"back") is True
            finally:
                await s.close()

            s2 = EtcdStorage(proc.endpoint, cluster_name="restart")
            try:
                await s2.start()
                assert await s2.get_all("nodes") == {b"n1": b"alive", b"n2": b"back"}
            finally:
                await s2.close()

        asyncio.run(main())
        tmpdir = proc.tmpdir
    assert tmpdir is not None and not os.path.exists(tmpdir)
    assert not proc.running


def test_restart_with_live_client_between_ops(etcd):
    """A restart (no op while down) must not break a client that was idle meanwhile."""

    async def body(s: EtcdStorage) -> None:
        await s.put("t", b"k", b"v")
        etcd.restart()
        assert await s.get("t", b"k") == b"v"

    run_with(etcd.endpoint, body)


def test_hung_etcd_times_out_then_recovers(etcd):
    async def body(s: EtcdStorage) -> None:
        await s.put("t", b"k", b"v")
        etcd.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(StorageUnavailable, match=etcd.endpoint):
                await s.get("t", b"k")
            assert time.monotonic() - t0 < 10
        finally:
            etcd.resume()
        assert await s.get("t", b"k") == b"v"

    run_with(etcd.endpoint, body)


def test_etcd_process_missing_binary():
    with pytest.raises(RuntimeError, match="not found"):
        EtcdProcess(binary="etcd-does-not-exist-ember")
