"""Ember's exception tree; the names, bases and meanings follow `ray.exceptions` (Ray 2.60).

    Exception
     └── RayError
          ├── RayTaskError            user code raised; also an instance of the user's type
          ├── RayActorError
          │    ├── ActorDiedError
          │    └── ActorUnavailableError   the actor is restarting or unreachable for now
          ├── ActorUnschedulableError      no node can ever host the actor (hard node affinity
          │                                to an unknown or dead node)
          ├── TaskUnschedulableError  no node can ever satisfy the task (infeasible)
          ├── WorkerCrashedError      the worker died and retries are exhausted
          ├── LocalRayletDiedError
          ├── NodeDiedError
          ├── TaskCancelledError
          ├── RuntimeEnvSetupError    the task's or actor's runtime_env could not be set up
          ├── ObjectLostError
          │    ├── OwnerDiedError
          │    ├── ObjectFetchTimedOutError     pulling the object from its node timed out
          │    ├── ObjectFreedError
          │    ├── ReferenceCountingAssertionError  (also an AssertionError)
          │    └── ObjectReconstructionFailedError      lineage could not rebuild it
          │         ├── ObjectReconstructionFailedMaxAttemptsExceededError
          │         └── ObjectReconstructionFailedLineageEvictedError
          ├── ObjectStoreFullError
          ├── OutOfDiskError, OutOfMemoryError
          ├── GetTimeoutError         (also a TimeoutError)
          ├── PendingCallsLimitExceeded    an actor handle's max_pending_calls is reached
          ├── TaskPlacementGroupRemoved, ActorPlacementGroupRemoved
          ├── PlasmaObjectNotAvailable, AsyncioActorExit, ObjectRefStreamEndOfStreamError
          ├── UserCodeException, UnserializableException, CrossLanguageError, RpcError
          ├── OufOfBandObjectRefSerializationException
          ├── RaySystemError          Ember itself failed (a bug or a lost service)
          │    ├── RayChannelError
          │    │    └── RayChannelTimeoutError  (also a TimeoutError)
          │    └── RayCgraphCapacityExceeded
          └── AuthenticationError     the cluster rejected this process's auth token
                                      (also ember_common.rpc.AuthenticationError, a ServiceError)

Each class's docstring says when Ember raises it. Classes for situations Ember has no
counterpart of (another language's worker, compiled-graph channels) say so:
they exist so that `except ray.exceptions.X:` in a Ray program imports and means the same.
"""
from __future__ import annotations

from typing import Any

from ember_common import rpc as _rpc

__all__ = [
    "RayError", "RayTaskError", "RayActorError", "ActorDiedError", "WorkerCrashedError",
    "NodeDiedError", "TaskCancelledError", "TaskUnschedulableError", "RuntimeEnvSetupError",
    "ObjectLostError",
    "OwnerDiedError", "ObjectReconstructionFailedError",
    "ObjectReconstructionFailedMaxAttemptsExceededError",
    "ObjectReconstructionFailedLineageEvictedError", "ObjectStoreFullError", "GetTimeoutError", "RaySystemError",
    "EmberError", "AuthenticationError",
    "ActorPlacementGroupRemoved", "ActorUnavailableError", "ActorUnschedulableError",
    "AsyncioActorExit", "CrossLanguageError", "LocalRayletDiedError", "ObjectFetchTimedOutError",
    "ObjectFreedError", "ObjectRefStreamEndOfStreamError",
    "OufOfBandObjectRefSerializationException", "OutOfDiskError", "OutOfMemoryError",
    "PendingCallsLimitExceeded", "PlasmaObjectNotAvailable", "RayCgraphCapacityExceeded",
    "RayChannelError", "RayChannelTimeoutError", "ReferenceCountingAssertionError", "RpcError",
    "TaskPlacementGroupRemoved", "UnserializableException", "UserCodeException",
]


class RayError(Exception):
    """Base of every error Ember raises for the user."""


EmberError = RayError


