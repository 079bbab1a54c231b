"""The streaming executor: runs a physical plan in a driver thread, block by block.

Loop: poll operators (limit/union/actor pools), move finished blocks to their consumers, launch
tasks while the budget policy allows (downstream first), wait for the next event of any task in
flight (a block streamed out of a map task, the end of a task; waiter.py), repeat. Map tasks
cut their output into blocks of the target size (`DataContext.target_max_block_size`, at most a
sixteenth of the budget) and stream them out as they are produced. Outputs of the last operator
go to a queue the consumer (iterator, write, materialize) reads; what waits there counts against
the budget, so a slow consumer slows the pipeline instead of filling the store. Results flow as tasks
finish; they are kept in order only with `execution_options.preserve_order`.

Each operator gets an OpenTelemetry span (spans.py) and a progress bar; a failing task fails the execution with the user's exception (its type kept, a note naming
the operator) after every task is cancelled and every actor is killed, unless
`DataContext.max_errored_blocks` allows skipping the block.
"""
from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from typing import Any, Iterator

import ember
from ember.data.block import BlockMetadata
from ember.data.context import DataContext

from . import plan as P
from .actor_pool import ActorPoolMapOp
from .all_to_all import AllToAllOp
from .backpressure import BudgetPolicy, RecentlyFreed, budget_from, max_in_flight
from .operators import Call, InputOp, LimitOp, RefBundle, RuntimeOp, TaskMapOp, UnionOp
from .progress import ProgressBars
from .spans import ExecutionSpans
from .stats import DatasetStats
from .tasks import annotate, make_map_task, slice_task
from .waiter import Event, Waiter

log = logging.getLogger(__name__)
_DONE = object()
# Blocks are at most this share of the budget, so that many of them fit in it at once.
BLOCKS_PER_BUDGET = 16


def _fallback_store_bytes() -> float:
    import psutil

    return psutil.virtual_memory().total * 0.3  # the default store size (30% of RAM)


def target_block_bytes(budget: float, target_max: int | None, target_min: int) -> int:
    """Blocks of at most target_max bytes and at most 1/BLOCKS_PER_BUDGET of the budget (not
    below target_min); target_max None: no size cut (a task's output stays one block)."""
    if target_max is None:
        return sys.maxsize
    return int(max(1, min(target_max, max(target_min, budget / BLOCKS_PER_BUDGET))))


class _InFlight:
    """A task in flight: its operator, its call, its generator (streaming) or return refs, and
    a ref of it to cancel it by (a stream's first item)."""

    __slots__ = ("op", "call", "gen", "refs", "cancel_ref")

    def __init__(self, op: RuntimeOp, call: Call, gen: Any = None, refs: list[Any] | None = None) -> None:
        self.op = op
        self.call = call
        self.gen = gen
        self.refs = refs or []
        self.cancel_ref: Any = None


