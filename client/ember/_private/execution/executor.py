"""Worker side: runs tasks and actor calls pushed by their owners/callers.

Normal tasks and calls of a plain actor run one at a time on the process's main thread, in
arrival order. Actor calls are first put back into each caller's submission order (sequence
numbers, see `_actor_call`). A threaded actor (max_concurrency > 1) runs calls on a thread pool;
an async actor (any `async def` method) runs them as coroutines on its own event loop thread, up
to max_concurrency at once. Concurrency groups each get their own pool or limit, and actor calls
are cancelled by their callers through `CallCancels` (both in actor_pools.py). Arguments, returns and streams go through one pipeline
(result_pipeline.py) for both paths: `_do_sync` and `_do_async` (executor_effects.py) only carry
out its effects (blocking calls or awaits). Small results travel back inline in the PushTask reply; bigger ones
are written to the node's shared-memory store. A user exception becomes a RayTaskError carrying
the remote traceback. Before each task the executor writes a marker line to stdout/stderr so
the raylet's log monitor can tell the driver which task printed what.
"""
from __future__ import annotations

import _thread
import asyncio
import inspect
import logging
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Coroutine, Protocol, cast

from ember import exceptions as exc
from ember_common import backoff, tracing
from ember_common.proto import common_pb2, core_worker_pb2

from ..telemetry import task_events
from . import precise_loop, worker_env
from . import result_pipeline as rp
from .actor_pools import CallCancels, ThreadPool, async_limits, thread_pools, unknown_group
from .current_task import current as _current
from .current_task import running_as
from .executor_effects import PipelineEffects
from .result_pipeline import drive_async, drive_sync

if TYPE_CHECKING:
    from .function_manager import FunctionManager
    from .ports import ExecutorCore

log = logging.getLogger(__name__)

# A line "\x1e<job hex>\x1f<task name>" announces whose output follows (see the log monitor).
LOG_MARKER = "\x1e"
_exec_names: dict[str, str] = {}  # task name -> its execute span's name (no formatting per task)


def _exec_name(task_name: str) -> str:
    name = _exec_names.get(task_name)
    if name is None:
        if len(_exec_names) >= 4096:
            _exec_names.clear()
        name = _exec_names[task_name] = f"execute {task_name}"
    return name
LOG_SEP = "\x1f"


class ActorExit(SystemExit):
    """Raised by ember.actor.exit_actor() to end the actor after the current call."""


class ReplyFuture(Protocol):
    """Where a pushed task's PushTaskReply goes, on the core loop: an asyncio future (unary
    PushTask) or a task stream's reply sink, which sends the reply on at once (no extra loop
    iteration for a done-callback)."""

    def done(self) -> bool: ...

    def set_result(self, result: core_worker_pb2.PushTaskReply, /) -> None: ...


# A task waiting in the main queue or the actor's pool; None ends run_forever().
QueueItem = tuple[common_pb2.TaskSpec, ReplyFuture]


@dataclass
class _Caller:
    next_seq: int
    buffered: dict[int, QueueItem] = field(default_factory=dict)