class RayTaskError(RayError):
    """A task or actor method raised. `cause` is the original exception.

    `ember.get` raises `as_instanceof_cause()`: an object that is both a RayTaskError and an
    instance of the user's exception class, so `except ValueError:` works as it would locally.
    A task that failed because a task it waited on failed keeps the innermost user exception as
    its cause (as Ray does); its traceback text names every task on the way.
    """

    cause: BaseException | None

    def __init__(self, function_name: str, traceback_str: str, cause: BaseException | None,
                 pid: int = 0, ip: str = "", trace_id: str = "") -> None:
        while isinstance(cause, RayTaskError) and cause.cause is not None:
            cause = cause.cause  # nested tasks: the user's exception, not another wrapper
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.ip = ip
        self.trace_id = trace_id
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" (pid={self.pid}, ip={self.ip})" if self.pid else ""
        trace = f" [trace_id={self.trace_id}]" if self.trace_id else ""
        cause = type(self.cause).__name__ if self.cause is not None else "Error"
        return f"{cause} in {self.function_name}(){where}{trace}\n{self.traceback_str.rstrip()}"

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[Any, ...]:
        # The cause travels as (class, args, attributes) and is rebuilt without calling its
        # __init__, so exception classes whose __init__ takes other arguments than their `args`
        # (a common pattern) survive the trip.
        c = self.cause
        cause_state = None if c is None else _portable(c)
        return (_rebuild_task_error, (self.function_name, self.traceback_str, cause_state, self.pid,
                                      self.ip, self.trace_id))

    def as_instanceof_cause(self) -> RayTaskError:
        """Returns an exception that is an instance of both RayTaskError and the cause's type."""
        cause_cls = type(self.cause) if self.cause is not None else None
        if cause_cls is None or issubclass(cause_cls, RayTaskError) or not _subclassable(cause_cls):
            return self
        name = f"RayTaskError({cause_cls.__name__})"
        try:
            namespace: dict[str, Any] = {
                "__init__": lambda s, *a: None,
                "__str__": RayTaskError.__str__,
                "__reduce__": RayTaskError.__reduce__,
                "__module__": __name__,
            }
            cls: type[RayTaskError] = type(name, (RayTaskError, cause_cls), namespace)
            inst = cls.__new__(cls)
        except TypeError:  # the cause's type cannot be mixed in (layout conflict)
            return self
        inst.__dict__.update(self.__dict__)
        inst.args = (self._message(),)
        if self.cause is not None:
            # Keep the user's attributes (e.g. errno, custom fields) reachable on the new object.
            for k, v in getattr(self.cause, "__dict__", {}).items():
                inst.__dict__.setdefault(k, v)
        return inst


def _portable(c: BaseException) -> Any:
    """The cause itself if it survives pickling as is (keeping C-level fields such as
    OSError.filename), else (class, args, attributes) to rebuild it without its __init__."""
    import pickle

    import cloudpickle

    try:
        pickle.loads(cloudpickle.dumps(c))
        return c
    except Exception:
        return (type(c), c.args, dict(getattr(c, "__dict__", {})))


def _rebuild_task_error(function_name: str, traceback_str: str, cause_state: Any, pid: int,
                        ip: str, trace_id: str) -> RayTaskError:
    cause = None
    if isinstance(cause_state, BaseException):
        cause = cause_state
    elif cause_state is not None:
        cls, args, attrs = cause_state
        try:
            cause = cls.__new__(cls, *args)
        except Exception:  # a __new__ with its own signature
            cause = cls.__new__(cls)
        cause.args = args
        for k, v in attrs.items():
            setattr(cause, k, v)
    return RayTaskError(function_name, traceback_str, cause, pid, ip, trace_id)


def _subclassable(cls: type) -> bool:
    return issubclass(cls, Exception)


