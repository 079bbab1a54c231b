"""read_tfrecords / write_tfrecords without TensorFlow on a real embedded cluster: a TFRecord file
built byte by byte in the test (Examples serialized by the protobuf package from a descriptor
written here, CRC-32C by a bitwise implementation here) is read back; Ember's writer's files are
parsed by that same independent decoder; corrupted files and unknown arguments are refused."""
from __future__ import annotations

import os
import struct

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import ember

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


def _example_class():
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="ember_test_example.proto", package="etest",
                                            syntax="proto3")

    def msg(name, *fields, nested=()):
        m = fd.message_type.add(name=name)
        for fname, num, typ, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=typ, label=label)
            if tname:
                f.type_name = tname
        for n in nested:
            m.nested_type.add().CopyFrom(n)
        return m

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", ("value", 1, F.TYPE_BYTES, rep, None))
    msg("FloatList", ("value", 1, F.TYPE_FLOAT, rep, None))
    msg("Int64List", ("value", 1, F.TYPE_INT64, rep, None))
    feat = msg("Feature", ("bytes_list", 1, F.TYPE_MESSAGE, opt, ".etest.BytesList"),
               ("float_list", 2, F.TYPE_MESSAGE, opt, ".etest.FloatList"),
               ("int64_list", 3, F.TYPE_MESSAGE, opt, ".etest.Int64List"))
    feat.oneof_decl.add(name="kind")
    for f in feat.field:
        f.oneof_index = 0
    entry = descriptor_pb2.DescriptorProto(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=opt,
                    type_name=".etest.Feature")
    entry.options.map_entry = True
    msg("Features", ("feature", 1, F.TYPE_MESSAGE, rep, ".etest.Features.FeatureEntry"),
        nested=[entry])
    msg("Example", ("features", 1, F.TYPE_MESSAGE, opt, ".etest.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("etest.Example"))


Example = _example_class()


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = _crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(payload: bytes) -> bytes:
    n = struct.pack("<Q", len(payload))
    return n + struct.pack("<I", _masked(n)) + payload + struct.pack("<I", _masked(payload))


def _parse(raw: bytes) -> list:
    out, pos = [], 0
    while pos < len(raw):
        (n,) = struct.unpack_from("<Q", raw, pos)
        assert struct.unpack_from("<I", raw, pos + 8)[0] == _masked(raw[pos:pos + 8])
        payload = raw[pos + 12:pos + 12 + n]
        assert struct.unpack_from("<I", raw, pos + 12 + n)[0] == _masked(payload)
        out.append(Example.FromString(payload))
        pos += 16 + n
    return out


def _ex(**features) -> bytes:
    ex = Example()
    for k, (kind, vals) in features.items():
        getattr(ex.features.feature[k], kind).value.extend(vals)
    return ex.SerializeToString()


def test_crc_of_the_test_is_castagnoli():
    assert _crc32c(b"123456789") == 0xE3069283  # the standard check value


def test_reads_a_file_built_byte_by_byte(cluster, tmp_path):
    recs = [_ex(label=("int64_list", [3]), score=("float_list", [0.5]),
                name=("bytes_list", [b"cat"]), emb=("float_list", [1.0, 2.0, 3.0]),
                big=("int64_list", [-(2**40), 2**62])),
            _ex(label=("int64_list", [-4]), score=("float_list", [1.25]),
                name=("bytes_list", [b"dog"]), emb=("float_list", [4.0]),
                big=("int64_list", [7]))]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.tfrecords").write_bytes(b"".join(_record(r) for r in recs))
    ds = ember.data.read_tfrecords(str(tmp_path / "in"))
    rows = ds.take_all()
    assert [r["label"] for r in rows] == [3, -4]  # one value everywhere: plain column
    assert [r["score"] for r in rows] == [0.5, 1.25] and [r["name"] for r in rows] == [b"cat", b"dog"]
    assert [list(r["emb"]) for r in rows] == [[1.0, 2.0, 3.0], [4.0]]  # lists stay lists
    assert [list(r["big"]) for r in rows] == [[-(2**40), 2**62], [7]]
    schema = ds.schema()
    assert str(schema.types[schema.names.index("score")]) == "float"
    with_path = ember.data.read_tfrecords(str(tmp_path / "in"), include_paths=True).take(1)
    assert with_path[0]["path"].endswith("a.tfrecords") and with_path[0]["label"] == 3


def test_write_round_trip_and_independent_parse(cluster, tmp_path):
    items = [{"id": i, "x": float(i) / 2, "tag": f"t{i}", "raw": bytes([i]), "v": [i, i + 1]}
             for i in range(20)]
    out = tmp_path / "out"
    ember.data.from_items(items, override_num_blocks=4).write_tfrecords(str(out),
                                                                        min_rows_per_file=10)
    files = sorted(f for f in os.listdir(out) if not f.startswith("."))
    assert len(files) == 2 and all(f.endswith(".tfrecords") for f in files)
    parsed = [e for f in files for e in _parse((out / f).read_bytes())]
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in parsed) == list(range(20))
    e7 = next(e for e in parsed if e.features.feature["id"].int64_list.value[0] == 7)
    assert list(e7.features.feature["v"].int64_list.value) == [7, 8]
    assert e7.features.feature["tag"].bytes_list.value == [b"t7"]
    assert e7.features.feature["x"].float_list.value == [3.5]
    back = sorted(ember.data.read_tfrecords(str(out)).take_all(), key=lambda r: r["id"])
    assert [(r["id"], r["x"], r["tag"], r["raw"], list(r["v"])) for r in back] == \
        [(i, i / 2, f"t{i}".encode(), bytes([i]), [i, i + 1]) for i in range(20)]


def test_corruption_and_refusals(cluster, tmp_path):
    good = _record(_ex(a=("int64_list", [1]))) + _record(_ex(a=("int64_list", [2])))
    d = tmp_path / "bad"
    d.mkdir()
    flipped = bytearray(good)
    flipped[-6] ^= 0x01  # a byte of the second record's data
    (d / "x.tfrecords").write_bytes(bytes(flipped))
    with pytest.raises(Exception, match="record 1's data checksum does not match"):
        ember.data.read_tfrecords(str(d)).take_all()
    (d / "x.tfrecords").write_bytes(good[:-3])
    with pytest.raises(Exception, match="record 1 is cut short"):
        ember.data.read_tfrecords(str(d)).take_all()
    (d / "x.tfrecords").write_bytes(b"plain text, not records")
    with pytest.raises(Exception, match="length checksum does not match"):
        ember.data.read_tfrecords(str(d)).take_all()
    with pytest.raises(ValueError, match="'tf_schema'"):
        ember.data.read_tfrecords(str(d), tf_schema=object())
    with pytest.raises(ValueError, match="'tfx_read_options'"):
        ember.data.read_tfrecords(str(d), tfx_read_options=object())
    with pytest.raises(ValueError, match="'tf_schema'"):
        ember.data.range(3).write_tfrecords(str(tmp_path / "o"), tf_schema=object())
    with pytest.raises(Exception, match="column 'flag' has type bool"):
        ember.data.from_items([{"flag": True}]).write_tfrecords(str(tmp_path / "o2"))
