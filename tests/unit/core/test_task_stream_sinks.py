"""The task stream's reply sinks (task_stream.py): the caller's callback sink and the worker's
stream sink are called once, let go of what they hold, and survive a failing callback."""
from __future__ import annotations

import gc
import logging
import weakref

import pytest

from ember._private.transport.task_stream import _Callback, _StreamReply
from ember_common.proto import core_worker_pb2

REPLY = core_worker_pb2.PushTaskReply(is_application_error=False)


class _Held:
    """Stands for what a call's callback keeps alive (the entry, the actor handle)."""


def test_callback_is_called_once_with_the_reply_then_lets_go():
    held = _Held()
    seen: list[tuple[object, object]] = []
    cb = _Callback(lambda reply, err, h=held: seen.append((reply, err)))
    ref = weakref.ref(held)
    del held
    assert not cb.done()
    cb.set_result(REPLY)
    cb.set_result(REPLY)
    cb.set_exception(RuntimeError("late"))
    assert seen == [(REPLY, None)]
    assert cb.done()
    gc.collect()
    assert ref() is None  # the sink no longer holds the call (nor the actor handle it keeps)


def test_callback_gets_the_error_when_the_stream_breaks():
    seen: list[tuple[object, object]] = []
    cb = _Callback(lambda reply, err: seen.append((reply, err)))
    err = RuntimeError("stream ended")
    cb.set_exception(err)
    assert seen == [(None, err)]


def test_a_failing_callback_is_logged_not_raised(caplog: pytest.LogCaptureFixture):
    def boom(reply: object, err: object) -> None:
        raise ValueError("bug in the callback")

    cb = _Callback(boom)
    with caplog.at_level(logging.ERROR, logger="ember._private.transport.task_stream"):
        cb.set_result(REPLY)  # the stream's reader must keep reading
    assert cb.done()
    assert "task reply callback failed" in caplog.text


def test_stream_reply_emits_once():
    emitted: list[tuple[bytes, object]] = []
    sink = _StreamReply(b"t1", lambda tid, reply: emitted.append((tid, reply)))
    assert not sink.done()
    sink.set_result(REPLY)
    sink.set_result(core_worker_pb2.PushTaskReply(is_application_error=True))
    assert sink.done()
    assert emitted == [(b"t1", REPLY)]
