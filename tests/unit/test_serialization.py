"""serialize/deserialize (pickle 5, out-of-band buffers) and the plasma on-disk object format."""
from __future__ import annotations

import mmap
import os
import struct
import threading

import numpy as np
import pyarrow as pa
import pytest

from ember._private import plasma
from ember._private.serialization import (ERROR_METADATA, SerializedValue, deserialize,
                                          deserialize_proto, serialize, serialize_error)

OID = bytes(range(20))


def roundtrip(value):
    v = serialize(value)
    return deserialize(v.data, v.buffers)


def to_plasma(tmp_path, value, metadata: str = "", oid: bytes = OID):
    v = serialize(value, metadata)
    size = plasma.write(str(tmp_path), oid, v)
    return plasma.object_path(str(tmp_path), oid), size, v


def base_of(arr: np.ndarray):
    b = arr
    while isinstance(b, np.ndarray):
        b = b.base
    return b


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


def test_plasma_round_trip_of_plain_value_and_metadata(tmp_path):
    value = {"a": [1, 2, 3], "b": "x" * 1000}
    path, size, _ = to_plasma(tmp_path, value, metadata="RAW")
    assert path == os.path.join(str(tmp_path), OID.hex())
    assert os.path.getsize(path) == size
    assert not os.path.exists(path + ".tmp")
    out, meta = plasma.read_value(path)
    assert out == value
    assert meta == "RAW"


@pytest.mark.parametrize("meta", ["", "ERROR", "ünï ✓", "m" * 1000])
def test_plasma_metadata_round_trips(tmp_path, meta):
    path, _, _ = to_plasma(tmp_path, np.ones(3), metadata=meta)
    data, buffers, got = plasma.read(path)
    assert got == meta
    assert len(buffers) == 1


def test_plasma_numpy_arrays_are_read_only_views_of_the_mapping(tmp_path):
    arr = np.arange(100_000, dtype=np.float64).reshape(100, 1000)
    path, size, _ = to_plasma(tmp_path, {"arr": arr, "n": 1})
    assert size >= arr.nbytes
    out, meta = plasma.read_value(path)
    assert meta == ""
    got = out["arr"]
    np.testing.assert_array_equal(got, arr)
    assert got.flags.writeable is False
    with pytest.raises(ValueError):
        got[0, 0] = 1.0
    base = base_of(got)
    assert isinstance(base, memoryview)
    assert isinstance(base.obj, mmap.mmap)  # not a copy: a view of the mapped file
    assert base.readonly
    assert got.ctypes.data % plasma.ALIGN == 0
    assert out["n"] == 1


def test_plasma_buffers_are_aligned_and_match_the_source(tmp_path):
    arrays = [np.arange(n, dtype=np.uint8) for n in (1, 63, 64, 65, 1000)]
    path, _, v = to_plasma(tmp_path, arrays)
    data, buffers, _ = plasma.read(path)
    assert bytes(data) == v.data
    assert [bytes(b) for b in buffers] == [bytes(b) for b in v.buffers]
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:4] == plasma.MAGIC
    (n,) = struct.unpack_from("<I", raw, 8 + 16)
    assert n == len(arrays)
    for i in range(n):
        offset, length = struct.unpack_from("<QQ", raw, 8 + 20 + 16 * i)
        assert offset % plasma.ALIGN == 0
        assert raw[offset:offset + length] == arrays[i].tobytes()


def test_plasma_write_copies_so_later_mutation_does_not_change_the_object(tmp_path):
    arr = np.zeros(1000)
    path, _, _ = to_plasma(tmp_path, arr)
    arr[:] = 7
    out, _ = plasma.read_value(path)
    assert not out.any()


def test_plasma_rejects_a_foreign_file(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(ValueError, match="not an Ember object"):
        plasma.read(str(path))


def test_plasma_overwrite_same_id(tmp_path):
    to_plasma(tmp_path, "first")
    path, _, _ = to_plasma(tmp_path, "second")
    assert plasma.read_value(path) == ("second", "")
    assert sorted(os.listdir(tmp_path)) == [OID.hex()]


def test_pyarrow_table_round_trip_through_plasma(tmp_path):
    table = pa.table({
        "x": pa.array(range(10_000), type=pa.int64()),
        "y": pa.array([f"s{i}" for i in range(10_000)]),
        "z": pa.array([1.5, None] * 5_000),
    })
    v = serialize(table)
    assert v.buffers, "Arrow buffers should be out-of-band"
    assert len(v.data) < 10_000 * 8
    path = plasma.object_path(str(tmp_path), OID)
    plasma.write(str(tmp_path), OID, v)
    out, meta = plasma.read_value(path)
    assert isinstance(out, pa.Table)
    assert out.equals(table)
    assert out.schema == table.schema
    assert meta == ""

    # Zero-copy: the int column's data buffer lies inside the mapped file.
    data, buffers, _ = plasma.read(path)
    out = deserialize(data, buffers)
    assert out.equals(table)
    spans = [(np.frombuffer(b, dtype=np.uint8).ctypes.data, b.nbytes) for b in buffers]
    buf = out.column("x").chunk(0).buffers()[1]
    assert not buf.is_mutable
    assert any(start <= buf.address and buf.address + buf.size <= start + n for start, n in spans)


def test_serialized_value_defaults():
    v = SerializedValue(b"abc", [memoryview(b"xy")])
    assert v.metadata == "" and v.contained_refs == []
    assert v.size == 5
