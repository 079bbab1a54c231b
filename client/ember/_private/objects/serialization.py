"""Serialization: cloudpickle with pickle protocol 5 and out-of-band buffers.

A value becomes (data, buffers): `data` is the pickle stream, `buffers` the raw memory of numpy
arrays / Arrow buffers, which are never copied into the stream. Small values travel inline as a
SerializedObject; big ones are written once into the node's shared-memory store (plasma.py) and
read back as zero-copy, read-only views.

ObjectRefs inside a value are pickled as references (ObjectRef.__reduce__); the serialization
context records them so the owner knows they escaped.
"""
from __future__ import annotations

import io
import pickle
import threading
import types
from typing import Any

import cloudpickle
from cloudpickle import cloudpickle as _cp_impl

from ember_common.proto import common_pb2

ERROR_METADATA = "ERROR"

_ctx = threading.local()


class SerializedValue:
    """A pickled value: the in-band stream plus out-of-band buffers (memoryviews)."""

    __slots__ = ("data", "buffers", "metadata", "contained_refs")

    def __init__(self, data: bytes, buffers: list[memoryview], metadata: str = "",
                 contained_refs: list[Any] | None = None) -> None:
        self.data = data
        self.buffers = buffers
        self.metadata = metadata
        self.contained_refs = contained_refs or []

    @property
    def size(self) -> int:
        return len(self.data) + sum(b.nbytes for b in self.buffers)

    def to_proto(self) -> common_pb2.SerializedObject:
        return common_pb2.SerializedObject(
            data=self.data, buffers=[bytes(b) for b in self.buffers], metadata=self.metadata)


class _Pickler(cloudpickle.CloudPickler):  # type: ignore[misc]  # cloudpickle ships no types
    """CloudPickler that keeps code objects' file names, so remote tracebacks show source lines
    (cloudpickle 3 replaces them with "<dynamic-code>" for deterministic payloads)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            fn, args = _cp_impl._code_reduce(obj)
            return fn, tuple(obj.co_filename if isinstance(a, str) and a == "<dynamic-code>" else a
                             for a in args)
        return super().reducer_override(obj)


def contained_refs_sink() -> list[Any] | None:
    """The list collecting ObjectRefs pickled in the current serialize() call, if any."""
    return getattr(_ctx, "refs", None)


# Values of these exact types pickle the same with the C pickler, far faster than a CloudPickler.
_PRIMITIVES = frozenset({type(None), bool, int, float, str, bytes})


def serialize(value: Any, metadata: str = "") -> SerializedValue:
    """Pickles value. Raises TypeError naming the problem if it cannot be pickled."""
    if type(value) in _PRIMITIVES:
        return SerializedValue(pickle.dumps(value, protocol=5), [], metadata)
    buffers: list[pickle.PickleBuffer] = []
    prev = getattr(_ctx, "refs", None)
    refs: list[Any] = []
    _ctx.refs = refs
    try:
        f = io.BytesIO()
        _Pickler(f, protocol=5, buffer_callback=buffers.append).dump(value)
        data = f.getvalue()
    except Exception as exc:
        raise TypeError(f"cannot serialize {type(value).__name__} value: {exc}") from exc
    finally:
        _ctx.refs = prev
    views = []
    for b in buffers:
        raw = b.raw()
        views.append(raw)
    return SerializedValue(data, views, metadata, refs)


def serialize_error(exc: BaseException) -> SerializedValue:
    try:
        return serialize(exc, ERROR_METADATA)
    except TypeError:
        from ember.exceptions import RaySystemError

        return serialize(RaySystemError(f"unpicklable exception {type(exc).__name__}: {exc}"),
                         ERROR_METADATA)


def deserialize(data: bytes | memoryview, buffers: list[Any]) -> Any:
    return pickle.loads(data, buffers=buffers)


def deserialize_proto(obj: common_pb2.SerializedObject) -> Any:
    return deserialize(obj.data, list(obj.buffers))


def dumps_function(fn: Any) -> bytes:
    f = io.BytesIO()
    _Pickler(f, protocol=5).dump(fn)
    return f.getvalue()
