"""retry_exceptions (task_retry.py): Ray 2.60's option check and the owner's classifier of the
error a worker sent back, on errors serialized as the executor serializes them."""
from __future__ import annotations

import pytest

from ember import exceptions as exc
from ember._private import task_retry
from ember._private.serialization import serialize, serialize_error
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
    task_retry.check_retry_exceptions(value, "remote function f")


@pytest.mark.parametrize("value", ["ConnectionError", 1, None, {ConnectionError}, ConnectionError])
def test_a_wrong_type_is_a_type_error_naming_the_option(value):
    with pytest.raises(TypeError, match="retry_exceptions"):
        task_retry.check_retry_exceptions(value, "remote function f")


@pytest.mark.parametrize("value", [[ConnectionError, "x"], [ConnectionError()], [KeyboardInterrupt],
                                   [int]])
def test_a_list_of_non_exceptions_is_a_value_error_naming_the_option(value):
    with pytest.raises(ValueError, match="retry_exceptions"):
        task_retry.check_retry_exceptions(value, "remote function f")


def test_split_keeps_the_allowlist_with_the_owner():
    assert task_retry.split(True) == (True, None)
    assert task_retry.split(False) == (False, None)
    assert task_retry.split([ConnectionError]) == (True, (ConnectionError,))
    assert task_retry.split([]) == (False, ())


def test_the_classifier_matches_the_user_exception_and_its_subclasses():
    allow = (ConnectionError,)
    assert task_retry.error_in_allowlist(reply_with(task_error(ConnectionError("x"))), allow)
    assert task_retry.error_in_allowlist(reply_with(task_error(Flaky("x"))), allow)
    assert not task_retry.error_in_allowlist(reply_with(task_error(ValueError("x"))), allow)
    # A nested task's failure keeps the innermost user exception as the cause.
    nested = exc.RayTaskError("outer", "tb", task_error(Flaky("deep")))
    assert task_retry.error_in_allowlist(reply_with(nested), allow)
    assert task_retry.error_in_allowlist(reply_with(task_error(ValueError("x"))),
                                         (exc.RayTaskError,))


def test_an_unreadable_or_missing_error_is_not_retried():
    allow = (Exception,)
    unreadable = core_worker_pb2.PushTaskReply(is_application_error=True, returns=[
        common_pb2.ReturnObject(value=common_pb2.SerializedObject(
            data=b"\x80\x05cno_such_module\nNoSuchError\n.", metadata="ERROR"))])
    assert not task_retry.error_in_allowlist(unreadable, allow)
    assert not task_retry.error_in_allowlist(core_worker_pb2.PushTaskReply(
        is_application_error=True), allow)
    value = core_worker_pb2.PushTaskReply(returns=[common_pb2.ReturnObject(
        value=serialize(ConnectionError("a value, not an error")).to_proto())])
    assert not task_retry.error_in_allowlist(value, allow)
