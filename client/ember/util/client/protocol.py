"""The client-proxy wire: two gRPC methods with raw-bytes messages, and the pickling on both ends.

    Connect  (unary -> stream)   request: pickle of the init options; first reply: pickle of the
                                 session's info; the stream then stays open for as long as the
                                 client is connected (its end is the session's end).
    Call     (unary -> stream)   request: one pickle of (op, args, releases) that fits in one
                                 chunk and has no out-of-band buffers; reply: ("ok", value) or
                                 ("err", exception), framed.
    CallChunked (stream -> stream)  the same, for a bigger request, framed.

Framed: a pickle (protocol 5) whose large buffers (numpy, Arrow) are kept out of band, sent as
a header message (the length of the pickle stream and of each buffer) then each of them cut
into EMBER_CLIENT_PROXY_CHUNK_BYTES messages: a value of any size streams in messages of a few
MiB, never as one giant message, and its buffers are copied only into and out of the messages.

Every message is opaque bytes: the payloads are pickles (functions, classes, arguments) that
only the two ends read, and the proxy in between forwards them without parsing. Refs and actor
handles never travel as such: the client's stubs pickle as ("ref", id) / ("actor", id) and the
session maps them to its real ones; the session's real ones pickle as the same ids, and the
client builds stubs from them (pickle's persistent ids).
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Callable, Iterable, Iterator

import cloudpickle

from ember_common import envvars

SERVICE = "ember.client.ClientProxy"
CONNECT = f"/{SERVICE}/Connect"
CALL = f"/{SERVICE}/Call"
CALL_CHUNKED = f"/{SERVICE}/CallChunked"
CLIENT_ID_HEADER = "ember-client-id"
DEFAULT_PORT = 10001  # Ray's client server port


_chunk_bytes = 0


def handler(servicer: Any) -> Any:
    """The wire's three methods (a grpc.GenericRpcHandler), served by `servicer`'s async
    `connect`, `call` and `call_chunked`: the proxy's, which forward, and the session's, which
    run them."""
    import grpc

    return grpc.method_handlers_generic_handler(SERVICE, {
        "Connect": grpc.unary_stream_rpc_method_handler(servicer.connect),
        "Call": grpc.unary_stream_rpc_method_handler(servicer.call),
        "CallChunked": grpc.stream_stream_rpc_method_handler(servicer.call_chunked),
    })


def chunk_bytes() -> int:
    """EMBER_CLIENT_PROXY_CHUNK_BYTES (read once): a few MiB per message, never one giant one."""
    global _chunk_bytes
    if not _chunk_bytes:
        n = int(envvars.value("EMBER_CLIENT_PROXY_CHUNK_BYTES"))
        if n <= 0:
            raise ValueError(f"EMBER_CLIENT_PROXY_CHUNK_BYTES must be > 0, got {n}")
        _chunk_bytes = n
    return _chunk_bytes


Payload = tuple[bytes, list[pickle.PickleBuffer]]  # a pickle stream and its out-of-band buffers


def frames(payload: Payload) -> Iterator[bytes]:
    """The messages of a framed payload: the header, then every segment in chunks."""
    stream, buffers = payload
    views = [memoryview(stream)] + [_raw(b) for b in buffers]
    yield pickle.dumps([v.nbytes for v in views])
    size = chunk_bytes()
    for v in views:
        for start in range(0, v.nbytes, size):
            yield bytes(v[start:start + size])


def _raw(b: pickle.PickleBuffer) -> memoryview:
    try:
        return b.raw()
    except BufferError:  # not contiguous: one copy
        return memoryview(bytes(memoryview(b)))


def unframe(messages: Iterable[bytes]) -> tuple[bytes, list[Any]]:
    """The pickle stream and buffers that `frames` sent (a segment that came in one message is
    that message; a longer one is assembled into one bytearray)."""
    it = iter(messages)
    segments: list[Any] = []
    for n in pickle.loads(next(it)):
        first = next(it) if n else b""
        if len(first) == n:
            segments.append(first)
            continue
        seg = bytearray(n)
        seg[:len(first)] = first
        pos = len(first)
        while pos < n:
            m = next(it)
            seg[pos:pos + len(m)] = m
            pos += len(m)
        segments.append(seg)
    return segments[0], segments[1:]


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def __init__(self, file: io.BytesIO, persistent: Callable[[Any], Any],
                 buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._persistent = persistent

    def persistent_id(self, obj: Any) -> Any:  # noqa: D102 - pickle's hook
        return self._persistent(obj)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, load: Callable[[Any], Any], buffers: Iterable[Any] = ()) -> None:
        super().__init__(file, buffers=buffers)
        self._load = load

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle's hook
        return self._load(pid)


def dumps(obj: Any, persistent: Callable[[Any], Any]) -> bytes:
    """cloudpickle of obj, buffers in band; `persistent(x)` returns an id for x (a ref, a
    handle) or None."""
    buf = io.BytesIO()
    _Pickler(buf, persistent).dump(obj)
    return buf.getvalue()


def encode(obj: Any, persistent: Callable[[Any], Any]) -> Payload:
    """cloudpickle of obj with its large buffers out of band (see `frames`)."""
    buffers: list[pickle.PickleBuffer] = []
    buf = io.BytesIO()
    _Pickler(buf, persistent, buffers.append).dump(obj)
    return buf.getvalue(), buffers


def loads(data: bytes, load: Callable[[Any], Any], buffers: Iterable[Any] = ()) -> Any:
    """The object `dumps`/`encode` wrote; `load(pid)` turns each persistent id back into an object."""
    return _Unpickler(io.BytesIO(data), load, buffers).load()


def dumps_error(exc: BaseException, persistent: Callable[[Any], Any]) -> bytes:
    """("err", exc) in band (Connect's reply; see encode_error)."""
    stream, buffers = encode_error(exc, persistent)
    return stream if not buffers else dumps(("err", RuntimeError(f"{type(exc).__name__}: {exc}")), persistent)


def encode_error(exc: BaseException, persistent: Callable[[Any], Any]) -> Payload:
    """("err", exc), or ("err", RuntimeError(text)) when the exception does not pickle."""
    try:
        return encode(("err", exc), persistent)
    except Exception as e:  # an exception holding something unpicklable
        return encode(("err", RuntimeError(f"{type(exc).__name__}: {exc} (not picklable: {e})")),
                      persistent)
