"""retry_exceptions (task_errors.py): Ray 2.60's option check and the owner's classifier of the
error a worker sent back, on errors serialized as the executor serializes them."""
from __future__ import annotations

import pytest

from ember import exceptions as exc
from ember._private.objects.serialization import serialize, serialize_error
from ember._private.owner import task_errors
from ember_common.proto import common_pb2, core_worker_pb2


class Flaky(ConnectionError):
    pass


def reply_with(error: BaseException) -> core_worker_pb2.PushTaskReply:
    sv = serialize_error(error)
    return core_worker_pb2.PushTaskReply(is_application_error=True, returns=[
        common_pb2.ReturnObject(object_id=b"o" * 28, value=sv.to_proto())])


def task_error(cause: BaseException) -> exc.RayTaskError:
    return exc.RayTaskError("f", "Traceback ...", cause)


@pytest.mark.parametrize("value", [True, False, [], (), [ConnectionError], (ValueError, Flaky)])
def test_valid_values_pass(value):
    task_errors.check_retry_exceptions(value, "remote function f")


@pytest.mark.parametrize("value", ["ConnectionError", 1, None, {ConnectionError}, ConnectionError])
def test_a_wrong_type_is_a_type_error_naming_the_option(value):
    with pytest.raises(TypeError, match="retry_exceptions"):
        task_errors.check_retry_exceptions(value, "remote function f")


@pytest.mark.parametrize("value", [[ConnectionError, "x"], [ConnectionError()], [KeyboardInterrupt],
                                   [int]])
def test_a_list_of_non_exceptions_is_a_value_error_naming_the_option(value):
    with pytest.raises(ValueError, match="retry_exceptions"):
        task_errors.check_retry_exceptions(value, "remote function f")


def test_split_keeps_the_allowlist_with_the_owner():
    assert task_errors.split(True) == (True, None)
    assert task_errors.split(False) == (False, None)
    assert task_errors.split([ConnectionError]) == (True, (ConnectionError,))
    assert task_errors.split([]) == (False, ())


def test_the_classifier_matches_the_user_exception_and_its_subclasses():
    allow = (ConnectionError,)
    assert task_errors.error_in_allowlist(reply_with(task_error(ConnectionError("x"))), allow)
    assert task_errors.error_in_allowlist(reply_with(task_error(Flaky("x"))), allow)
    assert not task_errors.error_in_allowlist(reply_with(task_error(ValueError("x"))), allow)
    # A nested task's failure keeps the innermost user exception as the cause.
    nested = exc.RayTaskError("outer", "tb", task_error(Flaky("deep")))
    assert task_errors.error_in_allowlist(reply_with(nested), allow)
    assert task_errors.error_in_allowlist(reply_with(task_error(ValueError("x"))),
                                         (exc.RayTaskError,))


def test_an_unreadable_or_missing_error_is_not_retried():
    allow = (Exception,)
    unreadable = core_worker_pb2.PushTaskReply(is_application_error=True, returns=[
        common_pb2.ReturnObject(value=common_pb2.SerializedObject(
            data=b"\x80\x05cno_such_module\nNoSuchError\n.", metadata="ERROR"))])
    assert not task_errors.error_in_allowlist(unreadable, allow)
    assert not task_errors.error_in_allowlist(core_worker_pb2.PushTaskReply(
        is_application_error=True), allow)
    value = core_worker_pb2.PushTaskReply(returns=[common_pb2.ReturnObject(
        value=serialize(ConnectionError("a value, not an error")).to_proto())])
    assert not task_errors.error_in_allowlist(value, allow)


def _arg_error(error: BaseException) -> common_pb2.TaskArg:
    return common_pb2.TaskArg(value=serialize_error(error).to_proto())


def test_a_failed_dependency_is_the_upstream_error_unchanged():
    cancelled = exc.TaskCancelledError("ab" * 8)
    spec = common_pb2.TaskSpec(name="dep", args=[
        common_pb2.TaskArg(value=serialize(1).to_proto()), _arg_error(cancelled)])
    error = task_errors.failed_dependency(spec)
    assert isinstance(error, exc.TaskCancelledError)
    assert str(error) == str(cancelled) and error.task_id == "ab" * 8  # not wrapped again
    upstream = task_errors.failed_dependency(common_pb2.TaskSpec(args=[_arg_error(
        task_error(ValueError("boom")))]))
    assert isinstance(upstream, exc.RayTaskError) and isinstance(upstream.cause, ValueError)


def test_plain_arguments_are_no_failed_dependency():
    ok = common_pb2.TaskSpec(args=[
        common_pb2.TaskArg(value=serialize(ValueError("a value, not an error")).to_proto()),
        common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(object_id=b"r" * 28))])
    assert task_errors.failed_dependency(ok) is None
    assert task_errors.failed_dependency(common_pb2.TaskSpec()) is None


def test_a_foreign_or_unreadable_error_becomes_a_system_error():
    foreign = common_pb2.TaskSpec(name="dep", args=[_arg_error(ValueError("raw"))])
    assert isinstance(task_errors.failed_dependency(foreign), exc.RaySystemError)
    unreadable = common_pb2.TaskSpec(name="dep", args=[common_pb2.TaskArg(
        value=common_pb2.SerializedObject(data=b"junk", metadata="ERROR"))])
    error = task_errors.failed_dependency(unreadable)
    assert isinstance(error, exc.RaySystemError) and "dep()" in str(error)
