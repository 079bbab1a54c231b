"""serialize/deserialize (pickle 5, out-of-band buffers) and the plasma object layout inside a
shared-memory arena."""
from __future__ import annotations

import mmap
import struct
import threading

import numpy as np
import pyarrow as pa
import pytest

from ember._private.objects import plasma
from ember._private.objects.serialization import (
    ERROR_METADATA,
    SerializedValue,
    deserialize,
    deserialize_proto,
    serialize,
    serialize_error,
)


def roundtrip(value):
    v = serialize(value)
    return deserialize(v.data, v.buffers)


@pytest.mark.parametrize("value", [
    None, 0, -7, 3.5, "text", "ünïcode", b"\x00bytes", [1, [2, 3]], (1, "a"), {"k": {1, 2}},
    {"nested": [{"a": 1.5}, None]}, frozenset({1}), 2**100, complex(1, 2),
])
def test_plain_values_round_trip(value):
    v = serialize(value)
    assert isinstance(v.data, bytes)
    assert v.buffers == []
    assert v.size == len(v.data)
    assert roundtrip(value) == value


def test_functions_and_lambdas_round_trip():
    k = 10
    f = roundtrip(lambda x: x + k)
    assert f(1) == 11


def test_numpy_buffers_go_out_of_band_without_copying():
    arr = np.arange(10_000, dtype=np.int64)
    v = serialize(arr)
    assert len(v.buffers) == 1
    assert v.buffers[0].nbytes == arr.nbytes
    assert len(v.data) < 1000  # the stream holds only the header, not 80 kB of data
    assert arr.tobytes()[:64] not in v.data
    assert v.size == len(v.data) + arr.nbytes
    # Zero-copy: the buffer is the array's own memory.
    assert np.shares_memory(np.frombuffer(v.buffers[0], dtype=np.uint8), arr)
    out = deserialize(v.data, v.buffers)
    np.testing.assert_array_equal(out, arr)
    assert out.dtype == arr.dtype


@pytest.mark.parametrize("arr", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.zeros(0, dtype=np.uint8),
    np.array([True, False, True]),
    np.arange(20.0)[::2],  # not contiguous: pickled in-band
])
def test_numpy_arrays_round_trip(arr):
    out = roundtrip(arr)
    np.testing.assert_array_equal(out, arr)
    assert out.dtype == arr.dtype and out.shape == arr.shape


def test_multiple_arrays_in_a_container():
    value = {"a": np.ones(100), "b": [np.arange(50, dtype=np.int16), "x"]}
    v = serialize(value)
    assert sorted(b.nbytes for b in v.buffers) == [100, 800]
    out = deserialize(v.data, v.buffers)
    np.testing.assert_array_equal(out["a"], value["a"])
    np.testing.assert_array_equal(out["b"][0], value["b"][0])
    assert out["b"][1] == "x"


def test_unpicklable_value_raises_type_error_naming_the_type():
    with pytest.raises(TypeError, match="lock") as ei:
        serialize(threading.Lock())
    assert "cannot serialize" in str(ei.value)
    with pytest.raises(TypeError, match="_thread.lock"):
        serialize({"inner": [threading.Lock()]})


def test_serialize_error_uses_error_metadata():
    v = serialize_error(ValueError("boom"))
    assert v.metadata == ERROR_METADATA
    out = deserialize(v.data, v.buffers)
    assert isinstance(out, ValueError) and str(out) == "boom"


def test_serialize_error_replaces_an_unpicklable_exception():
    from ember.exceptions import RaySystemError

    class Bad(Exception):
        def __init__(self) -> None:
            super().__init__("bad one")
            self.lock = threading.Lock()

    v = serialize_error(Bad())
    assert v.metadata == ERROR_METADATA
    out = deserialize(v.data, v.buffers)
    assert isinstance(out, RaySystemError)
    assert "Bad" in str(out) and "bad one" in str(out)


def test_proto_round_trip_keeps_buffers_and_metadata():
    arr = np.arange(256, dtype=np.uint8)
    v = serialize({"arr": arr}, metadata="meta")
    p = v.to_proto()
    assert p.metadata == "meta"
    assert len(p.buffers) == 1 and p.buffers[0] == arr.tobytes()
    out = deserialize_proto(p)
    np.testing.assert_array_equal(out["arr"], arr)


