"""Red-team checks against a loopback cluster of real processes (no Docker): the attacks of
docs/security.md that a caller on the network, with or without the cluster's token, can try.
Each check prints one line, PASS or FAIL with what it observed; the exit status is 1 when any
check fails. tests/integration/security/test_redteam.py runs it under `make test`.

    python scripts/redteam.py           # start a cluster, attack it, stop it
    python scripts/redteam.py --list    # the checks' names

The token is this process's (EMBER_AUTH_TOKEN, EMBER_AUTH_TOKEN_PATH or ~/.ember/auth_token,
created on first use), as for `ember.init()`. The cluster listens on loopback only.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # attacks.py: the helpers the tests use

import grpc  # noqa: E402
from attacks import (  # noqa: E402
    KV_PUT,
    MIB,
    PeakRss,
    call_raw,
    kv_put_request,
    oversized_first_frame,
    raw_channel,
    varint,
)  # noqa: E402

import ember  # noqa: E402
from ember.testing import LocalCluster  # noqa: E402
from ember_common import auth, rpc  # noqa: E402
from ember_common.proto import (  # noqa: E402
    autoscaler_pb2,
    common_pb2,
    core_worker_pb2,
    gcs_pb2,
    gcs_task_pb2,
    logs_pb2,
    objmgr_pb2,
    raylet_pb2,
    raylet_pb2_grpc,
)
from ember_common.validate_rules import MAX_BUNDLES_PER_GROUP, MAX_GROUPS_PER_REQUEST  # noqa: E402

WRONG = (("authorization", "Bearer not-the-token"),)
SERVICES = {"gcs": (gcs_pb2, gcs_task_pb2, autoscaler_pb2), "raylet": (raylet_pb2, logs_pb2),
            "objmgr": (objmgr_pb2,), "core worker": (core_worker_pb2,)}


@dataclass
class Target:
    """The cluster under attack: its addresses and the pids whose memory is watched."""

    cluster: LocalCluster
    addresses: dict[str, str]
    worker_pid: int
    direct_port: int

    @property
    def gcs(self) -> str:
        return self.addresses["gcs"]


Check = Callable[[Target], tuple[bool, str]]
CHECKS: list[tuple[str, Check]] = []


def check(name: str) -> Callable[[Check], Check]:
    def add(fn: Check) -> Check:
        CHECKS.append((name, fn))
        return fn
    return add


def _code(fn: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    """The status a call ends with (OK when it returns)."""
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def _any_call(channel: grpc.Channel, path: str, client_streams: bool, server_streams: bool, md: Any) -> None:
    """Calls a method of any shape with one empty message, reading the whole answer."""
    if client_streams and server_streams:
        list(channel.stream_stream(path)(iter([b""]), timeout=30, metadata=md))
    elif client_streams:
        channel.stream_unary(path)(iter([b""]), timeout=30, metadata=md)
    elif server_streams:
        list(channel.unary_stream(path)(b"", timeout=30, metadata=md))
    else:
        channel.unary_unary(path)(b"", timeout=30, metadata=md)


def _auth_check(service: str) -> Check:
    def run(t: Target) -> tuple[bool, str]:
        calls, wrong = 0, []
        with raw_channel(t.addresses[service]) as ch:
            for module in SERVICES[service]:
                for svc in module.DESCRIPTOR.services_by_name.values():
                    for m in svc.methods:
                        path = f"/{svc.full_name}/{m.name}"
                        for md in (None, WRONG):
                            code, _ = _code(functools.partial(_any_call, ch, path, m.client_streaming,
                                                              m.server_streaming, md))
                            calls += 1
                            if code != grpc.StatusCode.UNAUTHENTICATED:
                                wrong.append(f"{path}: {code.name}")
        return not wrong, f"{calls} calls without or with a wrong token: {wrong or 'all UNAUTHENTICATED'}"
    return run


for _service in SERVICES:
    check(f"auth: every {_service} method needs the token")(_auth_check(_service))


FEW_MIB = 8 * MIB  # what a refused request may cost the GCS's RSS (read buffers, sampling noise)


@check("unauthenticated 256 MiB message: refused unread")
def _unauth_big(t: Target) -> tuple[bool, str]:
    request = kv_put_request(256 * MIB)
    with raw_channel(t.gcs) as ch, PeakRss(t.cluster.gcs.pid) as rss:
        code, _ = _code(lambda: call_raw(ch, KV_PUT, request))
    return (code == grpc.StatusCode.UNAUTHENTICATED and rss.growth < FEW_MIB,
            f"{code.name}, GCS RSS +{rss.growth / MIB:.1f} MiB")


@check("authenticated message just over the GCS's limit: refused unbuffered")
def _over_server_limit(t: Target) -> tuple[bool, str]:
    request = kv_put_request(rpc.receive_limit(control=True) + MIB)
    with raw_channel(t.gcs) as ch, PeakRss(t.cluster.gcs.pid) as rss:
        code, _ = _code(lambda: call_raw(ch, KV_PUT, request, metadata=auth.client_metadata()))
    return (code == grpc.StatusCode.RESOURCE_EXHAUSTED and rss.growth < FEW_MIB,
            f"{code.name}, GCS RSS +{rss.growth / MIB:.1f} MiB")


@check("40 MiB request to a control method, with and without the token: refused unbuffered")
def _forty_mib(t: Target) -> tuple[bool, str]:
    path = "/ember.PlacementGroupInfoGcsService/RemovePlacementGroups"
    request = (varint(1 << 3 | 2) + varint(18) + bytes(18)) * 2_000_000  # two million group ids
    seen, ok = [], True
    for md, want in ((auth.client_metadata(), grpc.StatusCode.RESOURCE_EXHAUSTED),
                     (None, grpc.StatusCode.UNAUTHENTICATED)):
        with raw_channel(t.gcs) as ch, PeakRss(t.cluster.gcs.pid) as rss:
            t0 = time.monotonic()
            code, _ = _code(lambda: call_raw(ch, path, request, metadata=md))  # noqa: B023
            elapsed = time.monotonic() - t0
        ok = ok and code == want and rss.growth < FEW_MIB and elapsed < 10
        seen.append(f"{code.name} in {elapsed:.1f} s, GCS RSS +{rss.growth / MIB:.1f} MiB")
    return ok, "; ".join(seen)


@check("legitimate 8 MiB KV value: stored (in chunks)")
def _big_kv_value(t: Target) -> tuple[bool, str]:
    from ember.experimental import internal_kv as kv

    value = os.urandom(8 * MIB)
    kv._internal_kv_put(b"redteam-big", value, namespace="redteam")
    back = kv._internal_kv_get(b"redteam-big", namespace="redteam")
    return back == value, f"read back {len(back or b'')} bytes"


def _group(bundles: int, resources: dict[str, float]) -> common_pb2.PlacementGroupInfo:
    return common_pb2.PlacementGroupInfo(placement_group_id=os.urandom(18), bundles=[
        common_pb2.Bundle(index=i, resources=resources) for i in range(bundles)])


def _gcs_call(t: Target, stub: str, method: str, request: Any) -> tuple[grpc.StatusCode, str]:
    from ember_common.proto import gcs_pb2_grpc

    with rpc.sync_channel(t.gcs) as ch:
        return _code(lambda: getattr(getattr(gcs_pb2_grpc, stub)(ch), method)(request, timeout=60))


def _refused(t: Target, stub: str, method: str, request: Any, needle: str) -> tuple[bool, str]:
    t0 = time.monotonic()
    code, details = _gcs_call(t, stub, method, request)
    elapsed = time.monotonic() - t0
    ok = code == grpc.StatusCode.INVALID_ARGUMENT and needle in details and elapsed < 20
    return ok, f"{code.name} in {elapsed:.1f} s: {details[:100]}"


@check("placement group of 100,000 bundles: refused naming the cap")
def _bundles_100k(t: Target) -> tuple[bool, str]:
    return _refused(t, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroup",
                    gcs_pb2.CreatePlacementGroupRequest(spec=_group(100_000, {"CPU": 0.0001})),
                    f"at most {MAX_BUNDLES_PER_GROUP} items")


@check("bundle of CPU=1e308: refused")
def _bundle_1e308(t: Target) -> tuple[bool, str]:
    return _refused(t, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroup",
                    gcs_pb2.CreatePlacementGroupRequest(spec=_group(1, {"CPU": 1e308})), "spec.bundles[0].resources")


@check("RegisterNode with CPU=1e308: refused")
def _node_1e308(t: Target) -> tuple[bool, str]:
    node = common_pb2.NodeInfo(node_id="ghost", raylet_address="127.0.0.1:1", total_resources={"CPU": 1e308},
                               available_resources={"CPU": 1e308}, state=common_pb2.NodeInfo.ALIVE)
    return _refused(t, "NodeInfoGcsServiceStub", "RegisterNode", gcs_pb2.RegisterNodeRequest(node=node),
                    "node.total_resources")


@check("AddJob with start_time=1e308: refused")
def _job_1e308(t: Target) -> tuple[bool, str]:
    return _refused(t, "JobInfoGcsServiceStub", "AddJob",
                    gcs_pb2.AddJobRequest(job=common_pb2.JobInfo(start_time=1e308)), "job.start_time")


@check("KV key of 1 MiB: refused")
def _kv_key_1mib(t: Target) -> tuple[bool, str]:
    return _refused(t, "InternalKVGcsServiceStub", "InternalKVPut",
                    gcs_pb2.InternalKVPutRequest(key=b"k" * MIB, value=b"v"), "key")


@check("KV key of 100 MiB: refused")
def _kv_key_100mib(t: Target) -> tuple[bool, str]:
    request = gcs_pb2.InternalKVPutRequest(namespace="redteam").SerializeToString()
    request += varint(2 << 3 | 2) + varint(100 * MIB) + bytes(100 * MIB)  # field 2, `key`
    with raw_channel(t.gcs) as ch:
        code, _ = _code(lambda: call_raw(ch, KV_PUT, request, metadata=auth.client_metadata()))
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED, code.name


@check("PublishLogs forged into a job that does not exist: dropped")
def _forged_logs(t: Target) -> tuple[bool, str]:
    batch = gcs_pb2.LogBatch(job_id=b"\xff\xff\xff\xf0", lines=["forged line"])
    code, _ = _gcs_call(t, "InternalPubSubGcsServiceStub", "PublishLogs", gcs_pb2.PublishLogsRequest(batches=[batch]))
    log_path = os.path.join(t.cluster.session_dir, "logs", "gcs.err")
    deadline = time.monotonic() + 10
    dropped = False
    while not dropped and time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            dropped = "batches naming unknown or ended jobs" in f.read()
        time.sleep(0.1)
    return code == grpc.StatusCode.OK and dropped, f"{code.name}, the GCS logged the drop: {dropped}"


def _groups(n: int, bundles: int) -> list[raylet_pb2.GroupBundles]:
    return [raylet_pb2.GroupBundles(placement_group_id=os.urandom(18), bundles=[
        common_pb2.Bundle(index=i, resources={"tiny": 1.0}) for i in range(bundles)]) for _ in range(n)]


@check("raylet call of too many groups: refused naming the cap")
def _too_many_groups(t: Target) -> tuple[bool, str]:
    request = raylet_pb2.PrepareBundleResourcesRequest(groups=_groups(MAX_GROUPS_PER_REQUEST + 1, 1))
    with rpc.sync_channel(t.addresses["raylet"]) as ch:
        code, details = _code(lambda: raylet_pb2_grpc.RayletStub(ch).PrepareBundleResources(request, timeout=60))
    ok = code == grpc.StatusCode.INVALID_ARGUMENT and f"at most {MAX_GROUPS_PER_REQUEST} items" in details
    return ok, f"{code.name}: {details[:100]}"


@check("GCS batch of too many groups: refused naming the cap")
def _too_many_specs(t: Target) -> tuple[bool, str]:
    request = gcs_pb2.CreatePlacementGroupsRequest(specs=[_group(1, {"tiny": 1.0})
                                                          for _ in range(MAX_GROUPS_PER_REQUEST + 1)])
    return _refused(t, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroups", request,
                    f"specs must have at most {MAX_GROUPS_PER_REQUEST} items")


@check("1,500 groups created at once: all placed, then removed")
def _many_groups(t: Target) -> tuple[bool, str]:
    from ember.util.placement_group import placement_group, remove_placement_group

    t0 = time.monotonic()
    groups = [placement_group([{"tiny": 1.0}]) for _ in range(1500)]  # sent in batches of 1,000
    ready = ember.get([g.ready() for g in groups], timeout=60)
    placed = time.monotonic() - t0
    for g in groups:
        remove_placement_group(g)
    return len(ready) == 1500, f"{len(ready)} placed in {placed:.1f} s"


@ember.remote
def _one() -> int:
    return 1


def _latency(n: int) -> list[float]:
    """The latencies of n tasks run one after another (each submitted, then awaited)."""
    out = []
    for _ in range(n):
        t1 = time.monotonic()
        ember.get(_one.remote(), timeout=60)
        out.append(time.monotonic() - t1)
        time.sleep(0.05)
    return out


@check("tasks run while the raylet reserves 200,000 bundles")
def _busy_raylet(t: Target) -> tuple[bool, str]:
    """The slowest task during the round is held to 1 s, or on a loaded machine to 10 times the
    slowest of the same task at rest just before, or to a quarter of the round (which load
    stretches as much): a raylet that held its loop for the round keeps a task waiting for
    most of it, and fails all three."""
    request = raylet_pb2.PrepareBundleResourcesRequest(groups=_groups(200, 1000))
    address = t.addresses["raylet"]
    answered: list[Any] = []
    rest = max(_latency(20))

    def prepare() -> None:
        with rpc.sync_channel(address) as ch:
            answered.append(_code(lambda: raylet_pb2_grpc.RayletStub(ch).PrepareBundleResources(request, timeout=300)))
            answered.append(time.monotonic())

    worker = threading.Thread(target=prepare)
    t0 = time.monotonic()
    worker.start()
    slowest, tasks = 0.0, 0
    while worker.is_alive():
        slowest, tasks = max(slowest, *_latency(1)), tasks + 1
    worker.join()
    with rpc.sync_channel(address) as ch:
        raylet_pb2_grpc.RayletStub(ch).CancelResourceReserve(raylet_pb2.CancelResourceReserveRequest(
            groups=[raylet_pb2.GroupBundleIndexes(placement_group_id=g.placement_group_id)
                    for g in request.groups]), timeout=300)
    (code, _), busy = answered[0], answered[1] - t0
    bound = max(1.0, 10 * rest, busy / 4)
    return (code == grpc.StatusCode.OK and slowest < bound,
            f"the round took {busy:.1f} s ({code.name}); {tasks} tasks meanwhile, the slowest "
            f"{slowest:.2f} s (bound {bound:.2f} s: at rest the slowest of 20 took {rest * 1000:.0f} ms)")


@check("worker direct port: a first frame longer than the secret is refused unbuffered")
def _wire_first_frame(t: Target) -> tuple[bool, str]:
    closed, elapsed, growth = oversized_first_frame(t.direct_port, t.worker_pid)
    return (closed and elapsed < 10 and growth < 16 * MIB,
            f"closed: {closed} after {elapsed:.1f} s, worker RSS +{growth / MIB:.1f} MiB")


@check("the cluster still serves")
def _still_serves(t: Target) -> tuple[bool, str]:
    value = ember.get(_one.remote(), timeout=60)
    alive = [n["Alive"] for n in ember.nodes()]
    return value == 1 and alive == [True], f"task -> {value}, nodes alive {alive}"


@ember.remote
class _Probe:
    def where(self) -> tuple[int, int, int]:
        from ember._private.worker import global_worker

        core = global_worker().core
        return os.getpid(), core.port, core.direct_server.port


def run() -> int:
    failed = 0
    with LocalCluster() as c:
        c.add_node({"CPU": 2, "tiny": 1e9}, is_head=True)
        ember.init(address=c.gcs_address, log_to_driver=False)  # the rejections are logged
        try:
            probe = _Probe.remote()  # kept: its worker is the core worker attacked
            pid, port, direct = ember.get(probe.where.remote(), timeout=60)
            node = c.nodes[0].record
            target = Target(c, {"gcs": c.gcs_address, "raylet": node.raylet_address, "objmgr": node.objmgr_address,
                                "core worker": f"127.0.0.1:{port}"}, pid, direct)
            for name, fn in CHECKS:
                try:
                    ok, observed = fn(target)
                except Exception as e:  # a check that crashes fails, saying how
                    ok, observed = False, f"{type(e).__name__}: {e}"
                failed += not ok
                print(f"{'PASS' if ok else 'FAIL'} {name}: {observed}", flush=True)
        finally:
            ember.shutdown()
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the checks' names and exit")
    if parser.parse_args().list:
        print("\n".join(name for name, _ in CHECKS))
        return 0
    return run()


if __name__ == "__main__":
    sys.exit(main())
