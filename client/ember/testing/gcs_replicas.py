"""GcsReplicas: N GCS processes on one etcd that elect a leader (`ember-gcs --ha`), for tests.

    with EtcdProcess() as etcd, GcsReplicas(etcd.url, 3) as gcs:
        leader = gcs.wait_leader()      # the replica whose health says ember.Gcs SERVING
        gcs.kill(leader)                # SIGKILL; gcs.pause / gcs.resume: SIGSTOP / SIGCONT
        ember.init(address=gcs.address) # every replica, comma-separated: clients follow the leader

Each replica listens on loopback on a port of its own, fixed at start so that `restart` brings it
back on the same address. A leader that loses its leadership exits (it is not restarted here).
"""
from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from typing import Any

from ember._private import node as node_mod


class GcsReplicas:
    """N GCS replicas on one etcd (see the module docstring)."""

    def __init__(self, storage: str, n: int = 3, *, cluster_name: str | None = None,
                 lease_s: int = 2, session_dir: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        from ember_common import auth

        if n < 1:
            raise ValueError(f"GcsReplicas needs at least one replica, got {n}")
        auth.ensure_token()
        self.storage = storage
        self.cluster_name = cluster_name or f"test-{os.urandom(4).hex()}"
        self.lease_s = lease_s
        self.env = env
        self.session_dir = session_dir or node_mod.new_session_dir()
        self._own_session = session_dir is None
        self.procs: list[node_mod.ServiceProcess | None] = [None] * n
        self.ports = [0] * n
        try:  # started side by side: each start waits for its process to listen
            with concurrent.futures.ThreadPoolExecutor(n) as pool:
                for started in [pool.submit(self.start, i) for i in range(n)]:
                    started.result()
        except BaseException:
            self.shutdown()
            raise

    @property
    def addresses(self) -> list[str]:
        """Every replica's HOST:PORT, in index order."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    @property
    def address(self) -> str:
        """The GCS address clients get: every replica, comma-separated."""
        return ",".join(self.addresses)

    def _args(self, i: int) -> list[str]:
        from ember_common.settings import GcsSettings

        return GcsSettings(port=self.ports[i], host="127.0.0.1", storage=self.storage,
                           cluster_name=self.cluster_name, session_dir=self.session_dir, ha=True,
                           leader_lease_s=self.lease_s).to_argv()

    def start(self, i: int) -> None:
        """Starts replica i (again, on its port once it has one)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                p = node_mod.start_service("ember_gcs", self._args(i), self.session_dir, f"gcs-{i}",
                                           env=self.env)
                break
            except RuntimeError:  # its port not free yet after a kill: try again shortly
                if not self.ports[i] or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.procs[i] = p
        self.ports[i] = p.port

    def proc(self, i: int) -> node_mod.ServiceProcess:
        """Replica i's process (it must have been started)."""
        p = self.procs[i]
        assert p is not None, f"replica {i} is not running"
        return p

    def alive(self, i: int) -> bool:
        """Whether replica i's process runs."""
        p = self.procs[i]
        return p is not None and p.alive()

    def serving(self, i: int, timeout_s: float = 1.0) -> bool:
        """Whether replica i answers its health check with ember.Gcs SERVING (it leads)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from ember_common import rpc

        if not self.alive(i):
            return False
        with rpc.sync_channel(self.addresses[i]) as ch:
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service="ember.Gcs"), timeout=timeout_s)
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def leaders(self) -> list[int]:
        """The replicas that say they lead now."""
        return [i for i in range(len(self.procs)) if self.serving(i)]

    def wait_leader(self, timeout_s: float = 20.0, other_than: int | None = None) -> int:
        """The index of the leader once exactly one replica (not other_than) serves."""
        from .cluster import wait_for  # cluster.py imports this module

        def one() -> int | None:  # other_than is not asked (a paused one would hold each round)
            found = [i for i in range(len(self.procs)) if i != other_than and self.serving(i)]
            return found[0] + 1 if len(found) == 1 else None  # +1: index 0 is truthy this way
        return int(wait_for(one, timeout_s, 0.05, "one GCS leader")) - 1

    def kill(self, i: int) -> None:
        """SIGKILLs replica i."""
        p = self.proc(i)
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if p.popen is not None:
            p.popen.wait(10)

    def pause(self, i: int) -> None:
        """SIGSTOPs replica i (its sockets stay open; nothing answers)."""
        os.kill(self.proc(i).pid, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        """SIGCONTs replica i."""
        os.kill(self.proc(i).pid, signal.SIGCONT)

    def stop(self, i: int) -> None:
        """SIGTERMs replica i and waits for it (a graceful stop: a leader resigns)."""
        p = self.procs[i]
        if p is not None:
            try:
                os.kill(p.pid, signal.SIGCONT)  # in case it was paused
            except ProcessLookupError:
                pass
            node_mod.stop_process(p.pid, popen=p.popen)

    def log(self, i: int) -> str:
        """Replica i's stderr so far."""
        try:
            with open(os.path.join(self.session_dir, "logs", f"gcs-{i}.err"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def shutdown(self) -> None:
        """Stops every replica."""
        for i in range(len(self.procs)):
            self.stop(i)
        if self._own_session:
            node_mod.remove_session_store(self.session_dir)

    def __enter__(self) -> GcsReplicas:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
