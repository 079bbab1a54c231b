"""Running a write: the datasink's driver-side hooks around one write operator.

    on_write_start()            in the driver, before any task (save mode, directories)
    write(blocks, ctx) -> r     in each write task, over that task's blocks (fused with upstream)
    on_write_complete(result)   in the driver: WriteResult(num_rows, size_bytes, [r, ...])
    on_write_failed(error)      in the driver instead, then the error is raised

With `min_rows`, the rows are first cut into blocks of at least that many (the last write may
hold all rows when there are fewer), one write task per block; this is an all-to-all barrier.
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Generic, TypeVar

import ember

from . import plan as P
from . import transforms as T
from .compute import TaskPoolStrategy

R = TypeVar("R")


@dataclasses.dataclass
class WriteResult(Generic[R]):
    """What a write produced (Ray's WriteResult): totals and each task's `write` return."""

    num_rows: int
    size_bytes: int
    write_returns: list[R]


def run_write(plan: P.LogicalOp, sink: Any, name: str, ray_remote_args: dict[str, Any] | None,
              concurrency: int | None, min_rows: int | None) -> Any:
    """Runs the write of `plan` into `sink`; returns the execution's stats (None if skipped)."""
    from ember.data.dataset import Dataset

    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise ValueError(f"concurrency must be an int >= 1 or None, got {concurrency!r}")
    if min_rows is not None and (not isinstance(min_rows, int) or min_rows < 1):
        raise ValueError(f"min_rows_per_file must be an int >= 1 or None, got {min_rows!r}")
    sink.on_write_start()
    if getattr(sink, "_skip_write", False):
        return None
    if min_rows is not None:
        plan = P.AllToAll(name="Repartition", inputs=[plan], kind="repartition",
                          params={"num_blocks": None, "min_rows_per_block": min_rows})
    ds = Dataset(P.MapOp(name=name, inputs=[plan], step=T.Write(sink, name),
                         compute=TaskPoolStrategy(size=concurrency),
                         remote_args=dict(ray_remote_args or {})))
    try:
        tables = ember.get([b.ref for b in ds._iter_bundles()])
    except Exception as e:
        sink.on_write_failed(e)
        raise
    rows = [r for t in tables if t.num_rows for r in t.to_pylist()]
    result = WriteResult(num_rows=sum(r["num_rows"] for r in rows),
                         size_bytes=sum(r["size_bytes"] for r in rows),
                         write_returns=[pickle.loads(r["write_return"]) for r in rows])
    sink.on_write_complete(result)
    return ds._last_stats
