"""What runs in the workers: fused map tasks, the map actor, and block slicing.

A map task (and the map actor's `run`) is a streaming generator: its output goes through a
BlockOutputBuffer and every block of about the target size is yielded as soon as it is full, as
two items: the block's BlockMetadata (small, inline to the driver; its exec stats are the task's
so far) and then the block (an Arrow table, in the object store when large). The driver learns of
each block as it is produced and never fetches blocks. A failing UDF's exception keeps its type;
a note names the operator. Other tasks (slices, all-to-all) return (block, metadata).
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

import pyarrow as pa

import ember
from ember.data import block as B

from .output_buffer import BlockOutputBuffer
from .transforms import Step, run_steps

_proc: Any = None
_F = TypeVar("_F", bound=Callable[..., Any])


def _streaming(fn: _F) -> _F:
    """`@ember.method(num_returns="streaming")` with fn's type kept (ember.method is typed as Any)."""
    decorated: _F = ember.method(num_returns="streaming")(fn)
    return decorated


@dataclasses.dataclass
class TaskContext:
    """What a running map task knows of itself (Ray's TaskContext): its index among its
    operator's tasks (unique per operator run) and the operator's name. Datasinks get it."""

    task_idx: int
    op_name: str


_local = threading.local()


def current_task_context() -> TaskContext:
    """The context of the map task running in this thread (task_idx -1 outside one)."""
    ctx = getattr(_local, "ctx", None)
    return ctx if ctx is not None else TaskContext(-1, "")


def _heap_bytes() -> int:
    """Anonymous (heap) memory of this process: RSS minus file and shared-memory pages."""
    global _proc
    try:
        if _proc is None:
            import psutil

            _proc = psutil.Process(os.getpid())
        mi = _proc.memory_info()
        return int(mi.rss - getattr(mi, "shared", 0))
    except Exception:  # pragma: no cover - no psutil or no /proc
        return 0


def annotate(exc: BaseException, op_name: str) -> None:
    """Adds a note naming the Data operator to a UDF's exception (its type is kept)."""
    note = f"(in Ember Data operator {op_name})"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)


def run_map_task(steps: list[Step], op_name: str, read_task: Any, blocks: tuple[pa.Table, ...],
                 target_max_block_size: int, task_idx: int = -1) -> Iterator[Any]:
    """Runs the fused steps over a read task's output or over the input blocks; yields
    (metadata, block) for every output block, as items of a streaming generator."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    h0 = _heap_bytes()
    peak = 0
    files: list[str] = []
    buf = BlockOutputBuffer(target_max_block_size)

    def item(blk: pa.Table) -> B.BlockMetadata:
        nonlocal peak
        peak = max(peak, _heap_bytes() - h0)
        stats = B.BlockExecStats(wall_time_s=time.perf_counter() - t0,
                                 cpu_time_s=time.process_time() - c0, max_heap_bytes=max(0, peak))
        return B.metadata_of(blk, files, stats)

    _local.ctx = TaskContext(task_idx, op_name)
    try:
        for s in steps:
            s.setup()
        src: Iterator[pa.Table]
        if read_task is not None:
            src = read_task()
            files = list(getattr(read_task, "input_files", []) or [])
        else:
            src = iter(blocks)
        del blocks
        for out in run_steps(steps, src):
            peak = max(peak, _heap_bytes() - h0)
            for blk in buf.add(out):
                yield item(blk)
                yield blk
            del out
        for blk in buf.finish():
            yield item(blk)
            yield blk
    except Exception as e:
        annotate(e, op_name)
        raise
    finally:
        _local.ctx = None


def make_map_task(steps: list[Step], op_name: str, remote_args: dict[str, Any],
                  target_max_block_size: int) -> Any:
    """A remote streaming generator (pickled once per operator) running one operator's steps."""

    def data_map_task(task_idx: int, read_task: Any, *blocks: pa.Table) -> Iterator[Any]:
        return run_map_task(steps, op_name, read_task, blocks, target_max_block_size, task_idx)

    data_map_task.__name__ = data_map_task.__qualname__ = _task_name(op_name)
    return ember.remote(num_returns="streaming", max_retries=3, **remote_args)(data_map_task)


def _task_name(op_name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "_->()." else "_" for ch in op_name)
    return safe[:80] or "data_task"


class MapWorker:
    """The actor of an actor-pool operator: builds the callable classes once, then maps blocks."""

    def __init__(self, steps: list[Step], op_name: str, target_max_block_size: int) -> None:
        self.steps = steps
        self.op_name = op_name
        self.target_max_block_size = target_max_block_size
        try:
            for s in steps:
                s.setup()
        except Exception as e:
            annotate(e, op_name)
            raise

    def ready(self) -> bool:
        return True

    @_streaming
    def run(self, task_idx: int, read_task: Any, *blocks: pa.Table) -> Iterator[Any]:
        """Maps one block (or one read task); yields (metadata, block) items."""
        yield from run_map_task(self.steps, self.op_name, read_task, blocks,
                                self.target_max_block_size, task_idx)


def slice_blocks(parts: list[tuple[int, int]], *blocks: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Concatenates blocks[i][offset:offset+rows] for each (offset, rows) in parts."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    pieces = [blk.slice(off, rows) for (off, rows), blk in zip(parts, blocks, strict=False)]
    out = B.compact(B.concat(pieces)) if pieces else pa.table({})
    stats = B.BlockExecStats(wall_time_s=time.perf_counter() - t0, cpu_time_s=time.process_time() - c0)
    return out, B.metadata_of(out, stats=stats)


slice_task = ember.remote(num_returns=2, num_cpus=0)(slice_blocks)
