"""The pure parts of the replicated GCS: the leader's lease clock, the gate in front of the
services, and a client's choice of replica (no sockets, no etcd)."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from ember_common.gcs_leader import LEADER_METADATA_KEY, Replicas, go_again, leader_hint, parse_addresses
from ember_gcs.gate import Gate
from ember_gcs.leader import LeaseClock


def test_lease_clock_holds_until_send_time_plus_ttl():
    clock = LeaseClock()
    assert not clock.holds(0.0)
    clock.renewed(sent_at=10.0, ttl_s=2)
    assert clock.holds(11.99) and not clock.holds(12.0)
    clock.renewed(sent_at=11.0, ttl_s=2)
    assert clock.holds(12.5) and not clock.holds(13.0)
    clock.renewed(sent_at=10.5, ttl_s=2)  # a late answer to an older renewal never shortens it
    assert clock.holds(12.9)
    clock.renewed(sent_at=12.0, ttl_s=0)  # etcd: the lease is gone
    assert not clock.holds(12.1)


def test_lease_clock_renews_at_a_third_of_the_ttl_or_sooner():
    clock = LeaseClock()
    clock.renewed(sent_at=0.0, ttl_s=3)
    assert clock.next_renewal(0.0, 3) == pytest.approx(1.0)
    assert clock.next_renewal(2.5, 3) == pytest.approx(0.25)  # half of what is left
    assert clock.next_renewal(4.0, 3) == 0.0


def test_parse_addresses():
    assert parse_addresses("a:1") == ["a:1"]
    assert parse_addresses(" a:1, b:2 ,a:1,") == ["a:1", "b:2"]
    assert parse_addresses("") == [""]


def test_replicas_follow_a_hint_and_rotate_on_silence():
    r = Replicas(["a:1", "b:2", "c:3"])
    assert r.current == "a:1"
    assert r.failed("a:1", None) is False and r.current == "b:2"  # silent: next, after backoff
    assert r.failed("b:2", "c:3") is True and r.current == "c:3"  # a follower names the leader
    assert r.failed("a:1", None) is True and r.current == "c:3"  # stale failure: already moved
    assert r.failed("c:3", "") is False and r.current == "a:1"  # no leader known yet
    assert r.failed("a:1", "d:4") is True and r.current == "d:4"  # a leader it was not told of
    assert r.addresses == ["a:1", "b:2", "c:3", "d:4"]
    assert r.failed("d:4", "d:4") is False  # a replica naming itself: no redirect
    single = Replicas(["a:1"])
    assert single.failed("a:1", None) is False and single.current == "a:1"


def test_replicas_do_not_follow_a_hint_to_a_replica_that_just_went_silent():
    now = [0.0]
    r = Replicas(["a:1", "b:2", "c:3"], clock=lambda: now[0])
    assert r.failed("a:1", None) is False and r.current == "b:2"  # the leader a is gone
    # b's lease on a has not ended yet: it still names a; the client tries c instead
    assert r.failed("b:2", "a:1") is False and r.current == "c:3"
    now[0] = 4.0  # past SILENT_S: a hint naming a is followed again (it may be back)
    assert r.failed("c:3", "a:1") is True and r.current == "a:1"
    assert r.failed("a:1", "") is False and r.failed("b:2", "a:1") is True  # "": it answered


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple | None = None

    async def abort(self, code, details, trailing_metadata=()):
        self.aborted = (code, details, tuple(trailing_metadata))
        raise RuntimeError("aborted")


def _run(handler, request=b"x"):
    ctx = _Context()

    async def call():
        if handler.response_streaming:
            return [x async for x in handler.unary_stream(request, ctx)]
        return await handler.unary_unary(request, ctx)
    try:
        return asyncio.run(call()), ctx
    except RuntimeError:
        return None, ctx


def test_gate_passes_calls_while_serving_and_refuses_with_the_leader_otherwise():
    async def unary(request, context):
        return b"ok:" + request

    async def stream(request, context):
        yield 1
        yield 2

    leading = [True]
    gate = Gate("me:1", serving=lambda: leading[0], leader=lambda: "other:2")
    u = gate.wrap(grpc.unary_unary_rpc_method_handler(unary))
    s = gate.wrap(grpc.unary_stream_rpc_method_handler(stream))
    starting = Gate("me:1")  # no --ha: closed only until its tables are loaded
    starting_u = starting.wrap(grpc.unary_unary_rpc_method_handler(unary))
    _, ctx = _run(starting_u)
    assert ctx.aborted[0] == grpc.StatusCode.UNAVAILABLE and "loading its tables" in ctx.aborted[1]
    assert ctx.aborted[2] == ((LEADER_METADATA_KEY, ""),)
    starting.open = True
    assert _run(starting_u)[0] == b"ok:x"
    gate.open = True
    assert _run(u)[0] == b"ok:x"
    assert _run(s)[0] == [1, 2]
    leading[0] = False
    for handler in (u, s):
        result, ctx = _run(handler)
        assert result is None
        code, details, md = ctx.aborted
        assert code == grpc.StatusCode.UNAVAILABLE and "other:2" in details
        assert md == ((LEADER_METADATA_KEY, "other:2"),)
    gate.leader = lambda: "me:1"  # deposed, the key still naming it: point nowhere
    _, ctx = _run(u)
    assert ctx.aborted[2] == ((LEADER_METADATA_KEY, ""),) and "no leader" in ctx.aborted[1]


def test_leader_hint_reads_the_trailing_metadata():
    class Err:
        def __init__(self, md):
            self.md = md

        def trailing_metadata(self):
            return self.md

    assert leader_hint(Err(((LEADER_METADATA_KEY, "x:1"),))) == "x:1"
    assert leader_hint(Err(((LEADER_METADATA_KEY, b""),))) == ""
    assert leader_hint(Err((("other", "y"),))) is None
    assert leader_hint(Err(None)) is None
    assert leader_hint(object()) is None


class _Failed:
    def __init__(self, code, hint=None):
        self._code, self._hint = code, hint

    def code(self):
        return self._code

    def trailing_metadata(self):
        return () if self._hint is None else ((LEADER_METADATA_KEY, self._hint),)


def test_go_again_redirects_any_call_but_moves_on_from_silence_only_when_idempotent():
    unavailable = grpc.StatusCode.UNAVAILABLE
    r = Replicas(["a:1", "b:2", "c:3"])
    # A follower's redirect: even a non-idempotent call goes (the follower did nothing).
    assert go_again(r, "a:1", _Failed(unavailable, "c:3"), False, {"a:1"}) and r.current == "c:3"
    # c is silent: an idempotent call tries a (not tried yet in this attempt) ...
    assert go_again(r, "c:3", _Failed(unavailable), True, {"c:3"}) and r.current == "a:1"
    # ... a non-idempotent one stops (c may have run it before it went silent).
    r.current = "c:3"
    assert not go_again(r, "c:3", _Failed(unavailable), False, {"c:3"})
    # every replica tried in this attempt: back off
    r.current = "c:3"
    assert not go_again(r, "c:3", _Failed(unavailable), True, {"a:1", "b:2", "c:3"})
    # any other status is the caller's answer
    r.current = "a:1"
    assert not go_again(r, "a:1", _Failed(grpc.StatusCode.NOT_FOUND), True, set()) and r.current == "a:1"
    # out of time: the next try (after the caller's backoff) goes to the next replica
    assert not go_again(r, "a:1", _Failed(grpc.StatusCode.DEADLINE_EXCEEDED), True, set())
    assert r.current == "b:2"
    # cancelled by a replica that stopped with the call in hand (a deposed leader): an idempotent
    # call goes on to the next replica at once, a non-idempotent one is the caller's answer
    cancelled = grpc.StatusCode.CANCELLED
    assert go_again(r, "b:2", _Failed(cancelled), True, {"b:2"}) and r.current == "c:3"
    assert not go_again(r, "c:3", _Failed(cancelled), False, {"c:3"})
    single = Replicas(["a:1"])  # one GCS: nowhere else to go
    assert not go_again(single, "a:1", _Failed(cancelled), True, {"a:1"})
