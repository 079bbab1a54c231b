"""References bookkeeping (references.py) without processes: what a borrower still has to tell
each owner, and when an owner may free an object. The core is a small stand-in holding the
state References reads (its counts, owned set, lock) and recording what it is asked to do."""
from __future__ import annotations

import threading

from ember._private.references import References
from ember_common.proto import gcs_pb2

OWNER = ("127.0.0.1", 5000, "owner-worker", "node-1")


class Core:
    def __init__(self) -> None:
        self.worker_id = "me"
        self._ref_lock = threading.Lock()
        self._refcounts: dict[bytes, int] = {}
        self._owned: set[bytes] = set()
        self._escaped: set[bytes] = set()
        self._contained: dict[bytes, list] = {}
        self._shutdown = False
        self.posted: list = []
        self.released: list[bytes] = []

    def post(self, fn, *args) -> None:
        self.posted.append((fn, args))

    def _release(self, oid: bytes, owned: bool) -> None:
        self.released.append(oid)


def test_a_borrow_registers_once_and_a_quick_drop_costs_nothing():
    core = Core()
    refs = References(core)
    with core._ref_lock:
        refs.first_ref(b"a", OWNER)
        refs.first_ref(b"a", OWNER)  # already registered (or queued): nothing more
    assert refs.to_add == {b"a": OWNER} and refs.borrowed == {b"a": OWNER}
    assert len(core.posted) == 1  # one flush scheduled
    with core._ref_lock:
        refs.last_ref(b"a")  # dropped before the owner heard of it: no RPC either way
    assert refs.to_add == {} and refs.to_remove == {} and refs.borrowed == {}
    assert not refs.unacked()


def test_a_removal_is_cancelled_when_the_ref_comes_back_before_it_is_sent():
    core = Core()
    refs = References(core)
    refs.borrowed[b"a"] = OWNER  # registered earlier
    with core._ref_lock:
        refs.last_ref(b"a")
    assert b"a" in refs.to_remove and b"a" not in refs.borrowed
    with core._ref_lock:
        refs.first_ref(b"a", OWNER)
    assert refs.to_remove == {} and refs.to_add == {} and refs.borrowed == {b"a": OWNER}


def test_an_owned_object_lives_while_any_borrower_remains():
    core = Core()
    refs = References(core)
    core._owned.update({b"x", b"y"})
    assert refs.add_borrowers([b"x", b"y", b"gone"], "w1") == [b"gone"]
    refs.add_borrowers([b"x"], "w2")
    refs.add_borrowers([b"x"], "w2")  # idempotent
    assert refs.borrowers[b"x"] == {"w1", "w2"}
    refs.remove_borrowers([b"x"], "w1")
    assert core.released == [] and b"x" in core._owned
    core._refcounts[b"y"] = 1  # the owner itself still holds y
    refs.remove_borrowers([b"x", b"y"], "w2")  # w2 never borrowed y: ignored
    assert core.released == [b"x"] and b"x" not in core._owned
    refs.remove_borrowers([b"y"], "w1")
    assert core.released == [b"x"] and b"y" in core._owned  # a local ref remains
    assert refs.borrowers == {} and refs.by_borrower == {}


def test_a_dead_borrower_is_dropped_from_every_object():
    core = Core()
    refs = References(core)
    core._owned.update({b"x", b"y"})
    refs.add_borrowers([b"x", b"y"], "w1")
    refs.add_borrowers([b"y"], "w2")

    refs._on_death(gcs_pb2.PubMessage(worker_death=gcs_pb2.WorkerDeath(worker_id="w1")))
    assert core.released == [b"x"] and refs.borrowers == {b"y": {"w2"}}
