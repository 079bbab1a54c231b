"""The actor call queue (actor_queue.py): order, window, resends and failure, without I/O."""
from __future__ import annotations

from ember import exceptions as exc
from ember._private.owner.actor_queue import ActorCallQueue, PushCall, WaitForActor
from ember._private.owner.task_queue import Complete, Fail, TaskEntry
from ember_common.proto import common_pb2, core_worker_pb2

ACTOR = b"\x01" * 16
OK = core_worker_pb2.PushTaskReply()


def call(i: int, retries: int | None = None) -> TaskEntry:
    spec = common_pb2.TaskSpec(task_id=bytes([i]) * 16, name=f"m{i}", actor_id=ACTOR)
    return TaskEntry(spec, [], retries)


def submit(q: ActorCallQueue, n: int, retries: int | None = None) -> list[TaskEntry]:
    entries = [call(i, retries) for i in range(n)]
    for e in entries:
        q.assign_seq(e)
    return entries


def pushes(out: list) -> list[int]:
    return [i.entry.spec.seq_no for i in out if isinstance(i, PushCall)]


def test_calls_wait_for_the_address_then_go_in_sequence_order():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    e = submit(q, 3)
    assert [x.spec.seq_no for x in e] == [0, 1, 2]
    assert q.ready(e[0]) == [WaitForActor()]
    assert q.ready(e[2]) == []  # already resolving
    out = q.actor_alive(1, "10.0.0.1:7")
    assert pushes(out) == [0]  # seq 1 is not ready: 2 waits behind it
    assert pushes(q.ready(e[1])) == [1, 2]
    assert out[0].address == "10.0.0.1:7" and out[0].incarnation == 1
    assert e[2].spec.lowest_unacked == 0
    out = q.replied(e[0], OK)
    assert out == [Complete(e[0], OK)] and q.low == 1


def test_the_in_flight_window_is_bounded():
    q = ActorCallQueue(ACTOR, max_task_retries=0, max_inflight=2)
    q.actor_alive(1, "a:1")
    e = submit(q, 4)
    assert pushes(q.ready(e[0]) + q.ready(e[1]) + q.ready(e[2]) + q.ready(e[3])) == [0, 1]
    assert pushes(q.replied(e[0], OK)) == [2]
    assert pushes(q.replied(e[1], OK)) == [3]


def test_a_delivered_call_costs_a_retry_and_an_undelivered_one_does_not():
    q = ActorCallQueue(ACTOR, max_task_retries=1)
    q.actor_alive(1, "a:1")
    e = submit(q, 2)
    q.ready(e[0])
    q.ready(e[1])
    assert q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True) == [WaitForActor()]
    assert q.address is None and e[0].retries_left == 0
    assert q.push_failed(e[1], 1, "UNAVAILABLE", delivered=False) == []
    assert e[1].retries_left == 1
    assert q.actor_alive(0, "old:1") is None  # an older incarnation: keep waiting
    q.resolved()
    assert pushes(q.actor_alive(2, "b:2")) == [0, 1]
    q.resolved()
    # No retry left: its seq is finished at once (later calls do not wait for it), its error
    # waits for the GCS's word on the actor.
    assert q.push_failed(e[0], 2, "UNAVAILABLE", delivered=True) == [WaitForActor()]
    assert q.needs_actor() and q.low == 1
    out = q.actor_alive(3, "c:3")
    assert isinstance(out[0], Fail) and out[0].entry is e[0]
    # Alive again (restarted): the call may or may not have run: unavailable, not dead (Ray).
    assert isinstance(out[0].error, exc.ActorUnavailableError)
    assert not isinstance(out[0].error, exc.ActorDiedError)
    assert "max_task_retries=1" in str(out[0].error)


def test_a_call_in_flight_when_the_actor_dies_fails_with_the_death_cause():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    q.actor_alive(1, "a:1")
    e = submit(q, 3)
    assert pushes(q.ready(e[0]) + q.ready(e[1])) == [0, 1]
    # The worker was killed under both calls: they are doomed until the GCS answers.
    assert q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True) == [WaitForActor()]
    assert q.push_failed(e[1], 1, "UNAVAILABLE", delivered=True) == []
    out = q.actor_dead("killed by ember.kill()")
    assert [f.entry for f in out] == [e[0], e[1]]
    assert all(isinstance(f.error, exc.ActorDiedError) and "killed by ember.kill()" in str(f.error)
               for f in out)
    assert not q.doomed and not q.needs_actor()


def test_a_kill_by_this_process_fails_in_flight_calls_when_their_push_breaks():
    q = ActorCallQueue(ACTOR, max_task_retries=-1)
    q.actor_alive(1, "a:1")
    e = submit(q, 2)
    assert pushes(q.ready(e[0])) == [0]
    assert q.actor_dead("killed by ember.kill()") == []  # nothing waiting: in flight only
    out = q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True)  # retries would be forever
    assert isinstance(out[0], Fail) and isinstance(out[0].error, exc.ActorDiedError)
    assert "killed by ember.kill()" in str(out[0].error)
    out = q.ready(e[1])
    assert isinstance(out[0], Fail) and "killed by ember.kill()" in str(out[0].error)
    q.actor_dead("a later report")  # the first cause stays
    assert q.dead_cause == "killed by ember.kill()"


def test_a_failure_from_an_older_incarnation_keeps_the_new_address():
    q = ActorCallQueue(ACTOR, max_task_retries=-1)
    q.actor_alive(1, "a:1")
    e = submit(q, 1)
    q.ready(e[0])
    q.actor_alive(2, "b:2")
    q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True)
    assert q.address == "b:2" and e[0].retries_left == -2  # -1: forever


