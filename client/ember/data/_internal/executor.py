"""The streaming executor: runs a physical plan in a driver thread, block by block.

Loop: poll operators (limit/union/actor pools), move finished blocks to their consumers, launch
tasks while the budget policy allows (downstream first), wait for any task in flight to finish
(`ember.wait` over the metadata refs of all of them), repeat. Outputs of the last operator go to
a queue the consumer (iterator, write, materialize) reads; what waits there counts against the
budget, so a slow consumer slows the pipeline instead of filling the store. Results flow as tasks
finish; they are kept in order only with `execution_options.preserve_order`.

Each operator gets an OpenTelemetry span (child of one span for the execution) and a progress
bar; a failing task fails the execution with the user's exception (its type kept, a note naming
the operator) after every task is cancelled and every actor is killed, unless
`DataContext.max_errored_blocks` allows skipping the block.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Iterator

import ember
from ember.data.block import BlockMetadata
from ember.data.context import DataContext
from . import plan as P
from .actor_pool import ActorPoolMapOp
from .all_to_all import AllToAllOp
from .backpressure import BudgetPolicy, budget_from, max_in_flight
from .operators import Call, InputOp, LimitOp, RefBundle, RuntimeOp, TaskMapOp, UnionOp
from .progress import ProgressBars
from .stats import DatasetStats
from .tasks import annotate, make_map_task, slice_task

log = logging.getLogger(__name__)
_DONE = object()


def store_capacity_bytes() -> float | None:
    """The cluster's object store capacity, if the core reports it (Ray's cluster_resources key
    `object_store_memory`)."""
    v = ember.cluster_resources().get("object_store_memory")
    return float(v) if v else None


def _fallback_store_bytes() -> float:
    import psutil

    return psutil.virtual_memory().total * 0.3  # the default store size (30% of RAM)


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
        self.policy = BudgetPolicy(self.budget)
        self.ops: list[RuntimeOp] = []
        self.consumer: dict[int, tuple[RuntimeOp, int]] = {}
        self._build(root)
        self.in_flight: dict[Any, tuple[RuntimeOp, Call, list[Any]]] = {}
        self.out: collections.deque[RefBundle] = collections.deque()
        self.cv = threading.Condition()
        self.error: BaseException | None = None
        self.finished = False
        self.stop_flag = False
        self.errored_blocks = 0
        self.thread: threading.Thread | None = None
        self.stats = DatasetStats(ops=[o.stats for o in self.ops], budget_bytes=self.budget)
        self._t0 = 0.0
        self._spans: dict[int, Any] = {}
        self._ended: set[int] = set()
        self._root_span: Any = None
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
                                      self.ctx.wait_for_min_actors_s)
            read_tasks = None
            if p.read is not None:
                r = p.read
                read_tasks = r.datasource.get_read_tasks(
                    self._parallelism(r), columns=r.columns, filter=r.filter)
            fn = make_map_task(p.steps, p.name, ra)
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
        """Read tasks: as asked, else at least 2 per CPU and small enough that 8 of them fit
        in the memory budget."""
        if r.parallelism and r.parallelism > 0:
            return r.parallelism
        n = max(self.ctx.read_op_min_num_blocks, int(self.cpus) * 2)
        est = getattr(r.datasource, "estimate_inmemory_data_size", lambda: 0)() or 0
        return max(n, int(-(-est // max(1, self.budget / 8))))

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
                        self.cv.notify_all()
                    elif self.finished:
                        return
                yield b
        finally:
            self.shutdown()

    def _start(self) -> None:
        from opentelemetry import trace

        self._tracer = trace.get_tracer("ember.data")
        self._root_span = self._tracer.start_span(f"ember.data execute {self.name}")
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
                            self.out.append(op.outqueue.popleft())
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
        return sum(o.held_bytes() for o in self.ops) + sum(b.size_bytes for b in self.out)

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

        span = self._op_span(op)
        with trace.use_span(span, end_on_exit=False):
            out = call.fn.remote(*call.args)
        refs = list(out) if isinstance(out, (list, tuple)) else [out]
        self.in_flight[refs[-1]] = (op, call, refs)
        op.in_flight += 1
        op.in_flight_input_bytes += call.input_bytes
        op.stats.on_start()

    def _wait_some(self, timeout: float) -> None:
        keys = list(self.in_flight)
        ready, _ = ember.wait(keys, num_returns=1, timeout=timeout)
        if not ready:
            return
        if len(keys) > 1:
            ready, _ = ember.wait(keys, num_returns=len(keys), timeout=0)
        for r in ready:
            self._complete(r)

    def _complete(self, ref: Any) -> None:
        op, call, refs = self.in_flight.pop(ref)
        op.in_flight -= 1
        op.in_flight_input_bytes -= call.input_bytes
        try:
            try:
                last = ember.get(ref)
            except Exception as e:
                if self.errored_blocks < self.ctx.max_errored_blocks:
                    self.errored_blocks += 1
                    op.stats.errored_blocks += 1
                    log.warning("ember.data: %s: skipping a block that failed (%d of "
                                "max_errored_blocks=%d): %s", op.name, self.errored_blocks,
                                self.ctx.max_errored_blocks, e)
                    op.stats.on_task_done(call.input_bytes, None)
                    if call.index >= 0:
                        op.skip_at(call.index, self.preserve_order)
                    return
                annotate(e, op.name)
                raise
            op.stats.on_task_done(call.input_bytes, last if isinstance(last, BlockMetadata) else None)
            call.on_done(refs, last)
        finally:
            if call.on_finally is not None:
                call.on_finally()

    # --- observability -----------------------------------------------------------------------
    def _op_span(self, op: RuntimeOp) -> Any:
        sp = self._spans.get(id(op))
        if sp is None:
            from opentelemetry import trace

            ctx = trace.set_span_in_context(self._root_span)
            sp = self._tracer.start_span(f"ember.data operator {op.name}", context=ctx)
            self._spans[id(op)] = sp
        return sp

    def _end_span(self, op: RuntimeOp, error: BaseException | None = None) -> None:
        op.stats.on_end()
        sp = self._spans.get(id(op))
        if sp is None or id(op) in self._ended:
            return
        self._ended.add(id(op))
        s = op.stats
        sp.set_attributes({"ember.data.operator": op.name, "ember.data.rows": s.rows_out,
                           "ember.data.bytes": s.bytes_out, "ember.data.tasks": s.tasks_done,
                           "ember.data.errored_blocks": s.errored_blocks})
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            sp.record_exception(error)
            sp.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        sp.end()

    def _progress(self, force: bool = False) -> None:
        self.bars.update([o.stats.rows_out for o in self.ops],
                         [o.est_rows_total for o in self.ops],
                         [o.completed() for o in self.ops], force)

    def _cleanup(self) -> None:
        for ref, (op, call, _refs) in list(self.in_flight.items()):
            try:
                if not hasattr(call.fn, "_handle"):
                    ember.cancel(ref)
            except Exception:  # already finished
                pass
        self.in_flight.clear()
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
        if self._root_span is not None:
            if self.error is not None:
                from opentelemetry.trace import Status, StatusCode

                self._root_span.set_status(Status(StatusCode.ERROR, str(self.error)[:200]))
            self._root_span.end()
            self._root_span = None