class Arena:
    """A stand-in for the object manager's arena: a tmp file mapped with mmap, filled with junk
    so that nothing depends on the space being zeroed."""

    JUNK = 0xA5

    def __init__(self, tmp_path, size: int = 4 * 2**20) -> None:
        path = tmp_path / "arena"
        with open(path, "wb") as f:
            f.truncate(size)
        with open(path, "r+b") as f:
            self.mm = mmap.mmap(f.fileno(), size)
        self.size = size
        self.view = memoryview(self.mm)
        self.view[:] = bytes([self.JUNK]) * size
        self.ro = self.view.toreadonly()
        self.np = np.frombuffer(self.ro, dtype=np.uint8)  # the whole arena, for overlap checks
        self.base = self.np.ctypes.data

    def put(self, value, metadata: str = "", offset: int = 0):
        """Writes value at offset like PlasmaClient.put; returns (uint8 array of the object,
        its total size, the SerializedValue)."""
        assert offset % plasma.ALIGN == 0
        v = serialize(value, metadata)
        total, header, data_offset, spans = plasma.layout(v)
        assert offset + total <= self.size
        plasma.write_into(self.view[offset:offset + total], v, header, data_offset, spans)
        return self.obj(offset, total), total, v

    def obj(self, offset: int, total: int) -> np.ndarray:
        return np.frombuffer(self.ro[offset:offset + total], dtype=np.uint8)

    def inside(self, address: int, nbytes: int) -> bool:
        return self.base <= address and address + nbytes <= self.base + self.size


@pytest.fixture
def arena(tmp_path):
    return Arena(tmp_path)


def plasma_value(obj):
    data, buffers, meta = plasma.parse(obj)
    return deserialize(data, buffers), meta


def test_plasma_round_trip_of_plain_value_and_metadata(arena):
    value = {"a": [1, 2, 3], "b": "x" * 1000}
    obj, total, v = arena.put(value, metadata="RAW", offset=3 * plasma.ALIGN)
    assert total >= len(v.data)
    out, meta = plasma_value(obj)
    assert out == value
    assert meta == "RAW"
    # The write stays inside its range: the junk around it is untouched.
    assert not (arena.np[:3 * plasma.ALIGN] != Arena.JUNK).any()
    assert not (arena.np[3 * plasma.ALIGN + total:] != Arena.JUNK).any()


def test_plasma_layout_is_aligned_and_large_enough():
    for value in [None, b"", "x" * 5000, np.arange(3, dtype=np.uint8),
                  [np.arange(n, dtype=np.uint8) for n in (0, 1, 63, 64, 65)]]:
        v = serialize(value, "meta")
        total, header, data_offset, spans = plasma.layout(v)
        assert header[:4] == plasma.MAGIC
        assert data_offset % plasma.ALIGN == 0 and data_offset >= len(header)
        assert total >= data_offset + len(v.data)
        assert len(spans) == len(v.buffers)
        prev_end = data_offset + len(v.data)
        for (o, ln), b in zip(spans, v.buffers, strict=True):
            assert o % plasma.ALIGN == 0 and o >= prev_end and ln == b.nbytes
            prev_end = o + ln
        assert total >= prev_end


def test_large_buffers_are_placed_half_a_page_from_their_source():
    """A large buffer's copy must not start just past its source modulo 4 KiB (the copy's loads
    would alias its stores): wherever the store places the object, each large buffer lands half
    a page (rounded to the alignment) away from its source, inside the same reserved total."""
    src = np.ones(3 * 2**20 + 17, dtype=np.uint8)
    v = serialize([src, np.arange(10, dtype=np.uint8)])
    addr = src.__array_interface__["data"][0]
    totals = set()
    for base in range(0, 2 * plasma.PAGE, plasma.ALIGN):
        total, _, data_offset, spans = plasma.layout(v, base)
        totals.add(total)
        (o, ln), (o_small, _) = spans
        assert ln == src.nbytes and o % plasma.ALIGN == 0 and o >= data_offset + len(v.data)
        assert plasma.PAGE // 2 - plasma.ALIGN < (base + o - addr) % plasma.PAGE <= plasma.PAGE // 2
        assert o_small >= o + ln and o_small + 10 <= total
    assert len(totals) == 1  # known before the store picks the offset


@pytest.mark.parametrize("meta", ["", "ERROR", "ünï ✓", "m" * 1000])
def test_plasma_metadata_round_trips(arena, meta):
    obj, _, _ = arena.put(np.ones(3), metadata=meta, offset=plasma.ALIGN)
    data, buffers, got = plasma.parse(obj)
    assert got == meta
    assert len(buffers) == 1


def test_plasma_numpy_arrays_are_read_only_views_of_the_arena(arena):
    arr = np.arange(100_000, dtype=np.float64).reshape(100, 1000)
    obj, total, _ = arena.put({"arr": arr, "n": 1}, offset=5 * plasma.ALIGN)
    assert total >= arr.nbytes
    out, meta = plasma_value(obj)
    assert meta == ""
    got = out["arr"]
    np.testing.assert_array_equal(got, arr)
    assert got.flags.writeable is False
    with pytest.raises(ValueError):
        got[0, 0] = 1.0
    # Not a copy: the array's memory lies inside the object's range of the arena.
    assert np.shares_memory(got, arena.np)
    assert np.shares_memory(got, obj)
    assert not np.shares_memory(got, arr)
    assert arena.inside(got.ctypes.data, got.nbytes)
    start = arena.base + 5 * plasma.ALIGN
    assert start <= got.ctypes.data and got.ctypes.data + got.nbytes <= start + total
    assert got.ctypes.data % plasma.ALIGN == 0
    assert out["n"] == 1


