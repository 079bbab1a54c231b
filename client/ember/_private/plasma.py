"""The on-node shared-memory object format: one file per object in the node's store dir.

The store dir sits on a tmpfs (/dev/shm), so a file there *is* shared memory. The creator writes
`<id>.tmp` and renames it to `<id>` (sealing is atomic: a reader never sees a partial object),
then tells the object manager (Seal RPC). Readers mmap the file read-only: numpy arrays and Arrow
buffers come back as zero-copy, read-only views of the mapping.

Layout: b"EMB1" | u32 header_len | header | padding | data | buffers, each buffer 64-byte aligned.
header = u64 data_offset, u64 data_len, u32 n, n x (u64 offset, u64 len), u16 meta_len, meta.
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import Any

from .serialization import SerializedValue

MAGIC = b"EMB1"
ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def object_path(store_dir: str, object_id: bytes) -> str:
    return os.path.join(store_dir, object_id.hex())


def write(store_dir: str, object_id: bytes, value: SerializedValue) -> int:
    """Writes and seals the object; returns its size in bytes on disk."""
    meta = value.metadata.encode()
    n = len(value.buffers)
    header_len = 8 + 8 + 4 + 16 * n + 2 + len(meta)
    offset = _align(8 + header_len)
    data_offset = offset
    offset = _align(offset + len(value.data))
    spans = []
    for b in value.buffers:
        spans.append((offset, b.nbytes))
        offset = _align(offset + b.nbytes)
    header = struct.pack("<QQI", data_offset, len(value.data), n)
    header += b"".join(struct.pack("<QQ", o, ln) for o, ln in spans)
    header += struct.pack("<H", len(meta)) + meta
    path = object_path(store_dir, object_id)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(header)) + header)
        f.seek(data_offset)
        f.write(value.data)
        for (o, _), b in zip(spans, value.buffers):
            f.seek(o)
            f.write(b)
        f.truncate(max(offset, 8))
    os.replace(tmp, path)
    return offset


def read(path: str) -> tuple[memoryview, list[memoryview], str]:
    """Maps a sealed object read-only. Returns (data, buffers, metadata); views keep the map alive."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    if bytes(view[:4]) != MAGIC:
        raise ValueError(f"{path} is not an Ember object")
    (hlen,) = struct.unpack_from("<I", view, 4)
    data_offset, data_len, n = struct.unpack_from("<QQI", view, 8)
    pos = 8 + 20
    buffers = []
    for _ in range(n):
        o, ln = struct.unpack_from("<QQ", view, pos)
        pos += 16
        buffers.append(view[o:o + ln])
    (mlen,) = struct.unpack_from("<H", view, pos)
    meta = bytes(view[pos + 2:pos + 2 + mlen]).decode()
    return view[data_offset:data_offset + data_len], buffers, meta


def read_value(path: str) -> tuple[Any, str]:
    """Deserializes the object at path; returns (value, metadata)."""
    from .serialization import deserialize

    data, buffers, meta = read(path)
    return deserialize(data, buffers), meta
