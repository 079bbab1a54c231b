"""The typed GCS client against a real GCS process: every per-domain service answers through
it, errors come back as the kit's exceptions (status codes, not reply fields), idempotent calls
ride out a GCS restart under the backoff policy, and the health service names every service."""
from __future__ import annotations

import asyncio
import importlib.util
import os
import pathlib
import threading
import time

import pytest

from ember.testing import LocalCluster
from ember_common import backoff, rpc
from ember_common.gcs_client import GcsClient, SyncGcsClient
from ember_common.proto import common_pb2, gcs_pb2

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as c:  # a GCS only: the node table is filled by hand below
        yield c


def _run(coro_fn, address):
    async def main():
        gcs = GcsClient(address, timeout_s=5)
        try:
            return await coro_fn(gcs)
        finally:
            await gcs.close()

    return asyncio.run(main())


def test_nodes_register_heartbeat_and_unregister(cluster):
    async def body(gcs: GcsClient) -> None:
        node = common_pb2.NodeInfo(node_id="n-" + os.urandom(4).hex(), raylet_address="127.0.0.1:1",
                                   total_resources={"CPU": 2})
        assert await gcs.register_node(node) == cluster.cluster_name
        await gcs.report_heartbeat(node.node_id, {"CPU": 1}, {"CPU": 2})
        nodes = {n.node_id: n for n in await gcs.get_all_node_info()}
        assert nodes[node.node_id].available_resources["CPU"] == 1
        await gcs.unregister_node(node.node_id, "test")
        with pytest.raises(rpc.NotFound, match="not registered as alive"):
            await gcs.report_heartbeat(node.node_id, {}, {})
        with pytest.raises(rpc.NotFound):
            await gcs.unregister_node("no-such-node", "test")
        with pytest.raises(rpc.InvalidArgument, match="'CPU'"):
            await gcs.register_node(common_pb2.NodeInfo(node_id="bad", total_resources={"CPU": -1}))

    _run(body, cluster.gcs_address)


def test_jobs_and_the_kv(cluster):
    async def body(gcs: GcsClient) -> None:
        job_id = await gcs.add_job(common_pb2.JobInfo(driver_pid=os.getpid()))
        assert job_id in {j.job_id for j in await gcs.get_all_job_info()}
        await gcs.mark_job_finished(job_id)
        assert [j.is_dead for j in await gcs.get_all_job_info() if j.job_id == job_id] == [True]
        with pytest.raises(rpc.NotFound):
            await gcs.mark_job_finished(b"\xff\xff\xff\xff")

        assert await gcs.internal_kv_get("t", b"k") is None  # NOT_FOUND becomes None
        assert await gcs.internal_kv_put("t", b"k", b"v1") is True
        assert await gcs.internal_kv_put("t", b"k", b"v2", overwrite=False) is False
        assert await gcs.internal_kv_get("t", b"k") == b"v1"
        assert await gcs.internal_kv_exists("t", b"k") and not await gcs.internal_kv_exists("t", b"x")
        await gcs.internal_kv_put("t", b"k2", b"")
        assert await gcs.internal_kv_keys("t", b"k") == [b"k", b"k2"]
        assert await gcs.internal_kv_get("t", b"k2") == b""  # an empty value is not "missing"
        assert await gcs.internal_kv_del("t", b"k", del_by_prefix=True) == 2
        assert await gcs.internal_kv_keys("t") == []

    _run(body, cluster.gcs_address)


def test_actor_table_errors_are_status_codes(cluster):
    async def body(gcs: GcsClient) -> None:
        with pytest.raises(rpc.NotFound):
            await gcs.get_actor_info(b"\x01" * 16)
        with pytest.raises(rpc.NotFound, match="'nobody'"):
            await gcs.get_named_actor_info("nobody", "ns")
        with pytest.raises(rpc.NotFound):
            await gcs.kill_actor(b"\x01" * 16, no_restart=True)
        with pytest.raises(rpc.InvalidArgument, match="actor_id"):
            await gcs.register_actor(common_pb2.TaskSpec())

        def spec(actor_id: bytes) -> common_pb2.TaskSpec:
            return common_pb2.TaskSpec(actor_id=actor_id, actor_creation=common_pb2.ActorCreationSpec(
                name="solo", namespace="ns", class_name="Solo"))

        first = await gcs.register_actor(spec(b"\x02" * 16))
        again = await gcs.register_actor(spec(b"\x02" * 16))  # idempotent by actor id
        assert first.actor_id == again.actor_id
        with pytest.raises(rpc.AlreadyExists, match="solo"):
            await gcs.register_actor(spec(b"\x03" * 16))
        assert (await gcs.get_named_actor_info("solo", "ns")).actor_id == b"\x02" * 16
        await gcs.kill_actor(b"\x02" * 16, no_restart=True)
        dead = await gcs.get_actor_info(b"\x02" * 16)
        assert dead.state == common_pb2.ActorInfo.DEAD and "ember.kill" in dead.death_cause

    _run(body, cluster.gcs_address)


