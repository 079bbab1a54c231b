"""The task or actor call that the calling thread (or coroutine) is running now.

An actor with `max_concurrency > 1` runs calls on pool threads, an async actor runs them as
coroutines on its own loop: the executor's `running` (the main thread's task) is not theirs. A
context variable holds each call's spec where it runs, so `get_runtime_context()` answers for the
call that asks (Ray's current task id is per thread and per coroutine alike).
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Awaitable

from ember_common.proto import common_pb2

current: ContextVar[common_pb2.TaskSpec | None] = ContextVar("ember_current_task", default=None)


async def running_as(spec: common_pb2.TaskSpec, aw: Awaitable[Any]) -> Any:
    """Awaits `aw` as the call `spec` (run as its own asyncio task: the setting stays in it)."""
    current.set(spec)
    return await aw
