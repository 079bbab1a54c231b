"""RayTaskError.as_instanceof_cause, pickling, and the exception hierarchy."""
from __future__ import annotations

import pickle

import cloudpickle
import pytest

from ember import exceptions as exc
from ember.exceptions import GetTimeoutError, RayError, RayTaskError

TB = ('Traceback (most recent call last):\n  File "job.py", line 3, in compute\n'
      '    raise ValueError("bad input")\nValueError: bad input\n')


class CustomError(Exception):
    def __init__(self, message: str, code: int, *, detail: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail


class PicklableCustomError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def test_as_instanceof_cause_with_value_error():
    cause = ValueError("bad input")
    err = RayTaskError("compute", TB, cause, pid=1234, ip="10.0.0.1")
    e = err.as_instanceof_cause()
    assert isinstance(e, RayTaskError)
    assert isinstance(e, ValueError)
    assert isinstance(e, RayError)
    assert type(e) is not RayTaskError
    assert "ValueError" in type(e).__name__
    s = str(e)
    assert "compute" in s
    assert 'raise ValueError("bad input")' in s
    assert "pid=1234" in s and "10.0.0.1" in s
    assert e.cause is cause
    assert e.function_name == "compute"
    assert e.traceback_str == TB
    # `except ValueError:` catches it as it would locally.
    with pytest.raises(ValueError, match="compute"):
        raise e


def test_as_instanceof_cause_with_custom_exception_taking_extra_args():
    cause = CustomError("broken", 42, detail="more")
    tb = "Traceback...\n  in train\nCustomError: broken\n"
    e = RayTaskError("train", tb, cause).as_instanceof_cause()
    assert isinstance(e, RayTaskError)
    assert isinstance(e, CustomError)
    assert "train" in str(e)
    assert "CustomError: broken" in str(e)
    # The user's attributes stay reachable.
    assert e.code == 42
    assert e.detail == "more"
    try:
        raise e
    except CustomError as caught:
        assert caught is e


def test_as_instanceof_cause_keeps_ray_task_error_attributes_over_cause_attributes():
    class Shadowing(Exception):
        def __init__(self) -> None:
            super().__init__("x")
            self.function_name = "user's value"

    e = RayTaskError("real_fn", "tb", Shadowing()).as_instanceof_cause()
    assert e.function_name == "real_fn"


def test_as_instanceof_cause_without_cause_or_with_base_exception_returns_self():
    err = RayTaskError("f", "tb", None)
    assert err.as_instanceof_cause() is err
    err2 = RayTaskError("f", "tb", KeyboardInterrupt())
    assert err2.as_instanceof_cause() is err2



def test_a_nested_task_error_keeps_the_innermost_user_exception():
    nested = RayTaskError("g", "tb2", ValueError("x"))
    err3 = RayTaskError("f", "tb naming g()", nested)
    assert type(err3.cause) is ValueError
    e = err3.as_instanceof_cause()
    assert isinstance(e, ValueError) and isinstance(e, RayTaskError) and "g()" in str(e)


@pytest.mark.parametrize("cause", [KeyError("k"), OSError(2, "no such file"), ZeroDivisionError("z"),
                                   TimeoutError("t"), RuntimeError("r")])
def test_as_instanceof_cause_for_builtin_exception_types(cause):
    e = RayTaskError("f", "the traceback", cause).as_instanceof_cause()
    assert isinstance(e, RayTaskError)
    assert isinstance(e, type(cause))
    assert "the traceback" in str(e)
    assert "f()" in str(e)


def test_message_mentions_cause_type_and_trace_id():
    err = RayTaskError("fn", "tb text\n\n", ValueError("v"), trace_id="abc123")
    s = str(err)
    assert s.startswith("ValueError in fn()")
    assert "[trace_id=abc123]" in s
    assert s.endswith("tb text")
    assert err.args == (s,)
    assert "pid=" not in s  # no pid given


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_ray_task_error_pickle_round_trip(dumps):
    err = RayTaskError("compute", TB, ValueError("bad input"), pid=7, ip="1.2.3.4", trace_id="t")
    out = pickle.loads(dumps(err))
    assert type(out) is RayTaskError
    assert (out.function_name, out.traceback_str, out.pid, out.ip, out.trace_id) == (
        "compute", TB, 7, "1.2.3.4", "t")
    assert isinstance(out.cause, ValueError) and str(out.cause) == "bad input"
    assert str(out) == str(err)
    # After the trip it can still become an instance of the cause.
    assert isinstance(out.as_instanceof_cause(), ValueError)


def test_pickle_round_trip_with_custom_cause_and_of_the_dual_instance():
    err = RayTaskError("f", "tb", PicklableCustomError(5))
    out = pickle.loads(pickle.dumps(err))
    assert isinstance(out.cause, PicklableCustomError) and out.cause.code == 5
    dual = err.as_instanceof_cause()
    back = pickle.loads(pickle.dumps(dual))
    assert isinstance(back, RayTaskError)
    assert back.function_name == "f"
    assert isinstance(back.as_instanceof_cause(), PicklableCustomError)


def test_get_timeout_error_is_a_timeout_error():
    e = GetTimeoutError("timed out")
    assert isinstance(e, TimeoutError)
    assert isinstance(e, RayError)
    with pytest.raises(TimeoutError):
        raise e


def test_hierarchy():
    assert exc.EmberError is RayError
    assert issubclass(exc.ActorDiedError, exc.RayActorError)
    assert issubclass(exc.OwnerDiedError, exc.ObjectLostError)
    for name in exc.__all__:
        assert issubclass(getattr(exc, name), RayError), name
    assert not issubclass(RayTaskError, ValueError)


def test_default_messages():
    assert "t1" in str(exc.TaskCancelledError("t1"))
    assert exc.TaskCancelledError("t1", "custom").args == ("custom",)
    assert "o1" in str(exc.ObjectLostError("o1"))
    assert exc.OwnerDiedError("o2").object_id == "o2"
    assert exc.RayActorError(actor_id="a").actor_id == "a"
    assert "died" in str(exc.ActorDiedError())


def test_pickle_round_trip_with_cause_whose_init_takes_extra_args():
    # CustomError("broken", 42) has args == ("broken",): plain pickling would call
    # CustomError("broken") and fail; the error must still reach the caller intact.
    err = RayTaskError("train", "tb", CustomError("broken", 42, detail="more"))
    out = pickle.loads(pickle.dumps(err))
    assert type(out.cause) is CustomError
    assert out.cause.args == ("broken",)
    assert (out.cause.code, out.cause.detail) == (42, "more")
    dual = out.as_instanceof_cause()
    assert isinstance(dual, CustomError) and isinstance(dual, RayTaskError)
    assert dual.code == 42
    assert "train" in str(dual)


def test_pickle_round_trip_keeps_os_error_fields():
    err = RayTaskError("f", "tb", FileNotFoundError(2, "No such file", "/x"))
    out = pickle.loads(cloudpickle.dumps(err))
    assert isinstance(out.cause, FileNotFoundError)
    assert (out.cause.errno, out.cause.strerror, out.cause.filename) == (2, "No such file", "/x")


# Ray 2.60's ray.exceptions: each class and the bases Ray gives it (read from Ray's module).
RAY_BASES = {
    "RayError": (Exception,), "CrossLanguageError": ("RayError",),
    "TaskCancelledError": ("RayError",), "RayTaskError": ("RayError",),
    "LocalRayletDiedError": ("RayError",), "WorkerCrashedError": ("RayError",),
    "RayActorError": ("RayError",), "ActorDiedError": ("RayActorError",),
    "ActorUnavailableError": ("RayActorError",), "RaySystemError": ("RayError",),
    "UserCodeException": ("RayError",), "ObjectStoreFullError": ("RayError",),
    "OutOfDiskError": ("RayError",), "OutOfMemoryError": ("RayError",),
    "NodeDiedError": ("RayError",), "ObjectLostError": ("RayError",),
    "ObjectFetchTimedOutError": ("ObjectLostError",), "RpcError": ("RayError",),
    "ReferenceCountingAssertionError": ("ObjectLostError", AssertionError),
    "ObjectFreedError": ("ObjectLostError",), "OwnerDiedError": ("ObjectLostError",),
    "ObjectReconstructionFailedError": ("ObjectLostError",),
    "ObjectReconstructionFailedMaxAttemptsExceededError": ("ObjectLostError",),
    "ObjectReconstructionFailedLineageEvictedError": ("ObjectLostError",),
    "GetTimeoutError": ("RayError", TimeoutError), "PlasmaObjectNotAvailable": ("RayError",),
    "AsyncioActorExit": ("RayError",), "RuntimeEnvSetupError": ("RayError",),
    "TaskPlacementGroupRemoved": ("RayError",), "ActorPlacementGroupRemoved": ("RayError",),
    "PendingCallsLimitExceeded": ("RayError",), "TaskUnschedulableError": ("RayError",),
    "ActorUnschedulableError": ("RayError",), "ObjectRefStreamEndOfStreamError": ("RayError",),
    "RayChannelError": ("RaySystemError",), "RayChannelTimeoutError": ("RayChannelError", TimeoutError),
    "RayCgraphCapacityExceeded": ("RaySystemError",), "UnserializableException": ("RayError",),
    "OufOfBandObjectRefSerializationException": ("RayError",), "AuthenticationError": ("RayError",),
}


def test_every_ray_exception_class_with_rays_bases():
    for name, bases in RAY_BASES.items():
        cls = getattr(exc, name)
        assert name in exc.__all__, name
        for base in bases:
            base_cls = getattr(exc, base) if isinstance(base, str) else base
            assert issubclass(cls, base_cls), (name, base)


def test_ray_constructor_arguments_of_the_new_classes():
    assert str(exc.ActorUnschedulableError("node gone")) == "The actor is not schedulable: node gone"
    assert exc.OutOfMemoryError("low").message == "low"
    e = exc.ActorUnavailableError("restarting", b"\x01\x02")
    assert e.actor_id == "0102" and "restarting" in str(e)
    assert isinstance(e, exc.RayActorError)
    assert exc.RpcError("x", rpc_code=14).rpc_code == 14
    f = exc.ObjectFetchTimedOutError("ab", "Object ab is lost: timed out")
    assert f.object_id == "ab" and pickle.loads(pickle.dumps(f)).object_id == "ab"
    with pytest.raises(TimeoutError):
        raise exc.RayChannelTimeoutError("slow")


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_actor_errors_keep_their_message_and_actor_id_across_processes(dumps):
    from ember.exceptions import ActorDiedError, ActorUnavailableError

    un = ActorUnavailableError("its worker was lost", b"\x01" * 16)
    back = pickle.loads(dumps(un))
    assert str(back) == str(un) == ("The actor " + "01" * 16 + " is unavailable: its worker was lost. "
                                    "The task may or may not have been executed on the actor.")
    assert back.actor_id == "01" * 16 and back.error_message == "its worker was lost"
    died = ActorDiedError("The actor ab is dead: killed", "ab")
    died.cause = ValueError("setup")
    back = pickle.loads(dumps(died))
    assert (str(back), back.actor_id, repr(back.cause)) == (str(died), "ab", "ValueError('setup')")
