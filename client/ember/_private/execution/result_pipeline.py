"""The worker's argument/result/stream pipeline, written once for the sync and async paths.

Each step is a generator that yields *effects* (what it needs done: materialize an argument,
fetch one from its owner, store a value, register borrowers, report a stream item, take the
next value of the user's generator) and gets each effect's result back. The executor runs a
step with `drive_sync` (plain tasks and threaded actors: blocking calls) or `drive_async`
(async actors: awaits on the core loop); only its `do(effect)` differs. An effect that raises
is thrown back into the step at the point that yielded it, so error handling (a value that does
not pickle, a caller that is gone, the user's generator raising) is written once here.

Streaming generators (Ray Data's streaming executor, LLM token streams) take this path: each
item is stored, its nested refs handed over, and reported to the caller before the next value
is taken. Pure: no I/O of its own.
"""
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Generator, NamedTuple, TypeVar, Union

from ember import exceptions as exc
from ember_common import ids
from ember_common.proto import common_pb2, core_worker_pb2

from ..objects.object_ref import OwnerAddress
from ..objects.serialization import ERROR_METADATA, SerializedValue, deserialize_proto, serialize, serialize_error


class Materialize(NamedTuple):
    """An argument in shared memory, kept alive by the caller: its value."""
    entry: common_pb2.ReturnObject
    owner: OwnerAddress


class Fetch(NamedTuple):
    """A borrowed argument: its value, from its owner."""
    ref: common_pb2.ObjectRefProto


class Store(NamedTuple):
    """A result too big to travel inline: its entry, once written to this node's shared
    memory."""
    object_id: bytes
    value: SerializedValue
    owner_worker_id: str


class Register(NamedTuple):
    """Refs nested in a result: wait until the caller is registered as their borrower."""
    done: Awaitable[None]


class Report(NamedTuple):
    """A stream item: send it to the caller (raises CallerGone when it cannot be reached)."""
    caller: common_pb2.Address
    request: core_worker_pb2.ReportGeneratorItemRequest


class Next(NamedTuple):
    """The user's generator's next value, or END."""
    gen: Any


Effect = Union[Materialize, Fetch, Store, Register, Report, Next]
END = object()  # what a Next effect returns when the user's generator is exhausted
T = TypeVar("T")
Step = Generator[Effect, Any, T]
TaskError = Callable[[common_pb2.TaskSpec, BaseException], BaseException]
ErrorReply = Callable[..., core_worker_pb2.PushTaskReply]
HandOver = Callable[[list[Any], bytes, common_pb2.Address],
                    tuple[list[core_worker_pb2.NestedRefs], Awaitable[None] | None]]


class CallerGone(Exception):
    """The caller of a streaming generator cannot be reached (the message says why)."""


def error_item(spec: common_pb2.TaskSpec, index: int, error: BaseException) -> common_pb2.ReturnObject:
    """Stream item `index` holding `error` (getting its ref raises it)."""
    sv = serialize_error(error)
    return common_pb2.ReturnObject(object_id=ids.object_id_for_return(spec.task_id, index + 1),
                                   value=sv.to_proto(), size=sv.size)


def undelivered_reply(spec: common_pb2.TaskSpec, index: int, why: str) -> core_worker_pb2.PushTaskReply:
    """The reply of a stream whose item `index` could not be reported: the stream ends there
    with an error item carried in the reply itself. A caller that is gone reads nothing; one that
    is alive but could not be called back (an unreachable address) gets the error on its own
    PushTask call instead of a silently short stream."""
    error = exc.RaySystemError(f"{spec.name}(): item {index} of the stream could not be delivered "
                               f"to the caller at {spec.caller.ip}:{spec.caller.port}: {why}")
    return core_worker_pb2.PushTaskReply(num_streamed=index + 1, returns=[error_item(spec, index, error)])


def drive_sync(step: Step[T], do: Callable[[Effect], Any]) -> T:
    """Runs a step, doing each effect with a blocking call."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = step.throw(error) if error is not None else step.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = do(effect), None
        except BaseException as e:  # thrown back where the step yielded
            value, error = None, e


async def drive_async(step: Step[T], do: Callable[[Effect], Awaitable[Any]]) -> T:
    """Runs a step, awaiting each effect."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = step.throw(error) if error is not None else step.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = await do(effect), None
        except BaseException as e:
            value, error = None, e


