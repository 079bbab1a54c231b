"""Replicated GCS processes (`ember-gcs --ha`) on a real etcd: one leader serves, followers
redirect to it, a killed or paused leader is replaced within the lease, and a deposed leader's
writes never land."""
from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest

from ember.testing import EtcdProcess, GcsReplicas, wait_for
from ember_common import backoff, rpc
from ember_common.gcs_client import SyncGcsClient
from ember_common.gcs_leader import leader_hint
from ember_common.proto import common_pb2, gcs_pb2, gcs_pb2_grpc

pytestmark = [pytest.mark.etcd, pytest.mark.chaos]


@pytest.fixture(scope="module")
def etcd():
    with EtcdProcess() as e:
        yield e


def _kv_get_raw(address: str, key: bytes) -> tuple[grpc.StatusCode, str | None, bytes]:
    """One InternalKVGet straight to one replica: (status, the leader it names, value)."""
    with rpc.sync_channel(address) as ch:
        stub = gcs_pb2_grpc.InternalKVGcsServiceStub(ch)
        try:
            reply = stub.InternalKVGet(gcs_pb2.InternalKVGetRequest(namespace="t", key=key), timeout=5)
        except grpc.RpcError as e:
            return e.code(), leader_hint(e), b""
    return grpc.StatusCode.OK, None, bytes(reply.value)


def _one_try(address: str) -> SyncGcsClient:
    return SyncGcsClient(address, retry=backoff.NO_RETRY, timeout_s=5)


def test_replicas_elect_one_leader_and_followers_redirect(etcd):
    with GcsReplicas(etcd.url, 3) as gcs:
        leader = gcs.wait_leader()
        with _one_try(gcs.addresses[leader]) as c:
            c.internal_kv_put("t", b"k", b"v")
        for i, address in enumerate(gcs.addresses):
            code, hint, value = _kv_get_raw(address, b"k")
            if i == leader:
                assert (code, value) == (grpc.StatusCode.OK, b"v")
            else:
                assert code == grpc.StatusCode.UNAVAILABLE
                assert hint == gcs.addresses[leader]
                # A client given only a follower follows its redirect to the leader.
                with _one_try(address) as c:
                    assert c.internal_kv_get("t", b"k") == b"v"
                    assert c.replicas.current == gcs.addresses[leader]
        assert gcs.leaders() == [leader]


def test_a_killed_leader_is_replaced_within_three_seconds_with_its_state(etcd):
    with GcsReplicas(etcd.url, 3, lease_s=2) as gcs:
        leader = gcs.wait_leader()
        with _one_try(gcs.addresses[leader]) as c:
            c.internal_kv_put("t", b"kept", b"yes")
            job = c.add_job(common_pb2.JobInfo(driver_pid=1))
        t0 = time.monotonic()
        gcs.kill(leader)
        new = gcs.wait_leader(timeout_s=10, other_than=leader)
        took = time.monotonic() - t0
        assert took < 3.0, f"a new leader served {took:.2f}s after the old one was killed"
        with _one_try(gcs.addresses[new]) as c:
            assert c.internal_kv_get("t", b"kept") == b"yes"
            assert [j.job_id for j in c.get_all_job_info()] == [job]
        # The third replica names the new leader from its next read of the leader key on.
        third = gcs.addresses[3 - leader - new]
        wait_for(lambda: _kv_get_raw(third, b"kept")[:2] == (grpc.StatusCode.UNAVAILABLE, gcs.addresses[new]),
                 5, what="the other follower to name the new leader")


def test_a_stopped_leader_hands_over_at_once(etcd):
    with GcsReplicas(etcd.url, 2, lease_s=10) as gcs:
        leader = gcs.wait_leader()
        t0 = time.monotonic()
        gcs.stop(leader)  # SIGTERM: it resigns (revokes its lease)
        gcs.wait_leader(timeout_s=10, other_than=leader)
        assert time.monotonic() - t0 < 5.0  # well inside the 10 s lease


