"""No work before authentication, bounded messages, loopback binds: a two-node LocalCluster of
real processes on loopback.

- A caller with no token that sends the GCS a big message is answered UNAUTHENTICATED at once,
  and the GCS's memory (psutil, sampled while the call runs) does not grow by the message: the
  request is never read (auth.py's rejecting handler).
- An authenticated message over the GCS's limit (the control limit, 4 MiB) is RESOURCE_EXHAUSTED
  without being buffered, whatever the method; a 40 MiB KV value still goes in chunks.
- A worker's direct port refuses a first frame longer than the secret from its header and closes
  the connection, without buffering the frame.
- Every server of a loopback cluster (GCS, raylets, object managers, workers, the driver) listens
  on loopback only.
- Authenticated traffic that is legitimately big still works: tasks with large args and
  returns, actor calls, put/get of 100 MB, a pull between the two nodes, a runtime-env package,
  a function and a job package bigger than one KV part (kv_parts; the job package bigger than
  the GCS's message limit); a function over Ray's size limit is a clear error.
"""
from __future__ import annotations

import os
import time

import grpc
import numpy as np
import psutil
import pytest
from attacks import KV_PUT, MIB, PeakRss, call_raw, kv_put_request, oversized_first_frame, raw_channel

import ember
from ember._private.execution import function_manager
from ember.testing import LocalCluster
from ember_common import rpc
from ember_common.proto import gcs_pb2


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(object_store_memory=320 * MIB) as c:
        c.add_node({"CPU": 2}, is_head=True)
        c.add_node({"CPU": 1, "second": 1})
        ember.init(address=c.gcs_address)
        try:
            yield c
        finally:
            ember.shutdown()


@ember.remote
class Probe:
    def where(self) -> tuple[int, int]:
        from ember._private.worker import global_worker

        return os.getpid(), global_worker().core.direct_server.port

    def echo(self, x):
        return x


# A refused request may cost the GCS a few MiB of RSS (gRPC's read buffers, the sampler's noise),
# never the request: before the control limit was the server's own, a 40 MiB one cost +110 MiB.
FEW_MIB = 8 * MIB


@pytest.mark.parametrize("size_mib", [40, 256])  # the data limit, and far over it
def test_an_unauthenticated_big_message_is_refused_unread(cluster, size_mib):
    request = kv_put_request(size_mib * MIB)
    assert gcs_pb2.InternalKVPutRequest.FromString(kv_put_request(3)).value == b"\0\0\0"
    with raw_channel(cluster.gcs_address) as ch, PeakRss(cluster.gcs.pid) as rss:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            call_raw(ch, KV_PUT, request)
        elapsed = time.monotonic() - t0
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, err.value
    assert elapsed < 15, elapsed
    assert rss.growth < FEW_MIB, f"the GCS grew by {rss.growth / MIB:.1f} MiB for a refused call"


def test_an_unauthenticated_stream_call_is_refused(cluster):
    with raw_channel(cluster.gcs_address) as ch:
        call = ch.unary_stream("/ember.PubSubGcsService/Subscribe",
                               request_serializer=gcs_pb2.SubscribeRequest.SerializeToString)
        with pytest.raises(grpc.RpcError) as err:
            next(iter(call(gcs_pb2.SubscribeRequest(), timeout=30)))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("method", [KV_PUT, "/ember.NodeInfoGcsService/GetAllNodeInfo"])
