"""The object store keeps its arena resident: prefaulted on a background thread at start, pages of
objects beyond the prefaulted prefix populated when allocated, and freed space never handed back
to the kernel (so the next put there takes no page fault). One process, no sockets: residency is
read from /proc/self/smaps."""
from __future__ import annotations

import os
import sys

import pytest

from ember_common import shm_prefault
from ember_objmgr.store import ObjectStore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")

MiB = 2**20


def arena_rss(path: str, pid: str = "self") -> int:
    """Resident bytes of this process's mapping(s) of the file at path."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and ":" not in first:  # a mapping's header line
                inside = line.rstrip("\n").endswith(" " + path)
            elif inside and first == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def file_bytes(path: str) -> int:
    """Bytes the file system has allocated to the file (tmpfs: its pages)."""
    return os.stat(path).st_blocks * 512


@pytest.fixture
def stores(tmp_path):
    made: list[ObjectStore] = []

    def make(capacity: int, **kw) -> ObjectStore:
        kw.setdefault("prefault_bytes", 2**40)  # past the arena's end: the prefault stops at its end
        s = ObjectStore(str(tmp_path / f"store-{len(made)}"), capacity, str(tmp_path / "spill"), **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.destroy()


def test_arena_is_prefaulted_in_the_background(stores):
    s = stores(16 * MiB)
    assert s.prefaulter.done.wait(30), "prefault did not finish"
    assert s.prefaulter.populated == s.capacity
    assert arena_rss(s.arena_path) >= s.capacity - 64 * 1024
    assert file_bytes(s.arena_path) >= s.capacity


def test_prefault_stops_at_its_limit_and_allocation_populates_the_rest(stores):
    s = stores(16 * MiB, prefault_bytes=4 * MiB)
    assert s.prefaulter.done.wait(30)
    assert s.prefaulter.populated == 4 * MiB
    assert arena_rss(s.arena_path) < 8 * MiB  # nothing past the limit yet
    off = s.create(b"x" * 20, 10 * MiB, "w1")
    assert off + 10 * MiB > 4 * MiB
    assert arena_rss(s.arena_path) >= off + 10 * MiB - 64 * 1024  # the object's range is backed


def test_freed_extents_stay_resident_and_are_reused(stores):
    s = stores(16 * MiB)
    assert s.prefaulter.done.wait(30)
    before = file_bytes(s.arena_path)
    first = s.create(b"a" * 20, 12 * MiB, "w1")
    s.view[first:first + 12 * MiB] = b"\x07" * (12 * MiB)
    s.seal(b"a" * 20)
    s.free(b"a" * 20)
    assert b"a" * 20 not in s.objects and s.alloc.used == 0
    assert file_bytes(s.arena_path) == before  # no hole punched: the pages are still there
    assert arena_rss(s.arena_path) >= s.capacity - 64 * 1024
    assert s.create(b"b" * 20, 12 * MiB, "w1") == first  # the same (still mapped) extent


def test_populate_without_the_kernel_call_reports_it(monkeypatch, tmp_path):
    """Kernels without MADV_POPULATE_WRITE: populate says so and the prefaulter allocates the
    file's pages instead, keeping what is written there."""
    import mmap

    path = tmp_path / "f"
    path.write_bytes(b"\x05" * MiB)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), MiB)
    monkeypatch.setattr(shm_prefault, "_madvise", None)
    assert not shm_prefault.populate(mm, 0, MiB)
    p = shm_prefault.Prefaulter(mm, MiB, str(path)).start()
    assert p.done.wait(10)
    assert file_bytes(str(path)) >= MiB and mm[:MiB] == b"\x05" * MiB
    mm.close()