class RayActorError(RayError):
    """An actor died or could not be reached. `cause`: what killed it, when known (e.g. the
    RuntimeEnvSetupError of an actor whose runtime_env could not be set up)."""

    cause: BaseException | None = None

    def __init__(self, message: str = "The actor died unexpectedly.", actor_id: str = "") -> None:
        self.actor_id = actor_id
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:  # keeps the actor id (and `cause`) across processes
        return type(self), (self.args[0] if self.args else "", self.actor_id), self.__dict__


class ActorDiedError(RayActorError):
    """The actor died (killed, crashed, or its owner exited)."""


class WorkerCrashedError(RayError):
    """The worker running the task died; retries (max_retries) are exhausted."""


class NodeDiedError(RayError):
    """The node running the task died (its raylet is unreachable) and the task's retries
    (max_retries) are used up. An actor on a dead node gives ActorDiedError, an object that
    was only there ObjectLostError, as in Ray."""


class TaskCancelledError(RayError):
    """The task was cancelled with `ember.cancel`."""

    def __init__(self, task_id: str = "", message: str | None = None) -> None:
        self.task_id = task_id
        super().__init__(message or f"Task {task_id} was cancelled.")

    def __reduce__(self) -> tuple[Any, ...]:  # the message must not be wrapped again
        return (TaskCancelledError, (self.task_id, str(self)))


class TaskUnschedulableError(RayError):
    """No node in the cluster can ever satisfy the task's resource request."""


