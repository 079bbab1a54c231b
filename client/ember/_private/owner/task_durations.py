"""How long tasks of each function run: the owner's estimate that decides pipelining.

The task queue (task_queue.py) pushes a task to a worker that is still busy only when the
function is known to be short: pipelining then saves a round trip per task, and the task waits
behind at most a few short ones. The estimate comes from the workers' own start/end times in
the push replies (`PushTaskReply.start_time_ns`, `end_time_ns`), per function (its function
table id): a moving average that rises fast (half the gap per sample: a function that turns
long stops being pipelined after one slow run) and falls slowly (an eighth: it must stay short
for several runs to be pipelined again). A function with no finished run yet is unknown, and
unknown counts as long: the first tasks of a burst spread over workers and nodes instead of
queueing behind the first leases. Pure: no clock, no I/O.
"""
from __future__ import annotations

import math

UNKNOWN = math.inf  # the estimate of a function that has not finished a run here

RISE = 0.5  # share of the gap a longer sample closes
FALL = 0.125  # share of the gap a shorter sample closes


class TaskDurations:
    """Per-function run-time estimates (seconds), bounded in the number of functions kept."""

    __slots__ = ("_est", "max_functions")

    def __init__(self, max_functions: int = 10_000) -> None:
        self._est: dict[str, float] = {}
        self.max_functions = max_functions

    def estimate(self, function_id: str) -> float:
        """The expected run time of a task of this function; UNKNOWN (inf) before its first run."""
        return self._est.get(function_id, UNKNOWN)

    def observe(self, function_id: str, seconds: float) -> float:
        """A task of this function ran for seconds (from its reply): returns the new estimate."""
        if seconds < 0 or seconds != seconds:  # a clock step on the worker: no information
            return self.estimate(function_id)
        est = self._est.get(function_id)
        if est is None:
            if len(self._est) >= self.max_functions:  # many throwaway functions: forget the oldest
                del self._est[next(iter(self._est))]
            new = seconds
        elif seconds > est:
            new = est + RISE * (seconds - est)
        else:
            new = est + FALL * (seconds - est)
        self._est[function_id] = new
        return new

    def observe_reply(self, function_id: str, start_ns: int, end_ns: int) -> None:
        """The worker's start/end times of a run from a push reply (0: it did not run)."""
        if start_ns and end_ns:
            self.observe(function_id, (end_ns - start_ns) * 1e-9)

    def __len__(self) -> int:
        return len(self._est)
