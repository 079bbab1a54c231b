"""Who gets which rows in `streaming_split(n, equal=...)` (pure: events in, decisions out).

Blocks arrive from the executor (`add`), consumers ask for their next share (`next_for`).
With equal=False any consumer takes the next block. With equal=True every consumer ends with
the same number of rows: a consumer may run ahead of the slowest one by at most one block (L,
the largest block seen), and n×L rows are kept back until the input ends; then the rest is cut
so that each consumer reaches floor(total / n) rows and the remainder (< n rows) is dropped, as
in Ray. Consumers of an equal split must therefore read concurrently, as in Ray.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Give:
    """Hand `rows` rows starting at `offset` of block `block_id` to the consumer."""

    block_id: Any
    offset: int
    rows: int
    whole: bool


WAIT = "wait"
DONE = "done"


class SplitCoordinatorCore:
    """Balances blocks between n consumers."""

    def __init__(self, n: int, equal: bool) -> None:
        if n < 1:
            raise ValueError(f"streaming_split needs n >= 1, got {n}")
        self.n = n
        self.equal = equal
        self.given = [0] * n
        self.buffer: collections.deque[list[Any]] = collections.deque()  # [block_id, offset, rows, whole]
        self.buffered_rows = 0
        self.max_block_rows = 0
        self.finished = False
        self._targets: list[int] | None = None

    def add(self, block_id: Any, num_rows: int) -> None:
        """A new block of num_rows rows is available."""
        if num_rows <= 0:
            return
        self.buffer.append([block_id, 0, num_rows, True])
        self.buffered_rows += num_rows
        self.max_block_rows = max(self.max_block_rows, num_rows)

    def finish(self) -> None:
        """No more blocks will come."""
        self.finished = True
        if self.equal:
            total = sum(self.given) + self.buffered_rows
            share = total // self.n
            self._targets = [share] * self.n

    def next_for(self, i: int) -> Give | str:
        """Consumer i's next share: a Give, WAIT (ask again after the next add/finish) or DONE."""
        if not 0 <= i < self.n:
            raise IndexError(f"split index {i} out of range for n={self.n}")
        if not self.equal:
            if self.buffer:
                return self._pop(i, self.buffer[0][2])
            return DONE if self.finished else WAIT
        if self.finished:
            assert self._targets is not None
            want = self._targets[i] - self.given[i]
            if want <= 0 or not self.buffer:
                return DONE
            return self._pop(i, min(want, self.buffer[0][2]))
        if not self.buffer:
            return WAIT
        rows = self.buffer[0][2]
        lead_ok = self.given[i] + rows <= min(self.given) + self.max_block_rows
        reserve_ok = self.buffered_rows - rows >= self.n * self.max_block_rows
        if lead_ok and reserve_ok:
            return self._pop(i, rows)
        return WAIT

    def _pop(self, i: int, rows: int) -> Give:
        head = self.buffer[0]
        block_id, off, avail, whole = head
        if rows >= avail:
            self.buffer.popleft()
            g = Give(block_id, off, avail, whole)
        else:
            head[1] = off + rows
            head[2] = avail - rows
            head[3] = False
            g = Give(block_id, off, rows, False)
        self.buffered_rows -= g.rows
        self.given[i] += g.rows
        return g
