"""TFRecord files of `tf.train.Example` messages, without TensorFlow (Ray's read_tfrecords /
write_tfrecords).

A TFRecord file is a sequence of records:

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

(little-endian; masked(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2**32). Both checksums are
verified; a short or corrupted record raises naming the file and the record's index.

Each record is an Example, decoded by the small protobuf wire codec below:

    Example  { Features features = 1 }
    Features { map<string, Feature> feature = 1 }     (entries: key = 1, value = 2)
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
    BytesList { repeated bytes value = 1 }  FloatList { repeated float value = 1 }
    Int64List { repeated int64 value = 1 }  (packed or not)

A row has a column per feature, a list of its values (binary, float32 or int64). As in Ray, a
second pass over the data then finds the columns whose lists never hold more than one value and
makes those plain values (so `label` is an int, not a one-item list). Writing maps each column's Arrow
type back: integers to int64_list, floats to float_list, binary and strings (UTF-8) to
bytes_list, lists to their items, null to an empty feature.
"""
from __future__ import annotations

import struct
from typing import Any, Iterator

import pyarrow as pa

from .sinks import FileDatasink

# --- CRC-32C (Castagnoli), table driven ---------------------------------------------------

_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c_py(data: bytes) -> int:
    """CRC-32C in Python (about 1 MB/s): the fallback when google-crc32c is not installed."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    import google_crc32c

    def crc32c(data: bytes) -> int:
        """CRC-32C by google-crc32c (the data extra pins it; C, GB/s)."""
        return int(google_crc32c.value(bytes(data)))
except ImportError:  # pragma: no cover - the data extra installs it
    crc32c = crc32c_py


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- record framing -----------------------------------------------------------------------

def _read_exact(f: Any, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def iter_records(f: Any, path: str) -> Iterator[bytes]:
    """The records of a TFRecord stream (anything with read(n)), checksums verified."""
    idx = 0
    while True:
        head = _read_exact(f, 12)
        if not head:
            return
        if len(head) < 12:
            raise ValueError(f"{path}: record {idx} is cut short: {len(head)} bytes where a "
                             "12-byte header is due")
        (length,) = struct.unpack("<Q", head[:8])
        (crc_len,) = struct.unpack("<I", head[8:])
        if masked_crc(head[:8]) != crc_len:
            raise ValueError(f"{path}: record {idx}'s length checksum does not match: the file is "
                             "corrupted or not a TFRecord file")
        rest = _read_exact(f, length + 4)
        if len(rest) < length + 4:
            raise ValueError(f"{path}: record {idx} is cut short: {length} data bytes announced, "
                             f"{max(0, len(rest) - 4)} present")
        body = rest[:length]
        if masked_crc(body) != struct.unpack("<I", rest[length:])[0]:
            raise ValueError(f"{path}: record {idx}'s data checksum does not match: the file is "
                             "corrupted")
        yield body
        idx += 1


def frame(record: bytes) -> bytes:
    head = struct.pack("<Q", len(record))
    return (head + struct.pack("<I", masked_crc(head)) + record
            + struct.pack("<I", masked_crc(record)))


# --- protobuf wire codec for tf.train.Example ---------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: ints for varint/fixed, bytes for length-
    delimited."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        val: Any
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            ln, pos = _varint(buf, pos)
            if pos + ln > len(buf):
                raise ValueError("truncated field")
            val, pos = buf[pos:pos + ln], pos + ln
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > len(buf):
            raise ValueError("truncated field")
        yield num, wt, val


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _feature(buf: bytes) -> tuple[str | None, list[Any]]:
    kind: str | None = None
    values: list[Any] = []
    for num, wt, val in _fields(buf):
        if num not in (1, 2, 3) or wt != 2:
            continue
        kind = {1: "bytes", 2: "float", 3: "int"}[num]
        values = []
        for n2, w2, v2 in _fields(val):
            if n2 != 1:
                continue
            if kind == "bytes":
                values.append(bytes(v2))
            elif kind == "float":
                values.extend(struct.unpack(f"<{len(v2) // 4}f", v2) if w2 == 2
                              else struct.unpack("<f", v2))
            elif w2 == 2:
                p = 0
                while p < len(v2):
                    x, p = _varint(v2, p)
                    values.append(_signed(x))
            else:
                values.append(_signed(v2))
    return kind, values


def decode_example(buf: bytes) -> dict[str, tuple[str | None, list[Any]]]:
    """{feature name: (kind, values)} of a serialized Example."""
    out: dict[str, tuple[str | None, list[Any]]] = {}
    for num, wt, features in _fields(buf):
        if num != 1 or wt != 2:
            continue
        for n2, w2, entry in _fields(features):
            if n2 != 1 or w2 != 2:
                continue
            key, value = "", b""
            for n3, _w3, v3 in _fields(entry):
                if n3 == 1:
                    key = bytes(v3).decode("utf-8")
                elif n3 == 2:
                    value = v3
            out[key] = _feature(value)
    return out


def _ld(num: int, payload: bytes) -> bytes:
    return _enc_varint(num << 3 | 2) + _enc_varint(len(payload)) + payload


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_feature(kind: str | None, values: list[Any]) -> bytes:
    if kind is None:
        return b""
    if kind == "bytes":
        body = b"".join(_ld(1, v) for v in values)
        return _ld(1, body)
    if kind == "float":
        return _ld(2, _ld(1, struct.pack(f"<{len(values)}f", *values)) if values else b"")
    return _ld(3, _ld(1, b"".join(_enc_varint(int(v)) for v in values)) if values else b"")


def encode_example(features: dict[str, tuple[str | None, list[Any]]]) -> bytes:
    entries = b"".join(_ld(1, _ld(1, k.encode("utf-8")) + _ld(2, encode_feature(*kv)))
                       for k, kv in features.items())
    return _ld(1, entries)


# --- rows ---------------------------------------------------------------------------------

_ARROW = {"bytes": pa.binary(), "float": pa.float32(), "int": pa.int64()}


def examples_to_table(examples: list[dict[str, tuple[str | None, list[Any]]]], path: str) -> pa.Table:
    """A row per Example, a list column per feature (null where a record lacks it)."""
    names: dict[str, None] = {}
    for ex in examples:
        names.update(dict.fromkeys(ex))
    cols = {}
    for name in names:
        cells = [ex.get(name) for ex in examples]
        kinds = {c[0] for c in cells if c is not None and c[0] is not None}
        if len(kinds) > 1:
            raise ValueError(f"{path}: feature {name!r} holds {sorted(kinds)} in different records")
        typ = _ARROW[kinds.pop()] if kinds else pa.null()
        cols[name] = pa.array([None if c is None else c[1] for c in cells], type=pa.list_(typ))
    return pa.table(cols) if cols else pa.table({})


def max_list_sizes(batch: pa.Table) -> pa.Table:
    """One row: the longest list of each column of the batch."""
    import pyarrow.compute as pc

    out = {}
    for name in batch.column_names:
        if not pa.types.is_list(batch.schema.field(name).type):
            continue
        n = pc.max(pc.list_value_length(batch.column(name))).as_py() if batch.num_rows else None
        out[name] = pa.array([n], type=pa.int64())
    return pa.table(out)


def unwrap_single(batch: pa.Table, single: list[str]) -> pa.Table:
    """The batch with each column of `single` (lists of at most one value) as its values."""
    import numpy as np
    import pyarrow.compute as pc

    for name in single:
        if name not in batch.column_names:
            continue
        col = batch.column(name).combine_chunks()
        lens = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
        idx = np.cumsum(lens) - 1
        vals = col.flatten()
        if pa.types.is_null(vals.type):
            continue
        if len(vals) == 0:
            taken = pa.nulls(len(col), type=vals.type)
        else:
            taken = vals.take(pa.array(np.where(lens == 1, idx, 0), mask=lens != 1))
        batch = batch.set_column(batch.column_names.index(name), name, taken)
    return batch


CHUNK_BYTES = 16 * 2**20  # a table per this many record bytes: big files are not held whole


def read_tfrecords_file(fs: Any, path: str, opts: dict[str, Any]) -> Iterator[pa.Table]:
    """A file's Examples as tables of list columns, a table per CHUNK_BYTES of records."""
    with fs.open_input_stream(path, **{"compression": "detect",
                                       **opts.get("open_stream_args", {})}) as f:
        examples: list[dict[str, tuple[str | None, list[Any]]]] = []
        size = 0
        for i, rec in enumerate(iter_records(f, path)):
            try:
                examples.append(decode_example(rec))
            except (ValueError, struct.error, UnicodeDecodeError) as e:
                raise ValueError(f"{path}: record {i} is not a tf.train.Example ({e})") from None
            size += len(rec)
            if size >= CHUNK_BYTES:
                yield examples_to_table(examples, path)
                examples, size = [], 0
        if examples:
            yield examples_to_table(examples, path)


