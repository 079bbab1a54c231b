"""The extension API (Ray's `ray.data.Datasource` / `Datasink`): user-defined sources and sinks.

    class MySource(Datasource):
        def estimate_inmemory_data_size(self): return None
        def get_read_tasks(self, parallelism):
            return [ReadTask(lambda i=i: [make_block(i)], BlockMetadata(num_rows=..., size_bytes=...))
                    for i in range(parallelism)]

    ds = ember.data.read_datasource(MySource(), override_num_blocks=4)

    class MySink(Datasink):
        def on_write_start(self): ...                  # driver, before any task
        def write(self, blocks, ctx): ...              # each write task: its blocks, ctx.task_idx
        def on_write_complete(self, write_result): ... # driver: WriteResult(num_rows, size_bytes,
                                                       #   write_returns=[each write's return])
        def on_write_failed(self, error): ...          # driver, instead of on_write_complete

    ds.write_datasink(MySink())

A read task's `read_fn()` returns an iterable of blocks (pyarrow Tables or pandas DataFrames);
each read task runs as one Ember task (fused with the maps after it). A sink's `write` gets
Arrow tables. The built-in file readers and writers run on the same machinery.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import pyarrow as pa

from . import block as B
from ._internal.datasource.partitioning import Partitioning
from ._internal.datasource.sinks import SaveMode
from ._internal.tasks import TaskContext
from ._internal.write import WriteResult
from .block import BlockMetadata

R = TypeVar("R")


def _strip(name: str, suffix: str) -> str:
    return name[:-len(suffix)] if name.endswith(suffix) and name != suffix else name


class ReadTask:
    """One read task: `read_fn()` returns an iterable of blocks; `metadata` estimates them."""

    def __init__(self, read_fn: Callable[[], Iterable[Any]], metadata: BlockMetadata,
                 schema: Any = None, per_task_row_limit: int | None = None) -> None:
        if not callable(read_fn):
            raise TypeError(f"ReadTask: read_fn must be callable, got {type(read_fn).__name__}")
        if not isinstance(metadata, BlockMetadata):
            raise TypeError("ReadTask: metadata must be an ember.data.block.BlockMetadata, got "
                            f"{type(metadata).__name__}")
        self.read_fn = read_fn
        self.metadata = metadata
        self.schema = schema
        self.per_task_row_limit = per_task_row_limit

    # what the executor reads of a read task
    @property
    def input_files(self) -> list[str]:
        return list(self.metadata.input_files or [])

    @property
    def est_num_rows(self) -> int | None:
        return self.metadata.num_rows

    @property
    def est_size_bytes(self) -> int:
        return int(self.metadata.size_bytes or 0)

    def __call__(self) -> Iterator[pa.Table]:
        blocks = self.read_fn()
        if blocks is None:
            raise TypeError("ReadTask: read_fn returned None; it must return an iterable of "
                            "blocks (pyarrow Tables or pandas DataFrames)")
        left = self.per_task_row_limit
        for b in blocks:
            t = _to_table(b)
            if left is not None:
                if left <= 0:
                    return
                t = t.slice(0, left)
                left -= t.num_rows
            yield t


def _to_table(b: Any) -> pa.Table:
    if isinstance(b, pa.Table):
        return b
    try:
        import pandas as pd

        if isinstance(b, pd.DataFrame):
            return B.pandas_to_block(b)
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    raise TypeError(f"a read task yielded a {type(b).__name__}; blocks are pyarrow Tables or "
                    "pandas DataFrames")


class Datasource:
    """A source of read tasks (subclass it; Ray's Datasource)."""

    def get_name(self) -> str:
        """The name in the read operator (`Read<name>`): the class name without "Datasource"."""
        return _strip(type(self).__name__, "Datasource")

    def estimate_inmemory_data_size(self) -> int | None:
        """Bytes the data takes in memory, or None if unknown (sizes the read parallelism)."""
        raise NotImplementedError

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        """About `parallelism` read tasks covering all the data."""
        raise NotImplementedError

    @property
    def supports_distributed_reads(self) -> bool:
        return True


class _SourceAdapter:
    """A user Datasource as the executor sees datasources (no pushdown)."""

    supports_projection_pushdown = False
    supports_filter_pushdown = False
    include_paths = False

    def __init__(self, ds: Datasource) -> None:
        self.ds = ds

    def estimate_inmemory_data_size(self) -> int:
        return int(self.ds.estimate_inmemory_data_size() or 0)

    def num_rows(self) -> None:
        return None

    def get_read_tasks(self, parallelism: int, columns: Any = None, filter: Any = None) -> list[Any]:
        tasks = list(self.ds.get_read_tasks(parallelism))
        for t in tasks:
            if not isinstance(t, ReadTask):
                raise TypeError(f"{type(self.ds).__name__}.get_read_tasks() must return "
                                f"ReadTasks, got a {type(t).__name__}")
        return tasks


class Datasink(Generic[R]):
    """A destination for a dataset's blocks (subclass it; Ray's Datasink)."""

    def on_write_start(self) -> None:
        """Called once in the driver before any write task."""

    def write(self, blocks: Iterable[pa.Table], ctx: TaskContext) -> R:
        """Writes one task's blocks; the return value goes to on_write_complete."""
        raise NotImplementedError

    def on_write_complete(self, write_result: WriteResult[R]) -> None:
        """Called once in the driver after every write task succeeded."""

    def on_write_failed(self, error: Exception) -> None:
        """Called once in the driver when the write failed (the error is raised after)."""

    def get_name(self) -> str:
        """The name in the write operator (`Write<name>`): the class name without "Datasink"."""
        return _strip(type(self).__name__, "Datasink")

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    @property
    def min_rows_per_write(self) -> int | None:
        """At least this many rows per write task (None: as the blocks come)."""
        return None


class FilenameProvider:
    """Names the files a file write creates (Ray's FilenameProvider)."""

    def get_filename_for_block(self, block: Any, write_uuid: str, task_index: int,
                               block_index: int) -> str:
        raise NotImplementedError

    def get_filename_for_row(self, row: dict[str, Any], write_uuid: str, task_index: int,
                             block_index: int, row_index: int) -> str:
        raise NotImplementedError


__all__ = ["BlockMetadata", "Datasink", "Datasource", "FilenameProvider", "Partitioning",
           "ReadTask", "SaveMode", "TaskContext", "WriteResult"]