def test_a_paused_leader_is_deposed_and_its_writes_never_land(etcd):
    """SIGSTOP the leader past its lease, let another replica win, send the old one writes while
    it is stopped, SIGCONT it: it refuses them (its lease is gone; a write that reached etcd
    would be fenced), exits, and nothing it was asked to do is visible."""
    with GcsReplicas(etcd.url, 2, lease_s=2) as gcs:
        old = gcs.wait_leader()
        node = common_pb2.NodeInfo(node_id="ab" * 28, raylet_address="127.0.0.1:1",
                                   total_resources={"CPU": 1.0})
        with _one_try(gcs.addresses[old]) as c:
            c.internal_kv_put("t", b"k", b"before")
        gcs.pause(old)
        try:
            new = gcs.wait_leader(timeout_s=10, other_than=old)
            # Requests to the paused replica wait in its socket until it resumes.
            with rpc.sync_channel(gcs.addresses[old]) as ch:
                kv = gcs_pb2_grpc.InternalKVGcsServiceStub(ch)
                nodes = gcs_pb2_grpc.NodeInfoGcsServiceStub(ch)
                put = kv.InternalKVPut.future(gcs_pb2.InternalKVPutRequest(
                    namespace="t", key=b"k", value=b"stale", overwrite=True), timeout=20)
                register = nodes.RegisterNode.future(gcs_pb2.RegisterNodeRequest(node=node), timeout=20)
                time.sleep(0.5)
                gcs.resume(old)
                for call in (put, register):  # refused by its gate, or cancelled as it stops:
                    with pytest.raises(grpc.RpcError) as err:  # both send a client on (go_again)
                        call.result()
                    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), \
                        err.value.details()
        finally:
            gcs.resume(old)
        wait_for(lambda: not gcs.alive(old), 10, what="the deposed leader to exit")
        assert "lost the leadership" in gcs.log(old)
        assert gcs.leaders() == [new]
        with _one_try(gcs.addresses[new]) as c:
            assert c.internal_kv_get("t", b"k") == b"before"
            assert [n.node_id for n in c.get_all_node_info()] == []


class _EtcdLink:
    """A TCP relay between one GCS replica and etcd that can be cut like a network partition:
    after `cut()` nothing more passes either way, connections stay open (a silent peer)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._cut = threading.Event()
        self._socks: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if not self._cut.is_set():
                try:
                    dst.sendall(data)
                except OSError:
                    return

    def cut(self) -> None:
        """Drops everything from now on, both ways."""
        self._cut.set()

    def close(self) -> None:
        for s in self._socks:
            s.close()


def test_a_leader_cut_off_from_etcd_stops_serving_before_another_leads(etcd):
    """The leader reaches etcd through a link that is then cut: it stops serving when its lease
    clock runs out, before etcd ends the lease and another replica takes over, so two replicas
    never serve at once; then it exits."""
    link = _EtcdLink(etcd.endpoint)
    try:
        with GcsReplicas(f"etcd://{link.endpoint}", 1, lease_s=2) as cut_off, \
                GcsReplicas(etcd.url, 1, lease_s=2, cluster_name=cut_off.cluster_name) as other:
            cut_off.wait_leader()
            link.cut()
            t0 = time.monotonic()
            while True:  # bounded by the assertion below
                old_serves = _kv_get_raw(cut_off.addresses[0], b"k")[0] != grpc.StatusCode.UNAVAILABLE
                new_serves = _kv_get_raw(other.addresses[0], b"k")[0] != grpc.StatusCode.UNAVAILABLE
                assert not (old_serves and new_serves), "two replicas served at once"
                if new_serves:
                    break
                assert time.monotonic() - t0 < 15, "no replica took over"
                time.sleep(0.02)
            assert not cut_off.serving(0, timeout_s=0.5)
            wait_for(lambda: not cut_off.alive(0), 15, what="the cut-off leader to exit")
            assert "lost the leadership" in cut_off.log(0)
    finally:
        link.close()


def test_a_client_connected_to_a_paused_leader_moves_on_within_seconds(etcd):
    """A leader that goes silent without closing its connections (paused; a vanished host is
    the same to its callers): a client with an open connection to it fails over to the new
    leader within the lease and its keepalive, not its 30 s call timeout."""
    with GcsReplicas(etcd.url, 3, lease_s=2) as gcs:
        leader = gcs.wait_leader()
        with SyncGcsClient(gcs.address, timeout_s=30) as c:
            c.internal_kv_put("t", b"k", b"v")
            assert c.replicas.current == gcs.addresses[leader]  # connected to the leader
            gcs.pause(leader)
            try:
                t0 = time.monotonic()
                assert c.internal_kv_get("t", b"k") == b"v"
                took = time.monotonic() - t0
            finally:
                gcs.resume(leader)
            assert took < 8.0, f"the client took {took:.1f}s to reach the new leader"
            assert c.replicas.current != gcs.addresses[leader]
