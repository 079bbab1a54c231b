"""The GCS leader's faults on the HA compose cluster (docker/compose.ha.yml: replicas gcs, gcs-2,
gcs-3 on one etcd), and how the suite tells which replica leads.

The leader is found the way clients find it (ember_common.gcs_leader): a GCS call to each
replica from inside the cluster network (an InternalKV read, from the raylet-head container, as
a driver there would make it); the leader answers it, a follower refuses it UNAVAILABLE naming
the leader in its trailing metadata. One leader answering, and every follower that names one
naming it, is "the leader".

  leader-kill       SIGKILL the leader's container; a new leader must serve (timed from the
                    kill); after `down_s` the old container is started again.
  leader-partition  disconnect the leader's container from etcd's network only (clients still
                    reach it); a new leader must serve, and the deposed one, still reachable,
                    must refuse a write (an InternalKV put); after `down_s` it is reconnected.
Recovery after either (besides the cluster's health): a single leader serves, and the old
replica, unless a later election (the lease lost again on a loaded host) made it the leader
again, is a follower that refuses a write, naming that leader.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .docker_faults import DockerCluster
from .faults import FaultEvent

REPLICAS = ["gcs", "gcs-2", "gcs-3"]
PROBE_SERVICE = "raylet-head"  # on the clients' network, with the cluster's token
PORT = 6379
TIMEOUT_S = 5  # a replica's answer to one probe (a loaded host takes seconds)

# ask(replica, write) -> {"leads": bool, "code": ..., "hint": ...}; `loop` below uses it too.
_ASK = r"""
import json, sys, time
import grpc
from ember_common import gcs_leader, rpc
from ember_common.proto import gcs_pb2, gcs_pb2_grpc
_stubs = {}
def ask(replica, write=False):
    stub = _stubs.get(replica)
    if stub is None:
        stub = _stubs[replica] = gcs_pb2_grpc.InternalKVGcsServiceStub(rpc.sync_channel(f"{replica}:%(port)d"))
    try:
        if write:
            stub.InternalKVPut(gcs_pb2.InternalKVPutRequest(
                namespace="chaos", key=b"write-probe", value=replica.encode(), overwrite=True), timeout=%(timeout_s)d)
        else:
            stub.InternalKVGet(gcs_pb2.InternalKVGetRequest(namespace="chaos", key=b"probe"),
                               timeout=%(timeout_s)d)
        return {"leads": True}
    except grpc.RpcError as e:  # NOT_FOUND: the leader read the KV (the key is not there)
        return {"leads": e.code() == grpc.StatusCode.NOT_FOUND, "code": e.code().name,
                "hint": gcs_leader.leader_hint(e)}
"""

_ONCE = _ASK + r"""
out = {r: ask(r) for r in %(replicas)r}
if %(write_to)r:
    out["write:" + %(write_to)r] = ask(%(write_to)r, write=True)
print(json.dumps(out))
"""

# Polls the replicas other than `old` until one answers: prints when (this kernel's monotonic
# clock, which the host shares) and, when `old` is reachable, its answer to a write.
_FAILOVER = _ASK + r"""
deadline = time.monotonic() + %(bound_s)f
while time.monotonic() < deadline:
    for r in %(others)r:
        if ask(r)["leads"]:
            at = time.monotonic()
            print(json.dumps({"new_leader": r, "at": at, "old_write": ask(%(old)r, write=True)}))
            sys.exit(0)
    time.sleep(0.05)
print(json.dumps({"new_leader": None}))
"""


def leader_of(answers: dict[str, dict[str, Any]]) -> str | None:
    """The one replica that answered, when every follower naming a leader names it (pure)."""
    leading = [r for r, a in answers.items() if ":" not in r and a.get("leads")]
    if len(leading) != 1:
        return None
    named = {a.get("hint") for r, a in answers.items() if ":" not in r and not a.get("leads")}
    named.discard(None)
    named.discard("")
    return leading[0] if named <= {f"{leading[0]}:{PORT}"} else None


def ask_replicas(c: DockerCluster, write_to: str = "") -> dict[str, dict[str, Any]]:
    code = _ONCE % {"port": PORT, "timeout_s": TIMEOUT_S, "replicas": REPLICAS, "write_to": write_to}
    return dict(json.loads(c.exec_python(PROBE_SERVICE, code).strip().splitlines()[-1]))


def find_leader(c: DockerCluster) -> str:
    answers = ask_replicas(c)
    leader = leader_of(answers)
    if leader is None:
        raise AssertionError(f"no single GCS leader: {json.dumps(answers)}")
    return leader


def follower_problem(c: DockerCluster, old: str) -> str | None:
    """None when a single leader serves and `old`, unless elected again since, is a follower
    refusing a write naming it."""
    answers = ask_replicas(c, write_to=old)
    leader = leader_of(answers)
    if leader is None:
        return f"no single GCS leader: {json.dumps(answers)}"
    if leader == old:  # another replica led after the fault (inject saw it); then this one again
        return None
    w = answers[f"write:{old}"]
    if w.get("leads") or w.get("code") != "UNAVAILABLE" or w.get("hint") != f"{leader}:{PORT}":
        return f"{old} answered a write with {json.dumps(w)}, not a refusal naming {leader}"
    return None


def _failover(c: DockerCluster, old: str, t0: float, bound_s: float) -> dict[str, Any]:
    others = [r for r in REPLICAS if r != old]
    code = _FAILOVER % {"port": PORT, "timeout_s": TIMEOUT_S, "bound_s": bound_s, "others": others, "old": old}
    got = dict(json.loads(c.exec_python(PROBE_SERVICE, code).strip().splitlines()[-1]))
    if got["new_leader"] is None:
        raise AssertionError(f"no replica of {others} led within {bound_s}s of the fault on {old}")
    return {"old_leader": old, "new_leader": got["new_leader"],
            "failover_s": round(got["at"] - t0, 2), "old_write": got["old_write"]}


def inject(c: DockerCluster, ev: FaultEvent, sleep: Callable[[float], None],
           bound_s: float) -> tuple[dict[str, Any], Callable[[], str | None]]:
    """Carries out a leader fault: (what the log records, the check recovery must pass)."""
    old = find_leader(c)
    if ev.kind == "leader-kill":
        t0 = time.monotonic()
        c.kill(old)
        detail = _failover(c, old, t0, bound_s)
        sleep(max(0.0, ev.down_s - (time.monotonic() - t0)))
        c.start(old)
    elif ev.kind == "leader-partition":
        t0 = time.monotonic()
        aliases = c.disconnect(old, c.etcd_network_name)
        try:
            detail = _failover(c, old, t0, bound_s)
            w = detail["old_write"]
            if w.get("leads"):  # reachable, deposed, and took a write: the fence failed
                detail["violation"] = f"the deposed leader {old} accepted a write: {w}"
            sleep(max(0.0, ev.down_s - (time.monotonic() - t0)))
        finally:
            c.connect(old, aliases, c.etcd_network_name)
    else:
        raise ValueError(f"not a leader fault: {ev.kind!r}")
    return detail, lambda: follower_problem(c, old)
