"""ObjectStore: one arena with pinning, LRU spilling and restoring, in tmp dirs (no processes)."""
from __future__ import annotations

import os

import pytest

from ember_common.rpc import NotFound, ResourceExhausted
from ember_objmgr.allocator import ALIGN
from ember_objmgr.store import DataLoss, ObjectStore

OBJ = 1024  # bytes per test object
CAP = 4 * OBJ  # the arena holds exactly four of them


def oid(i: int) -> bytes:
    return i.to_bytes(20, "big")


def pattern(i: int, size: int = OBJ) -> bytes:
    return bytes((i * 31 + k * 7) % 251 for k in range(size))


@pytest.fixture
def make_store(tmp_path):
    stores = []

    def make(capacity: int = CAP, spill_uri: str | None = "default", sub: str = "a") -> ObjectStore:
        if spill_uri == "default":
            spill_uri = str(tmp_path / f"spill-{sub}")
        s = ObjectStore(str(tmp_path / "root" / f"store-{sub}"), capacity, spill_uri)
        stores.append(s)
        return s

    yield make
    for s in stores:
        s.destroy()


@pytest.fixture
def store(make_store):
    return make_store()


def put(store: ObjectStore, i: int, size: int = OBJ, owner: str = "w1", primary: bool = True) -> bytes:
    """Create, write and seal object i; returns the bytes written."""
    data = pattern(i, size)
    off = store.create(oid(i), size, owner, primary=primary)
    assert off % ALIGN == 0 and off + size <= store.capacity
    store.view[off:off + size] = data
    store.seal(oid(i))
    return data


def read(store: ObjectStore, i: int, client: str = "reader") -> bytes:
    """get (pins) -> the object's bytes at the returned offset -> release."""
    e = store.get(oid(i), client)
    assert e.state == "SEALED" and (e.offset >= 0) != bool(e.fallback_path)
    try:
        return bytes(store.buffer(e))
    finally:
        store.release(oid(i), client)


def state(store: ObjectStore, i: int) -> str | None:
    e = store.objects.get(oid(i))
    return e.state if e is not None else None


def spill_file(store: ObjectStore, i: int) -> str:
    return store.spiller.path(oid(i))


def assert_no_overlap(store: ObjectStore) -> None:
    spans = sorted((e.offset, e.offset + e.size) for e in store.objects.values() if e.offset >= 0)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False)), spans
    assert all(0 <= s and e <= store.capacity for s, e in spans)


# ------------------------------------------------------------------ create / seal / get

def test_create_seal_get_returns_the_written_bytes(store):
    assert store.capacity == CAP
    assert os.path.getsize(store.arena_path) == CAP
    written = {i: put(store, i, size) for i, size in [(1, 100), (2, OBJ), (3, 1)]}
    offsets = {i: store.objects[oid(i)].offset for i in written}
    assert len(set(offsets.values())) == 3
    assert_no_overlap(store)
    for i, data in written.items():
        e = store.get(oid(i), "c1")
        assert e.offset == offsets[i] and e.size == len(data)
        assert bytes(store.view[e.offset:e.offset + e.size]) == data
        assert e.pins == {"c1": 1}
        store.release(oid(i), "c1")
        assert e.pins == {}
    # The arena file is what other processes map: the bytes are there too.
    with open(store.arena_path, "rb") as f:
        f.seek(offsets[2])
        assert f.read(OBJ) == written[2]


def test_contains_and_get_of_unsealed_or_unknown_objects(store):
    off = store.create(oid(1), 10, "w1")
    assert store.create(oid(1), 10, "w1") == off  # a retried Create gets the same space
    assert not store.contains(oid(1))
    with pytest.raises(NotFound, match="not sealed"):
        store.get(oid(1), "c")
    store.seal(oid(1))
    assert store.contains(oid(1))
    with pytest.raises(ValueError, match="already exists"):
        store.create(oid(1), 10, "w1")
    assert not store.contains(oid(2))
    with pytest.raises(NotFound):
        store.get(oid(2), "c")
    with pytest.raises(NotFound):
        store.seal(oid(2))
    store.release(oid(2), "c")  # unknown: ignored
    store.free(oid(2))  # unknown: ignored


