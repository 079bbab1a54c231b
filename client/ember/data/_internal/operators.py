"""Runtime operators of the streaming executor (driver side, executor thread only).

Each operator has input queues (one per upstream), an output queue and tasks in flight. The
executor moves bundles between queues, asks the budget policy which operator may launch a task,
and reports finished tasks back. A bundle is one block: (ObjectRef of the Arrow table, metadata).
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable

from ember.data.block import BlockMetadata

from .backpressure import OpView
from .stats import OpStats


@dataclasses.dataclass
class RefBundle:
    """One block in the object store and what is known of it."""

    ref: Any
    meta: BlockMetadata
    seq: tuple[int, ...] = ()  # position in the output order (for preserve_order)

    @property
    def num_rows(self) -> int:
        return self.meta.num_rows

    @property
    def size_bytes(self) -> int:
        return self.meta.size_bytes


@dataclasses.dataclass
class Call:
    """A task to launch: fn.remote(*args) (or an actor method).

    A streaming call (`on_block` set) is a streaming generator yielding (metadata, block)
    items: on_block gets each block as it is produced, on_done([], last metadata) runs at the
    end. Any other call is tracked by its last return, whose value on_done gets."""

    fn: Any
    args: tuple[Any, ...]
    on_done: Callable[[list[Any], Any], None]  # (all refs, value of the last ref)
    input_bytes: int = 0  # store bytes of its inputs, held until it finishes
    seq: tuple[int, ...] = ()
    on_finally: Callable[[], None] | None = None  # after on_done or a failure
    num_returns: int = 2
    index: int = -1  # dispatch index within its operator (ordering, skipping)
    # (this call, block ref, metadata); given the call so that no closure refers back to it
    # (a cycle would keep its input refs alive until the garbage collector runs)
    on_block: Callable[[Call, Any, BlockMetadata], None] | None = None
    # Bytes its output is proportional to (its input; a read's estimated size): what the
    # operator's output/input ratio is learned from.
    ratio_input_bytes: int = 0
    expected_bytes: float = 0.0  # output the budget expects of it (set at launch)
    produced_bytes: int = 0
    produced_rows: int = 0
    blocks: int = 0
    last_meta: BlockMetadata | None = None

    @property
    def streaming(self) -> bool:
        return self.on_block is not None

    def pending_bytes(self) -> float:
        """Expected output not produced yet."""
        return max(0.0, self.expected_bytes - self.produced_bytes)


class RuntimeOp:
    """Base of every runtime operator."""

    barrier = False

    def __init__(self, name: str, num_inputs: int) -> None:
        self.name = name
        self.inqueues: list[collections.deque[RefBundle]] = [collections.deque() for _ in range(num_inputs)]
        self.inputs_done = [False] * num_inputs
        self.outqueue: collections.deque[RefBundle] = collections.deque()
        self.in_flight = 0
        self.in_flight_input_bytes = 0
        self.stats = OpStats(name)
        self.max_in_flight = 1
        self.est_rows_total: int | None = None
        self.finished_early = False  # e.g. a limit was reached: upstream may stop
        self._reorder: dict[int, list[RefBundle]] = {}
        self._finished: set[int] = set()
        self._next_emit = 0
        self._dispatched = 0
        self.running: dict[int, Call] = {}  # calls in flight, by executor key

    # --- queues ----------------------------------------------------------------------------
    def add_input(self, b: RefBundle, idx: int = 0) -> None:
        self.inqueues[idx].append(b)

    def mark_input_done(self, idx: int = 0) -> None:
        self.inputs_done[idx] = True

    def all_inputs_done(self) -> bool:
        return all(self.inputs_done)

    def emit(self, b: RefBundle) -> None:
        self.stats.on_output(b.meta)
        self.outqueue.append(b)

    def emit_block(self, index: int, b: RefBundle, ordered: bool) -> None:
        """Emits a block of the index-th task; when ordered, after every block of the tasks
        before it (blocks of one task keep their order)."""
        if not ordered or index == self._next_emit:
            self.emit(b)
        else:
            self._reorder.setdefault(index, []).append(b)

    def finish_index(self, index: int, ordered: bool) -> None:
        """The index-th task has produced all its blocks (or failed and was skipped)."""
        if not ordered:
            return
        self._finished.add(index)
        while self._next_emit in self._finished:
            self._finished.discard(self._next_emit)
            self._next_emit += 1
            for nb in self._reorder.pop(self._next_emit, ()):
                self.emit(nb)

    def emit_at(self, index: int, b: RefBundle | None, ordered: bool) -> None:
        """Emits the only output of the index-th task (None: it has none)."""
        if b is not None:
            self.emit_block(index, b, ordered)
        self.finish_index(index, ordered)

    def skip_at(self, index: int, ordered: bool) -> None:
        """The index-th task's output was dropped (max_errored_blocks)."""
        self.finish_index(index, ordered)

    def queued_input_bytes(self) -> int:
        return sum(b.size_bytes for q in self.inqueues for b in q) + sum(
            b.size_bytes for bs in self._reorder.values() for b in bs)

    def held_bytes(self) -> int:
        """Store bytes this operator holds: queued inputs, inputs of tasks running, outputs."""
        return (self.queued_input_bytes() + self.in_flight_input_bytes
                + sum(b.size_bytes for b in self.outqueue) + self.internal_bytes())

    def internal_bytes(self) -> int:
        return 0

    # --- work ------------------------------------------------------------------------------
    def poll(self) -> None:
        """Moves data that needs no task (limit, union, input); called every loop."""

    def can_launch(self) -> bool:
        return False

    def next_call(self) -> Call | None:
        return None

    def completed(self) -> bool:
        """True when no more output will come."""
        return self.all_inputs_done() and self.in_flight == 0 and not any(self.inqueues)

    def view(self) -> OpView:
        nxt = self._next_input_bytes()
        heap = self.stats.est_heap_bytes(nxt)
        return OpView(self.name, in_flight=self.in_flight, max_in_flight=self.max_in_flight,
                      has_input=self.can_launch(), est_output_bytes=self.stats.est_output_bytes(nxt),
                      est_heap_bytes=heap, barrier=self.barrier,
                      pending_bytes=sum(c.pending_bytes() for c in self.running.values())
                      + self.in_flight * heap)

    def expected_output(self, call: Call) -> float:
        """Output the budget expects of call, from what the operator's tasks produced so far."""
        return self.stats.est_output_bytes(call.ratio_input_bytes or call.input_bytes)

    def _next_input_bytes(self) -> int:
        for q in self.inqueues:
            if q:
                return q[0].size_bytes
        return 0

    def shutdown(self) -> None:
        """Releases actors and anything else the operator started."""

    def next_seq(self, base: tuple[int, ...]) -> tuple[int, ...]:
        return base