def test_an_authenticated_40_mib_message_is_refused_unbuffered(cluster, method):
    """40 MiB in one message, over the control limit (4 MiB) and under the data limit (64 MiB),
    to a method that carries data (which takes that much only in chunks) and to one that does
    not: gRPC refuses both from the length prefix."""
    token_md = rpc.auth.client_metadata()
    request = kv_put_request(40 * MIB)
    with raw_channel(cluster.gcs_address) as ch, PeakRss(cluster.gcs.pid) as rss:
        with pytest.raises(grpc.RpcError) as err:
            call_raw(ch, method, request, metadata=token_md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value
    assert rss.growth < FEW_MIB, f"the GCS grew by {rss.growth / MIB:.1f} MiB for a refused call"
    assert ember.get(ember.remote(lambda: 1).remote(), timeout=60) == 1  # the cluster still works


def test_a_40_mib_kv_value_is_stored_in_chunks(cluster):
    from ember.experimental import internal_kv

    value = os.urandom(40 * MIB)
    internal_kv._internal_kv_put(b"preauth-40mib", value, namespace="preauth")
    assert internal_kv._internal_kv_get(b"preauth-40mib", namespace="preauth") == value
    internal_kv._internal_kv_del(b"preauth-40mib", namespace="preauth")


def test_the_direct_port_refuses_an_oversized_first_frame_unbuffered(cluster):
    probe = Probe.remote()
    pid, port = ember.get(probe.where.remote(), timeout=60)
    assert port, "the worker has no direct port"
    closed, closed_at, growth = oversized_first_frame(port, pid)
    assert closed, "the worker kept the connection of an oversized unauthenticated frame open"
    assert closed_at < 10, closed_at
    assert growth < 16 * MIB, f"the worker grew by {growth / MIB:.0f} MiB"
    assert ember.get(probe.echo.remote(7), timeout=60) == 7  # and still serves


def _listening(pid: int) -> list[str]:
    return [c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN]


def test_a_loopback_cluster_listens_on_loopback_only(cluster):
    probe = Probe.remote()  # kept: an actor lives while a handle does
    pid, _ = ember.get(probe.where.remote(), timeout=60)
    pids = {"gcs": cluster.gcs.pid, "worker": pid, "driver": os.getpid()}
    for i, node in enumerate(cluster.nodes):
        pids[f"raylet {i}"], pids[f"objmgr {i}"] = node.procs[0].pid, node.procs[1].pid
    for name, p in pids.items():
        ips = _listening(p)
        assert ips, f"{name} listens nowhere"
        assert all(ip.removeprefix("::ffff:").startswith("127.") or ip == "::1" for ip in ips), (name, ips)


@ember.remote
def _double(a: np.ndarray) -> np.ndarray:
    return a * 2


@ember.remote(resources={"second": 1})
def _made_on_the_second_node(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.uint8)


@ember.remote
def _inline_args(*parts: bytes) -> int:
    return sum(len(p) for p in parts)


def test_big_authenticated_traffic_still_works(cluster):
    big = np.arange(100 * MIB // 8, dtype=np.int64)  # 100 MB
    ref = ember.put(big)
    assert np.array_equal(ember.get(ref, timeout=120), big)
    del ref
    arg = np.ones(20 * MIB, dtype=np.uint8)
    assert int(ember.get(_double.remote(arg), timeout=120).sum()) == 40 * MIB
    probe = Probe.remote()
    assert ember.get(probe.echo.remote(arg), timeout=120).nbytes == 20 * MIB
    # many inline-sized args: one task spec over a control service's limit of a few MiB
    parts = [os.urandom(90 * 1024) for _ in range(100)]
    assert ember.get(_inline_args.remote(*parts), timeout=120) == 100 * 90 * 1024
    pulled = ember.get(_made_on_the_second_node.remote(100 * MIB), timeout=120)  # objmgr to objmgr
    assert pulled.nbytes == 100 * MIB and int(pulled[-1]) == 1


def test_a_runtime_env_package_bigger_than_one_kv_part_arrives_whole(cluster, tmp_path):
    blob = os.urandom(3 * MIB)  # incompressible: a zip of three parts
    (tmp_path / "data.bin").write_bytes(blob)

    @ember.remote(runtime_env={"working_dir": str(tmp_path)})
    def read() -> bytes:
        with open("data.bin", "rb") as f:
            return f.read()

    assert ember.get(read.remote(), timeout=120) == blob


def test_a_function_of_several_mib_ships_in_parts(cluster):
    captured = os.urandom(5 * MIB)

    @ember.remote
    def digest() -> int:
        return sum(captured[::4096])

    assert ember.get(digest.remote(), timeout=120) == sum(captured[::4096])


def test_a_function_too_big_to_ship_is_a_clear_error(cluster):
    captured = bytes(function_manager.MAX_FUNCTION_BYTES + 1)

    @ember.remote
    def heavy() -> int:
        return len(captured)

    with pytest.raises(ValueError, match="too large to ship.*FUNCTION_SIZE_ERROR_THRESHOLD.*ember.put"):
        heavy.remote()
    assert ember.get(ember.remote(lambda: 2).remote(), timeout=60) == 2


def test_a_job_package_over_the_control_limit_is_stored_in_parts(cluster):
    import io
    import zipfile

    from ember._tools import job_manager

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("big.bin", bytes(rpc.receive_limit(control=True) + MIB))
    uri = "gcs://_ray_pkg_preauth.zip"
    job_manager.put_package(uri, buf.getvalue())
    assert job_manager.package_exists(uri)
    assert job_manager._get_package(uri) == buf.getvalue()
