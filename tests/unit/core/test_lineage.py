"""The lineage policy (lineage.py) without processes: what an owner keeps to rebuild lost task
returns, when it lets go, the byte bound, the retry budget, and the errors that name why an
object cannot be rebuilt."""
from __future__ import annotations

import pickle

import pytest

from ember import exceptions as exc
from ember._private.objects.object_ref import OwnerAddress
from ember._private.owner.lineage import InFlight, Lineage, Resubmit, is_put, task_of
from ember._private.owner.reference_table import ReferenceTable
from ember_common import ids
from ember_common.proto import common_pb2

ME = "me"


def spec(name: str = "f", max_retries: int = 3, args: list[bytes] = (), owner: str = ME,
         num_returns: int = 1, payload: int = 0) -> common_pb2.TaskSpec:
    tid = ids.new_task_id()
    s = common_pb2.TaskSpec(task_id=tid, name=name, max_retries=max_retries)
    s.return_ids.extend(ids.object_id_for_return(tid, i + 1) for i in range(num_returns))
    for a in args:
        s.args.append(common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(
            object_id=a, owner=common_pb2.Address(worker_id=owner))))
    if payload:
        s.args.append(common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"x" * payload)))
    return s


def everything(_: bytes) -> bool:
    return True


def test_a_lost_return_is_planned_for_a_rerun_with_a_copy_of_its_spec_and_one_retry_less():
    lin = Lineage(ME)
    s = spec(max_retries=2)
    assert lin.record(s, ("key",), None, 2, everything)
    plan = lin.plan(s.return_ids[0])
    assert isinstance(plan, Resubmit)
    assert plan.task_id == s.task_id and plan.key == ("key",) and plan.retries_left == 1
    assert plan.spec is not s and plan.spec.attempt == 1 and plan.spec.name == "f"
    # A second loss while the run is going on joins it instead of starting another.
    assert lin.plan(s.return_ids[0]) == InFlight(s.task_id)
    assert lin.stats()["reconstructions"] == 1
    lin.finished(s.task_id)
    assert isinstance(lin.plan(s.return_ids[0]), Resubmit)  # the last retry
    lin.finished(s.task_id)
    with pytest.raises(exc.ObjectReconstructionFailedMaxAttemptsExceededError,
                       match=r"f\(\).*no retries left \(max_retries=2\)"):
        lin.plan(s.return_ids[0])


def test_the_rerun_records_its_new_spec_and_what_is_left_of_the_shared_budget():
    lin = Lineage(ME)
    s = spec(max_retries=3)
    lin.record(s, (), None, 1, everything)  # two retries already spent on worker crashes
    plan = lin.plan(s.return_ids[0])
    assert isinstance(plan, Resubmit) and plan.retries_left == 0
    assert lin.in_flight(s.task_id)
    assert lin.record(plan.spec, (), None, 0, everything)  # the rerun finished
    assert not lin.in_flight(s.task_id)
    with pytest.raises(exc.ObjectReconstructionFailedMaxAttemptsExceededError):
        lin.plan(s.return_ids[0])


def test_infinite_retries_never_run_out():
    lin = Lineage(ME)
    s = spec(max_retries=-1)
    lin.record(s, (), None, -1, everything)
    for _ in range(20):
        assert isinstance(lin.plan(s.return_ids[0]), Resubmit)
        lin.finished(s.task_id)


def test_max_retries_zero_keeps_only_the_reason():
    lin = Lineage(ME)
    s = spec(max_retries=0, payload=1000)
    assert lin.record(s, (), None, 0, everything)
    assert lin.bytes == 0  # no spec kept
    with pytest.raises(exc.ObjectReconstructionFailedMaxAttemptsExceededError, match="max_retries=0"):
        lin.plan(s.return_ids[0])


def test_put_objects_and_unknown_returns_raise_errors_naming_the_cause():
    lin = Lineage(ME)
    put_id = ids.new_put_id()
    assert is_put(put_id)
    with pytest.raises(exc.ObjectLostError, match="created by put"):
        lin.plan(put_id)
    with pytest.raises(exc.ObjectReconstructionFailedError, match="keeps no lineage"):
        lin.plan(spec().return_ids[0])


def test_lineage_goes_with_the_last_reference_to_its_returns():
    lin = Lineage(ME)
    s = spec(num_returns=2)
    lin.record(s, (), None, 3, everything)
    assert s.task_id in lin
    lin.release(s.return_ids[0])
    assert s.task_id in lin  # the second return still needs it
    lin.release(s.return_ids[1])
    assert s.task_id not in lin and lin.bytes == 0