class TaskExecutor(PipelineEffects):
    """Runs the tasks and actor calls pushed to this worker (see the module's docstring)."""

    def __init__(self, core: ExecutorCore, function_manager: FunctionManager) -> None:
        self.core = core
        self.functions = function_manager
        self._max_inline: int = core.config.max_inline_bytes
        self._queue: queue.SimpleQueue[QueueItem | None] = queue.SimpleQueue()
        self.running: common_pb2.TaskSpec | None = None
        self._cancel_requested: bytes | None = None
        self._last_marker: tuple[bytes, str] | None = None
        # Actor state (set by the creation task).
        self.actor: object | None = None  # the actor instance (user class)
        self.actor_spec: common_pb2.TaskSpec | None = None
        self.actor_gpu_ids: list[int] = []
        self.actor_restarted = False
        self._callers: dict[str, _Caller] = {}
        # Threaded actor: a pool per concurrency group ("" = default, when max_concurrency > 1;
        # else default calls run on the main thread). Async actor: a limit per group.
        self._pools: dict[str, ThreadPool] = {}
        self._user_loop: asyncio.AbstractEventLoop | None = None
        self._core_methods: frozenset[str] = frozenset()  # async actor: run on the core loop
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._cancels = CallCancels()
        # Normal tasks: how many waits of the running task are blocked now (while > 0, tasks
        # pushed here go back to their owner unstarted), and cancels of tasks not started yet.
        self._blocked = 0
        self._cancel_queued: set[bytes] = set()
        # The running task's wait in get/wait (main thread): how a cancel ends it early.
        self._wait_lock = threading.Lock()
        self._wake: Callable[[], object] | None = None
        self._tasks: set[asyncio.Future[None]] = set()  # recursive cancels under way
        self._queued: dict[bytes, QueueItem] = {}  # normal tasks waiting for the main thread

    # ------------------------------------------------------------------ entry (core loop)
    async def push(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        """Core loop: runs a pushed task and returns its reply."""
        fut: asyncio.Future[core_worker_pb2.PushTaskReply] = asyncio.get_running_loop().create_future()
        self.submit(spec, fut)
        return await fut

    def submit(self, spec: common_pb2.TaskSpec, fut: ReplyFuture) -> None:
        """Core loop: runs a pushed task; fut gets its PushTaskReply."""
        if spec.actor_id and not spec.HasField("actor_creation"):
            self._actor_call(spec, fut)
        elif self._blocked and not spec.actor_id:
            fut.set_result(_RETURNED)  # the running task is blocked: run it elsewhere
        else:
            if not spec.actor_id:
                self._queued[spec.task_id] = (spec, fut)
            self._queue.put((spec, fut))

    # ------------------------------------------------------------------ give-back (core loop)
    def set_blocked(self, blocked: bool) -> None:
        """Core loop: the running task blocked in get/wait (or resumed). On blocking, every
        task queued behind it goes back to its owner (it may be what the task waits for), and
        so does every task pushed while it stays blocked."""
        self._blocked += 1 if blocked else -1
        if blocked and self._blocked == 1:
            self.give_back()

    def give_back(self) -> None:
        """Core loop: answers every queued normal task that has not started with
        returned_unstarted (its owner queues it again). Actor workers keep their queue (their
        calls are ordered)."""
        if self.actor is not None or self.actor_spec is not None:
            return
        keep: list[QueueItem | None] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None or item[0].actor_id:
                keep.append(item)
            else:
                self._queued.pop(item[0].task_id, None)
                _resolve(item[1], _RETURNED)
        for kept in keep:
            self._queue.put(kept)

    def _actor_call(self, spec: common_pb2.TaskSpec, fut: ReplyFuture) -> None:
        """Runs calls of each caller in its submission order (seq_no), whatever order they
        arrive in; a call resent after a failure (seq below the expected one) runs at once, and
        seqs below the caller's lowest_unacked are never waited for (it skipped them)."""
        if self.actor is None:
            fut.set_result(self._error_reply(spec, exc.ActorDiedError(
                "This worker hosts no actor (it exited or was never created here).")))
            return
        self._cancels.arrived(spec.task_id)
        st = self._callers.get(spec.caller.worker_id)
        if st is None:
            st = self._callers[spec.caller.worker_id] = _Caller(spec.lowest_unacked)
        if spec.seq_no < st.next_seq:
            self._dispatch(spec, fut)
            return
        if spec.lowest_unacked > st.next_seq:  # the caller skipped seqs (cancelled, given up)
            for seq in sorted(q for q in st.buffered if q < spec.lowest_unacked):
                self._dispatch(*st.buffered.pop(seq))
            st.next_seq = spec.lowest_unacked
        st.buffered[spec.seq_no] = (spec, fut)
        while st.next_seq in st.buffered:
            s, f = st.buffered.pop(st.next_seq)
            st.next_seq += 1
            self._dispatch(s, f)

    def _dispatch(self, spec: common_pb2.TaskSpec, fut: ReplyFuture) -> None:
        """Runs an actor call in its concurrency group (in caller order, see _actor_call)."""
        if self._user_loop is not None:
            asyncio.ensure_future(self._run_async(spec, fut))
            return
        pool = self._pools.get(spec.concurrency_group)
        if pool is not None:
            pool.put((spec, fut))
        elif not spec.concurrency_group:
            self._queue.put((spec, fut))
        else:
            self._unknown_group(spec, fut)

    def _unknown_group(self, spec: common_pb2.TaskSpec, fut: ReplyFuture) -> None:
        assert self.actor_spec is not None
        self._cancels.start(spec.task_id)
        self._cancels.finished(spec.task_id)
        err = unknown_group(spec, self.actor_spec.actor_creation)
        _resolve(fut, self._error_reply(spec, self._task_error(spec, err), application=True))

    def request_exit(self) -> None:
        """Ends run_forever() after the tasks queued before this."""
        self._queue.put(None)

    def cancel(self, task_id: bytes, force: bool, recursive: bool = False) -> bool:
        """Core loop: cancels the running task if it is task_id (force: the process exits);
        False if not. A task waiting in get/wait wakes up to be interrupted. On an actor: the
        call does not run if it has not started, a running async call is cancelled, a running
        sync call is answered as cancelled once it ends (its caller rejects force=True).
        recursive: what the task or call submitted (this worker owns it) is cancelled too."""
        if self.actor is not None:
            ok = self._cancels.cancel(task_id)
            if recursive:
                self._background(self.core.cancel_children(task_id, False))
            return ok
        spec = self.running
        if spec is None or spec.task_id != task_id:
            # Pushed here but not started (pipelined behind the running task, or still on its
            # way): it answers TaskCancelledError instead of running.
            if len(self._cancel_queued) > 10_000:  # ids of tasks that never came: forget them
                self._cancel_queued.clear()
            self._cancel_queued.add(task_id)
            item = self._queued.pop(task_id, None)
            if item is not None:  # queued here: answered now, skipped when its turn comes
                _resolve(item[1], self._error_reply(item[0], exc.TaskCancelledError(task_id.hex())))
            return True
        if force:
            self._background(self._exit_after_children(task_id if recursive else None))
            return True
        self._cancel_requested = task_id
        with self._wait_lock:
            wake, self._wake = self._wake, None
        if wake is not None:
            wake()  # blocked in get/wait: it wakes up and raises KeyboardInterrupt itself
        else:
            _thread.interrupt_main()
        if recursive:
            self._background(self.core.cancel_children(task_id, False))
        return True

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Core loop: runs coro as a task, held until it ends."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exit_after_children(self, parent: bytes | None) -> None:
        """force=True: the process exits, once what the task submitted was told to stop
        (parent, when recursive) and the cancel's reply had time to leave."""
        if parent is not None:
            try:
                await asyncio.wait_for(self.core.cancel_children(parent, True), 5)
            except Exception as e:  # noqa: BLE001 - exiting regardless
                log.debug("recursive cancel of %s: %s", parent.hex()[:8], e)
        await asyncio.sleep(0.05)
        os._exit(1)

    # ------------------------------------------------------------------ cancellable waits
    def interruptible_wait(self) -> bool:
        """A wait of the calling thread is one a cancel wakes: the main thread running a
        normal task (actor calls are not interrupted, as in Ray)."""
        spec = self.running
        return (spec is not None and not spec.actor_id
                and threading.current_thread() is threading.main_thread())

    def begin_wait(self, wake: Callable[[], object]) -> None:
        """Main thread: the running task blocks in get/wait; a cancel calls wake() (which ends
        the wait early) instead of interrupting. Raises KeyboardInterrupt when the task was
        cancelled already."""
        spec = self.running
        with self._wait_lock:
            if spec is not None and self._cancel_requested == spec.task_id:
                raise KeyboardInterrupt
            self._wake = wake

    def end_wait(self) -> None:
        """Main thread: the wait is over; KeyboardInterrupt when a cancel woke it."""
        spec = self.running
        with self._wait_lock:
            self._wake = None
            if spec is not None and self._cancel_requested == spec.task_id:
                raise KeyboardInterrupt

    # ------------------------------------------------------------------ main thread
    def run_forever(self) -> None:
        """Runs tasks from the main queue until a None arrives."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            spec, fut = item
            if self._queued:
                self._queued.pop(spec.task_id, None)
            if self._cancel_queued and spec.task_id in self._cancel_queued:
                self._cancel_queued.discard(spec.task_id)
                self.core.post(_resolve, fut, self._error_reply(
                    spec, exc.TaskCancelledError(spec.task_id.hex())))
                continue
            try:
                reply = self.execute(spec)
            except KeyboardInterrupt:  # a cancel that landed after the task finished
                reply = self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
            self.core.post(_resolve, fut, reply)

    def _run_in_pool(self, item: QueueItem) -> None:
        """A pool thread runs one actor call."""
        spec, fut = item
        self.core.post(_resolve, fut, self.execute(spec))

    def current_task(self) -> common_pb2.TaskSpec | None:
        """The task or call the calling thread or coroutine runs now (None: none)."""
        return _current.get()

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
        """Runs one task or call here (main or pool thread) and returns its reply."""
        start = time.time_ns()
        task_events.started(spec, start)
        left = None  # the execute span, when left to the owner's task events (tracing.leaves_spans)
        if tracing.enabled() and (tp := spec.trace_parent):
            # A thread's synchronous task: its span is the thread's current-span holder, made
            # an object only if code asks for it (tracing.exec_begin); else the general way.
            p = tracing.exec_begin(_exec_names.get(spec.name) or _exec_name(spec.name), spec, self.core.node_id,
                                   self.core.worker_id, tp, start)
            if p is not None:
                try:
                    reply = self._execute(spec)
                except BaseException as e:
                    tracing.exec_finish(p, None, e)
                    raise
                left = tracing.exec_finish(p, reply.error_message if reply.is_application_error else None)
            else:
                with self._span(spec, tp) as sp:
                    reply = self._execute(spec)
                    if reply.is_application_error:
                        tracing.set_error(sp, reply.error_message)
        else:
            reply = self._execute(spec)
        if spec.actor_id and not spec.HasField("actor_creation"):
            reply = self._unless_cancelled(spec, reply)
        if left is not None:
            if reply.is_application_error or spec.actor_id and spec.HasField("actor_creation"):
                # cancelled after all, or an actor's creation (its owner, the GCS, reports no
                # task events): the owner will not carry the span
                tracing.record_exec_left(left)
            else:
                reply.exec_span_left = True
        if self.core.refs.unacked():  # refs borrowed by this task and still held: register first
            self.core.run(self.core.refs.flush())
        task_events.executed(spec, reply)
        reply.start_time_ns = start
        reply.end_time_ns = time.time_ns()
        return reply

    def _unless_cancelled(self, spec: common_pb2.TaskSpec,
                          reply: core_worker_pb2.PushTaskReply) -> core_worker_pb2.PushTaskReply:
        """An actor call is over: a call cancelled while it ran (sync) answers
        TaskCancelledError (a stream has already sent its items and keeps its reply)."""
        if self._cancels.finished(spec.task_id) and not spec.streaming:
            return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
        return reply

    def _span(self, spec: common_pb2.TaskSpec, tp: bytes | None = None) -> ContextManager[Any]:
        """The execution span, child of the submission that travelled with the task; its
        attributes are the task's and this worker's ids (tracing.task_executing: a lazy span,
        recorded as one record). tp: spec.trace_parent, when the caller has read it."""
        core = self.core
        # (the cast's type as a string: ContextManager[Any] would be subscripted on every task)
        return cast("ContextManager[Any]", tracing.task_executing(_exec_name(spec.name), spec, core.node_id,
                                                                  core.worker_id, tp))

    def _execute(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        creating = spec.HasField("actor_creation")
        is_method = bool(spec.actor_id) and not creating
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            self.running = spec
        token = _current.set(spec)
        # What this task submits belongs to its job (the worker itself has none): nested tasks
        # and actors then find the job's import paths and namespace.
        self.core.job_id = spec.job_id
        if not is_method:
            self._cancel_requested = None
            worker_env.enter(spec)  # OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES
        if creating:
            self.actor_spec = spec
            self.actor_gpu_ids = list(spec.gpu_ids)
            self.actor_restarted = spec.attempt > 0
        elif is_method and not self._cancels.start(spec.task_id):
            if on_main:
                self.running = None
            _current.reset(token)
            return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
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
                args, kwargs = rp.inline_args(spec) or drive_sync(rp.resolve_args(spec), self._do_sync)
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
            return drive_sync(rp.returns(spec, result, self._task_error, self._error_reply,
                                         self.core.refs.hand_over, self._max_inline), self._do_sync)
        finally:
            if on_main:
                self.running = None
            _current.reset(token)
            if not is_method:
                worker_env.leave(spec)
            sys.stdout.flush()
            sys.stderr.flush()

    # ------------------------------------------------------------------ actors
    def _become_actor(self, spec: common_pb2.TaskSpec, instance: Any) -> None:
        c = spec.actor_creation
        self.actor = instance
        if c.is_async:
            self._limits = async_limits(c)
            loop = precise_loop.new_event_loop()  # timers wake when due (not up to 1 ms late)
            threading.Thread(target=loop.run_forever, name="ember-actor-loop", daemon=True).start()
            self._user_loop = loop
            self._core_methods = core_loop_methods(instance)
        else:
            self._pools = thread_pools(c, self._run_in_pool)

    async def _run_async(self, spec: common_pb2.TaskSpec, fut: ReplyFuture) -> None:
        limit = self._limits.get(spec.concurrency_group)
        if limit is None:
            self._unknown_group(spec, fut)
            return
        async with limit:
            if not self._cancels.start(spec.task_id):
                _resolve(fut, self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex())))
                return
            start = time.time_ns()
            task_events.started(spec, start)
            try:
                if tracing.enabled() and spec.trace_parent:
                    with self._span(spec) as sp:
                        reply = await self._run_async_call(spec)
                        if reply.is_application_error:
                            tracing.set_error(sp, reply.error_message)
                else:
                    reply = await self._run_async_call(spec)
            finally:
                self._cancels.finished(spec.task_id)
        if self.core.refs.unacked():
            await self.core.refs.flush()
        task_events.executed(spec, reply)
        reply.start_time_ns = start
        reply.end_time_ns = time.time_ns()
        _resolve(fut, reply)

    async def _run_async_call(self, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        assert self._user_loop is not None
        self._mark(spec)
        try:
            inline = rp.inline_args(spec)
            args, kwargs = inline if inline is not None else await drive_async(
                rp.resolve_args(spec), self._do_async)
            method = getattr(self.actor, spec.method_name)
            if spec.method_name in self._core_methods and not spec.streaming:
                return await self._run_on_core_loop(spec, method, args, kwargs)
            if spec.streaming:
                return await drive_async(rp.stream(spec, method(*args, **kwargs), self._task_error,
                                                   self._error_reply, self.core.refs.hand_over,
                                                   self._max_inline), self._do_async)
            if inspect.iscoroutinefunction(method):
                cf = asyncio.run_coroutine_threadsafe(running_as(spec, method(*args, **kwargs)), self._user_loop)
            else:
                cf = asyncio.run_coroutine_threadsafe(running_as(spec, _call_sync(method, args, kwargs)),
                                                      self._user_loop)
            self._cancels.running(spec.task_id, cf)  # ember.cancel cancels its coroutine
            try:
                result = await asyncio.wrap_future(cf)
            except asyncio.CancelledError:
                if not cf.cancelled():
                    raise  # this worker is shutting down, not a cancel of the call
                return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
            return await drive_async(rp.returns(spec, result, self._task_error, self._error_reply,
                                                self.core.refs.hand_over, self._max_inline),
                                     self._do_async)
        except exc.RayError as e:
            return self._error_reply(spec, e)
        except ActorExit:
            return self._exit_actor(spec)
        except Exception as e:
            return self._error_reply(spec, self._task_error(spec, e), application=True)

    async def _run_on_core_loop(self, spec: common_pb2.TaskSpec, method: Callable[..., Any],
                                args: list[Any], kwargs: dict[str, Any]) -> core_worker_pb2.PushTaskReply:
        """A method Ember marked as never blocking: it runs here, on the core loop (a coroutine
        as a task of its own, which ember.cancel cancels; a plain method inline)."""
        result = method(*args, **kwargs)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._cancels.running(spec.task_id, task)
            try:
                result = await task
            except asyncio.CancelledError:
                if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    raise  # this worker is shutting down, not a cancel of the call
                return self._error_reply(spec, exc.TaskCancelledError(spec.task_id.hex()))
        return await drive_async(rp.returns(spec, result, self._task_error, self._error_reply,
                                            self.core.refs.hand_over, self._max_inline),
                                 self._do_async)

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


def core_loop_methods(instance: object) -> frozenset[str]:
    """The methods of an async actor that run on the core loop instead of the actor's loop: the
    frozenset of names in `__ember_core_loop_methods__`, read only when the actor's class itself
    defines it (never inherited by a user's subclass; Serve's replica sets it on the instance,
    non-empty only for deployments Ember registered as never blocking). Anything else: none."""
    if "__ember_core_loop_methods__" not in type(instance).__dict__:
        return frozenset()
    names = getattr(instance, "__ember_core_loop_methods__", None)
    if not isinstance(names, frozenset) or not all(isinstance(n, str) for n in names):
        return frozenset()
    return names


async def _call_sync(method: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    return method(*args, **kwargs)


_RETURNED = core_worker_pb2.PushTaskReply(returned_unstarted=True)


def _resolve(fut: ReplyFuture, reply: core_worker_pb2.PushTaskReply) -> None:
    if not fut.done():
        fut.set_result(reply)
