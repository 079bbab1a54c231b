"""Random ids for the fast paths, drawn in bulk: one draw of a few KB gives the next 512 span
ids (or trace and span ids) as slices, so a task's ids cost a `next()` on an iterator.

The SDK's RandomIdGenerator draws from `random` too; os.urandom would release the GIL (a
syscall) on the hot path, handing the thread's turn to another one every draw. Each supply has
a Random of its own, seeded from os.urandom (a user's random.seed() does not repeat ids) and
reseeded after fork (a child must not reuse its parent's ids).
"""
from __future__ import annotations

import os
import random
import weakref
from typing import Iterator

ZERO8 = bytes(8)
_PER_DRAW = 512
_supplies: weakref.WeakSet[IdSupply] = weakref.WeakSet()


class IdSupply:
    """Chunks of `size` random bytes, none holding 8 zero bytes at an id's place: read as
    `next(supply.it, None) or supply.draw()` (the cheapest form on a hot path)."""

    __slots__ = ("it", "size", "_rng", "__weakref__")

    def __init__(self, size: int) -> None:
        self.size = size
        self._rng = random.Random()
        self.it: Iterator[bytes] = iter(())
        _supplies.add(self)

    def draw(self) -> bytes:
        """A fresh chunk; refills the supply."""
        n = self.size
        while True:
            buf = self._rng.randbytes(n * _PER_DRAW)
            if ZERO8 not in buf:  # an all-zero id is invalid (redrawn, not checked per id)
                break
        self.it = iter([buf[i:i + n] for i in range(n, len(buf), n)])
        return buf[:n]

    def next(self) -> bytes:
        """The next chunk."""
        return next(self.it, None) or self.draw()

    def reset(self) -> None:
        """Forgets the chunks drawn and reseeds (after fork)."""
        self.it = iter(())
        self._rng.seed()


def _after_fork() -> None:
    for s in list(_supplies):
        s.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

span_ids = IdSupply(8)  # execute span ids (_exec)
trace_and_span_ids = IdSupply(24)  # a trace id and a span id (_submit)
