"""Fuzzing every unary-request RPC of every service (GCS, raylet, objmgr, a worker's core-worker
server; the server streams Subscribe, ReadObject and ReadRange included) over real sockets,
authenticated with the cluster's token. The request streams (WriteObject, TaskStream) have
their own fuzz in test_fuzz_streams.py; the random messages come from tests/fuzzing.py.

Per method: seeded random byte strings, then random but well-formed messages (every field type
filled with plausible and implausible values: ids of wrong lengths, unknown enum numbers, NaN,
negative amounts, bad addresses), then well-formed messages of valid-looking values that pass
the rules and reach the services' cores (unknown ids, empty lists). The answer must never be UNKNOWN or INTERNAL (an unhandled
exception in a handler), nor a unary call left hanging (a stream may wait for news: a
subscription to channels nothing is published on); where the same bytes fail to parse locally, or the kit's rules
(`validate_rules.RULES`) find a problem, the answer is INVALID_ARGUMENT naming that problem —
garbage is never OK where a required field is missing. Then the cluster still runs tasks, an
actor and objects. A message over EMBER_MAX_MESSAGE_BYTES is RESOURCE_EXHAUSTED with gRPC's
"larger than max" text, a chunked KV put over it RESOURCE_EXHAUSTED naming the limit. Bounded: PER_METHOD cases per method, each call 15 s at most, and the
whole fuzz stops at DEADLINE_S.
"""
from __future__ import annotations

import os
import random
import time

import grpc
import pytest
from core_probe import Probe, probe_cluster
from fuzzing import expected_problem, fill
from google.protobuf import message_factory

import ember
from ember_common import rpc
from ember_common.proto import core_worker_pb2, gcs_pb2, gcs_task_pb2, logs_pb2, objmgr_pb2, raylet_pb2

SEED = 20261201
PER_METHOD = 10  # random byte strings; as many random well-formed messages
DEADLINE_S = 240
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# Methods whose correct answer to an empty request is to stop the service: not fuzzed.
SKIP = {"/ember.Raylet/Shutdown", "/ember.CoreWorker/Exit"}
# Valid requests here take resources for an owner that never comes (a lease, a reserved bundle):
# a real client's bug, not a malformed request; only the bad-input cases go to them.
HOLDS_RESOURCES = {"/ember.Raylet/RequestWorkerLease", "/ember.Raylet/PrepareBundleResources",
                   "/ember.PlacementGroupInfoGcsService/CreatePlacementGroup",
                   "/ember.PlacementGroupInfoGcsService/CreatePlacementGroups",
                   "/ember.ObjectManager/Create"}
FILES = {"gcs": gcs_pb2, "gcs tasks": gcs_task_pb2, "raylet": raylet_pb2, "raylet logs": logs_pb2,
         "objmgr": objmgr_pb2, "core worker": core_worker_pb2}
BAD = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


@ember.remote
def square(x: int) -> int:
    return x * x


@pytest.fixture(scope="module")
def cluster():
    old = os.environ.get("EMBER_MAX_MESSAGE_BYTES")
    os.environ["EMBER_MAX_MESSAGE_BYTES"] = str(MAX_MESSAGE_BYTES)  # the services inherit it
    try:
        with probe_cluster() as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("EMBER_MAX_MESSAGE_BYTES", None)
        else:
            os.environ["EMBER_MAX_MESSAGE_BYTES"] = old


def _addresses(c) -> dict[str, str]:
    node = c.nodes[0].record
    return {"gcs": c.gcs_address, "gcs tasks": c.gcs_address, "raylet": node.raylet_address,
            "raylet logs": node.raylet_address, "objmgr": node.objmgr_address,
            "core worker": c.worker_address}


def _methods(mod) -> list[tuple[str, object, bool]]:
    """(path, request descriptor, response streams) of each method without a request stream."""
    out = []
    for service in mod.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            path = f"/{service.full_name}/{m.name}"
            if not m.client_streaming and path not in SKIP:
                out.append((path, m.input_type, m.server_streaming))
    return out


