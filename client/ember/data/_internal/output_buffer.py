"""BlockOutputBuffer: cuts a task's output into blocks of about the target size (pure).

A task (a read, a fused map) produces tables of any size: a read of a big row group, a UDF that
explodes rows, many small batches. The buffer collects them and hands out blocks of at most
`target_max_bytes` (Ray's `target_max_block_size`) as soon as that many bytes are there, so a
task yields several blocks while it runs instead of one block of unknown size at the end; small
outputs are coalesced into one block. Every block handed out is compacted (its own buffers, one
chunk per column), so what lands in the object store is the size the executor counts.
"""
from __future__ import annotations

import math
from typing import Iterator

import pyarrow as pa

from ember.data import block as B


class BlockOutputBuffer:
    """add(table) yields the blocks that are full; finish() yields the rest."""

    def __init__(self, target_max_bytes: int) -> None:
        if target_max_bytes < 1:
            raise ValueError(f"target_max_bytes must be >= 1, got {target_max_bytes}")
        self.target = int(target_max_bytes)
        self._pending: list[pa.Table] = []
        self._bytes = 0
        self._emitted = 0
        self._last: pa.Table | None = None  # keeps the schema of an all-empty output

    def add(self, table: pa.Table) -> Iterator[pa.Table]:
        """Takes one output table; yields every full block now available."""
        self._last = table
        if table.num_rows == 0:
            return
        self._pending.append(table)
        self._bytes += B.size_bytes(table)
        if self._bytes >= self.target:
            yield from self._cut(final=False)

    def finish(self) -> Iterator[pa.Table]:
        """Yields what is left; a task whose output had no rows yields one empty block (its
        schema) unless it already yielded blocks."""
        if self._pending:
            yield from self._cut(final=True)
        elif self._emitted == 0 and self._last is not None:
            self._emitted += 1
            yield B.compact(self._last)

    def _cut(self, final: bool) -> Iterator[pa.Table]:
        tbl = self._pending[0] if len(self._pending) == 1 else B.concat(self._pending)
        self._pending, self._bytes = [], 0
        counts = split_rows(tbl.num_rows, B.size_bytes(tbl), self.target)
        if not final and len(counts) > 1:
            keep = counts.pop()  # coalesced with the output that follows, if any
        else:
            keep = 0
        off = 0
        for rows in counts:
            self._emitted += 1
            yield B.compact(tbl.slice(off, rows))
            off += rows
        if keep:
            rest = tbl.slice(off)
            self._pending = [rest]
            self._bytes = B.size_bytes(rest)


def split_rows(num_rows: int, num_bytes: int, target_bytes: int) -> list[int]:
    """Row counts of the fewest blocks of (nearly) equal size, each within target_bytes, that
    a table of num_rows rows and num_bytes bytes splits into."""
    if num_rows <= 0:
        return []
    k = min(num_rows, max(1, math.ceil(num_bytes / max(1, target_bytes))))
    base, extra = divmod(num_rows, k)
    return [base + (1 if i < extra else 0) for i in range(k)]