def test_a_dead_actor_fails_waiting_and_later_calls():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    e = submit(q, 3)
    q.ready(e[0])
    q.ready(e[1])
    out = q.actor_dead("killed by ember.kill")
    assert [f.entry for f in out] == [e[0], e[1]]
    assert all(isinstance(f.error, exc.ActorDiedError) and "killed by ember.kill" in str(f.error)
               for f in out)
    out = q.ready(e[2])
    assert isinstance(out[0], Fail) and not q.needs_actor() and q.low == 3


def test_a_cancelled_call_not_yet_sent_fails_and_later_calls_do_not_wait_for_it():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    q.actor_alive(1, "a:1")
    e = submit(q, 4)
    assert pushes(q.ready(e[0])) == [0]
    # e[1] is still resolving its arguments; e[2] is ready but waits behind it.
    assert q.ready(e[2]) == []
    out, address = q.cancel(e[1])
    assert address is None
    assert isinstance(out[0], Fail) and out[0].entry is e[1]
    assert isinstance(out[0].error, exc.TaskCancelledError)
    assert pushes(out) == [2]  # its turn is skipped
    assert q.ready(e[1]) == []  # its arguments arrive late: nothing happens
    out, address = q.cancel(e[3])  # waiting for its arguments too
    assert isinstance(out[0].error, exc.TaskCancelledError) and address is None
    assert pushes(q.replied(e[0], OK) + q.replied(e[2], OK)) == [] and q.low == 4


def test_a_cancelled_call_in_flight_is_the_workers_to_drop_and_is_never_resent():
    q = ActorCallQueue(ACTOR, max_task_retries=-1)
    q.actor_alive(1, "a:1")
    e = submit(q, 2)
    assert pushes(q.ready(e[0])) == [0]
    assert q.cancel(e[0]) == ([], "a:1")
    out = q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True)
    assert isinstance(out[0], Fail) and isinstance(out[0].error, exc.TaskCancelledError)
    assert q.cancel(e[0]) == ([], None)  # finished: nothing to do
    # Calls waiting for the actor are dropped at once.
    assert q.ready(e[1]) == [WaitForActor()]
    out, address = q.cancel(e[1])
    assert isinstance(out[0].error, exc.TaskCancelledError) and address is None
    assert not q.needs_actor()


def test_an_application_error_with_retry_exceptions_is_sent_again_as_a_new_call():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    q.actor_alive(1, "a:1")
    e = submit(q, 2, retries=1)
    e[0].spec.retry_exceptions = True
    failed = core_worker_pb2.PushTaskReply(is_application_error=True)
    assert pushes(q.ready(e[0]) + q.ready(e[1])) == [0, 1]
    out = q.replied(e[0], failed)
    assert pushes(out) == [2] and e[0].spec.attempt == 1 and e[0].retries_left == 0
    assert q.replied(e[1], failed) == [Complete(e[1], failed)]  # no retry_exceptions
    assert q.replied(e[0], failed) == [Complete(e[0], failed)]  # no retry left
    assert q.low == 3


def test_a_restarting_actor_fails_doomed_calls_and_unretried_waiting_ones_as_unavailable():
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    q.actor_alive(1, "a:1")
    e = submit(q, 3)
    assert pushes(q.ready(e[0])) == [0]
    assert q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True) == [WaitForActor()]
    assert q.ready(e[1]) == [] and q.grace_s() == 1.0  # doomed: a short wait for its fate
    out = q.actor_restarting()
    assert [f.entry for f in out] == [e[0], e[1]]
    assert all(isinstance(f.error, exc.ActorUnavailableError) for f in out)
    assert "is unavailable" in str(out[0].error) and "may or may not have been executed" in str(out[0].error)
    assert q.restarting and not q.needs_actor()
    q.resolved()  # the submitter's wait ends: nothing needs the actor
    assert q.ready(e[2]) == [WaitForActor()]  # a later call: the GCS is asked first
    assert pushes(q.actor_alive(2, "b:2")) == [2] and not q.restarting


def test_a_restarting_actor_goes_by_each_calls_own_retries():
    """@method(max_task_retries=N) overrides the actor's setting: with the actor at 0, a call
    given retries waits for the restart (and the long grace), a call without them fails."""
    q = ActorCallQueue(ACTOR, max_task_retries=0)
    q.actor_alive(1, "a:1")
    kept, dropped = call(0, retries=1), call(1)
    for e in (kept, dropped):
        q.assign_seq(e)
    q.ready(kept)
    q.push_failed(kept, 1, "UNAVAILABLE", delivered=True)  # one retry used: waiting again
    assert q.grace_s() == 5.0
    q.ready(dropped)
    assert q.grace_s() == 1.0  # a waiting call has no retry: a short wait for its fate
    out = q.actor_restarting()
    assert [f.entry for f in out] == [dropped] and isinstance(out[0].error, exc.ActorUnavailableError)
    assert pushes(q.actor_alive(2, "b:2")) == [0]


def test_a_restarting_actor_keeps_calls_that_have_retries():
    q = ActorCallQueue(ACTOR, max_task_retries=-1)
    q.actor_alive(1, "a:1")
    e = submit(q, 2)
    q.ready(e[0])
    q.push_failed(e[0], 1, "UNAVAILABLE", delivered=True)  # retried: waiting, not doomed
    q.ready(e[1])
    assert q.actor_restarting() == [] and q.grace_s() == 5.0
    assert pushes(q.actor_alive(2, "b:2")) == [0, 1]
