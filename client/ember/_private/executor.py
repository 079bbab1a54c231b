"""Worker side: runs tasks pushed by owners, one at a time, on the process's main thread.

Results small enough travel back inline in the PushTask reply; bigger ones are written to the
node's shared-memory store. A user exception becomes a RayTaskError carrying the remote
traceback. Before each task the executor writes a marker line to stdout/stderr so the raylet's
log monitor can tell the driver which task printed what.
"""
from __future__ import annotations

import _thread
import asyncio
import inspect
import os
import queue
import sys
import traceback
from typing import Any

from ember import exceptions as exc
from ember._proto import common_pb2, core_worker_pb2

from .object_ref import ObjectRef
from .serialization import ERROR_METADATA, deserialize_proto, serialize, serialize_error

# A line "\x1e<job hex>\x1f<task name>" announces whose output follows (see the log monitor).
LOG_MARKER = "\x1e"
LOG_SEP = "\x1f"


class TaskExecutor:
    def __init__(self, core: Any, function_manager: Any) -> None:
        self.core = core
        self.functions = function_manager
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.running: common_pb2.TaskSpec | None = None
        self._cancel_requested: bytes | None = None
        self._last_marker: tuple[bytes, str] | None = None

    async def push(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        fut = asyncio.get_running_loop().create_future()
        self._queue.put((spec, fut))
        return await fut

    def request_exit(self) -> None:
        self._queue.put(None)

    def cancel(self, task_id: bytes, force: bool) -> bool:
        spec = self.running
        if spec is None or spec.task_id != task_id:
            return False
        if force:
            self.core.loop.call_later(0.05, os._exit, 1)
        else:
            self._cancel_requested = task_id
            _thread.interrupt_main()
        return True

    def run_forever(self) -> None:
        loop = self.core.loop
        while True:
            item = self._queue.get()
            if item is None:
                return
            spec, fut = item
            try:
                reply = self.execute(spec)
            except KeyboardInterrupt:  # a cancel that landed after the task finished
                reply = self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
            loop.call_soon_threadsafe(_resolve, fut, reply)

    def _mark(self, spec: common_pb2.TaskSpec) -> None:
        key = (spec.job_id, spec.name)
        if key != self._last_marker:
            self._last_marker = key
            line = f"{LOG_MARKER}{spec.job_id.hex()}{LOG_SEP}{spec.name}\n"
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
                stream.write(line)
                stream.flush()

    def execute(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        self.running = spec
        self._cancel_requested = None
        self._mark(spec)
        if spec.gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
        elif "CUDA_VISIBLE_DEVICES" in os.environ:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            try:
                fn = self.functions.load(spec.function.function_id, spec.job_id, spec.name)
                args, kwargs = self._resolve_args(spec)
            except exc.RayError as e:  # a failed dependency: pass its error on unchanged
                return self._error_reply(spec, e)
            except Exception as e:
                return self._error_reply(spec, self._task_error(spec, e))
            try:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
            except KeyboardInterrupt:
                if self._cancel_requested == spec.task_id:
                    return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
                raise
            except Exception as e:
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            return self._returns(spec, result)
        finally:
            self.running = None
            sys.stdout.flush()
            sys.stderr.flush()

    def _resolve_args(self, spec: common_pb2.TaskSpec) -> tuple[list[Any], dict[str, Any]]:
        values: list[Any] = []
        for arg in spec.args:
            if arg.HasField("value"):
                if arg.value.metadata == ERROR_METADATA:
                    err = deserialize_proto(arg.value)
                    raise err if isinstance(err, exc.RayError) else exc.RaySystemError(str(err))
                values.append(deserialize_proto(arg.value))
            else:
                r = arg.ref
                o = r.owner
                ref = ObjectRef(r.object_id, (o.ip, o.port, o.worker_id, o.node_id), self.core)
                values.append(self.core.get([ref])[0])
        nk = len(spec.kwarg_names)
        if nk:
            return values[:-nk], dict(zip(spec.kwarg_names, values[-nk:]))
        return values, {}

    def _returns(self, spec: common_pb2.TaskSpec, result: Any) -> core_worker_pb2.PushTaskReply:
        n = len(spec.return_ids)
        if n == 1:
            results = [result]
        else:
            try:
                results = list(result)
            except TypeError:
                results = []
            if len(results) != n:
                return self._error_reply(spec, self._task_error(spec, ValueError(
                    f"{spec.name}() declared num_returns={n} but returned "
                    f"{type(result).__name__} of length {len(results) if results else 'n/a'}")),
                    application=True)
        reply = core_worker_pb2.PushTaskReply()
        for oid, value in zip(spec.return_ids, results):
            try:
                sv = serialize(value)
            except TypeError as e:
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            for r in sv.contained_refs:
                self.core.mark_escaped(r._id)
            reply.returns.append(self.core.store_value(oid, sv))
        return reply

    def _task_error(self, spec: common_pb2.TaskSpec, e: BaseException) -> exc.RayTaskError:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        trace_id = spec.trace_context.get("traceparent", "").split("-")[1] if \
            spec.trace_context.get("traceparent") else ""
        return exc.RayTaskError(spec.name, tb, e, pid=os.getpid(), ip=self.core.ip, trace_id=trace_id)

    def _error_reply(self, spec: common_pb2.TaskSpec, error: BaseException,
                     application: bool = False) -> core_worker_pb2.PushTaskReply:
        sv = serialize_error(error)
        proto = sv.to_proto()
        reply = core_worker_pb2.PushTaskReply(is_application_error=application)
        for oid in spec.return_ids:
            reply.returns.append(common_pb2.ReturnObject(object_id=oid, value=proto, size=sv.size))
        return reply


def _resolve(fut: asyncio.Future, reply: Any) -> None:
    if not fut.done():
        fut.set_result(reply)
