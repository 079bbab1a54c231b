"""streaming_split: one execution feeding n iterators, through a coordinator actor.

The coordinator (a threaded actor) runs the dataset's streaming executor in its own process and
hands each split its next block (or a slice of one, for equal=True) as decided by the pure
SplitCoordinatorCore. The iterators only hold the actor's handle and their index, so they can be
passed to other processes (Train workers). Iterating a split again starts the next epoch: a new
execution begins once every split has finished the previous one.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import ember

from .split_coordinator import DONE, WAIT, Give, SplitCoordinatorCore


class SplitCoordinator:
    """Actor: executes the dataset and serves splits."""

    def __init__(self, ds: Any, n: int, equal: bool) -> None:
        self.ds = ds
        self.n = n
        self.equal = equal
        self.cv = threading.Condition()
        self.epoch = -1
        self.core: SplitCoordinatorCore | None = None
        self.blocks: dict[int, Any] = {}
        self.done_splits: set[int] = set()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def _start_epoch(self) -> None:
        self.epoch += 1
        self.core = SplitCoordinatorCore(self.n, self.equal)
        self.blocks = {}
        self.done_splits = set()
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(self.core,), daemon=True)
        self.thread.start()

    def _run(self, core: SplitCoordinatorCore) -> None:
        try:
            for i, b in enumerate(self.ds._iter_bundles()):
                with self.cv:
                    self.blocks[i] = b
                    core.add(i, b.num_rows)
                    self.cv.notify_all()
                    while core.buffered_rows > max(4, 2 * self.n) * max(core.max_block_rows, 1) \
                            and core is self.core:
                        self.cv.wait(0.5)
        except BaseException as e:  # noqa: BLE001 - handed to the splits
            with self.cv:
                self.error = e
        with self.cv:
            core.finish()
            self.cv.notify_all()

    def next(self, i: int, epoch: int, timeout_s: float = 1.0) -> Any:
        """("block", ref, num_rows) | ("wait",) | ("done",)"""
        from .tasks import slice_task

        deadline = time.monotonic() + timeout_s
        with self.cv:
            while epoch > self.epoch:
                if self.core is None or len(self.done_splits) == self.n:
                    self._start_epoch()
                    break
                if time.monotonic() >= deadline:
                    return ("wait",)
                self.cv.wait(0.1)
            if epoch < self.epoch:
                return ("done",)
            while True:
                if self.error is not None:
                    raise self.error
                assert self.core is not None
                d = self.core.next_for(i)
                if isinstance(d, Give):
                    b = self.blocks[d.block_id]
                    if d.whole:
                        self.blocks.pop(d.block_id, None)
                    self.cv.notify_all()
                    if d.offset == 0 and d.rows == b.num_rows:
                        return ("block", b.ref, d.rows)
                    ref, _meta = slice_task.remote([(d.offset, d.rows)], b.ref)
                    return ("block", ref, d.rows)
                if d == DONE:
                    self.done_splits.add(i)
                    self.cv.notify_all()
                    return ("done",)
                assert d == WAIT
                if time.monotonic() >= deadline:
                    return ("wait",)
                self.cv.wait(0.05)


class _SplitBundle:
    __slots__ = ("ref", "num_rows")

    def __init__(self, ref: Any, num_rows: int) -> None:
        self.ref = ref
        self.num_rows = num_rows


class _SplitSource:
    """Picklable: yields split i's blocks from the coordinator, one epoch per call."""

    def __init__(self, coord: Any, i: int) -> None:
        self.coord = coord
        self.i = i
        self.epoch = -1

    def __call__(self) -> Iterator[Any]:
        self.epoch += 1
        epoch = self.epoch
        while True:
            r = ember.get(self.coord.next.remote(self.i, epoch))
            if r[0] == "block":
                yield _SplitBundle(r[1], r[2])
            elif r[0] == "done":
                return


def make_split_iterators(ds: Any, n: int, equal: bool) -> list[Any]:
    """The n DataIterators of ds.streaming_split(n, equal=equal)."""
    from ember.data.iterator import DataIterator

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"streaming_split needs n >= 1, got {n!r}")
    cls = ember.remote(num_cpus=0, max_concurrency=n + 4)(SplitCoordinator)
    coord = cls.remote(ds, n, equal)
    return [DataIterator(_SplitSource(coord, i), name=f"split {i} of {n}") for i in range(n)]
