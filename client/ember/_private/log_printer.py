"""The driver's subscription to the GCS.

Its "driver" channel tells the GCS the driver is alive: when the stream ends and the driver does
not come back within a few seconds, the GCS finishes the job (its non-detached actors die).
With log_to_driver it also prints what the job's tasks print, prefixed Ray-style with
"(task_name pid=N)"; the lines come on the "logs" channel, published by each node's raylet log
monitor, which tails the worker log files."""
from __future__ import annotations

import asyncio
import sys
from typing import Any

from ember_common.proto import gcs_pb2


class LogPrinter:
    def __init__(self, core: Any, print_logs: bool = True) -> None:
        self.core = core
        self._channels = ["driver", "logs"] if print_logs else ["driver"]
        self._task = asyncio.run_coroutine_threadsafe(self._run(), core.loop)
        self._node_id = core.node_id

    async def _run(self) -> None:
        def on_message(msg: gcs_pb2.PubMessage) -> None:
            if msg.HasField("logs"):
                self._print(msg.logs)

        await self.core.gcs.follow(self._channels, on_message, job_id=self.core.job_id)

    def _print(self, batch: gcs_pb2.LogBatch) -> None:
        prefix = f"({batch.name or 'worker'} pid={batch.pid}"
        if batch.node_id and batch.node_id != self._node_id:
            prefix += f", node={batch.node_id[:8]}"
        prefix += ")"
        out = sys.stderr if batch.is_err else sys.stdout
        try:
            out.write("".join(f"{prefix} {line}\n" for line in batch.lines))
            out.flush()
        except ValueError:  # stream closed at exit
            pass

    def stop(self) -> None:
        self._task.cancel()  # cancels the subscription task on the loop