def _call(ch: grpc.Channel, path: str, data: bytes, streams: bool) -> tuple[grpc.StatusCode, str]:
    try:
        if streams:
            call = ch.unary_stream(path, response_deserializer=lambda b: b)(data, timeout=5)
            next(iter(call), None)
            call.cancel()
            return grpc.StatusCode.OK, ""
        ch.unary_unary(path, response_deserializer=lambda b: b)(data, timeout=15)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def test_fuzz_every_unary_rpc_then_the_cluster_still_works(cluster):
    rng = random.Random(SEED)
    deadline = time.monotonic() + DEADLINE_S
    failures: list[str] = []
    counts: dict[str, int] = {}
    calls = 0
    for service, address in _addresses(cluster).items():
        with rpc.sync_channel(address) as ch:
            for path, desc, streams in _methods(FILES[service]):
                cls = message_factory.GetMessageClass(desc)
                cases = [rng.randbytes(rng.randint(1, 64)) for _ in range(PER_METHOD)]
                cases += [fill(cls(), rng).SerializeToString() for _ in range(PER_METHOD)]
                if path not in HOLDS_RESOURCES:
                    cases += [fill(cls(), rng, mostly=True).SerializeToString() for _ in range(PER_METHOD)]
                for data in cases:
                    assert time.monotonic() < deadline, f"fuzzing took over {DEADLINE_S} s ({calls} calls)"
                    code, details = _call(ch, path, data, streams)
                    calls += 1
                    counts[code.name] = counts.get(code.name, 0) + 1
                    expected = expected_problem(desc, data)
                    if code in BAD or (code == grpc.StatusCode.DEADLINE_EXCEEDED and not streams):
                        failures.append(f"{path} {data!r}: {code.name} {details}")  # a crash or a hang
                    elif expected is not None and (code != grpc.StatusCode.INVALID_ARGUMENT
                                                   or expected.split(" (")[0] not in details):
                        failures.append(f"{path} {data!r}: expected INVALID_ARGUMENT {expected!r}, "
                                        f"got {code.name} {details!r}")
    print(f"{calls} calls: {counts}")
    assert calls >= 4 * 3 * PER_METHOD * 5
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"
    assert counts.get("INVALID_ARGUMENT", 0) > calls // 3 and counts.get("OK", 0) > calls // 10

    # The services still serve a real workload: tasks, a new actor, objects.
    assert ember.get([square.remote(i) for i in range(8)], timeout=120) == [i * i for i in range(8)]
    assert ember.get(Probe.remote().ping.remote(), timeout=120) == "pong"
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"
    blob = os.urandom(512 * 1024)
    assert ember.get(ember.put(blob), timeout=60) == blob


def test_an_oversized_request_is_resource_exhausted_and_the_gcs_keeps_serving(cluster):
    request = gcs_pb2.InternalKVPutRequest(namespace="fuzz", key=b"big", value=b"x" * (MAX_MESSAGE_BYTES + 1))
    with rpc.sync_channel(cluster.gcs_address) as ch:  # the client may send up to 1 GiB
        put = ch.unary_unary("/ember.InternalKVGcsService/InternalKVPut",
                             request_serializer=gcs_pb2.InternalKVPutRequest.SerializeToString,
                             response_deserializer=gcs_pb2.InternalKVPutReply.FromString)
        with pytest.raises(grpc.RpcError) as err:  # sent in chunks (a method that carries data)
            put(request, timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"over this method's limit of {MAX_MESSAGE_BYTES} bytes" in err.value.details()
        assert "EMBER_MAX_MESSAGE_BYTES" in err.value.details()
        delete = ch.unary_unary("/ember.InternalKVGcsService/InternalKVDel",
                                request_serializer=gcs_pb2.InternalKVDelRequest.SerializeToString)
        with pytest.raises(grpc.RpcError) as err:  # one message, refused by gRPC
            delete(gcs_pb2.InternalKVDelRequest(key=b"k" * (MAX_MESSAGE_BYTES + 1)), timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in err.value.details(), err.value.details()
        assert "EMBER_MAX_MESSAGE_BYTES" in str(rpc.status_to_exception(err.value))  # the kit's hint
        small = gcs_pb2.InternalKVPutRequest(namespace="fuzz", key=b"small", value=b"x" * 1024)
        assert put(small, timeout=30).added


def test_a_malformed_request_names_the_field(cluster):
    with rpc.sync_channel(cluster.nodes[0].record.raylet_address) as ch:
        ret = ch.unary_unary("/ember.Raylet/ReturnWorker",
                             request_serializer=raylet_pb2.ReturnWorkerRequest.SerializeToString)
        with pytest.raises(grpc.RpcError) as err:
            ret(raylet_pb2.ReturnWorkerRequest(lease_id=b"abc"), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "/ember.Raylet/ReturnWorker: lease_id must be 16 bytes, got 3"
        raw = ch.unary_unary("/ember.Raylet/ReturnWorker")
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\x0a\xff", timeout=30)  # field 1, length 255, nothing follows
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid ember.ReturnWorkerRequest message" in err.value.details()


def test_a_garbage_pickle_fails_that_task_only_and_the_worker_keeps_serving(cluster):
    """An authenticated client's well-formed spec with an unknown function or an argument that
    is not a pickle: the task fails (an application error in the reply), the worker lives on."""
    from ember_common import ids
    from ember_common.proto import common_pb2

    garbage = [common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"\x80\x05garbage"))]
    specs = [
        common_pb2.TaskSpec(task_id=ids.new_task_id(), name="garbage", args=garbage,
                            function=common_pb2.FunctionDescriptor(function_id="no-such-function"),
                            return_ids=[ids.object_id_for_return(ids.new_task_id(), 1)]),
        common_pb2.TaskSpec(task_id=ids.new_task_id(), actor_id=b"a" * 16, method_name="ping", args=garbage,
                            return_ids=[ids.object_id_for_return(ids.new_task_id(), 1)]),
    ]
    with rpc.sync_channel(cluster.worker_address) as ch:
        push = ch.unary_unary("/ember.CoreWorker/PushTask",
                              request_serializer=core_worker_pb2.PushTaskRequest.SerializeToString,
                              response_deserializer=core_worker_pb2.PushTaskReply.FromString)
        replies = [push(core_worker_pb2.PushTaskRequest(spec=spec), timeout=60) for spec in specs]
    assert all(r.is_application_error for r in replies), replies
    assert "UnpicklingError" in replies[1].error_message
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"



