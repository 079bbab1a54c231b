"""WorkerLedger (services/raylet/ember_raylet/worker_ledger.py): the ids a raylet stores so that
its successor can report its workers dead. Pure: ids come from a counter."""
from __future__ import annotations

import asyncio
import itertools

from ember_raylet.worker_ledger import LedgerWriter, WorkerLedger


def ledger(reserve: int = 4) -> WorkerLedger:
    n = itertools.count()
    return WorkerLedger(new_id=lambda: f"w{next(n)}", reserve=reserve)


def test_a_worker_id_is_in_the_stored_ledger_before_the_worker_starts():
    lg = ledger()
    stored = set(WorkerLedger.parse(lg.encode()))
    for _ in range(10):  # more workers than the reserve: each write refills it
        wid = lg.take_id()
        assert wid in stored, f"{wid} was handed out before it was written"
        stored = set(WorkerLedger.parse(lg.encode()))
        assert wid in stored
        assert len(lg.reserved) > 0


def test_exited_workers_leave_and_live_ones_stay():
    lg = ledger()
    a, b = lg.take_id(), lg.take_id()
    v = lg.version
    lg.exited(a)
    assert lg.version > v
    ids = WorkerLedger.parse(lg.encode())
    assert a not in ids and b in ids
    v = lg.version
    lg.exited("unknown")  # not ours: nothing changes
    assert lg.version == v


def test_inherited_ids_stay_until_reported():
    lg = ledger()
    dead = lg.inherit(["old1", "old2", lg.reserved[0]])
    assert dead == ["old1", "old2"]  # our own reserved id is not a predecessor's worker
    assert {"old1", "old2"} <= set(WorkerLedger.parse(lg.encode()))
    lg.reported("old1")
    ids = WorkerLedger.parse(lg.encode())
    assert "old1" not in ids and "old2" in ids
    assert WorkerLedger.parse(None) == [] and WorkerLedger.parse(b"") == []


def test_writer_stores_the_latest_version_and_retries_after_a_failure():
    lg = ledger()
    writes: list[bytes] = []
    fail = [True]

    async def put(blob: bytes) -> None:
        if fail[0]:
            fail[0] = False
            raise ConnectionError("GCS restarting")
        writes.append(blob)

    async def scenario() -> None:
        w = LedgerWriter(lg, put)
        stop = asyncio.Event()
        task = asyncio.ensure_future(w.run(stop))
        lg.take_id()
        w.kick()
        for _ in range(300):  # the failed write is retried after RETRY_S
            if writes:
                break
            await asyncio.sleep(0.01)
        stop.set()
        w.kick()
        await asyncio.wait_for(task, 5)
        await w.flush()  # nothing changed since: no second write
        assert len(writes) == 1

    asyncio.run(scenario())
    assert writes[-1] == lg.encode()


def test_rewrite_stores_an_unchanged_ledger_again():
    """After the GCS deleted the ledger (it had declared the node dead) the raylet that
    registers again writes it anew, though nothing in it changed."""
    lg = ledger()
    writes: list[bytes] = []

    async def put(blob: bytes) -> None:
        writes.append(blob)

    async def scenario() -> None:
        w = LedgerWriter(lg, put)
        await w.flush()
        await w.flush()  # unchanged: not written twice
        assert len(writes) == 1
        w.rewrite()
        await w.flush()
        assert writes == [lg.encode(), lg.encode()]

    asyncio.run(scenario())