def test_pins_are_counted_per_client(store):
    put(store, 1)
    store.get(oid(1), "a")
    store.get(oid(1), "a")
    store.get(oid(1), "b")
    e = store.objects[oid(1)]
    assert e.pins == {"a": 2, "b": 1}
    store.release(oid(1), "a")
    store.release(oid(1), "b")
    store.release(oid(1), "b")  # more releases than gets: ignored
    assert e.pins == {"a": 1}
    store.release(oid(1), "a")
    assert not e.pinned


# ------------------------------------------------------------------ spilling

def test_full_store_spills_the_least_recently_used_object_and_get_restores_it(store):
    data = {i: put(store, i) for i in range(1, 5)}
    assert store.alloc.used == CAP
    assert read(store, 1) == data[1]  # 1 is now the most recently used; 2 the least
    data[5] = put(store, 5)
    assert state(store, 2) == "SPILLED"
    assert store.objects[oid(2)].offset == -1
    assert [state(store, i) for i in (1, 3, 4, 5)] == ["SEALED"] * 4
    path = spill_file(store, 2)
    assert store.objects[oid(2)].spill_path == path
    assert os.path.isfile(path) and os.path.getsize(path) == OBJ
    with open(path, "rb") as f:
        assert f.read() == data[2]
    assert store.spilled_bytes == OBJ
    assert store.contains(oid(2))  # spilled objects are still in the store
    assert_no_overlap(store)

    # get restores it (spilling the now least recently used one, 3) with identical bytes.
    assert read(store, 2) == data[2]
    assert state(store, 2) == "SEALED"
    assert state(store, 3) == "SPILLED"
    assert store.spilled_bytes == OBJ
    assert_no_overlap(store)
    for i in (1, 2, 3, 4, 5):
        assert read(store, i) == data[i]
    assert store.alloc.used == CAP


def test_spilling_makes_room_for_a_bigger_object(store):
    data = {i: put(store, i) for i in range(1, 5)}
    data[9] = put(store, 9, size=2 * OBJ)  # needs two adjacent slots: 1 and 2 are the LRU
    assert state(store, 1) == state(store, 2) == "SPILLED"
    assert store.spilled_bytes == 2 * OBJ
    assert_no_overlap(store)
    for i, d in data.items():
        assert read(store, i) == d
    assert_no_overlap(store)


def test_pinned_objects_are_never_spilled(store):
    data = {i: put(store, i) for i in range(1, 5)}
    entries = {i: store.get(oid(i), "holder") for i in (1, 2, 3)}  # 1..3 pinned; 4 is the newest
    offsets = {i: e.offset for i, e in entries.items()}
    data[5] = put(store, 5)
    assert state(store, 4) == "SPILLED"
    data[6] = put(store, 6)
    assert state(store, 5) == "SPILLED"
    for i, e in entries.items():
        assert e.state == "SEALED" and e.offset == offsets[i]
        assert bytes(store.view[e.offset:e.offset + OBJ]) == data[i]
    for i in (1, 2, 3):
        store.release(oid(i), "holder")
    data[7] = put(store, 7)  # unpinned now: 1 (the LRU) can go
    assert state(store, 1) == "SPILLED"


def fallback(store: ObjectStore, i: int) -> str:
    """The fallback file of object i (asserting it has one)."""
    path = store.objects[oid(i)].fallback_path
    assert path and os.path.dirname(path) == store.fallback_dir, path
    return path


