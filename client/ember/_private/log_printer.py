"""The driver's subscription to the GCS.

Its "driver" channel tells the GCS the driver is alive: when the stream ends and the driver does
not come back within a few seconds, the GCS finishes the job (its non-detached actors die).
With log_to_driver it also prints what the job's tasks print, prefixed Ray-style with
"(task_name pid=N)"; the lines come on the "logs" channel, published by each node's raylet log
monitor, which tails the worker log files (and sends each file's lines at most
EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S a second). The driver prints at most
EMBER_DRIVER_LOG_MAX_LINES_PER_S lines a second, all workers together (`PrintBudget`); what it
holds back is counted in one notice on stderr a second later."""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from ember_common.log_limit import LogBudget
from ember_common.proto import gcs_pb2

NOTICE_AFTER_S = 1.0


class PrintBudget:
    """How many lines the driver prints a second (a bucket of one second's lines); the lines it
    holds back are counted until `take_held`."""

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self._budget = LogBudget(per_s, max(1, int(per_s)), clock) if per_s > 0 else None
        self.held = 0

    def admit(self, lines: list[str]) -> list[str]:
        """The lines to print now (all of them without a limit)."""
        if self._budget is None:
            return lines
        out = [ln for ln in lines if self._budget.take() is not None]
        self.held += len(lines) - len(out)
        return out

    def take_held(self) -> int:
        """The lines held back since the last call."""
        held, self.held = self.held, 0
        return held


class LogPrinter:
    def __init__(self, core: Any, print_logs: bool = True) -> None:
        self.core = core
        self._channels = ["driver", "logs"] if print_logs else ["driver"]
        self._budget = PrintBudget(float(getattr(core.config, "driver_log_max_lines_per_s", 0.0)))
        self._notice: asyncio.TimerHandle | None = None
        self._task = asyncio.run_coroutine_threadsafe(self._run(), core.loop)
        self._node_id = core.node_id

    async def _run(self) -> None:
        def on_message(msg: gcs_pb2.PubMessage) -> None:
            if msg.HasField("logs"):
                self._print(msg.logs)

        await self.core.gcs.follow(self._channels, on_message, job_id=self.core.job_id)

    def _print(self, batch: gcs_pb2.LogBatch) -> None:
        lines = self._budget.admit(list(batch.lines))
        if self._budget.held and self._notice is None:  # on the loop: one notice a second at most
            self._notice = asyncio.get_running_loop().call_later(NOTICE_AFTER_S, self._print_notice)
        if not lines:
            return
        prefix = f"({batch.name or 'worker'} pid={batch.pid}"
        if batch.node_id and batch.node_id != self._node_id:
            prefix += f", node={batch.node_id[:8]}"
        prefix += ")"
        self._write(sys.stderr if batch.is_err else sys.stdout, "".join(f"{prefix} {line}\n" for line in lines))

    def _print_notice(self) -> None:
        self._notice = None
        held = self._budget.take_held()
        if held:
            self._write(sys.stderr, f"[ember] {held} lines of worker output not printed (over "
                                    f"{self._budget.per_s:g} lines/s, EMBER_DRIVER_LOG_MAX_LINES_PER_S); "
                                    "`ember logs` reads the workers' files\n")

    @staticmethod
    def _write(out: Any, text: str) -> None:
        try:
            out.write(text)
            out.flush()
        except ValueError:  # stream closed at exit
            pass

    def stop(self) -> None:
        self._task.cancel()  # cancels the subscription task on the loop
        if self._budget.held:  # held back in the last second: said now rather than never
            self._print_notice()
