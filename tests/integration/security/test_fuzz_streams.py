"""Fuzzing the request streams (WriteObject, TaskStream) over real sockets, authenticated with
the cluster's token, and the request checks of the server streams (Subscribe, ReadObject,
ReadRange; test_fuzz_rpcs.py fuzzes those with the unary RPCs).

WriteObject streams of random bytes and random chunks end INVALID_ARGUMENT naming the first bad
message and its field (a chunk outside its object too); TaskStream batches that mix malformed
specs with well-formed ones get one reply per task, each malformed spec refused naming its
field (the text PushTask's rules give) while the others run; a stream that carries bytes that
are not a TaskBatch ends INVALID_ARGUMENT after the tasks it already carried were answered.
Then the object manager still stores objects and the worker still serves its actor. Bounded:
a few dozen streams per test, each call 15-30 s at most.
"""
from __future__ import annotations

import os
import random
import time

import grpc
import pytest
from core_probe import probe_cluster
from fuzzing import expected_problem, fill

import ember
from ember_common import rpc
from ember_common.proto import core_worker_pb2, gcs_pb2, objmgr_pb2
from ember_common.validate_rules import task_spec_problem

SEED = 20261202
PER_METHOD = 10
DEADLINE_S = 120
BAD = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


@pytest.fixture(scope="module")
def cluster():
    with probe_cluster() as c:
        yield c