def _kind(t: pa.DataType, col: str) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) \
            or pa.types.is_large_string(t):
        return "bytes"
    if pa.types.is_null(t):
        return "none"
    raise ValueError(f"write_tfrecords: column {col!r} has type {t}; a tf.train.Feature holds "
                     "ints, floats or bytes/strings, or lists of them")


def table_to_records(table: pa.Table) -> Iterator[bytes]:
    kinds = {}
    for field in table.schema:
        t = field.type
        is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        kinds[field.name] = (_kind(t.value_type if is_list else t, field.name), is_list)
    cols = {n: table.column(n).to_pylist() for n in table.column_names}
    for i in range(table.num_rows):
        feats: dict[str, tuple[str | None, list[Any]]] = {}
        for n, (kind, is_list) in kinds.items():
            v = cols[n][i]
            vals = [] if v is None else (list(v) if is_list else [v])
            vals = [x.encode("utf-8") if isinstance(x, str) else x for x in vals if x is not None]
            feats[n] = (None if kind == "none" or not vals and v is None else kind, vals)
        yield frame(encode_example(feats))


class TFRecordDatasink(FileDatasink):
    """One TFRecord file per write task."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, "tfrecords", **kwargs)

    def get_name(self) -> str:
        return "TFRecord"

    @property
    def ext(self) -> str:
        return "tfrecords"

    def _encode(self, out: Any, first: pa.Table, rest: Iterator[pa.Table]) -> int:
        rows = 0
        for block in (first, *rest):
            for rec in table_to_records(block):
                out.write(rec)
            rows += block.num_rows
        return rows