def test_everything_pinned_falls_back_to_a_file_of_its_own(store, caplog):
    """As Ray's fallback allocation: with nothing left to spill, the object gets a file outside
    the arena (with a warning naming why), is read and written like any other, and the file goes
    with the object."""
    for i in range(1, 5):
        put(store, i)
        store.get(oid(i), "holder")
    assert store.create(oid(5), 100, "w1") == -1
    path = fallback(store, 5)
    assert os.path.getsize(path) == 100 and os.stat(path).st_mode & 0o777 == 0o600
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "100 bytes requested" in msg and f"{CAP} of {CAP} bytes used" in msg, msg
    store.buffer(store.objects[oid(5)])[:] = pattern(5, 100)
    store.seal(oid(5))
    assert read(store, 5) == pattern(5, 100)
    assert store.fallback_bytes == 100 and store.spilled_bytes == 0
    assert all(state(store, i) == "SEALED" for i in range(1, 5))
    assert_no_overlap(store)
    store.free(oid(5))
    assert not os.path.exists(path) and store.fallback_bytes == 0
    store.release(oid(3), "holder")  # releasing one pin is enough to make room in the arena again
    assert put(store, 6, size=100) and state(store, 3) == "SPILLED"
    assert not store.objects[oid(6)].fallback_path


def test_objects_being_written_are_never_spilled(store):
    for i in range(1, 5):
        store.create(oid(i), OBJ, "w1")  # never sealed
    assert store.create(oid(5), OBJ, "w1") == -1 and fallback(store, 5)
    assert all(state(store, i) == "CREATED" for i in range(1, 5))


def test_restore_when_nothing_can_be_spilled_falls_back(store):
    data = {i: put(store, i) for i in range(1, 6)}  # 1 spilled
    assert state(store, 1) == "SPILLED"
    for i in range(2, 6):
        store.get(oid(i), "holder")
    assert read(store, 1) == data[1]  # restored into a file of its own
    path = fallback(store, 1)
    assert all(state(store, i) == "SEALED" for i in range(1, 6))
    store.free(oid(1))
    assert not os.path.exists(path) and not os.path.exists(spill_file(store, 1))


def test_fallback_that_fails_too_raises_resource_exhausted_naming_both(make_store, tmp_path):
    s = make_store()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    s.fallback_dir = str(blocker / "fallback")
    for i in range(1, 5):
        put(s, i)
        s.get(oid(i), "holder")
    with pytest.raises(ResourceExhausted) as ei:
        s.create(oid(5), 100, "w1")
    msg = str(ei.value)
    assert "100 bytes requested" in msg and "nothing more can be spilled" in msg, msg
    assert f"allocating it in {s.fallback_dir} instead failed too" in msg, msg
    assert oid(5) not in s.objects and s.fallback_bytes == 0


def test_secondary_copies_are_dropped_rather_than_spilled(store):
    put(store, 1, primary=False)
    data = {i: put(store, i) for i in range(2, 5)}
    read(store, 1)  # the secondary is the most recently used, and still goes first
    data[5] = put(store, 5)
    assert oid(1) not in store.objects
    assert not store.contains(oid(1))
    assert not os.path.exists(spill_file(store, 1))
    assert store.spilled_bytes == 0
    with pytest.raises(NotFound):
        store.get(oid(1), "c")
    assert all(state(store, i) == "SEALED" for i in range(2, 6))
    for i, d in data.items():
        assert read(store, i) == d


def test_object_larger_than_the_store_falls_back_without_spilling(store):
    for i in range(1, 5):
        put(store, i)
    assert store.create(oid(9), CAP + 1, "w1") == -1
    path = fallback(store, 9)
    assert os.path.getsize(path) == CAP + 1
    assert all(state(store, i) == "SEALED" for i in range(1, 5))
    assert store.spilled_bytes == 0
    store.abort(oid(9))  # never sealed: its file goes at once
    assert not os.path.exists(path) and store.fallback_bytes == 0
    put(store, 10, size=CAP)  # exactly the capacity fits, by spilling everything else
    assert all(state(store, i) == "SPILLED" for i in range(1, 5))


def test_free_removes_the_spill_file(store):
    for i in range(1, 6):
        put(store, i)
    path = spill_file(store, 1)
    assert state(store, 1) == "SPILLED" and os.path.isfile(path)
    store.free(oid(1))
    assert oid(1) not in store.objects
    assert not os.path.exists(path)
    assert store.spilled_bytes == 0
    assert store.alloc.used == CAP  # a spilled object holds no arena space


