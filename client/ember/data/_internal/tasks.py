"""What runs in the workers: fused map tasks, the map actor, and block slicing.

Every task returns two objects: the output block (an Arrow table, in the object store when large)
and its BlockMetadata (small, travels inline to the driver). The driver waits on the metadata and
keeps only the block's ref. A failing UDF's exception keeps its type; a note names the operator.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterator

import pyarrow as pa

import ember
from ember.data import block as B
from .transforms import Step, run_steps

_proc: Any = None


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


def run_map_task(steps: list[Step], op_name: str, read_task: Any,
                 blocks: tuple[pa.Table, ...]) -> tuple[pa.Table, B.BlockMetadata]:
    """Runs the fused steps over a read task's output or over the input blocks."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    h0 = _heap_bytes()
    peak = 0
    files: list[str] = []
    try:
        for s in steps:
            s.setup()
        src: Iterator[pa.Table]
        if read_task is not None:
            src = read_task()
            files = list(getattr(read_task, "input_files", []) or [])
        else:
            src = iter(blocks)
        outs = []
        for out in run_steps(steps, src):
            outs.append(out)
            peak = max(peak, _heap_bytes() - h0)
        result = B.concat(outs) if outs else pa.table({})
    except Exception as e:
        annotate(e, op_name)
        raise
    peak = max(peak, _heap_bytes() - h0)
    stats = B.BlockExecStats(wall_time_s=time.perf_counter() - t0,
                             cpu_time_s=time.process_time() - c0, max_heap_bytes=max(0, peak))
    return result, B.metadata_of(result, files, stats)


def make_map_task(steps: list[Step], op_name: str, remote_args: dict[str, Any]) -> Any:
    """A remote function (pickled once per operator) running the steps of one operator."""

    def data_map_task(read_task: Any, *blocks: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
        return run_map_task(steps, op_name, read_task, blocks)

    data_map_task.__name__ = data_map_task.__qualname__ = _task_name(op_name)
    return ember.remote(num_returns=2, max_retries=3, **remote_args)(data_map_task)


def _task_name(op_name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "_->()." else "_" for ch in op_name)
    return safe[:80] or "data_task"


class MapWorker:
    """The actor of an actor-pool operator: builds the callable classes once, then maps blocks."""

    def __init__(self, steps: list[Step], op_name: str) -> None:
        self.steps = steps
        self.op_name = op_name
        try:
            for s in steps:
                s.setup()
        except Exception as e:
            annotate(e, op_name)
            raise

    def ready(self) -> bool:
        return True

    @ember.method(num_returns=2)
    def run(self, read_task: Any, *blocks: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
        return run_map_task(self.steps, self.op_name, read_task, blocks)


def slice_blocks(parts: list[tuple[int, int]], *blocks: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Concatenates blocks[i][offset:offset+rows] for each (offset, rows) in parts."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    pieces = [blk.slice(off, rows) for (off, rows), blk in zip(parts, blocks)]
    out = B.concat(pieces) if pieces else pa.table({})
    out = out.combine_chunks() if out.num_rows else out
    stats = B.BlockExecStats(wall_time_s=time.perf_counter() - t0, cpu_time_s=time.process_time() - c0)
    return out, B.metadata_of(out, stats=stats)


slice_task = ember.remote(num_returns=2, num_cpus=0)(slice_blocks)
