"""The reference table (reference_table.py) without processes: local counts, what a borrower
still has to tell each owner, and when an owner may free an object. Its decisions come out
through the two callbacks, recorded here."""
from __future__ import annotations

import threading

from ember._private.objects.object_ref import OwnerAddress
from ember._private.owner.reference_table import ReferenceTable

ME = "me"
OWNER = OwnerAddress("127.0.0.1", 5000, "owner-worker", "node-1")
MINE = OwnerAddress("127.0.0.1", 6000, ME, "node-1")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Rec:
    """Records the table's decisions."""

    def __init__(self) -> None:
        self.released: list[tuple[bytes, bool]] = []
        self.kicks = 0

    def release(self, oid: bytes, owned: bool) -> None:
        self.released.append((oid, owned))

    def pending(self) -> None:
        self.kicks += 1


def make(clock: Clock | None = None) -> tuple[ReferenceTable, Rec, Clock]:
    rec, clock = Rec(), clock or Clock()
    return ReferenceTable(ME, rec.release, rec.pending, clock=clock, remove_delay_s=0.5), rec, clock


def test_an_owned_object_is_released_when_its_last_local_ref_goes():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_local_ref(b"x", MINE)
    t.add_local_ref(b"x", MINE)
    t.remove_local_ref(b"x")
    assert rec.released == [] and t.owns(b"x") and t.has_local_ref(b"x")
    t.remove_local_ref(b"x")
    assert rec.released == [(b"x", True)] and not t.owns(b"x") and t.num_local_refs() == 0
    assert rec.kicks == 0  # owned objects never touch the borrower protocol


def test_escaped_objects_are_kept_until_exit():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_local_ref(b"x", MINE)
    t.mark_escaped(b"x")
    t.remove_local_ref(b"x")
    assert rec.released == [] and t.owns(b"x") and t.is_referenced(b"x")
    # A borrowed ref pickled out of band keeps one count (and its registration) forever.
    t.add_local_ref(b"b", OWNER)
    t.mark_escaped(b"b")
    t.remove_local_ref(b"b")
    assert t.has_local_ref(b"b") and t.borrowed_owner(b"b") == OWNER


def test_a_borrow_registers_once_and_a_quick_drop_costs_nothing():
    t, rec, _ = make()
    t.add_local_ref(b"a", OWNER)
    t.add_local_ref(b"a", OWNER)  # second local ref: nothing more
    assert t.unacked() and rec.kicks == 1  # one flush scheduled
    t.remove_local_ref(b"a")
    t.remove_local_ref(b"a")  # dropped before the owner heard of it: no RPC either way
    assert not t.unacked() and t.pending_removals() == {} and t.borrowed_owner(b"a") is None
    assert rec.released == [(b"a", False)]  # its fetched entry can go
    batch = t.begin_flush()
    assert batch.adds == {} and batch.removes == {} and batch.next_due_s is None


def test_a_removal_waits_its_delay_and_is_sent_once():
    t, rec, clock = make()
    t.add_local_ref(b"a", OWNER)
    batch = t.begin_flush()
    assert batch.adds == {b"a": OWNER} and t.unacked()  # in flight
    t.adds_acknowledged()
    t.end_flush()
    assert not t.unacked()
    t.remove_local_ref(b"a")
    assert t.pending_removals() == {b"a": OWNER}
    clock.t += 0.2
    batch = t.begin_flush()
    assert batch.removes == {} and abs(batch.next_due_s - 0.3) < 1e-9
    t.end_flush()
    clock.t += 0.3
    batch = t.begin_flush()
    assert batch.removes == {b"a": OWNER} and batch.next_due_s is None
    t.end_flush()
    assert t.pending_removals() == {}


def test_a_removal_is_cancelled_when_the_ref_comes_back_before_it_is_sent():
    t, _, _ = make()
    t.add_local_ref(b"a", OWNER)
    t.begin_flush()
    t.end_flush()
    t.remove_local_ref(b"a")
    assert b"a" in t.pending_removals() and t.borrowed_owner(b"a") is None
    t.add_local_ref(b"a", OWNER)
    assert t.pending_removals() == {} and not t.has_unsent() and t.borrowed_owner(b"a") == OWNER


