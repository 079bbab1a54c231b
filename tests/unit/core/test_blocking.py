"""blocking.py: a worker's waits lend its CPUs (block before the wait, unblock after) and the
wait returns only once the unblock was answered; nested waits of several threads count once;
an unblock never overtakes its block. A real event loop in a thread, a recording notifier."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ember._private.execution.blocking import BlockedWaits


@pytest.fixture()
def loop():
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)
    lp.close()


class Raylet:
    """Records NotifyWorkerBlocked calls; unblocks wait until `resume` is set."""

    def __init__(self, block_delay_s: float = 0.0) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.resume = threading.Event()
        self.block_delay_s = block_delay_s

    async def notify(self, blocked: bool) -> None:
        self.calls.append(("start", blocked))
        if blocked:
            await asyncio.sleep(self.block_delay_s)
        else:
            while not self.resume.is_set():
                await asyncio.sleep(0.005)
        self.calls.append(("end", blocked))


def test_a_wait_returns_only_once_its_cpus_are_back(loop):
    raylet = Raylet()
    waits = BlockedWaits(loop, raylet.notify)

    async def value() -> int:
        return 7

    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(waits.run(value())))
    t.start()
    time.sleep(0.2)
    assert result == [] and ("start", False) in raylet.calls  # waiting for the CPUs
    raylet.resume.set()
    t.join(5)
    assert result == [7]
    assert raylet.calls == [("start", True), ("end", True), ("start", False), ("end", False)]


def test_an_unblock_waits_for_its_block_to_be_answered(loop):
    raylet = Raylet(block_delay_s=0.2)
    raylet.resume.set()
    waits = BlockedWaits(loop, raylet.notify)
    assert waits.run(None, lambda: "here") == "here"  # a wait run in the calling thread
    assert raylet.calls == [("start", True), ("end", True), ("start", False), ("end", False)]


def test_waits_of_several_threads_count_once(loop):
    raylet = Raylet()
    raylet.resume.set()
    waits = BlockedWaits(loop, raylet.notify)
    inside = threading.Barrier(2)
    release = threading.Event()

    def wait() -> str:
        inside.wait(5)
        release.wait(5)
        return "done"

    threads = [threading.Thread(target=lambda: waits.run(None, wait)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(5)
    assert [c for c in raylet.calls if c[0] == "start"] == [("start", True), ("start", False)]


def test_errors_of_the_wait_and_of_the_raylet(loop):
    async def fail() -> None:
        raise KeyError("from the wait")

    async def gone(blocked: bool) -> None:
        raise ConnectionError("raylet gone")

    waits = BlockedWaits(loop, gone)
    with pytest.raises(KeyError):
        waits.run(fail())  # the wait's error, after a failed notify (ignored)
    assert waits.run(None, lambda: 1) == 1