class InputOp(RuntimeOp):
    """Blocks that already exist (from_items, materialized datasets)."""

    def __init__(self, name: str, bundles: list[RefBundle]) -> None:
        super().__init__(name, 0)
        self._pending = collections.deque(
            RefBundle(b.ref, b.meta, (i,)) for i, b in enumerate(bundles))
        self.est_rows_total = sum(b.num_rows for b in bundles)

    def poll(self) -> None:
        while self._pending:
            self.emit(self._pending.popleft())

    def completed(self) -> bool:
        return not self._pending


class LimitOp(RuntimeOp):
    """Passes the first `limit` rows; slices the block that crosses the limit."""

    def __init__(self, name: str, limit: int, slice_fn: Any) -> None:
        super().__init__(name, 1)
        self.limit = limit
        self.seen = 0
        self.slice_fn = slice_fn
        self._slice_pending: RefBundle | None = None
        self.est_rows_total = limit

    def poll(self) -> None:
        q = self.inqueues[0]
        while q and self.seen < self.limit and self.in_flight == 0:
            b = q.popleft()
            if self.seen + b.num_rows <= self.limit:
                self.seen += b.num_rows
                self.emit(b)
            else:
                self._slice_pending = b
                break
        if self.seen >= self.limit:
            q.clear()
            self.finished_early = True

    def can_launch(self) -> bool:
        return self._slice_pending is not None and self.in_flight == 0

    def next_call(self) -> Call | None:
        b = self._slice_pending
        if b is None:
            return None
        self._slice_pending = None
        rows = self.limit - self.seen

        def done(refs: list[Any], meta: BlockMetadata) -> None:
            self.seen += meta.num_rows
            self.emit(RefBundle(refs[0], meta, b.seq))
            self.finished_early = True

        return Call(self.slice_fn, ([(0, rows)], b.ref), done, b.size_bytes, b.seq)

    def completed(self) -> bool:
        if self.in_flight or self._slice_pending is not None:
            return False
        return self.seen >= self.limit or (self.all_inputs_done() and not self.inqueues[0])