def test_free_of_a_restored_object_removes_its_spill_file_and_space(store):
    data = {i: put(store, i) for i in range(1, 6)}
    assert read(store, 1) == data[1]  # restored; 2 spilled
    store.free(oid(1))
    store.free(oid(2))
    assert not os.path.exists(spill_file(store, 1))
    assert not os.path.exists(spill_file(store, 2))
    assert store.spilled_bytes == 0
    assert store.alloc.used == 3 * OBJ
    assert sorted(os.listdir(store.spiller.root)) == []


def test_client_died_drops_pins_and_frees_owned_objects(store):
    put(store, 1, owner="dead")
    put(store, 2, owner="dead")
    put(store, 3, owner="alive")
    store.get(oid(1), "alive")  # another process still reads 1
    store.get(oid(3), "dead")
    store.get(oid(3), "dead")
    assert store.client_died("dead") == 1  # 2; 1 waits for its reader
    assert oid(2) not in store.objects
    assert store.contains(oid(1))
    assert store.objects[oid(3)].pins == {}  # the dead reader's pins are gone
    assert store.alloc.used == 2 * OBJ
    store.release(oid(1), "alive")
    assert oid(1) not in store.objects
    assert store.contains(oid(3))
    assert store.alloc.used == OBJ
    assert store.client_died("dead") == 0


@pytest.mark.parametrize("how", ["client_died", "free"])
def test_space_of_an_object_being_written_is_not_reused_while_the_writer_writes(store, how):
    """A CREATED object's range belongs to the process writing it (an executor writing a return
    value for its caller, or a pull) until Seal. If the owner dies (or frees it) meanwhile, the
    range must not be handed to a new object: the writer's in-flight copy would overwrite it."""
    a_off = store.create(oid(1), OBJ, "owner")  # a writer is now copying into [a_off, +OBJ)
    if how == "client_died":
        store.client_died("owner")
    else:
        store.free(oid(1))
    b = put(store, 2, owner="other")  # someone else's object, sealed and readable
    b_off = store.objects[oid(2)].offset
    store.view[a_off:a_off + OBJ] = pattern(1)  # the writer finishes its copy
    assert not (a_off < b_off + OBJ and b_off < a_off + OBJ), (
        f"object 2 got range {b_off} of object 1, which was still being written at {a_off}")
    assert read(store, 2) == b


def test_an_unsealed_object_whose_writer_died_is_dropped(store):
    """A worker killed between Create and Seal (its task's return, owned by the driver, half
    written): the entry would hold its space for ever, as nobody else finishes it."""
    off = store.create(oid(1), OBJ, "driver", creator="w1")
    store.create(oid(2), OBJ, "driver", creator="w2")  # another writer, still alive
    assert store.client_died("w1") == 1
    assert oid(1) not in store.objects
    assert store.objects[oid(2)].state == "CREATED"
    assert store.alloc.used == OBJ
    # The task's retry writes the same return again, here: a fresh entry it can seal.
    assert store.create(oid(1), OBJ, "driver", creator="w3") == off
    store.seal(oid(1))
    assert store.contains(oid(1))


def test_a_copy_that_lands_after_its_owner_died_is_freed(store):
    """A pull (or a task's return) still in flight when the owner's death was published: the
    copy is sealed after client_died ran, and nobody else would ever free it."""
    put(store, 1, owner="driver")
    assert store.client_died("driver") == 1
    store.create(oid(2), OBJ, "driver", primary=False)  # the late copy
    store.view[store.objects[oid(2)].offset:store.objects[oid(2)].offset + OBJ] = pattern(2)
    store.seal(oid(2))
    assert oid(2) not in store.objects and store.alloc.used == 0
    b = put(store, 4, owner="alive")  # other owners' objects are untouched
    assert read(store, 4) == b