def test_pubsub_delivers_node_snapshot_and_logs(cluster):
    async def body(gcs: GcsClient) -> None:
        node = common_pb2.NodeInfo(node_id="p-" + os.urandom(4).hex(), total_resources={"CPU": 1})
        await gcs.register_node(node)
        job = await gcs.add_job(common_pb2.JobInfo(driver_pid=1))
        got: list[gcs_pb2.PubMessage] = []
        stop = asyncio.Event()

        def handle(msg: gcs_pb2.PubMessage) -> None:
            got.append(msg)
            if msg.HasField("logs"):
                stop.set()

        follow = asyncio.ensure_future(gcs.follow(["nodes", "logs"], handle, stop, job_id=job))
        for _ in range(100):  # the snapshot comes first
            if any(m.HasField("node") and m.node.node_id == node.node_id for m in got):
                break
            await asyncio.sleep(0.05)
        await gcs.publish_logs([gcs_pb2.LogBatch(job_id=job, lines=["hello"])])
        await asyncio.wait_for(follow, 10)
        assert [list(m.logs.lines) for m in got if m.HasField("logs")] == [["hello"]]

    _run(body, cluster.gcs_address)


def test_logs_for_unknown_or_long_ended_jobs_are_dropped(cluster):
    """PublishLogs delivers only into jobs the GCS recorded that still run (or ended less than
    LOG_GRACE_S ago): lines forged for a job id that was never issued, or for a job long over,
    reach no console. (Any token holder may still publish into a running job: docs/security.md.)"""
    async def body(gcs: GcsClient) -> None:
        live = await gcs.add_job(common_pb2.JobInfo(driver_pid=1))
        just_ended = await gcs.add_job(common_pb2.JobInfo(driver_pid=1))
        await gcs.mark_job_finished(just_ended, "SUCCEEDED")
        long_over = await gcs.add_job(common_pb2.JobInfo(driver_pid=1, start_time=1.0, end_time=2.0,
                                                         is_dead=True, end_state="SUCCEEDED"))
        never = b"\xff\xff\xff\xf0"
        got: dict[bytes, list[str]] = {job: [] for job in (live, just_ended, long_over, never)}
        stop = asyncio.Event()
        follows = []
        for job in got:
            def handle(msg: gcs_pb2.PubMessage, job: bytes = job) -> None:
                if msg.HasField("logs"):
                    got[job] += list(msg.logs.lines)
            follows.append(asyncio.ensure_future(gcs.follow(["logs"], handle, stop, job_id=job)))
        await asyncio.sleep(1.0)  # subscribed
        await gcs.publish_logs([gcs_pb2.LogBatch(job_id=job, lines=[f"to {job.hex()}"])
                                for job in (never, long_over, just_ended, live)])
        for _ in range(100):
            if got[live]:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*follows)
        assert got == {live: [f"to {live.hex()}"], just_ended: [f"to {just_ended.hex()}"],
                       long_over: [], never: []}

    _run(body, cluster.gcs_address)


def test_health_names_every_gcs_service(cluster):
    spec = importlib.util.spec_from_file_location("_ember_healthcheck", ROOT / "docker" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    hc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hc)
    names = [s.full_name for s in gcs_pb2.DESCRIPTOR.services_by_name.values()]
    assert len(names) == 7
    for name in ["ember.Gcs", *names]:
        assert hc.check_grpc(cluster.gcs_address, name) is None, name
    assert "NOT_FOUND" in hc.check_grpc(cluster.gcs_address, "ember.NoSuchService")


def test_idempotent_calls_ride_out_a_gcs_restart():
    with LocalCluster() as c:
        with SyncGcsClient(c.gcs_address, timeout_s=2) as gcs:
            gcs.internal_kv_put("t", b"k", b"v")
            c.kill_gcs()
            t0 = time.monotonic()
            with pytest.raises(rpc.Unavailable):  # one try: fails at once
                gcs.get_all_node_info(retry=backoff.NO_RETRY)
            with pytest.raises(rpc.Unavailable):  # AddJob is never retried
                gcs.add_job(common_pb2.JobInfo())
            assert time.monotonic() - t0 < 5
            restarter = threading.Timer(1.0, c.restart_gcs)
            restarter.start()
            try:
                t0 = time.monotonic()
                assert gcs.get_all_node_info() == []  # retried until the new GCS answered
                assert time.monotonic() - t0 >= 0.5
            finally:
                restarter.join()
            assert gcs.internal_kv_get("t", b"k") is None  # memory storage: a fresh GCS