# ---------------------------------------------------------------------------------- steps
def resolve_args(spec: common_pb2.TaskSpec) -> Step[tuple[list[Any], dict[str, Any]]]:
    """The call's positional and keyword arguments."""
    values: list[Any] = []
    for arg in spec.args:
        if arg.HasField("value"):
            values.append(inline_arg(arg.value))
        elif arg.ref.HasField("resolved"):  # in shared memory, kept alive by the caller
            values.append((yield Materialize(arg.ref.resolved, owner_of(arg.ref))))
        else:
            values.append((yield Fetch(arg.ref)))
    nk = len(spec.kwarg_names)
    if nk:
        return values[:-nk], dict(zip(spec.kwarg_names, values[-nk:], strict=True))
    return values, {}


def returns(spec: common_pb2.TaskSpec, result: Any, task_error: TaskError,
            error_reply: ErrorReply, hand_over: HandOver,
            max_inline_bytes: int) -> Step[core_worker_pb2.PushTaskReply]:
    """The reply for a finished call: each return value inline or stored, nested refs handed
    over."""
    results = split_results(spec, result)
    if isinstance(results, BaseException):
        return error_reply(spec, task_error(spec, results), application=True)
    reply = core_worker_pb2.PushTaskReply()
    for oid, value in zip(spec.return_ids, results, strict=False):
        try:
            sv = serialize(value)
        except TypeError as e:
            return error_reply(spec, task_error(spec, e), application=True)
        if sv.size <= max_inline_bytes:
            reply.returns.append(inline_entry(oid, sv))
        else:
            reply.returns.append((yield Store(oid, sv, spec.caller.worker_id)))
        if sv.contained_refs:
            nested, register = hand_over(sv.contained_refs, oid, spec.caller)
            if register is not None:
                yield Register(register)
            reply.nested.extend(nested)
    return reply


def stream(spec: common_pb2.TaskSpec, gen: Any, task_error: TaskError, error_reply: ErrorReply,
           hand_over: HandOver, max_inline_bytes: int) -> Step[core_worker_pb2.PushTaskReply]:
    """Streams the user's generator to the caller item by item; the reply counts the items.
    An exception in the generator becomes the stream's last item."""
    index = 0
    try:
        if not (inspect.isasyncgen(gen) or hasattr(gen, "__next__")):
            raise TypeError(f"{spec.name}() was called with num_returns='streaming' but "
                            f"returned {type(gen).__name__}, not a generator")
        while True:
            value = yield Next(gen)
            if value is END:
                break
            oid = ids.object_id_for_return(spec.task_id, index + 1)
            try:
                sv = serialize(value)
            except TypeError as e:
                sv = serialize_error(task_error(spec, e))
            if sv.size <= max_inline_bytes:
                item = inline_entry(oid, sv)
            else:
                item = yield Store(oid, sv, spec.caller.worker_id)
            nested: Any = ()
            if sv.contained_refs:
                nested, register = hand_over(sv.contained_refs, oid, spec.caller)
                if register is not None:
                    yield Register(register)
            yield Report(spec.caller, core_worker_pb2.ReportGeneratorItemRequest(
                task_id=spec.task_id, index=index, item=item, nested=nested))
            index += 1
    except CallerGone as e:  # the item never reached the caller: end the stream with an error
        return undelivered_reply(spec, index, str(e))
    except Exception as e:
        return error_reply(spec, task_error(spec, e), application=True, index=index)
    return core_worker_pb2.PushTaskReply(num_streamed=index)


# ---------------------------------------------------------------------------------- helpers
def inline_args(spec: common_pb2.TaskSpec) -> tuple[list[Any], dict[str, Any]] | None:
    """The arguments when every one travelled inline (the common case: no step needed), else
    None."""
    values = []
    for arg in spec.args:
        if not arg.HasField("value"):
            return None
        values.append(inline_arg(arg.value))
    nk = len(spec.kwarg_names)
    if nk:
        return values[:-nk], dict(zip(spec.kwarg_names, values[-nk:], strict=True))
    return values, {}


def inline_entry(oid: bytes, sv: SerializedValue) -> common_pb2.ReturnObject:
    """A small value's entry: the value itself."""
    return common_pb2.ReturnObject(object_id=oid, value=sv.to_proto(), size=sv.size)


def split_results(spec: common_pb2.TaskSpec, result: Any) -> list[Any] | BaseException:
    """The call's return values, one per return id (or the error for a wrong count)."""
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


def inline_arg(value: common_pb2.SerializedObject) -> Any:
    """An argument that travelled inline (an error from a failed dependency raises)."""
    if value.metadata == ERROR_METADATA:
        err = deserialize_proto(value)
        raise err if isinstance(err, exc.RayError) else exc.RaySystemError(str(err))
    return deserialize_proto(value)


def owner_of(r: common_pb2.ObjectRefProto) -> OwnerAddress:
    """The owner of a ref argument."""
    o = r.owner
    return OwnerAddress(o.ip, o.port, o.worker_id, o.node_id)