def test_write_object_refuses_chunks_outside_the_object(cluster):
    """A chunk past the object's end (or before it) would overwrite other objects in the shared
    arena: the call fails INVALID_ARGUMENT and the unsealed object is dropped."""
    from ember_common import ids

    oid = ids.new_put_id()
    with rpc.sync_channel(cluster.nodes[0].record.objmgr_address) as ch:
        write = ch.stream_unary("/ember.ObjectManager/WriteObject",
                                request_serializer=objmgr_pb2.ObjectChunk.SerializeToString,
                                response_deserializer=objmgr_pb2.WriteObjectReply.FromString)
        for offset, text in ((8, "does not fit object"), (-8, "message 1: offset must be >= 0, got -8")):
            chunks = [objmgr_pb2.ObjectChunk(object_id=oid, total_size=16, offset=0, data=b"a" * 16),
                      objmgr_pb2.ObjectChunk(total_size=16, offset=offset, data=b"b" * 16)]
            with pytest.raises(grpc.RpcError) as err:
                write(iter(chunks), timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert text in err.value.details(), err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            write(iter([objmgr_pb2.ObjectChunk(object_id=b"short", total_size=1, data=b"x")]), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "20 bytes" in err.value.details()
        stats = ch.unary_unary("/ember.ObjectManager/ListObjects",
                               request_serializer=objmgr_pb2.ListObjectsRequest.SerializeToString,
                               response_deserializer=objmgr_pb2.ListObjectsReply.FromString)
        assert oid not in [o.object_id for o in stats(objmgr_pb2.ListObjectsRequest(), timeout=30).objects]
        write(iter([objmgr_pb2.ObjectChunk(object_id=oid, total_size=4, offset=0, data=b"good")]), timeout=30)
        assert oid in [o.object_id for o in stats(objmgr_pb2.ListObjectsRequest(), timeout=30).objects]


def _first_bad(desc, messages: list[bytes]) -> tuple[int, str] | None:
    """(index, problem) of the first message of a stream the kit's check must refuse."""
    for i, data in enumerate(messages):
        problem = expected_problem(desc, data)
        if problem is not None:
            return i, problem
    return None


def test_fuzz_write_object_streams(cluster):
    """Streams of 1-4 messages, each random bytes or a random chunk: INVALID_ARGUMENT naming
    the first bad message and its field (or the servicer's own refusal of a chunk that does not
    fit, or OK when it stopped reading before the bad message: an object already there); never
    a crash or a hang. The object manager then still stores and serves objects."""
    rng = random.Random(SEED + 1)
    desc = objmgr_pb2.ObjectChunk.DESCRIPTOR
    failures: list[str] = []
    counts: dict[str, int] = {}
    deadline = time.monotonic() + DEADLINE_S
    with rpc.sync_channel(cluster.nodes[0].record.objmgr_address) as ch:
        write = ch.stream_unary("/ember.ObjectManager/WriteObject", response_deserializer=lambda b: b)
        for case in range(6 * PER_METHOD):
            assert time.monotonic() < deadline, f"WriteObject fuzz took over {DEADLINE_S} s"
            messages = [rng.randbytes(rng.randint(1, 48)) if rng.random() < 0.3 else
                        fill(objmgr_pb2.ObjectChunk(), rng, mostly=case % 2 == 0).SerializeToString()
                        for _ in range(rng.randint(1, 4))]
            try:
                write(iter(messages), timeout=15)
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
            counts[code.name] = counts.get(code.name, 0) + 1
            bad = _first_bad(desc, messages)
            where = f"WriteObject {messages!r}: {code.name} {details!r}"
            if code in BAD or code == grpc.StatusCode.DEADLINE_EXCEEDED:
                failures.append(where)
            elif bad is not None and bad[0] == 0 and (code != grpc.StatusCode.INVALID_ARGUMENT or
                                                      f"message 0: {bad[1].split(' (')[0]}" not in details):
                failures.append(f"{where}; expected message 0: {bad[1]!r}")
            elif bad is not None and code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK):
                failures.append(f"{where}; expected INVALID_ARGUMENT for message {bad[0]}")
            elif bad is not None and ": message " in details and \
                    f"message {bad[0]}: {bad[1].split(' (')[0]}" not in details:
                failures.append(f"{where}; expected message {bad[0]}: {bad[1]!r}")
    print(f"WriteObject streams: {counts}")
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"
    assert counts.get("INVALID_ARGUMENT", 0) >= PER_METHOD
    blob = os.urandom(256 * 1024)
    assert ember.get(ember.put(blob), timeout=60) == blob


def _task_stream(ch: grpc.Channel, messages: list[bytes]) -> tuple[list, grpc.StatusCode, str]:
    """Sends messages on one TaskStream; (replies, final code, details)."""
    call = ch.stream_stream("/ember.CoreWorker/TaskStream",
                            response_deserializer=core_worker_pb2.TaskReplyBatch.FromString)
    replies: list = []
    try:
        for batch in call(iter(messages), timeout=30):
            replies.extend(batch.replies)
        return replies, grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return replies, e.code(), e.details() or ""


def _harmless_spec() -> object:
    """A well-formed task the worker runs and fails (its function does not exist)."""
    from ember_common import ids
    from ember_common.proto import common_pb2

    task_id = ids.new_task_id()
    return common_pb2.TaskSpec(task_id=task_id, name="harmless",
                               function=common_pb2.FunctionDescriptor(function_id="no-such-function"),
                               return_ids=[ids.object_id_for_return(task_id, 1)])


def test_fuzz_task_stream_a_bad_spec_fails_its_task_only(cluster):
    """Batches that mix random malformed specs with well-formed ones: each task gets one reply;
    a malformed spec's reply is an error naming its field (the same text PushTask's rules give),
    its returns raise it; the well-formed ones ran. The stream itself ends OK."""
    from ember._private.objects.serialization import deserialize_proto
    from ember.exceptions import RaySystemError
    from ember_common.proto import common_pb2

    rng = random.Random(SEED + 2)
    with rpc.sync_channel(cluster.worker_address) as ch:
        for _ in range(PER_METHOD):
            specs, refused = [], {}
            for _ in range(rng.randint(1, 4)):
                spec = fill(common_pb2.TaskSpec(), rng)
                problem = task_spec_problem(spec)
                if problem is not None:  # a random spec that passes could run anything: not sent
                    specs.append(spec)
                    refused.setdefault(spec.task_id, []).append(problem)
                specs.append(_harmless_spec())
            rng.shuffle(specs)
            batches = [core_worker_pb2.TaskBatch(specs=specs[:2]), core_worker_pb2.TaskBatch(specs=specs[2:])]
            replies, code, details = _task_stream(ch, [b.SerializeToString() for b in batches])
            assert code == grpc.StatusCode.OK, (code, details)
            assert len(replies) == len(specs), (len(replies), len(specs))
            for r in replies:
                texts = refused.get(r.task_id)
                if texts and r.reply.error_message.startswith("/ember.CoreWorker/TaskStream: "):
                    text = r.reply.error_message.removeprefix("/ember.CoreWorker/TaskStream: ")
                    assert text in texts, (text, texts)
                    texts.remove(text)
                    assert r.reply.is_application_error and r.reply.start_time_ns == 0  # not run
                    for ret in r.reply.returns:
                        err = deserialize_proto(ret.value)
                        assert isinstance(err, RaySystemError), err
                        assert text in str(err)
                else:  # a well-formed task: it ran (and failed: its function is unknown)
                    assert r.reply.is_application_error and r.reply.start_time_ns > 0, r
            assert not any(refused.values()), refused
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


def test_task_stream_garbage_ends_the_stream_after_the_tasks_it_carried(cluster):
    """Bytes that are not a TaskBatch: the tasks of the batch before were answered, then the
    stream ends INVALID_ARGUMENT naming the message; the worker keeps serving."""
    rng = random.Random(SEED + 3)
    with rpc.sync_channel(cluster.worker_address) as ch:
        for _ in range(PER_METHOD):
            garbage = rng.randbytes(rng.randint(1, 48))
            expected = expected_problem(core_worker_pb2.TaskBatch.DESCRIPTOR, garbage)
            if expected is None:
                continue  # these bytes happen to parse as a TaskBatch
            specs = [_harmless_spec(), _harmless_spec()]
            good = core_worker_pb2.TaskBatch(specs=specs).SerializeToString()
            replies, code, details = _task_stream(ch, [good, garbage])
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
            assert details.startswith("/ember.CoreWorker/TaskStream: message 1: the request is not a valid "
                                      "ember.TaskBatch message"), details
            assert sorted(r.task_id for r in replies) == sorted(s.task_id for s in specs)
        one = core_worker_pb2.PushTaskRequest(spec=_harmless_spec()).SerializeToString()
        replies, code, details = _task_stream(ch, [one])  # not a TaskBatch: field 1 is not a spec
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (code, details)
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


def test_server_streams_check_their_request(cluster):
    """Subscribe, ReadObject and ReadRange answer a bad request INVALID_ARGUMENT naming the field."""
    objmgr = cluster.nodes[0].record.objmgr_address
    cases = [
        (cluster.gcs_address, "/ember.InternalPubSubGcsService/Subscribe",
         gcs_pb2.SubscribeRequest(channels=["has space"]), "channels[0] must be 1 to 128"),
        (objmgr, "/ember.ObjectManager/ReadObject", objmgr_pb2.ReadObjectRequest(object_id=b"short"),
         "object_id must be 20 bytes, got 5"),
        (objmgr, "/ember.ObjectTransfer/ReadRange",
         objmgr_pb2.ReadRangeRequest(object_id=b"o" * 20, offset=-1), "offset must be >= 0, got -1"),
    ]
    for address, path, request, text in cases:
        with rpc.sync_channel(address) as ch:
            call = ch.unary_stream(path, request_serializer=type(request).SerializeToString)
            with pytest.raises(grpc.RpcError) as err:
                next(iter(call(request, timeout=30)))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, err.value)
            assert err.value.details().startswith(f"{path}: {text}"), err.value.details()
