"""How the owner of a task reads errors: `retry_exceptions` and failed dependencies.

`retry_exceptions` of remote functions, as Ray 2.60 has it: `retry_exceptions=True` retries any application error (up to `max_retries`); a list or tuple of
exception classes retries only errors that are instances of one of them (subclasses included),
and any other error fails the task at once. The list stays with the owner (on its TaskEntry):
the task queue asks `error_in_allowlist` about the error in the worker's reply, so the classes
never travel to the worker.

A failed dependency: a task whose argument is the result of a task that failed or was
cancelled fails with that error (a cancelled upstream task: `TaskCancelledError`) as soon as
the owner has the argument, without waiting for a worker, as the worker would fail it anyway.
"""
from __future__ import annotations

from typing import Any

from ember import exceptions as exc
from ember_common.proto import common_pb2, core_worker_pb2

from ..objects.serialization import ERROR_METADATA, deserialize_proto

Allowlist = tuple[type[BaseException], ...]


def check_retry_exceptions(value: Any, what: str) -> None:
    """Ray's check of the option: a bool, or a list/tuple of Exception subclasses. A wrong type
    is a TypeError, a list holding anything else a ValueError; both name the option."""
    if isinstance(value, bool):
        return
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"The type of keyword 'retry_exceptions' of {what} must be a bool or a "
                        f"list of exception classes, but received type {type(value).__name__}")
    bad = [v for v in value if not (isinstance(v, type) and issubclass(v, Exception))]
    if bad:
        raise ValueError(f"retry_exceptions of {what} must be either a boolean or a list of "
                         f"exceptions; {bad[0]!r} is not an Exception subclass")


def split(value: Any) -> tuple[bool, Allowlist | None]:
    """(the spec's retry_exceptions flag, the owner's allowlist or None for "any error")."""
    if isinstance(value, (list, tuple)):
        return bool(value), tuple(value)
    return bool(value), None


def error_in_allowlist(reply: core_worker_pb2.PushTaskReply, allowlist: Allowlist) -> bool:
    """The task queue's classifier: whether the application error in reply (a RayTaskError
    whose cause is the user's exception, or a system error) is an instance of an allowlisted
    class. An error that cannot be read here (its class does not import in the owner) or a
    stream whose error went out as an item is not retried."""
    for ret in reply.returns:
        if ret.value.metadata != ERROR_METADATA:
            continue
        try:
            error = deserialize_proto(ret.value)
        except Exception:  # noqa: BLE001 - an unreadable error is simply not retried
            return False
        if isinstance(error, exc.RayTaskError) and error.cause is not None:
            return isinstance(error.cause, allowlist) or isinstance(error, allowlist)
        return isinstance(error, allowlist)
    return False


def failed_dependency(spec: common_pb2.TaskSpec) -> BaseException | None:
    """The error a task fails with because an argument the owner inlined is an error (the
    error itself for Ember's errors, as the worker passes it on unchanged), else None."""
    for arg in spec.args:
        if arg.HasField("value") and arg.value.metadata == ERROR_METADATA:
            try:
                error = deserialize_proto(arg.value)
            except Exception as e:  # noqa: BLE001 - unreadable here: the worker says why
                return exc.RaySystemError(f"an argument of {spec.name}() is an unreadable "
                                          f"error: {type(e).__name__}: {e}")
            return error if isinstance(error, exc.RayError) else exc.RaySystemError(str(error))
    return None
