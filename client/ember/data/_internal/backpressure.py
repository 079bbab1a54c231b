"""The streaming executor's budget and backpressure policy (pure: events in, decisions out).

One memory budget covers the whole pipeline (by default half of the object store, as Ray Data;
`ExecutionOptions.resource_limits.object_store_memory` overrides it). It counts

- store bytes: every block the executor holds (queued between operators, or handed to the
  consumer and not yet released), and
- bytes not yet in the store: for every task in flight, the output it is expected to put and
  has not put yet (tasks stream their blocks out as they produce them; the expectation is the
  operator's output/input ratio so far) plus the heap it is expected to use while it runs
  (the largest heap growth its operator's tasks reported: UDF outputs, pandas/numpy copies of
  batches, read buffers) — what Ray users most often run out of.

- blocks the executor dropped a moment ago (the inputs of a task that just finished): the store
  frees an object asynchronously, after the owner's and the readers' releases reach it (a few
  to tens of milliseconds), so they still count for FREE_GRACE_S (RecentlyFreed).

A task is launched only if it fits in what is left; operators are tried downstream first so
that data drains before more is read. Each operator also has a cap on tasks in flight (from its
concurrency and the cluster's CPUs/GPUs). If nothing at all is in flight, the most downstream
operator that has input may start one task regardless, so a pipeline whose single block is
larger than the budget still finishes (it then runs one task at a time).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable

FREE_GRACE_S = 0.1


@dataclasses.dataclass
class OpView:
    """What the policy needs to know of one operator, refreshed by the executor."""

    name: str
    in_flight: int = 0
    max_in_flight: int = 1
    has_input: bool = False
    # Estimates per task, from the operator's finished tasks (or the input size before any).
    est_output_bytes: float = 0.0
    est_heap_bytes: float = 0.0
    # True for operators that must take all their input before emitting (all-to-all): they are
    # not throttled by the budget (their data has to be held anyway).
    barrier: bool = False
    # Expected bytes of the tasks in flight not in the store yet (output still to come plus
    # heap); None: in_flight × task_cost.
    pending_bytes: float | None = None


@dataclasses.dataclass
class Usage:
    """Bytes counted against the budget right now."""

    store_bytes: int
    pending_bytes: float

    @property
    def total(self) -> float:
        return self.store_bytes + self.pending_bytes


class BudgetPolicy:
    """Decides which operator may launch its next task."""

    def __init__(self, budget_bytes: float) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"the memory budget must be > 0 bytes, got {budget_bytes}")
        self.budget_bytes = float(budget_bytes)
        self.peak_usage = 0.0

    @staticmethod
    def task_cost(op: OpView) -> float:
        """Bytes one more task of op is expected to need until its output is consumed."""
        return max(op.est_output_bytes, 0.0) + max(op.est_heap_bytes, 0.0)

    def usage(self, ops: list[OpView], store_bytes: int) -> Usage:
        """Store bytes plus the expected bytes of every task in flight."""
        pending = sum(o.in_flight * self.task_cost(o) if o.pending_bytes is None
                      else o.pending_bytes for o in ops)
        return Usage(store_bytes=store_bytes, pending_bytes=pending)

    def select(self, ops: list[OpView], store_bytes: int) -> int | None:
        """Index (into ops, ordered upstream → downstream) of the operator to launch next."""
        u = self.usage(ops, store_bytes)
        self.peak_usage = max(self.peak_usage, u.total)
        nothing_running = all(o.in_flight == 0 for o in ops)
        for i in range(len(ops) - 1, -1, -1):
            o = ops[i]
            if not o.has_input or o.in_flight >= o.max_in_flight:
                continue
            if o.barrier or u.total + self.task_cost(o) <= self.budget_bytes:
                return i
            if nothing_running:
                return i
        return None

    def may_buffer_output(self, store_bytes: int, ops: list[OpView]) -> bool:
        """Whether the consumer side may prefetch more output without exceeding the budget."""
        return self.usage(ops, store_bytes).total <= self.budget_bytes


class RecentlyFreed:
    """Bytes dropped by the executor in the last grace_s seconds (injected clock)."""

    def __init__(self, clock: Callable[[], float], grace_s: float = FREE_GRACE_S) -> None:
        self.clock = clock
        self.grace_s = grace_s
        self._items: collections.deque[tuple[float, int]] = collections.deque()
        self._total = 0

    def add(self, nbytes: int) -> None:
        """nbytes were just dropped."""
        if nbytes > 0:
            self._items.append((self.clock(), nbytes))
            self._total += nbytes

    def total(self) -> int:
        """Bytes dropped less than grace_s ago."""
        cutoff = self.clock() - self.grace_s
        while self._items and self._items[0][0] <= cutoff:
            self._total -= self._items.popleft()[1]
        return self._total


def max_in_flight(cluster_cpus: float, cluster_gpus: float, num_cpus: float, num_gpus: float,
                  cap: int | None, per_op_limit: int) -> int:
    """How many tasks of one operator to keep in flight: twice what the cluster can run at once
    (so a task is queued when one finishes), at most `cap` (concurrency) and `per_op_limit`."""
    slots = math.inf
    if num_cpus > 0:
        slots = min(slots, math.floor(cluster_cpus / num_cpus + 1e-9))
    if num_gpus > 0:
        slots = min(slots, math.floor(cluster_gpus / num_gpus + 1e-9))
    if slots == math.inf:
        slots = max(1, int(cluster_cpus))
    n = max(1, int(slots)) * 2
    if cap is not None:
        n = min(n, cap)
    return max(1, min(n, per_op_limit))


def budget_from(store_capacity_bytes: float | None, fraction: float,
                explicit_limit: float | None, fallback_bytes: float) -> float:
    """The pipeline's budget: the explicit limit, else `fraction` of the store, else fallback."""
    if explicit_limit is not None:
        return float(explicit_limit)
    if store_capacity_bytes:
        return float(store_capacity_bytes) * fraction
    return float(fallback_bytes) * fraction