class RuntimeEnvSetupError(RayError):
    """The node could not set up the runtime_env (a package, a pip install, the set-up timeout);
    `error_message` says what failed (with pip's output tail). Not retried."""

    def __init__(self, error_message: str = "", task_name: str = "") -> None:
        self.error_message = error_message
        self.task_name = task_name
        what = f" for {task_name}()" if task_name else ""
        super().__init__(f"Failed to set up runtime environment{what}.\n{error_message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RuntimeEnvSetupError, (self.error_message, self.task_name))


class ObjectLostError(RayError):
    """An object's value is gone (its node died, or its spill file is unreadable)."""

    def __init__(self, object_id: str = "", message: str | None = None) -> None:
        self.object_id = object_id
        super().__init__(message or f"Object {object_id} is lost.")

    def __reduce__(self) -> tuple[Any, ...]:  # keeps the id and the message apart
        return (type(self), (self.object_id, str(self)))


class OwnerDiedError(ObjectLostError):
    """The process that owned the object exited."""


class ObjectReconstructionFailedError(ObjectLostError):
    """Every copy of the object is lost and its owner could not rebuild it from its lineage
    (the message says why)."""


class ObjectReconstructionFailedMaxAttemptsExceededError(ObjectReconstructionFailedError):
    """The object is lost and the task that made it has no retries left (`max_retries`)."""


class ObjectReconstructionFailedLineageEvictedError(ObjectReconstructionFailedError):
    """The object is lost and its lineage was evicted to bound the owner's memory
    (`EMBER_MAX_LINEAGE_BYTES`)."""


class ObjectStoreFullError(RayError):
    """The object store is full and nothing could be spilled."""


class GetTimeoutError(RayError, TimeoutError):
    """`ember.get` timed out."""


class RaySystemError(RayError):
    """Ember itself failed (a lost service or an internal bug)."""


class AuthenticationError(RayError, _rpc.AuthenticationError):
    """The cluster rejected this process's auth token, or it sent none. The message names the
    token source this process used (EMBER_AUTH_TOKEN, EMBER_AUTH_TOKEN_PATH or
    ~/.ember/auth_token) and how to set the cluster's token (`ember get-auth-token`)."""


_rpc.use_client_error(AuthenticationError)  # failed calls of the kit's clients raise this class


# -- The rest of Ray's tree ------------------------------------------------------------------


class _MessageError(RayError):
    """A RayError built from one message (Ray's `error_message`/`message` argument)."""

    def __init__(self, error_message: str = "") -> None:
        self.error_message = error_message
        self.message = error_message
        super().__init__(error_message)


class ActorUnavailableError(RayActorError):
    """The actor cannot be reached for now (restarting, or its worker unreachable) and may be
    again later; the call may or may not have run. Raised, as Ray does, for a call with no
    retries left whose actor's worker was lost while it ran and the actor lives on (it
    restarts, or the GCS still has it ALIVE), and for calls of an actor whose calls have no
    retries (max_task_retries=0) sent while the GCS says it is RESTARTING."""

    def __init__(self, error_message: str = "", actor_id: bytes | str | None = None) -> None:
        aid = actor_id.hex() if isinstance(actor_id, bytes) else (actor_id or "")
        super().__init__(f"The actor {aid} is unavailable: {error_message}. The task may or may "
                         "not have been executed on the actor.", actor_id=aid)
        self.error_message = error_message

    def __reduce__(self) -> tuple[Any, ...]:  # the message must not be wrapped again
        return type(self), (self.error_message, self.actor_id), self.__dict__


class ActorUnschedulableError(_MessageError):
    """No node can ever host the actor. Ember raises it from `Actor.remote()` when a hard
    NodeAffinitySchedulingStrategy names a dead or unknown node (Ray: at the first call's get)."""

    def __str__(self) -> str:
        return f"The actor is not schedulable: {self.error_message}"


class LocalRayletDiedError(RayError):
    """The raylet of the task's node died. Ember reports a lost local raylet as
    RaySystemError naming the raylet; this class is for Ray programs that catch it."""


class OutOfDiskError(RayError):
    """The object store is full and so is the disk it spills to (Ember reports a store it
    cannot spill from as ObjectStoreFullError)."""


class OutOfMemoryError(_MessageError):
    """The node ran low on memory and its raylet's memory monitor killed the task's worker to
    free it (EMBER_MEMORY_USAGE_THRESHOLD); the message names the node, its usage and the
    threshold. Raised by `get` once the task may not run again: it was its owner's last task on
    the node, it is not retriable (max_retries=0), or EMBER_TASK_OOM_RETRIES are used up. The
    calls of an actor killed so raise it too once the actor is dead (it restarts, as on any
    death, while max_restarts allows), as Ray's do."""


class ObjectFetchTimedOutError(ObjectLostError):
    """Pulling the object from the node that holds it timed out. Ember raises it from `get`
    when the last pull it tried hit its deadline."""


class ObjectFreedError(ObjectLostError):
    """The object was freed explicitly (internal free) while a reference was still used."""


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    """The object was deleted while a reference to it still existed (a reference-counting bug)."""


class PendingCallsLimitExceeded(RayError):
    """The caller has max_pending_calls calls of this actor unfinished already. Ember raises
    it from `handle.method.remote()` (the limit counts this process's calls of the actor)."""


class TaskPlacementGroupRemoved(RayError):
    """The placement group the task was to run in was removed."""


class ActorPlacementGroupRemoved(RayError):
    """The placement group the actor was to run in was removed."""


class PlasmaObjectNotAvailable(RayError):
    """The object was not available in the object store within the timeout."""


class AsyncioActorExit(RayError):
    """An async actor left through exit_actor()."""


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more ObjectRefs to give."""


class UserCodeException(RayError):
    """Wraps an exception raised by user code (retry_exceptions still looks at its cause)."""


class UnserializableException(RayError):
    """The exception a task raised could not be pickled; the message carries its text."""


class OufOfBandObjectRefSerializationException(RayError):
    """An ObjectRef was serialized out of band (outside Ember's serializer), which Ray refuses
    when configured to."""


class CrossLanguageError(RayError):
    """Raised by a worker of another language (Ember runs Python workers only)."""


class RpcError(RayError):
    """An error of the RPC layer; `rpc_code` is the status code when known."""

    def __init__(self, message: str = "", rpc_code: int | None = None) -> None:
        self.message = message
        self.rpc_code = rpc_code
        super().__init__(message)


class RayChannelError(RaySystemError):
    """A compiled graph's channel failed (Ember has no compiled graphs: never raised)."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled graph's channel operation timed out."""


class RayCgraphCapacityExceeded(RaySystemError):
    """A compiled graph has more executions in flight than its buffers hold."""
