"""LocalCluster: a multi-node Ember cluster of real processes on loopback, for tests.

    with LocalCluster(gcs_storage="memory") as c:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 1, "special": 1})
        ember.init(address=c.gcs_address)

It keeps every process it starts, can kill raylets and restart the GCS on the same port (for
failure tests), and stops everything at exit. With `gcs_replicas=N` (etcd storage) the GCS is N
replicas that elect a leader (`c.gcs_replicas`, a GcsReplicas) and `gcs_address` lists them all.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from ember._private import node as node_mod

from .gcs_replicas import GcsReplicas


@dataclass
class Node:
    record: node_mod.NodeRecord
    procs: list[node_mod.ServiceProcess]

    @property
    def node_id(self) -> str:
        return self.record.node_id

    @property
    def raylet(self) -> node_mod.ServiceProcess:
        return self.procs[0]


class LocalCluster:
    def __init__(self, gcs_storage: str = "memory", cluster_name: str | None = None,
                 object_store_memory: int = 256 * 1024 * 1024, gcs_replicas: int = 1,
                 gcs_lease_s: int = 2) -> None:
        self.session_dir = node_mod.new_session_dir()
        self.gcs_storage = gcs_storage
        self.cluster_name = cluster_name or f"test-{os.urandom(4).hex()}"
        self.object_store_memory = object_store_memory
        self.nodes: list[Node] = []
        self.node_sessions: list[str] = []  # the session dirs of nodes started with own_session
        self.gcs: node_mod.ServiceProcess | None = None
        self.gcs_port = 0
        self.gcs_replicas: GcsReplicas | None = None
        if gcs_replicas > 1:
            self.gcs_replicas = GcsReplicas(gcs_storage, gcs_replicas, cluster_name=self.cluster_name,
                                            lease_s=gcs_lease_s, session_dir=self.session_dir)
            self.gcs_replicas.wait_leader()
        else:
            self._start_gcs()

    def _start_gcs(self) -> None:
        self.gcs = node_mod.start_gcs(self.session_dir, port=self.gcs_port, storage=self.gcs_storage,
                                      host="127.0.0.1", cluster_name=self.cluster_name)
        self.gcs_port = self.gcs.port

    @property
    def gcs_address(self) -> str:
        if self.gcs_replicas is not None:
            return self.gcs_replicas.address
        return f"127.0.0.1:{self.gcs_port}"

    def add_node(self, resources: dict[str, float], is_head: bool = False,
                 num_prestart_workers: int | None = None, own_session: bool = False,
                 labels: dict[str, str] | None = None) -> Node:
        """Starts a node (raylet + object manager). own_session: in a session directory of its
        own (its own log directory), as a node on another machine has. labels: the node's
        labels (as `ember start --labels`), beside Ray's defaults."""
        session_dir = self.session_dir
        if own_session:
            session_dir = node_mod.new_session_dir()
            self.node_sessions.append(session_dir)
        record, procs = node_mod.start_node(
            session_dir, self.gcs_address, resources=resources,
            object_store_memory=self.object_store_memory, is_head=is_head,
            num_prestart_workers=num_prestart_workers, labels=labels)
        node = Node(record, procs)
        self.nodes.append(node)
        return node

    def kill_raylet(self, node: Node) -> None:
        """SIGKILLs the node's raylet (its workers die with it) and its object manager."""
        for p in node.procs:
            _kill(p)

    def restart_raylet(self, node: Node) -> None:
        """SIGKILLs the node's raylet alone (its workers die with it, and nobody reports their
        exits) and starts a new one for the same node id and object manager, as a container
        restart does."""
        old = node.raylet
        _kill(old)
        new = node_mod.start_service(old.module, old.args, self.session_dir, old.name)
        node.procs[0] = new
        node.record.raylet_address = f"{node.record.raylet_address.rsplit(':', 1)[0]}:{new.port}"
        node.record.pids[0] = new.pid

    def kill_objmgr(self, node: Node) -> None:
        """SIGKILLs only the node's object manager: its store is lost, its raylet and workers
        live on (an object store failure, for object fault-tolerance tests)."""
        _kill(node.procs[1])

    def kill_gcs(self) -> None:
        assert self.gcs is not None
        _kill(self.gcs)

    def restart_gcs(self) -> None:
        """Starts the GCS again on the same port (and the same storage)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self._start_gcs()
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def shutdown(self) -> None:
        for node in self.nodes:
            for p in node.procs:
                node_mod.stop_process(p.pid, popen=p.popen)
        self.nodes = []
        if self.gcs is not None:
            node_mod.stop_process(self.gcs.pid, popen=self.gcs.popen)
            self.gcs = None
        if self.gcs_replicas is not None:
            self.gcs_replicas.shutdown()
            self.gcs_replicas = None
        for session_dir in [self.session_dir, *self.node_sessions]:
            node_mod.remove_session_store(session_dir)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _kill(p: node_mod.ServiceProcess) -> None:
    try:
        os.kill(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if p.popen is not None:
        p.popen.wait(10)


def wait_for(predicate: Any, timeout_s: float = 20.0, interval_s: float = 0.1, what: str = "condition") -> Any:
    """Polls predicate() until it returns something truthy; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def process_gone(pid: int) -> bool:
    """True once pid has exited (gone, or a zombie its parent has not reaped yet). Never raises
    for a process that exits while it is being looked at."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
