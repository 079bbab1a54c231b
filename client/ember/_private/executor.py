"""Worker side: runs tasks and actor calls pushed by their owners/callers.

Normal tasks and calls of a plain actor run one at a time on the process's main thread, in
arrival order. Actor calls are first put back into each caller's submission order (sequence
numbers, see `_actor_call`). A threaded actor (max_concurrency > 1) runs calls on a thread pool;
an async actor (any `async def` method) runs them as coroutines on its own event loop thread, up
to max_concurrency at once. Small results travel back inline in the PushTask reply; bigger ones
are written to the node's shared-memory store. A user exception becomes a RayTaskError carrying
the remote traceback. Before each task the executor writes a marker line to stdout/stderr so
the raylet's log monitor can tell the driver which task printed what.
"""
from __future__ import annotations

import _thread
import asyncio
import inspect
import os
import queue
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

from ember import exceptions as exc
from ember_common.proto import common_pb2, core_worker_pb2

from ember_common import backoff, ids, rpc, tracing
from .object_ref import ObjectRef
from .serialization import ERROR_METADATA, deserialize_proto, serialize, serialize_error

_PRIVATE_DIR = os.path.dirname(os.path.abspath(__file__))

# A line "\x1e<job hex>\x1f<task name>" announces whose output follows (see the log monitor).
LOG_MARKER = "\x1e"
LOG_SEP = "\x1f"


class ActorExit(SystemExit):
    """Raised by ember.actor.exit_actor() to end the actor after the current call."""


@dataclass
class _Caller:
    next_seq: int
    buffered: dict[int, tuple[common_pb2.TaskSpec, asyncio.Future]] = field(default_factory=dict)