def test_plasma_buffers_are_aligned_and_match_the_source(arena):
    arrays = [np.arange(n, dtype=np.uint8) for n in (1, 63, 64, 65, 1000)]
    offset = 7 * plasma.ALIGN
    obj, total, v = arena.put(arrays, offset=offset)
    data, buffers, _ = plasma.parse(obj)
    assert bytes(data) == v.data
    assert [bytes(b) for b in buffers] == [bytes(b) for b in v.buffers]
    for b in buffers:
        assert isinstance(b, np.ndarray) and not b.flags.writeable
        assert b.ctypes.data % plasma.ALIGN == 0
        assert arena.inside(b.ctypes.data, b.nbytes)
    raw = bytes(obj)
    assert raw[:4] == plasma.MAGIC
    (n,) = struct.unpack_from("<I", raw, 8 + 16)
    assert n == len(arrays)
    for i in range(n):
        o, length = struct.unpack_from("<QQ", raw, 8 + 20 + 16 * i)
        assert o % plasma.ALIGN == 0
        assert o + length <= total
        assert raw[o:o + length] == arrays[i].tobytes()
    out = deserialize(data, buffers)
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)


def test_plasma_write_copies_so_later_mutation_does_not_change_the_object(arena):
    arr = np.zeros(1000)
    obj, _, _ = arena.put(arr, offset=plasma.ALIGN)
    arr[:] = 7
    out, _ = plasma_value(obj)
    assert not out.any()
    assert not np.shares_memory(out, arr)


def test_plasma_parse_of_bytes_like_object(arena):
    """The remote path parses a plain bytes copy of the object."""
    value = {"arr": np.arange(1000, dtype=np.int32), "s": "hi"}
    obj, _, _ = arena.put(value, metadata="M", offset=0)
    raw = bytes(obj)
    out, meta = plasma_value(raw)
    assert meta == "M" and out["s"] == "hi"
    np.testing.assert_array_equal(out["arr"], value["arr"])
    out, meta = plasma_value(bytearray(raw))
    np.testing.assert_array_equal(out["arr"], value["arr"])


@pytest.mark.parametrize("junk", [b"NOPE" + bytes(100), bytes(200), b"EMB", b""])
def test_plasma_rejects_a_region_without_the_magic(arena, junk):
    from ember.exceptions import ObjectLostError

    with pytest.raises(ObjectLostError, match="bad magic"):
        plasma.parse(junk)
    with pytest.raises(ObjectLostError):
        plasma.parse(np.frombuffer(junk, dtype=np.uint8))
    # A range of the arena nobody wrote to (junk bytes).
    with pytest.raises(ObjectLostError):
        plasma.parse(arena.obj(0, 256))


def test_plasma_region_reused_for_another_object(arena):
    """Space is reused once freed: the newer object is read, and neighbours are untouched."""
    first, total1, _ = arena.put("first" * 100, offset=0)
    second_off = (total1 + plasma.ALIGN - 1) // plasma.ALIGN * plasma.ALIGN
    second, _, _ = arena.put(np.arange(10.0), metadata="2", offset=second_off)
    again, _, _ = arena.put("third", offset=0)
    assert plasma_value(again) == ("third", "")
    out, meta = plasma_value(second)
    np.testing.assert_array_equal(out, np.arange(10.0))
    assert meta == "2"


def test_pyarrow_table_round_trip_through_plasma(arena):
    table = pa.table({
        "x": pa.array(range(10_000), type=pa.int64()),
        "y": pa.array([f"s{i}" for i in range(10_000)]),
        "z": pa.array([1.5, None] * 5_000),
    })
    v = serialize(table)
    assert v.buffers, "Arrow buffers should be out-of-band"
    assert len(v.data) < 10_000 * 8
    offset = 11 * plasma.ALIGN
    obj, total, _ = arena.put(table, offset=offset)
    out, meta = plasma_value(obj)
    assert isinstance(out, pa.Table)
    assert out.equals(table)
    assert out.schema == table.schema
    assert meta == ""

    # Zero-copy: the int column's data buffer lies inside the object's range of the arena.
    data, buffers, _ = plasma.parse(obj)
    out = deserialize(data, buffers)
    assert out.equals(table)
    buf = out.column("x").chunk(0).buffers()[1]
    assert not buf.is_mutable
    start = arena.base + offset
    assert start <= buf.address and buf.address + buf.size <= start + total
    spans = [(b.ctypes.data, b.nbytes) for b in buffers]
    assert any(s <= buf.address and buf.address + buf.size <= s + n for s, n in spans)


def test_serialized_value_defaults():
    v = SerializedValue(b"abc", [memoryview(b"xy")])
    assert v.metadata == "" and v.contained_refs == []
    assert v.size == 5