def test_refs_handed_over_in_a_reply_need_no_registration_unless_our_removal_is_in_flight():
    t, rec, clock = make()
    t.take_nested(OWNER, [b"n"])  # the sender registered us
    t.add_local_ref(b"n", OWNER)
    assert not t.has_unsent() and t.borrowed_owner(b"n") == OWNER
    # Our own RemoveBorrower for m is in flight when m comes back nested in a reply: the
    # owner may see the sender's add before our removal, so we register again.
    t.add_local_ref(b"m", OWNER)
    t.begin_flush()
    t.end_flush()
    t.remove_local_ref(b"m")
    clock.t += 1
    batch = t.begin_flush()
    assert batch.removes == {b"m": OWNER}
    t.take_nested(OWNER, [b"m"])
    t.end_flush()
    assert t.begin_flush().adds == {b"m": OWNER}


def test_nested_refs_are_held_by_their_outer_object():
    t, _, _ = make()
    held = [object(), object()]
    t.hold_nested(b"outer", held)
    assert t.drop_nested(b"outer") == held
    assert t.drop_nested(b"outer") is None
    t.add_owned(b"late")
    t.hold_nested(b"late", [object()])
    t.forget_owned(b"late")  # a result nobody wants any more
    assert not t.owns(b"late") and t.drop_nested(b"late") is None


def test_an_owned_object_lives_while_any_borrower_remains():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_owned(b"y")
    assert t.add_borrowers([b"x", b"y", b"gone"], "w1") == [b"gone"]
    t.add_borrowers([b"x"], "w2")
    t.add_borrowers([b"x"], "w2")  # idempotent
    assert t.borrowers(b"x") == {"w1", "w2"}
    assert t.remove_borrowers([b"x"], "w1") == [] and t.owns(b"x")
    t.add_local_ref(b"y", MINE)  # the owner itself still holds y
    assert t.remove_borrowers([b"x", b"y"], "w2") == [b"x"]  # w2 never borrowed y: ignored
    assert rec.released == [(b"x", True)] and not t.owns(b"x")
    assert t.remove_borrowers([b"y"], "w1") == [] and t.owns(b"y")  # a local ref remains
    assert not t.has_borrowers()
    # With a borrower, dropping the last local ref keeps the object.
    t.add_borrowers([b"y"], "w3")
    t.remove_local_ref(b"y")
    assert t.owns(b"y") and t.is_referenced(b"y")
    t.remove_borrowers([b"y"], "w3")
    assert rec.released == [(b"x", True), (b"y", True)]


def test_a_dead_borrower_is_dropped_from_every_object():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_owned(b"y")
    t.add_borrowers([b"x", b"y"], "w1")
    t.add_borrowers([b"y"], "w2")
    assert t.borrower_died("w1") == [b"x"]
    assert rec.released == [(b"x", True)] and t.borrowers(b"y") == {"w2"}
    assert t.borrower_died("unknown") == []


def test_nothing_is_released_after_close():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_local_ref(b"x", MINE)
    t.closed = True
    t.remove_local_ref(b"x")
    assert rec.released == []


def test_counts_stay_exact_under_threads():
    t, rec, _ = make()
    t.add_owned(b"x")
    t.add_local_ref(b"x", MINE)  # held by the test

    def churn() -> None:
        for _ in range(2000):
            t.add_local_ref(b"x", MINE)
            t.remove_local_ref(b"x")

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert rec.released == [] and t.has_local_ref(b"x")
    t.remove_local_ref(b"x")
    assert rec.released == [(b"x", True)]


def test_a_watcher_of_an_owned_id_is_called_once_when_nothing_holds_it():
    """An actor's owner watches its handle id (actor lifetime by handle count): the watcher runs
    when the last local ref and the last borrower are gone, once, before the release; a
    borrowed id or an escaped one never triggers it."""
    t, rec, _ = make()
    fired: list[bytes] = []
    t.add_owned(b"h")
    t.on_free(b"h", lambda: fired.append(b"h"))
    t.add_local_ref(b"h", MINE)
    t.add_borrowers([b"h"], "w1")
    t.remove_local_ref(b"h")
    assert fired == [] and t.owns(b"h")  # a borrower (a task holding the handle) keeps it
    t.remove_borrowers([b"h"], "w1")
    assert fired == [b"h"] and rec.released == [(b"h", True)]
    t.add_owned(b"h2")
    t.on_free(b"h2", lambda: fired.append(b"h2"))
    t.add_local_ref(b"h2", MINE)
    t.remove_local_ref(b"h2")
    t.add_local_ref(b"h2", MINE)  # a stray ref made after the release changes nothing
    t.remove_local_ref(b"h2")
    assert fired == [b"h", b"h2"]
    t.add_owned(b"e")
    t.on_free(b"e", lambda: fired.append(b"e"))
    t.add_local_ref(b"e", MINE)
    t.mark_escaped(b"e")  # pickled out of band: kept until exit
    t.remove_local_ref(b"e")
    assert fired == [b"h", b"h2"]
