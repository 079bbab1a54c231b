"""The client-proxy wire: two gRPC methods with raw-bytes messages, and the pickling on both ends.

    Connect  (unary -> stream)   request: pickle of the init options; first reply: pickle of the
                                 session's info; the stream then stays open for as long as the
                                 client is connected (its end is the session's end).
    Call     (unary -> stream)   request: one pickle of (op, args, releases) that fits in one
                                 chunk; reply: one pickle of ("ok", value) or ("err", exception),
                                 cut into chunks.
    CallChunked (stream -> stream)  the same, for a request bigger than one chunk.

Every operation goes through Call or CallChunked, so a value of any size travels as a stream
of EMBER_CLIENT_PROXY_CHUNK_BYTES messages, never as one giant message.

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


def chunk_bytes() -> int:
    """EMBER_CLIENT_PROXY_CHUNK_BYTES (read once): a few MiB per message, never one giant one."""
    global _chunk_bytes
    if not _chunk_bytes:
        n = int(envvars.value("EMBER_CLIENT_PROXY_CHUNK_BYTES"))
        if n <= 0:
            raise ValueError(f"EMBER_CLIENT_PROXY_CHUNK_BYTES must be > 0, got {n}")
        _chunk_bytes = n
    return _chunk_bytes


def chunks(data: bytes) -> Iterator[bytes]:
    """data as chunk_bytes() slices (at least one message, even for b"")."""
    size = chunk_bytes()
    view = memoryview(data)
    yield bytes(view[:size])
    for start in range(size, len(data), size):
        yield bytes(view[start:start + size])


def join(messages: Iterable[bytes]) -> bytes:
    """The bytes a chunked message stream carried."""
    parts = list(messages)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def __init__(self, file: io.BytesIO, persistent: Callable[[Any], Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._persistent = persistent

    def persistent_id(self, obj: Any) -> Any:  # noqa: D102 - pickle's hook
        return self._persistent(obj)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, load: Callable[[Any], Any]) -> None:
        super().__init__(file)
        self._load = load

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle's hook
        return self._load(pid)


def dumps(obj: Any, persistent: Callable[[Any], Any]) -> bytes:
    """cloudpickle of obj; `persistent(x)` returns an id for x (a ref, a handle) or None."""
    buf = io.BytesIO()
    _Pickler(buf, persistent).dump(obj)
    return buf.getvalue()


def loads(data: bytes, load: Callable[[Any], Any]) -> Any:
    """The object `dumps` wrote; `load(pid)` turns each persistent id back into an object."""
    return _Unpickler(io.BytesIO(data), load).load()


def dumps_error(exc: BaseException, persistent: Callable[[Any], Any]) -> bytes:
    """("err", exc), or ("err", RuntimeError(text)) when the exception does not pickle."""
    try:
        return dumps(("err", exc), persistent)
    except Exception as e:  # an exception holding something unpicklable
        return dumps(("err", RuntimeError(f"{type(exc).__name__}: {exc} (not picklable: {e})")),
                     persistent)
