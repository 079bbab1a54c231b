"""Node-to-node transfer: the ObjectTransfer service (source side) and the puller (destination).

Bytes go over gRPC streams (`ObjectTransfer.ReadRange` in objmgr.proto) with as few copies as
Python allows:
- the source pins the object and yields each chunk already in DataChunk's wire format, built by
  one `b"".join` of a small header and a slice of the arena (no protobuf message per chunk);
- the destination takes the raw message bytes (no protobuf decoding) and copies the payload
  straight into the object's place in its own arena (no concatenation);
- one object is fetched over several range streams at once, on separate connections, so that
  both processes' gRPC threads and the kernel work in parallel: the first range tells the size
  (the object is created then) and the others start as soon as it is known.
Concurrent pulls of one object are merged by the servicer (server.py).

Every pull is bounded by a stall deadline (EMBER_PULL_STALL_TIMEOUT_S, 15 s): a stream that
brings no message for that long fails the pull with UNAVAILABLE, and the source's cached
channels are dropped. A source whose process is stopped or whose host vanished (no RST: its
connection neither answers nor breaks) would otherwise hold the pull, and every reader merged
into it, forever; the reader fails over to another copy or rebuilds the object (issue 19).
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import grpc

from ember_common import rpc, tracing
from ember_common.config import get_config
from ember_common.proto import objmgr_pb2
from ember_common.rpc import DataLoss, NotFound, OutOfRange, Unavailable, rpc_errors

from .store import ObjectStore

CHUNK_BYTES = 1024 * 1024  # fits in the caches: each copy of a chunk is cheap
FIRST_RANGE_BYTES = 8 * 1024 * 1024  # the first stream's range; smaller objects need one stream
MIN_RANGE_BYTES = 16 * 1024 * 1024  # no more streams than ranges of at least this size
STREAMS = 4  # parallel range streams (and connections) per source node
METHOD = "/ember.ObjectTransfer/ReadRange"


def stall_timeout_s() -> float:
    """How long a pull stream may bring nothing before the pull fails (EMBER_PULL_STALL_TIMEOUT_S)."""
    value = get_config().pull_stall_timeout_s
    if value <= 0:
        raise ValueError(f"EMBER_PULL_STALL_TIMEOUT_S must be > 0 seconds, got {value:g}")
    return value


class Stalled(Unavailable):
    """A pull stream brought nothing within the stall deadline."""


async def _messages(call: Any, stall_s: float, what: str) -> AsyncIterator[bytes]:
    """The call's messages, each awaited at most stall_s (the first one covers the connect)."""
    it = call.__aiter__()
    while True:
        try:
            msg = await asyncio.wait_for(it.__anext__(), stall_s)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            call.cancel()
            raise Stalled(f"{what}: no bytes for {stall_s:g}s (the source node is unreachable)") from None
        yield msg


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_chunk(data: memoryview, total_size: int | None = None) -> bytes:
    """A serialized DataChunk, built with a single copy of data."""
    head = b"\x10" + _varint(total_size) if total_size else b""
    return b"".join((head, b"\x0a", _varint(len(data)), data))