def test_nothing_is_kept_when_no_return_is_referenced_any_more():
    lin = Lineage(ME)
    assert not lin.record(spec(), (), None, 3, lambda _: False)
    assert len(lin) == 0


def test_an_argument_s_lineage_lives_while_a_task_that_took_it_is_kept():
    lin = Lineage(ME)
    x = spec("produce")
    lin.record(x, (), None, 3, everything)
    y = spec("consume", args=[x.return_ids[0]])
    lin.record(y, (), None, 3, everything)
    lin.release(x.return_ids[0])  # the user dropped x; y may still need it rebuilt
    assert x.task_id in lin
    assert isinstance(lin.plan(x.return_ids[0]), Resubmit)
    lin.finished(x.task_id)
    lin.release(y.return_ids[0])  # y goes, and x with it (nothing needs it any more)
    assert len(lin) == 0 and lin.bytes == 0


def test_borrowed_arguments_are_not_dependencies():
    lin = Lineage(ME)
    x = spec("produce")
    lin.record(x, (), None, 3, everything)
    y = spec("consume", args=[x.return_ids[0]], owner="someone-else")
    lin.record(y, (), None, 3, everything)
    lin.release(x.return_ids[0])
    assert x.task_id not in lin


def test_a_chain_is_dropped_in_one_release_and_the_table_stays_bounded():
    lin = Lineage(ME)
    prev = spec("head")
    lin.record(prev, (), None, 3, everything)
    first = prev
    for _ in range(200):
        nxt = spec("step", args=[prev.return_ids[0]])
        lin.record(nxt, (), None, 3, everything)
        lin.release(prev.return_ids[0])
        prev = nxt
    assert len(lin) == 201 and first.task_id in lin
    lin.release(prev.return_ids[0])
    assert len(lin) == 0 and lin.bytes == 0


def test_specs_beyond_the_byte_bound_are_evicted_oldest_first():
    one = spec(payload=1000).ByteSize()
    lin = Lineage(ME, max_bytes=3 * one + 10)
    specs = [spec(payload=1000) for _ in range(5)]
    for s in specs:
        lin.record(s, (), None, 3, everything)
    assert lin.bytes <= 3 * one + 10 and lin.stats()["evictions"] == 2
    for s in specs[:2]:
        with pytest.raises(exc.ObjectReconstructionFailedLineageEvictedError,
                           match="EMBER_MAX_LINEAGE_BYTES"):
            lin.plan(s.return_ids[0])
    assert isinstance(lin.plan(specs[4].return_ids[0]), Resubmit)
    for s in specs:  # evicted entries still go with their last reference
        lin.release(s.return_ids[0])
    lin.finished(specs[4].task_id)
    assert len(lin) == 0 and lin.bytes == 0


def test_a_negative_bound_is_refused_naming_it():
    with pytest.raises(ValueError, match="max_lineage_bytes"):
        Lineage(ME, max_bytes=-1)


def test_an_entry_in_flight_is_kept_until_its_run_ends():
    lin = Lineage(ME)
    s = spec()
    lin.record(s, (), None, 3, everything)
    assert isinstance(lin.plan(s.return_ids[0]), Resubmit)
    lin.release(s.return_ids[0])
    assert s.task_id in lin
    lin.finished(s.task_id)
    assert s.task_id not in lin


def test_the_reference_table_drops_lineage_at_an_owned_object_s_last_reference():
    released: list[bytes] = []
    table = ReferenceTable(ME, lambda oid, owned: released.append(oid), lambda: None)
    s = spec()
    rid = s.return_ids[0]
    table.add_owned(rid)
    table.add_local_ref(rid, OwnerAddress("127.0.0.1", 1, ME, "n"))
    assert table.lineage.record(s, (), None, 3, table.is_referenced)
    table.remove_local_ref(rid)
    assert released == [rid] and s.task_id not in table.lineage
    assert task_of(rid) == s.task_id


def test_reconstruction_errors_survive_pickling_with_their_message():
    e = exc.ObjectReconstructionFailedLineageEvictedError("ab", "Object ab is lost: evicted")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and back.object_id == "ab" and str(back) == str(e)
    assert isinstance(back, exc.ObjectLostError)
