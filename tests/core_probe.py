"""A one-node cluster with a probe actor whose worker the test then calls by hand (raw gRPC on
its core-worker port, or the direct task transport): shared by the tests that speak to a core
worker's services themselves (test_direct_transport, test_fuzz_streams, test_fuzz_rpcs)."""
from __future__ import annotations

import contextlib
from typing import Iterator

import ember
from ember.testing import LocalCluster


@ember.remote
class Probe:
    def core_port(self) -> int:
        from ember._private.worker import global_worker

        return global_worker().core.port

    def ping(self) -> str:
        return "pong"


@contextlib.contextmanager
def probe_cluster() -> Iterator[LocalCluster]:
    """A head node with 2 CPUs and a driver connected to it; the cluster carries `probe` (a live
    Probe) and `worker_address` (its worker's core-worker address on loopback)."""
    with LocalCluster() as c:
        c.add_node({"CPU": 2}, is_head=True)
        ember.init(address=c.gcs_address)
        try:
            c.probe = Probe.remote()  # type: ignore[attr-defined]
            c.worker_address = (  # type: ignore[attr-defined]
                f"127.0.0.1:{ember.get(c.probe.core_port.remote(), timeout=60)}")  # type: ignore[attr-defined]
            yield c
        finally:
            ember.shutdown()