class TaskExecutor:
    def __init__(self, core: Any, function_manager: Any) -> None:
        self.core = core
        self.functions = function_manager
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.running: common_pb2.TaskSpec | None = None
        self._cancel_requested: bytes | None = None
        self._last_marker: tuple[bytes, str] | None = None
        # Actor state (set by the creation task).
        self.actor: Any = None
        self.actor_spec: common_pb2.TaskSpec | None = None
        self.actor_gpu_ids: list[int] = []
        self.actor_restarted = False
        self._callers: dict[str, _Caller] = {}
        self._pool: queue.SimpleQueue | None = None  # threaded actor: calls for its threads
        self._pool_threads = 0  # started so far (grown on demand up to max_concurrency)
        self._pool_idle = 0
        self._pool_waiting = 0  # calls put but not yet taken by a thread
        self._pool_lock = threading.Lock()
        self._user_loop: asyncio.AbstractEventLoop | None = None
        self._sem: asyncio.Semaphore | None = None

    # ------------------------------------------------------------------ entry (core loop)
    async def push(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        fut = asyncio.get_running_loop().create_future()
        self.submit(spec, fut)
        return await fut

    def submit(self, spec: common_pb2.TaskSpec, fut: asyncio.Future) -> None:
        """Core loop: runs a pushed task; fut gets its PushTaskReply."""
        if spec.actor_id and not spec.HasField("actor_creation"):
            self._actor_call(spec, fut)
        else:
            self._queue.put((spec, fut))

    def _actor_call(self, spec: common_pb2.TaskSpec, fut: asyncio.Future) -> None:
        """Runs calls of each caller in its submission order (seq_no), whatever order they
        arrive in; a call resent after a failure (seq below the expected one) runs at once."""
        if self.actor is None:
            fut.set_result(self._error_reply(spec, exc.ActorDiedError(
                "This worker hosts no actor (it exited or was never created here).")))
            return
        st = self._callers.get(spec.caller.worker_id)
        if st is None:
            st = self._callers[spec.caller.worker_id] = _Caller(spec.lowest_unacked)
        if spec.seq_no < st.next_seq:
            self._dispatch(spec, fut)
            return
        st.buffered[spec.seq_no] = (spec, fut)
        while st.next_seq in st.buffered:
            s, f = st.buffered.pop(st.next_seq)
            st.next_seq += 1
            self._dispatch(s, f)

    def _dispatch(self, spec: common_pb2.TaskSpec, fut: asyncio.Future) -> None:
        if self._user_loop is not None:
            asyncio.ensure_future(self._run_async(spec, fut))
        elif self._pool is not None:
            # Start threads only as calls pile up: for short calls one or two threads do the
            # work, and fewer threads fight over the GIL.
            with self._pool_lock:
                self._pool_waiting += 1
                start = (self._pool_waiting > self._pool_idle and
                         self._pool_threads < self.actor_spec.actor_creation.max_concurrency)
                if start:
                    self._pool_threads += 1
                    self._pool_idle += 1
            self._pool.put((spec, fut))
            if start:
                threading.Thread(target=self._pool_thread, daemon=True,
                                 name=f"ember-actor-{self._pool_threads}").start()
        else:
            self._queue.put((spec, fut))

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

    # ------------------------------------------------------------------ main thread
    def run_forever(self) -> None:
        """Runs tasks from the main queue until a None arrives."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            spec, fut = item
            try:
                reply = self.execute(spec)
            except KeyboardInterrupt:  # a cancel that landed after the task finished
                reply = self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
            self.core.post(_resolve, fut, reply)

    def _pool_thread(self) -> None:
        assert self._pool is not None
        while True:
            spec, fut = self._pool.get()
            with self._pool_lock:
                self._pool_idle -= 1
                self._pool_waiting -= 1
            try:
                reply = self.execute(spec)
            finally:
                with self._pool_lock:
                    self._pool_idle += 1
            self.core.post(_resolve, fut, reply)

    def _mark(self, spec: common_pb2.TaskSpec) -> None:
        name = self.actor_spec.actor_creation.class_name if self.actor_spec is not None else spec.name
        key = (spec.job_id, name)
        if key != self._last_marker:
            self._last_marker = key
            line = f"{LOG_MARKER}{spec.job_id.hex()}{LOG_SEP}{name}\n"
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
                stream.write(line)
                stream.flush()

    def execute(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        if tracing.enabled() and spec.trace_context:
            with self._span(spec) as sp:
                reply = self._execute(spec)
                if reply.is_application_error:
                    tracing.set_error(sp, reply.error_message)
        else:
            reply = self._execute(spec)
        if self.core.refs.unacked():  # refs borrowed by this task and still held: register first
            self.core._call(self.core.refs.flush())
        return reply

    def _span(self, spec: common_pb2.TaskSpec) -> Any:
        """The execution span, child of the submission that travelled with the task."""
        core = self.core
        return tracing.execute_span(
            f"execute {spec.name}", spec.trace_context,
            **{"ember.task_id": spec.task_id.hex(), "ember.job_id": spec.job_id.hex(),
               "ember.node_id": core.node_id, "ember.worker_id": core.worker_id,
               "ember.attempt": spec.attempt, "ember.actor_id": spec.actor_id.hex() or None})

    def _execute(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        creating = spec.HasField("actor_creation")
        is_method = bool(spec.actor_id) and not creating
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            self.running = spec
        # What this task submits belongs to its job (the worker itself has none): nested tasks
        # and actors then find the job's import paths and namespace.
        self.core.job_id = spec.job_id
        if not is_method:
            self._cancel_requested = None
            if spec.gpu_ids:
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
            elif "CUDA_VISIBLE_DEVICES" in os.environ:
                os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if creating:
            self.actor_spec = spec
            self.actor_gpu_ids = list(spec.gpu_ids)
            self.actor_restarted = spec.attempt > 0
        self._mark(spec)
        try:
            try:
                if is_method:
                    if self.actor is None:
                        return self._error_reply(spec, exc.ActorDiedError(
                            "The actor exited (exit_actor()) before this call ran."))
                    fn = getattr(self.actor, spec.method_name)
                else:
                    fn = self.functions.load(spec.function.function_id, spec.job_id, spec.name)
                args, kwargs = self._resolve_args(spec)
            except exc.RayError as e:  # a failed dependency: pass its error on unchanged
                return self._error_reply(spec, e)
            except Exception as e:
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            try:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
            except ActorExit:
                return self._exit_actor(spec)
            except KeyboardInterrupt:
                if self._cancel_requested == spec.task_id:
                    return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
                raise
            except Exception as e:
                if creating:
                    self.actor_spec = None
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            if creating:
                self._become_actor(spec, result)
                result = None
            if spec.streaming:
                return self._stream(spec, result)
            return self._returns(spec, result)
        finally:
            if on_main:
                self.running = None
            sys.stdout.flush()
            sys.stderr.flush()

    # ------------------------------------------------------------------ actors
    def _become_actor(self, spec: common_pb2.TaskSpec, instance: Any) -> None:
        c = spec.actor_creation
        self.actor = instance
        if c.is_async:
            self._sem = asyncio.Semaphore(c.max_concurrency or 1000)
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="ember-actor-loop", daemon=True).start()
            self._user_loop = loop
        elif c.max_concurrency > 1:
            self._pool = queue.SimpleQueue()

    async def _run_async(self, spec: common_pb2.TaskSpec, fut: asyncio.Future) -> None:
        assert self._sem is not None
        async with self._sem:
            if tracing.enabled() and spec.trace_context:
                with self._span(spec) as sp:
                    reply = await self._run_async_call(spec)
                    if reply.is_application_error:
                        tracing.set_error(sp, reply.error_message)
            else:
                reply = await self._run_async_call(spec)
        if self.core.refs.unacked():
            await self.core.refs.flush()
        _resolve(fut, reply)

    async def _run_async_call(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        assert self._user_loop is not None
        self._mark(spec)
        try:
            args, kwargs = await self._resolve_args_async(spec)
            method = getattr(self.actor, spec.method_name)
            if spec.streaming:
                return await self._stream_async(spec, method(*args, **kwargs))
            if inspect.iscoroutinefunction(method):
                cf = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._user_loop)
            else:
                cf = asyncio.run_coroutine_threadsafe(_call_sync(method, args, kwargs), self._user_loop)
            result = await asyncio.wrap_future(cf)
            return await self._returns_async(spec, result)
        except exc.RayError as e:
            return self._error_reply(spec, e)
        except ActorExit:
            return self._exit_actor(spec)
        except Exception as e:
            return self._error_reply(spec, self._task_error(spec, e), application=True)

    def _exit_actor(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        core = self.core
        self.actor = None  # calls still queued or arriving fail from now on

        async def report_and_exit() -> None:
            try:
                await core.gcs.report_worker_failure(core.worker_id, core.node_id, "exit_actor()",
                                                     intentional=True, timeout_s=10,
                                                     retry=backoff.NO_RETRY)
            finally:
                core.loop.call_later(0.1, os._exit, 0)

        core.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(report_and_exit()))
        return self._error_reply(spec, exc.ActorDiedError("The actor exited via exit_actor()."))

    # ------------------------------------------------------------------ streaming generators
    def _item(self, spec: common_pb2.TaskSpec, index: int, value: Any) -> common_pb2.ReturnObject:
        oid = ids.object_id_for_return(spec.task_id, index + 1)
        try:
            sv = serialize(value)
        except TypeError as e:
            sv = serialize_error(self._task_error(spec, e))
        item = self.core.store_value(oid, sv, spec.caller.worker_id)
        return item, self._hand_over(sv, oid, spec)

    def _hand_over(self, sv: Any, oid: bytes, spec: common_pb2.TaskSpec) -> Any:
        """Refs nested in a result: the caller becomes their borrower (references.py)."""
        if not sv.contained_refs:
            return ()
        nested, register = self.core.refs.hand_over(sv.contained_refs, oid, spec.caller)
        if register is not None:
            self.core._call(register)
        return nested

    def _report(self, spec: common_pb2.TaskSpec, index: int, item: common_pb2.ReturnObject,
                nested: Any = ()) -> None:
        """Sends one item to the caller (blocking off the loop, in the background on it)."""
        c = spec.caller
        req = core_worker_pb2.ReportGeneratorItemRequest(task_id=spec.task_id, index=index, item=item,
                                                         nested=nested)
        call = lambda: self.core.worker_stub(f"{c.ip}:{c.port}").ReportGeneratorItem(req, timeout=60)  # noqa: E731
        if self.core.in_loop():
            rpc.best_effort(call())
        else:
            try:
                self.core._call(call)
            except Exception:  # the caller is gone: nobody reads the rest
                raise _CallerGone() from None

    def _stream(self, spec: common_pb2.TaskSpec, gen: Any) -> core_worker_pb2.PushTaskReply:
        index = 0
        try:
            if inspect.isasyncgen(gen):
                loop = asyncio.new_event_loop()
                try:
                    while True:
                        try:
                            value = loop.run_until_complete(gen.__anext__())
                        except StopAsyncIteration:
                            break
                        self._report(spec, index, *self._item(spec, index, value))
                        index += 1
                finally:
                    loop.close()
            else:
                if not hasattr(gen, "__next__"):
                    raise TypeError(f"{spec.name}() was called with num_returns='streaming' but "
                                    f"returned {type(gen).__name__}, not a generator")
                for value in gen:
                    self._report(spec, index, *self._item(spec, index, value))
                    index += 1
        except _CallerGone:
            return core_worker_pb2.PushTaskReply(num_streamed=index)
        except Exception as e:
            return self._error_reply(spec, self._task_error(spec, e), application=True, index=index)
        return core_worker_pb2.PushTaskReply(num_streamed=index)

    async def _stream_async(self, spec: common_pb2.TaskSpec, gen: Any) -> core_worker_pb2.PushTaskReply:
        assert self._user_loop is not None
        c = spec.caller
        stub = self.core.worker_stub(f"{c.ip}:{c.port}")
        index = 0
        step = gen.__anext__ if inspect.isasyncgen(gen) else (lambda: _next_sync(gen))
        try:
            while True:
                try:
                    value = await asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(step(), self._user_loop))
                except StopAsyncIteration:
                    break
                sv = serialize(value)
                oid = ids.object_id_for_return(spec.task_id, index + 1)
                item = await self.core.store_value_async(oid, sv, spec.caller.worker_id)
                nested: Any = ()
                if sv.contained_refs:
                    nested, register = self.core.refs.hand_over(sv.contained_refs, oid, spec.caller)
                    if register is not None:
                        await register
                await stub.ReportGeneratorItem(core_worker_pb2.ReportGeneratorItemRequest(
                    task_id=spec.task_id, index=index, item=item, nested=nested), timeout=60)
                index += 1
        except Exception as e:
            return self._error_reply(spec, self._task_error(spec, e), application=True, index=index)
        return core_worker_pb2.PushTaskReply(num_streamed=index)

    # ------------------------------------------------------------------ arguments and results
    def _resolve_args(self, spec: common_pb2.TaskSpec) -> tuple[list[Any], dict[str, Any]]:
        values: list[Any] = []
        for arg in spec.args:
            if arg.HasField("value"):
                values.append(_inline_arg(arg.value))
            elif arg.ref.HasField("resolved"):  # in shared memory, kept alive by the caller
                values.append(self.core.materialize(arg.ref.resolved, _owner(arg.ref)))
            else:
                values.append(self.core.get([_arg_ref(arg.ref, self.core)])[0])
        return _split(spec, values)

    async def _resolve_args_async(self, spec: common_pb2.TaskSpec) -> tuple[list[Any], dict[str, Any]]:
        values: list[Any] = []
        for arg in spec.args:
            if arg.HasField("value"):
                values.append(_inline_arg(arg.value))
            elif arg.ref.HasField("resolved"):
                values.append(await self.core.materialize_async(arg.ref.resolved, _owner(arg.ref)))
            else:
                values.append(await self.core.get_async(_arg_ref(arg.ref, self.core)))
        return _split(spec, values)

    def _results(self, spec: common_pb2.TaskSpec, result: Any) -> list[Any] | BaseException:
        n = len(spec.return_ids)
        if n == 1:
            return [result]
        try:
            results = list(result)
        except TypeError:
            results = []
        if len(results) != n:
            return ValueError(f"{spec.name}() declared num_returns={n} but returned "
                              f"{type(result).__name__} of length {len(results) if results else 'n/a'}")
        return results

    def _returns(self, spec: common_pb2.TaskSpec, result: Any) -> core_worker_pb2.PushTaskReply:
        results = self._results(spec, result)
        if isinstance(results, BaseException):
            return self._error_reply(spec, self._task_error(spec, results), application=True)
        reply = core_worker_pb2.PushTaskReply()
        for oid, value in zip(spec.return_ids, results):
            try:
                sv = serialize(value)
            except TypeError as e:
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            reply.returns.append(self.core.store_value(oid, sv, spec.caller.worker_id))
            if sv.contained_refs:
                reply.nested.extend(self._hand_over(sv, oid, spec))
        return reply

    async def _returns_async(self, spec: common_pb2.TaskSpec, result: Any) -> core_worker_pb2.PushTaskReply:
        results = self._results(spec, result)
        if isinstance(results, BaseException):
            return self._error_reply(spec, self._task_error(spec, results), application=True)
        reply = core_worker_pb2.PushTaskReply()
        for oid, value in zip(spec.return_ids, results):
            try:
                sv = serialize(value)
            except TypeError as e:
                return self._error_reply(spec, self._task_error(spec, e), application=True)
            reply.returns.append(await self.core.store_value_async(oid, sv, spec.caller.worker_id))
            if sv.contained_refs:
                nested, register = self.core.refs.hand_over(sv.contained_refs, oid, spec.caller)
                if register is not None:
                    await register
                reply.nested.extend(nested)
        return reply

    def _task_error(self, spec: common_pb2.TaskSpec, e: BaseException) -> exc.RayTaskError:
        frames = e.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename.startswith(_PRIVATE_DIR):
            frames = frames.tb_next  # Ember's own frames above the user's code
        tb = "".join(traceback.format_exception(type(e), e, frames))
        tp = spec.trace_context.get("traceparent", "")
        trace_id = tp.split("-")[1] if tp.count("-") >= 2 else ""
        return exc.RayTaskError(spec.name, tb, e, pid=os.getpid(), ip=self.core.ip, trace_id=trace_id)

    def _error_reply(self, spec: common_pb2.TaskSpec, error: BaseException,
                     application: bool = False, index: int = 0) -> core_worker_pb2.PushTaskReply:
        sv = serialize_error(error)
        proto = sv.to_proto()
        reply = core_worker_pb2.PushTaskReply(is_application_error=application,
                                              error_message=str(error) if application else "")
        if spec.streaming:  # the error is the stream's last item
            item = common_pb2.ReturnObject(object_id=ids.object_id_for_return(spec.task_id, index + 1),
                                           value=proto, size=sv.size)
            try:
                self._report(spec, index, item)
            except _CallerGone:
                pass
            reply.num_streamed = index + 1
            return reply
        for oid in spec.return_ids:
            reply.returns.append(common_pb2.ReturnObject(object_id=oid, value=proto, size=sv.size))
        return reply


def _inline_arg(value: common_pb2.SerializedObject) -> Any:
    if value.metadata == ERROR_METADATA:
        err = deserialize_proto(value)
        raise err if isinstance(err, exc.RayError) else exc.RaySystemError(str(err))
    return deserialize_proto(value)


def _arg_ref(r: common_pb2.ObjectRefProto, core: Any) -> ObjectRef:
    return ObjectRef(r.object_id, _owner(r), core)


def _owner(r: common_pb2.ObjectRefProto) -> tuple[str, int, str, str]:
    o = r.owner
    return (o.ip, o.port, o.worker_id, o.node_id)


def _split(spec: common_pb2.TaskSpec, values: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    nk = len(spec.kwarg_names)
    if nk:
        return values[:-nk], dict(zip(spec.kwarg_names, values[-nk:]))
    return values, {}


class _CallerGone(Exception):
    """The caller of a streaming generator cannot be reached."""


async def _next_sync(gen: Any) -> Any:
    try:
        return next(gen)
    except StopIteration:
        raise StopAsyncIteration from None


async def _call_sync(method: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return method(*args, **kwargs)


def _resolve(fut: asyncio.Future, reply: Any) -> None:
    if not fut.done():
        fut.set_result(reply)