def test_dead_owners_are_remembered_within_a_bound(store, monkeypatch):
    from ember_objmgr import store as store_mod

    monkeypatch.setattr(store_mod, "DEAD_OWNERS_KEPT", 3)
    for w in ("w1", "w2", "w3", "w4", "w2"):
        store.client_died(w)
    assert list(store.dead_owners) == ["w3", "w4", "w2"]


def test_a_retried_create_takes_over_the_unsealed_object(store):
    """The retry of a killed writer's task lands on the same node before its death is known:
    it finishes the same entry, and the late death notice of the first writer leaves it be."""
    a = store.create(oid(1), OBJ, "driver", creator="w1")
    assert store.create(oid(1), OBJ, "driver", creator="w2") == a
    assert store.client_died("w1") == 0
    assert store.objects[oid(1)].state == "CREATED"
    store.view[a:a + OBJ] = pattern(1)
    store.seal(oid(1))
    assert read(store, 1) == pattern(1)


def test_client_died_removes_spill_files_of_its_objects(store):
    for i in range(1, 6):
        put(store, i, owner="dead" if i == 1 else "w1")
    assert state(store, 1) == "SPILLED"
    assert store.client_died("dead") == 1
    assert not os.path.exists(spill_file(store, 1))
    assert store.spilled_bytes == 0


# ------------------------------------------------------------------ failures

