"""The effects of the result pipeline for the executor (result_pipeline.py yields them).

`PipelineEffects` is mixed into TaskExecutor (executor.py): `_do_sync` carries out an effect with
blocking calls (main or pool thread), `_do_async` with awaits on the core loop (async actors);
streamed items go to the caller over the direct connection their task came on (wire.py) or
with ReportGeneratorItem, and a user's exception becomes a
RayTaskError carrying the remote traceback (Ember's own frames cut off), or an error reply.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import os
import traceback
from typing import TYPE_CHECKING, Any, Awaitable

from ember import exceptions as exc
from ember_common import rpc, tracing
from ember_common.proto import common_pb2, core_worker_pb2

from ..objects.object_ref import ObjectRef
from ..objects.serialization import serialize_error
from . import result_pipeline as rp
from .result_pipeline import drive_sync

if TYPE_CHECKING:
    from .ports import ExecutorCore

_PRIVATE_DIR = os.path.dirname(os.path.abspath(__file__))


class PipelineEffects:
    """How the executor carries out the pipeline's effects (mixed into TaskExecutor)."""

    # Set by TaskExecutor.__init__ (and _user_loop once an async actor exists).
    core: ExecutorCore
    _max_inline: int
    _user_loop: asyncio.AbstractEventLoop | None

    def _stream(self, spec: common_pb2.TaskSpec, gen: Any) -> core_worker_pb2.PushTaskReply:
        loop = asyncio.new_event_loop() if inspect.isasyncgen(gen) else None
        try:
            return drive_sync(rp.stream(spec, gen, self._task_error, self._error_reply,
                                        self.core.refs.hand_over, self._max_inline),
                              functools.partial(self._do_sync, loop=loop))
        finally:
            if loop is not None:
                loop.close()

    def _do_sync(self, effect: rp.Effect, loop: asyncio.AbstractEventLoop | None = None) -> Any:
        """Does one effect of the pipeline with blocking calls (main or pool thread)."""
        core = self.core
        if type(effect) is rp.Store:  # the common case first, without `match`
            return core.store_value(effect.object_id, effect.value, effect.owner_worker_id)
        match effect:
            case rp.Store(oid, sv, owner):
                return core.store_value(oid, sv, owner)
            case rp.Materialize(entry, owner):
                return core.materialize(entry, owner)
            case rp.Fetch(ref):
                return core.get([ObjectRef(ref.object_id, rp.owner_of(ref), core)])[0]
            case rp.Register(done):
                return core.run(done)
            case rp.Report(caller, request):
                return self._report(caller, request)
            case rp.Next(gen):
                if loop is not None:
                    try:
                        return loop.run_until_complete(gen.__anext__())
                    except StopAsyncIteration:
                        return rp.END
                try:
                    return next(gen)
                except StopIteration:
                    return rp.END
        raise TypeError(f"unknown effect {effect!r}")

    async def _do_async(self, effect: rp.Effect) -> Any:
        """Does one effect of the pipeline on the core loop (async actors)."""
        core = self.core
        if type(effect) is rp.Store:  # the common case first, without `match`
            return await core.store_value_async(effect.object_id, effect.value,
                                                effect.owner_worker_id)
        match effect:
            case rp.Store(oid, sv, owner):
                return await core.store_value_async(oid, sv, owner)
            case rp.Materialize(entry, owner):
                return await core.materialize_async(entry, owner)
            case rp.Fetch(ref):
                return await core.get_async(ObjectRef(ref.object_id, rp.owner_of(ref), core))
            case rp.Register(done):
                return await done
            case rp.Report(caller, request):
                direct = core.direct_server.routes.get(request.task_id)
                if direct is not None:  # the task came over a direct connection: back on it
                    try:
                        await direct.report(request)  # type: ignore[misc]
                    except ConnectionError as e:
                        raise rp.CallerGone(_why(e)) from None
                    return None
                try:
                    await core.worker_stub(f"{caller.ip}:{caller.port}").ReportGeneratorItem(
                        request, timeout=60)
                except Exception as e:  # gone, or unreachable: the reply says so
                    raise rp.CallerGone(_why(e)) from None
                return None
            case rp.Next(gen):
                assert self._user_loop is not None
                step = gen.__anext__ if inspect.isasyncgen(gen) else (lambda: _next_sync(gen))
                try:
                    return await asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(step(), self._user_loop))
                except StopAsyncIteration:
                    return rp.END
        raise TypeError(f"unknown effect {effect!r}")

    def _report(self, caller: common_pb2.Address,
                request: core_worker_pb2.ReportGeneratorItemRequest) -> None:
        """Sends one item to the caller (blocking off the loop, in the background on it): on
        the direct connection its task came over (wire.py), else with a unary call."""
        direct = self.core.direct_server.routes.get(request.task_id)
        if direct is not None:
            if self.core.in_loop():
                direct.report(request, wait=False)
                return
            try:
                self.core.run(lambda: direct.report(request))  # type: ignore[arg-type,return-value]
            except ConnectionError as e:
                raise rp.CallerGone(_why(e)) from None
            return

        def call() -> Awaitable[core_worker_pb2.ReportGeneratorItemReply]:
            return self.core.worker_stub(f"{caller.ip}:{caller.port}").ReportGeneratorItem(
                request, timeout=60)

        if self.core.in_loop():
            rpc.best_effort(call())
        else:
            try:
                self.core.run(call)
            except Exception as e:  # gone, or unreachable: the reply says so
                raise rp.CallerGone(_why(e)) from None

    def _task_error(self, spec: common_pb2.TaskSpec, e: BaseException) -> exc.RayTaskError:
        frames = e.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename.startswith(_PRIVATE_DIR):
            frames = frames.tb_next  # Ember's own frames above the user's code
        tb = "".join(traceback.format_exception(type(e), e, frames))
        return exc.RayTaskError(spec.name, tb, e, pid=os.getpid(), ip=self.core.ip,
                                trace_id=tracing.trace_id_hex(spec))

    def _error_reply(self, spec: common_pb2.TaskSpec, error: BaseException,
                     application: bool = False, index: int = 0) -> core_worker_pb2.PushTaskReply:
        reply = core_worker_pb2.PushTaskReply(is_application_error=application,
                                              error_message=str(error) if application else "")
        if spec.streaming:  # the error is the stream's last item
            item = rp.error_item(spec, index, error)
            try:
                self._report(spec.caller, core_worker_pb2.ReportGeneratorItemRequest(
                    task_id=spec.task_id, index=index, item=item))
            except rp.CallerGone:
                reply.returns.append(item)  # undelivered: it travels in the reply instead
            reply.num_streamed = index + 1
            return reply
        sv = serialize_error(error)
        proto = sv.to_proto()
        for oid in spec.return_ids:
            reply.returns.append(common_pb2.ReturnObject(object_id=oid, value=proto, size=sv.size))
        return reply


def _why(e: BaseException) -> str:
    """A one-line cause for a failed call (a gRPC error's code and details)."""
    code = getattr(e, "code", None)
    if callable(code):
        return f"{code().name}: {e.details()}"  # type: ignore[attr-defined]
    return f"{type(e).__name__}: {e}"


async def _next_sync(gen: Any) -> Any:
    try:
        return next(gen)
    except StopIteration:
        raise StopAsyncIteration from None