class StreamingExecutor:
    """Runs one physical plan; iterate `run()` for its output bundles."""

    def __init__(self, root: P.PhysicalOp, ctx: DataContext, name: str = "dataset") -> None:
        self.ctx = ctx
        self.name = name
        self.preserve_order = ctx.execution_options.preserve_order
        res = ember.cluster_resources()
        self.cpus = float(res.get("CPU", 1))
        self.gpus = float(res.get("GPU", 0))
        limits = ctx.execution_options.resource_limits
        if limits.cpu is not None:
            self.cpus = min(self.cpus, limits.cpu)
        if limits.gpu is not None:
            self.gpus = min(self.gpus, limits.gpu)
        cap = res.get("object_store_memory")
        self.budget = budget_from(cap, ctx.object_store_memory_limit_fraction,
                                  limits.object_store_memory, _fallback_store_bytes())
        if limits.memory is not None:
            self.budget = min(self.budget, float(limits.memory))
        excl = ctx.execution_options.exclude_resources  # kept for other work on the cluster
        self.cpus = max(1.0, self.cpus - (excl.cpu or 0))
        self.gpus = max(0.0, self.gpus - (excl.gpu or 0))
        self.budget = max(1.0, self.budget - float(excl.object_store_memory or 0))
        self.policy = BudgetPolicy(self.budget)
        self.freed = RecentlyFreed(time.monotonic)
        self.target_block_bytes = target_block_bytes(self.budget, ctx.target_max_block_size,
                                                     ctx.target_min_block_size)
        self.ops: list[RuntimeOp] = []
        self.consumer: dict[int, tuple[RuntimeOp, int]] = {}
        self._build(root)
        self.in_flight: dict[int, _InFlight] = {}
        self._keys = 0
        self.waiter: Waiter | None = None
        self.out: collections.deque[RefBundle] = collections.deque()
        # Bytes of the bundles in `out`, kept with it under cv: the consumer's thread pops from
        # out while this executor's thread sums what the store holds (_store_bytes), and a
        # deque iterated while another thread pops raises RuntimeError.
        self.out_bytes = 0
        self.cv = threading.Condition()
        self.error: BaseException | None = None
        self.finished = False
        self.stop_flag = False
        self.errored_blocks = 0
        self.thread: threading.Thread | None = None
        self.stats = DatasetStats(ops=[o.stats for o in self.ops], budget_bytes=self.budget)
        self._t0 = 0.0
        self.spans: ExecutionSpans | None = None
        self.bars = ProgressBars([o.name for o in self.ops],
                                 ctx.enable_progress_bars and ctx.enable_operator_progress_bars)

    # --- building ----------------------------------------------------------------------------
    def _build(self, root: P.PhysicalOp) -> None:
        made: dict[int, RuntimeOp] = {}
        for p in P.topo_order(root):
            op = self._make(p)
            made[id(p)] = op
            self.ops.append(op)
            for idx, inp in enumerate(p.inputs):
                self.consumer[id(made[id(inp)])] = (op, idx)
        self.root = made[id(root)]

    def _slots(self, ra: dict[str, Any], cap: int | None) -> int:
        return max_in_flight(self.cpus, self.gpus, float(ra.get("num_cpus", 1) or 0),
                             float(ra.get("num_gpus", 0) or 0), cap,
                             self.ctx.max_tasks_in_flight_per_operator)

    def _make(self, p: P.PhysicalOp) -> RuntimeOp:
        if isinstance(p, P.PhysInput):
            return InputOp(p.name, p.bundles)
        if isinstance(p, P.PhysMap):
            ra = P.normalized_remote_args(p.remote_args)
            if P.is_actor_compute(p.compute):
                return ActorPoolMapOp(p.name, p.steps, ra, p.compute,
                                      self.ctx.max_tasks_in_flight_per_actor, self.preserve_order,
                                      self.ctx.wait_for_min_actors_s, self.target_block_bytes)
            read_tasks = None
            if p.read is not None:
                r = p.read
                read_tasks = r.datasource.get_read_tasks(
                    self._parallelism(r), columns=r.columns, filter=r.filter)
            fn = make_map_task(p.steps, p.name, ra, self.target_block_bytes)
            return TaskMapOp(p.name, fn, read_tasks, self._slots(ra, p.compute.size),
                             self.preserve_order)
        if isinstance(p, P.PhysAllToAll):
            return AllToAllOp(p.name, p.kind, p.params, len(p.inputs), p.remote_args)
        if isinstance(p, P.PhysLimit):
            return LimitOp(p.name, p.limit, slice_task)
        if isinstance(p, P.PhysUnion):
            return UnionOp(p.name, len(p.inputs), self.preserve_order)
        if isinstance(p, P.PhysZip):
            return AllToAllOp(p.name, "zip", {}, len(p.inputs), {})
        raise TypeError(f"unknown physical operator {type(p).__name__}")

    def _parallelism(self, r: P.Read) -> int:
        """Read tasks: as asked, else at least 2 per CPU and each about one block of the
        target size (a read task's output is not throttled while it runs)."""
        if r.parallelism and r.parallelism > 0:
            return r.parallelism
        n = max(self.ctx.read_op_min_num_blocks, int(self.cpus) * 2)
        est = getattr(r.datasource, "estimate_inmemory_data_size", lambda: 0)() or 0
        return max(n, int(-(-est // max(1, self.target_block_bytes))))

    # --- running -----------------------------------------------------------------------------
    def run(self) -> Iterator[RefBundle]:
        """Starts the execution thread and yields output bundles as they are ready."""
        self._start()
        try:
            while True:
                with self.cv:
                    while not self.out and not self.finished and self.error is None:
                        self.cv.wait(0.5)
                    if self.error is not None:
                        raise self.error
                    if self.out:
                        b = self.out.popleft()
                        self.out_bytes -= b.size_bytes
                        self.cv.notify_all()
                    elif self.finished:
                        return
                yield b
        finally:
            self.shutdown()

    def _start(self) -> None:
        self.spans = ExecutionSpans(self.name)
        self._t0 = time.monotonic()
        self.thread = threading.Thread(target=self._loop, name="ember-data-executor", daemon=True)
        self.thread.start()

    def shutdown(self) -> None:
        """Stops the loop, cancels tasks in flight and kills actor pools (idempotent)."""
        self.stop_flag = True
        with self.cv:
            self.cv.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            self.waiter = Waiter()
            while not self.stop_flag:
                self._step()
                if self.root.completed() and not self.root.outqueue and not self.in_flight:
                    break
                if self.in_flight:
                    self._wait_some(0.05)
                else:
                    with self.cv:
                        self.cv.wait(0.02)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            with self.cv:
                self.error = e
                self.cv.notify_all()
        finally:
            self._cleanup()
            with self.cv:
                self.finished = True
                self.cv.notify_all()

    def _step(self) -> None:
        for op in self.ops:
            op.poll()
        self._move()
        self._dispatch()
        self._move()
        self._progress()

    def _move(self) -> None:
        for op in self.ops:
            if op is self.root:
                if op.outqueue:
                    with self.cv:
                        while op.outqueue:
                            b = op.outqueue.popleft()
                            self.out.append(b)
                            self.out_bytes += b.size_bytes
                        self.cv.notify_all()
            else:
                cons, idx = self.consumer[id(op)]
                while op.outqueue:
                    cons.add_input(op.outqueue.popleft(), idx)
                if op.completed() and not cons.inputs_done[idx]:
                    cons.mark_input_done(idx)
                    self._end_span(op)
            if op.finished_early and isinstance(op, LimitOp):
                self._stop_upstream(op)
        if self.root.completed():
            self._end_span(self.root)

    def _stop_upstream(self, op: RuntimeOp) -> None:
        for up in self.ops:
            if self.consumer.get(id(up), (None, 0))[0] is op:
                if isinstance(up, TaskMapOp) and not up.finished_early:
                    up.stop_early()
                self._stop_upstream(up)

    def _store_bytes(self) -> int:
        return (sum(o.held_bytes() for o in self.ops) + self.out_bytes
                + self.freed.total())

    def _dispatch(self) -> None:
        for _ in range(1000):
            views = [o.view() for o in self.ops]
            i = self.policy.select(views, self._store_bytes())
            if i is None:
                return
            op = self.ops[i]
            call = op.next_call()
            if call is None:
                return
            self._submit(op, call)

    def _submit(self, op: RuntimeOp, call: Call) -> None:
        from opentelemetry import trace

        assert self.spans is not None
        with trace.use_span(self.spans.op_span(op), end_on_exit=False):
            out = call.fn.remote(*call.args)
        self._keys += 1
        key = self._keys
        call.expected_bytes = op.expected_output(call)
        assert self.waiter is not None
        if call.streaming:
            entry = _InFlight(op, call, gen=out)
            self.waiter.watch_stream(key, out)
        else:
            entry = _InFlight(op, call, refs=list(out) if isinstance(out, (list, tuple)) else [out])
            self.waiter.watch_value(key, entry.refs[-1])
        self.in_flight[key] = entry
        op.running[key] = call
        op.in_flight += 1
        op.in_flight_input_bytes += call.input_bytes
        op.stats.on_start()

    def _wait_some(self, timeout: float) -> None:
        assert self.waiter is not None
        for ev in self.waiter.wait(timeout):
            self._on_event(ev)

    def _on_event(self, ev: Event) -> None:
        entry = self.in_flight[ev.key]
        call = entry.call
        if ev.kind == "block":
            meta, block_ref, meta_ref = ev.payload
            if entry.cancel_ref is None:
                entry.cancel_ref = meta_ref  # ember.cancel takes a ref of the task
            call.blocks += 1
            call.produced_bytes += meta.size_bytes
            call.produced_rows += meta.num_rows
            call.last_meta = meta
            assert call.on_block is not None and self.waiter is not None
            call.on_block(call, block_ref, meta)
            self.waiter.watch_stream(ev.key, entry.gen)
            return
        self._complete(ev.key, ev)

    def _complete(self, key: int, ev: Event) -> None:
        entry = self.in_flight.pop(key)
        op, call = entry.op, entry.call
        op.running.pop(key, None)
        op.in_flight -= 1
        op.in_flight_input_bytes -= call.input_bytes
        call.args = ()  # its inputs: freed now, not whenever the last reference to call goes
        self.freed.add(call.input_bytes)
        try:
            if ev.kind == "error":
                e = ev.payload
                if not isinstance(e, Exception):
                    raise e
                if self.errored_blocks < self.ctx.max_errored_blocks:
                    self.errored_blocks += 1
                    op.stats.errored_blocks += 1
                    log.warning("ember.data: %s: skipping a block that failed (%d of "
                                "max_errored_blocks=%d): %s", op.name, self.errored_blocks,
                                self.ctx.max_errored_blocks, e)
                    op.stats.on_task_done(call.ratio_input_bytes or call.input_bytes, None)
                    if call.index >= 0:
                        op.skip_at(call.index, self.preserve_order)
                    return
                annotate(e, op.name)
                raise e
            if call.streaming:
                last = call.last_meta
                total = BlockMetadata(call.produced_rows, call.produced_bytes,
                                      exec_stats=last.exec_stats if last is not None else None)
                op.stats.on_task_done(call.ratio_input_bytes or call.input_bytes, total)
                call.on_done([], last)
            else:
                last = ev.payload
                op.stats.on_task_done(call.ratio_input_bytes or call.input_bytes,
                                      last if isinstance(last, BlockMetadata) else None)
                call.on_done(entry.refs, last)
        finally:
            if call.on_finally is not None:
                call.on_finally()

    # --- observability -----------------------------------------------------------------------
    def _end_span(self, op: RuntimeOp, error: BaseException | None = None) -> None:
        op.stats.on_end()
        if self.spans is not None:
            self.spans.end_op(op, error)

    def _progress(self, force: bool = False) -> None:
        self.bars.update([o.stats.rows_out for o in self.ops],
                         [o.est_rows_total for o in self.ops],
                         [o.completed() for o in self.ops], force)

    def _cleanup(self) -> None:
        for entry in list(self.in_flight.values()):
            ref = entry.cancel_ref if entry.call.streaming else entry.refs[-1]
            if ref is None or hasattr(entry.call.fn, "_handle"):
                continue  # actor calls end with their actors; a stream not started yet runs out
            try:
                ember.cancel(ref)
            except Exception:  # already finished
                pass
        self.in_flight.clear()
        for op in self.ops:
            op.running.clear()
        if self.waiter is not None:
            self.waiter.close()
            self.waiter = None
        for op in self.ops:
            try:
                op.shutdown()
            except Exception as e:  # pragma: no cover - best effort
                log.debug("shutdown of %s failed: %s", op.name, e)
        for op in self.ops:
            self._end_span(op, self.error)
        self.stats.wall_time_s = time.monotonic() - self._t0
        self.stats.peak_budget_usage_bytes = self.policy.peak_usage
        if self.bars.enabled:
            self.bars.close([o.stats.rows_out for o in self.ops], [o.est_rows_total for o in self.ops])
        if self.spans is not None:
            self.spans.end(self.error)