def parse_chunk(msg: bytes) -> tuple[memoryview, int]:
    """(data, total_size or 0) of a serialized DataChunk, without copying data."""
    view = memoryview(msg)
    pos, data, total = 0, view[0:0], 0
    while pos < len(view):
        tag = view[pos]
        pos += 1
        value = shift = 0
        while True:
            b = view[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if tag == 0x0A:  # field 1, length-delimited: the bytes
            data = view[pos:pos + value]
            pos += value
        elif tag == 0x10:  # field 2, varint: total_size
            total = value
        else:
            raise ValueError(f"unexpected field tag {tag:#x} in a DataChunk")
    return data, total


class TransferServicer:
    """Source side: ReadRange over this node's store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler("ember.ObjectTransfer", {
            "ReadRange": grpc.unary_stream_rpc_method_handler(
                self.read_range, request_deserializer=objmgr_pb2.ReadRangeRequest.FromString,
                response_serializer=None)})  # chunks are serialized by encode_chunk

    @rpc_errors  # NotFound, DataLoss (spill file unreadable), OutOfRange -> their status codes
    async def read_range(self, request: Any, context: Any) -> AsyncIterator[bytes]:
        """Streams a byte range of a sealed object, pinned meanwhile."""
        store, oid = self.store, request.object_id
        client = f"range-{id(context)}"
        with tracing.server_span("ember.ObjectTransfer/ReadRange", context.invocation_metadata()):
            e = store.get(oid, client)  # restores it from spill first
        try:
            total = e.size
            pos = request.offset
            end = total if request.length <= 0 else min(total, pos + request.length)
            if pos < 0 or pos > total:
                raise OutOfRange(f"offset {pos} is outside object {oid.hex()} of {total} bytes")
            first = True
            while True:
                n = min(CHUNK_BYTES, end - pos)
                yield encode_chunk(store.buffer(e)[pos:pos + n], total if first else None)
                first = False
                pos += n
                if pos >= end:
                    break
        finally:
            store.release(oid, client)


class Puller:
    """Destination side: fetches whole objects from other nodes into this node's store."""

    def __init__(self, store: ObjectStore, streams: int = STREAMS, stall_s: float | None = None) -> None:
        self.store = store
        self.streams = streams
        self.stall_s = stall_timeout_s() if stall_s is None else stall_s
        self._channels: dict[str, list[grpc.aio.Channel]] = {}

    def _calls(self, source: str) -> list[Any]:
        chans = self._channels.get(source)
        if chans is None:
            # Separate connections: one HTTP/2 connection is served by one thread at each end.
            opts: list[tuple[str, Any]] = [("grpc.use_local_subchannel_pool", 1)]
            chans = self._channels[source] = [rpc.aio_channel(source, opts) for _ in range(self.streams)]
        return [ch.unary_stream(METHOD, request_serializer=objmgr_pb2.ReadRangeRequest.SerializeToString,
                                response_deserializer=None) for ch in chans]

    async def pull(self, oid: bytes, source: str, owner: str) -> int:
        """Copies the object from source into a secondary copy here; returns its size."""
        store = self.store
        calls = self._calls(source)
        md = tracing.metadata()  # the source's restore (if spilled) joins the pull's trace
        first = calls[0](objmgr_pb2.ReadRangeRequest(object_id=oid, offset=0, length=FIRST_RANGE_BYTES),
                         metadata=md)
        rest: list[asyncio.Future[Any]] = []
        created = False
        pos = 0
        buf = memoryview(b"")
        what = f"pulling {oid.hex()} from {source}"
        try:
            async for msg in _messages(first, self.stall_s, what):
                data, total = parse_chunk(msg)
                if not created:
                    store.create(oid, total, owner, primary=False)
                    buf = store.buffer(store.objects[oid])
                    created = True
                    rest = [asyncio.ensure_future(self._range(c, oid, lo, hi, buf, md, what))
                            for c, (lo, hi) in zip(calls, _ranges(FIRST_RANGE_BYTES, total, self.streams), strict=False)]
                n = len(data)
                buf[pos:pos + n] = data
                pos += n
            if not created:
                raise NotFound(f"object {oid.hex()} is empty at {source}")
            await asyncio.gather(*rest)
        except grpc.aio.AioRpcError as e:
            _abort(store, oid, created, first, rest)
            err = rpc.status_to_exception(e)
            if isinstance(err, (NotFound, DataLoss)):
                raise NotFound(f"object {oid.hex()} is not at {source}: {err}") from None
            raise Unavailable(f"pulling {oid.hex()} from {source} failed: {e.code().name}") from None
        except Stalled:
            _abort(store, oid, created, first, rest)
            self._forget(source)  # its connections may be dead without knowing it: reconnect next time
            raise
        except BaseException:
            _abort(store, oid, created, first, rest)
            raise
        store.seal(oid)
        return store.objects[oid].size

    def _forget(self, source: str) -> None:
        chans = self._channels.pop(source, None)
        for ch in chans or []:
            asyncio.ensure_future(ch.close())

    async def _range(self, call: Any, oid: bytes, lo: int, hi: int, buf: memoryview, md: Any,
                     what: str) -> None:
        pos = lo
        stream = call(objmgr_pb2.ReadRangeRequest(object_id=oid, offset=lo, length=hi - lo), metadata=md)
        async for msg in _messages(stream, self.stall_s, f"{what} (range [{lo}, {hi}))"):
            data, _ = parse_chunk(msg)
            n = len(data)
            buf[pos:pos + n] = data
            pos += n
        if pos != hi:
            raise Unavailable(f"range [{lo}, {hi}) of {oid.hex()} ended at {pos}")

    async def close(self) -> None:
        for chans in self._channels.values():
            for ch in chans:
                await ch.close()


def _ranges(start: int, total: int, streams: int) -> list[tuple[int, int]]:
    """[start, total) split into at most `streams` ranges of at least MIN_RANGE_BYTES."""
    rest = total - start
    if rest <= 0:
        return []
    k = max(1, min(streams, rest // MIN_RANGE_BYTES))
    step = -(-rest // k)
    return [(lo, min(lo + step, total)) for lo in range(start, total, step)]


def _abort(store: ObjectStore, oid: bytes, created: bool, first: Any, rest: list[asyncio.Future[Any]]) -> None:
    first.cancel()
    for f in rest:
        f.cancel()
    if created:
        store.abort(oid)