@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_unreadable_spill_file_raises_data_loss_and_the_store_keeps_working(store, damage):
    data = {i: put(store, i) for i in range(1, 6)}
    path = spill_file(store, 1)
    assert state(store, 1) == "SPILLED"
    if damage == "delete":
        os.remove(path)
    else:
        with open(path, "r+b") as f:
            f.truncate(OBJ // 2)
    used = store.alloc.used
    with pytest.raises(DataLoss, match="spill file"):
        store.get(oid(1), "c")
    # No space leaked, no pin taken; the other objects are intact.
    assert_no_overlap(store)
    assert store.alloc.used <= used
    assert store.objects[oid(1)].pins == {}
    with pytest.raises(DataLoss):
        store.get(oid(1), "c")
    store.free(oid(1))
    assert oid(1) not in store.objects
    assert store.spilled_bytes == sum(OBJ for e in store.objects.values() if e.state == "SPILLED")
    for i in range(2, 6):
        assert read(store, i) == data[i]
    data[6] = put(store, 6)
    data[7] = put(store, 7)
    for i in range(2, 8):
        assert read(store, i) == data[i]
    assert_no_overlap(store)


def test_spill_to_an_unwritable_uri_falls_back(make_store, tmp_path, caplog):
    """A spill location that cannot be written (a path below a regular file; root ignores
    permissions) behaves like a full disk: no retry loop; the new object gets a file of its own
    with a warning naming the spill error, and every object stays readable."""
    (tmp_path / "afile").write_bytes(b"x")
    store = make_store(spill_uri=f"file://{tmp_path}/afile/spill")
    data = {i: put(store, i) for i in range(1, 5)}
    assert store.create(oid(5), OBJ, "w1") == -1 and fallback(store, 5)
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "object store full and spilling failed" in msg, msg
    assert all(state(store, i) == "SEALED" for i in range(1, 5))
    assert store.spilled_bytes == 0 and store.alloc.used == CAP
    for i, d in data.items():
        assert read(store, i) == d
    store.abort(oid(5))
    # Freeing space still works.
    store.free(oid(1))
    put(store, 5)
    assert read(store, 5) == pattern(5)


def test_local_spill_dir_that_became_unwritable_falls_back(store):
    data = {i: put(store, i) for i in range(1, 6)}  # 1 spilled fine
    root = store.spiller.root
    os.remove(spill_file(store, 1))
    os.rmdir(root)
    with open(root, "wb") as f:  # "disk full": the directory is now a regular file
        f.write(b"x")
    assert store.create(oid(6), OBJ, "w1") == -1 and fallback(store, 6)
    assert all(state(store, i) == "SEALED" for i in range(2, 6))
    for i in range(2, 6):
        assert read(store, i) == data[i]
    os.remove(root)


def test_spill_through_a_pyarrow_uri(make_store, tmp_path):
    spill = tmp_path / "uri-spill"
    spill.mkdir()
    store = make_store(spill_uri=f"file://{spill}")
    assert not store.spiller.local
    data = {i: put(store, i) for i in range(1, 6)}
    assert os.listdir(spill) == [oid(1).hex()]
    assert read(store, 1) == data[1]
    store.free(oid(1))
    assert oid(1).hex() not in os.listdir(spill)
    store.destroy()
    assert spill.is_dir()  # a remote (URI) location is not removed wholesale


# ------------------------------------------------------------------ destroy

def test_destroy_removes_the_store_dir_and_the_local_spill_dir(make_store, tmp_path):
    store = make_store()
    for i in range(1, 6):
        put(store, i)
    spill_root = store.spiller.root
    assert os.listdir(spill_root) == [oid(1).hex()]
    store.destroy()
    assert not os.path.exists(store.store_dir)
    assert not os.path.exists(spill_root)
    assert not os.path.exists(tmp_path / "root")  # the store root, once empty
    assert tmp_path.is_dir()


def test_destroy_with_the_default_spill_dir(tmp_path):
    store = ObjectStore(str(tmp_path / "root" / "store"), CAP)
    assert store.spill_uri == str(tmp_path / "root" / "store-spill")
    for i in range(1, 6):
        put(store, i)
    assert os.path.isfile(spill_file(store, 1))
    store.destroy()
    assert not os.path.exists(tmp_path / "root" / "store")
    assert not os.path.exists(tmp_path / "root" / "store-spill")
    assert not os.path.exists(tmp_path / "root")


def test_destroy_keeps_a_store_root_that_is_not_empty(make_store, tmp_path):
    a = make_store(sub="a")
    b = make_store(sub="b")
    a.destroy()
    assert os.path.isdir(b.store_dir)
    assert os.path.getsize(b.arena_path) == CAP
    put(b, 1)
    assert read(b, 1) == pattern(1)


def test_spill_to_a_full_disk_raises_resource_exhausted_and_leaves_no_file(store):
    """A disk that takes no more bytes: with a file size limit every spill write fails (EFBIG,
    as ENOSPC would on a full disk). The caller gets a clear error at once - no retry loop - and
    no partial spill file is left behind."""
    import resource
    import time

    data = {i: put(store, i) for i in range(1, 5)}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (OBJ // 2, hard))
    try:
        t0 = time.monotonic()
        with pytest.raises(ResourceExhausted, match="spilling failed") as ei:
            store.create(oid(5), OBJ, "w1")
        assert time.monotonic() - t0 < 5
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "object store full" in str(ei.value)
    assert os.listdir(store.spiller.root) == []
    assert all(state(store, i) == "SEALED" for i in range(1, 5)) and store.spilled_bytes == 0
    for i, d in data.items():
        assert read(store, i) == d
    put(store, 5)  # once the disk takes bytes again, spilling works
    assert state(store, 5) == "SEALED" and store.spilled_bytes == OBJ
    assert read(store, 5) == pattern(5)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300_000])
def test_hand_encoded_transfer_chunks_are_protobuf_data_chunks(size):
    """transfer.py writes DataChunk's wire format by hand and reads it without protobuf: both
    directions agree with the generated code."""
    from ember_common.proto import objmgr_pb2
    from ember_objmgr.transfer import encode_chunk, parse_chunk

    payload = pattern(3, size)
    for total in (None, size, 2**40 + 5):
        msg = objmgr_pb2.DataChunk.FromString(encode_chunk(memoryview(payload), total))
        assert msg.data == payload and msg.total_size == (total or 0)
        data, got_total = parse_chunk(objmgr_pb2.DataChunk(data=payload, total_size=total or 0).SerializeToString())
        assert bytes(data) == payload and got_total == (total or 0)