class UnionOp(RuntimeOp):
    """Rows of every input; with preserve_order, input 0's blocks come before input 1's."""

    def __init__(self, name: str, num_inputs: int, preserve_order: bool) -> None:
        super().__init__(name, num_inputs)
        self.preserve_order = preserve_order

    def poll(self) -> None:
        for i, q in enumerate(self.inqueues):
            if self.preserve_order and any(not d or self.inqueues[j] for j, d in
                                           enumerate(self.inputs_done[:i])):
                break
            while q:
                b = q.popleft()
                self.emit(RefBundle(b.ref, b.meta, (i,) + b.seq))


class TaskMapOp(RuntimeOp):
    """A fused map operator run as tasks (reads included)."""

    def __init__(self, name: str, task_fn: Any, read_tasks: list[Any] | None,
                 max_in_flight: int, preserve_order: bool) -> None:
        super().__init__(name, 0 if read_tasks is not None else 1)
        self.task_fn = task_fn
        self.read_tasks = collections.deque(enumerate(read_tasks)) if read_tasks is not None else None
        self.max_in_flight = max_in_flight
        self.preserve_order = preserve_order
        self._counter = 0
        if read_tasks is not None:
            rows: list[int | None] = [getattr(t, "est_num_rows", None) for t in read_tasks]
            known = [r for r in rows if r is not None]
            self.est_rows_total = sum(known) if rows and len(known) == len(rows) else None
            self.stats.initial_input_bytes = max(
                [getattr(t, "est_size_bytes", 0) or 0 for t in read_tasks] or [0])

    def can_launch(self) -> bool:
        if self.in_flight >= self.max_in_flight or self.finished_early:
            return False
        if self.read_tasks is not None:
            return bool(self.read_tasks)
        return bool(self.inqueues[0])

    def _next_input_bytes(self) -> int:
        if self.read_tasks is not None:
            return getattr(self.read_tasks[0][1], "est_size_bytes", 0) if self.read_tasks else 0
        return super()._next_input_bytes()

    def next_call(self) -> Call | None:
        idx = self._dispatched
        self._dispatched += 1
        if self.read_tasks is not None:
            i, rt = self.read_tasks.popleft()
            c = Call(self.task_fn, (idx, rt), self._done_fn(idx), 0, (i,),
                     ratio_input_bytes=int(getattr(rt, "est_size_bytes", 0) or 0))
        else:
            b = self.inqueues[0].popleft()
            c = Call(self.task_fn, (idx, None, b.ref), self._done_fn(idx), b.size_bytes, b.seq)
        c.index = idx
        c.on_block = streamed_block_fn(self, self.preserve_order)
        return c

    def _done_fn(self, idx: int) -> Callable[[list[Any], Any], None]:
        def done(refs: list[Any], meta: BlockMetadata) -> None:
            self.finish_index(idx, self.preserve_order)
        return done

    def completed(self) -> bool:
        if self.in_flight:
            return False
        if self.finished_early:
            return True
        if self.read_tasks is not None:
            return not self.read_tasks
        return super().completed()

    def stop_early(self) -> None:
        """Downstream needs no more input (a limit was reached)."""
        self.finished_early = True
        if self.read_tasks is not None:
            self.read_tasks.clear()
        for q in self.inqueues:
            q.clear()


def streamed_block_fn(op: RuntimeOp, ordered: bool) -> Callable[[Call, Any, BlockMetadata], None]:
    """on_block of a streaming call: the j-th block of task c goes out as (c.seq + (j,))."""
    def on_block(c: Call, ref: Any, meta: BlockMetadata) -> None:
        op.emit_block(c.index, RefBundle(ref, meta, c.seq + (c.blocks - 1,)), ordered)
    return on_block


def now() -> float:
    return time.monotonic()
