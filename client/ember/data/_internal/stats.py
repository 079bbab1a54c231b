"""Per-operator execution statistics: what `Dataset.stats()` prints and what the budget learns
from (average output per input byte, largest heap growth per task)."""
from __future__ import annotations

import collections
import dataclasses
import statistics
import time

from ember.data.block import BlockMetadata

HEAP_WINDOW = 32


@dataclasses.dataclass
class OpStats:
    """Counters of one operator over one execution."""

    name: str
    tasks_done: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    blocks_out: int = 0
    input_bytes_done: int = 0
    output_bytes_done: int = 0
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    task_wall_max_s: float = 0.0
    max_heap_bytes: int = 0
    errored_blocks: int = 0
    start_time: float | None = None
    end_time: float | None = None
    initial_input_bytes: int = 0
    # Heap growth of the operator's last tasks (what the budget expects of the next one).
    recent_heap: collections.deque[int] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=HEAP_WINDOW))

    def on_start(self) -> None:
        if self.start_time is None:
            self.start_time = time.monotonic()

    def on_output(self, meta: BlockMetadata) -> None:
        self.rows_out += meta.num_rows
        self.bytes_out += meta.size_bytes
        self.blocks_out += 1

    def on_task_done(self, input_bytes: int, meta: BlockMetadata | None) -> None:
        self.tasks_done += 1
        if meta is None:
            return
        self.input_bytes_done += input_bytes
        self.output_bytes_done += meta.size_bytes
        st = meta.exec_stats
        if st is not None:
            self.wall_time_s += st.wall_time_s
            self.cpu_time_s += st.cpu_time_s
            self.task_wall_max_s = max(self.task_wall_max_s, st.wall_time_s)
            self.max_heap_bytes = max(self.max_heap_bytes, st.max_heap_bytes)
            self.recent_heap.append(st.max_heap_bytes)

    def on_end(self) -> None:
        if self.end_time is None:
            self.end_time = time.monotonic()

    def est_output_bytes(self, next_input_bytes: int) -> float:
        """Bytes the next task is expected to put into the store."""
        if self.tasks_done and self.input_bytes_done > 0 and next_input_bytes > 0:
            return next_input_bytes * self.output_bytes_done / self.input_bytes_done
        if self.tasks_done:
            return self.output_bytes_done / self.tasks_done
        return float(next_input_bytes or self.initial_input_bytes)

    def est_heap_bytes(self, next_input_bytes: int) -> float:
        """Heap the next task is expected to use while it runs (outside the store): the
        median growth of the operator's last tasks. Not the largest: a task that is the first
        in its worker also grows the heap by the modules it imports and the pages the
        allocator then keeps for the next tasks, which is not memory each task needs."""
        if self.recent_heap:
            return float(statistics.median(self.recent_heap))
        return float(next_input_bytes or self.initial_input_bytes)

    def summary(self) -> str:
        wall = (self.end_time or time.monotonic()) - (self.start_time or time.monotonic())
        lines = [f"Operator {self.name}: {self.tasks_done} tasks executed, {self.blocks_out} blocks "
                 f"produced in {wall:.2f}s"]
        if self.tasks_done:
            n = self.tasks_done
            lines.append(f"* Remote wall time: {self.wall_time_s / n * 1e3:.1f}ms mean, "
                         f"{self.task_wall_max_s * 1e3:.1f}ms max, {self.wall_time_s:.2f}s total")
            lines.append(f"* Remote cpu time: {self.cpu_time_s / n * 1e3:.1f}ms mean, "
                         f"{self.cpu_time_s:.2f}s total")
            lines.append(f"* Peak heap memory per task: {_mib(self.max_heap_bytes)}")
        lines.append(f"* Output num rows: {self.rows_out} total")
        lines.append(f"* Output size bytes: {self.bytes_out} total ({_mib(self.bytes_out)})")
        if wall > 0:
            lines.append(f"* Throughput: {self.rows_out / wall:,.0f} rows/s")
        if self.errored_blocks:
            lines.append(f"* Errored blocks skipped: {self.errored_blocks}")
        return "\n".join(lines)


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


@dataclasses.dataclass
class DatasetStats:
    """Statistics of one execution of a dataset."""

    ops: list[OpStats] = dataclasses.field(default_factory=list)
    wall_time_s: float = 0.0
    peak_budget_usage_bytes: float = 0.0
    budget_bytes: float = 0.0

    def to_summary(self) -> str:
        parts = [s.summary() for s in self.ops]
        parts.append(f"Dataset execution: {self.wall_time_s:.2f}s wall time; memory budget "
                     f"{_mib(self.budget_bytes)}, peak use {_mib(self.peak_budget_usage_bytes)}")
        return "\n\n".join(parts)
