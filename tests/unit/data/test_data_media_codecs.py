"""The codecs under the media readers, without a cluster: CRC-32C and TFRecord framing, the
tf.train.Example wire codec (packed and unpacked lists, negative ints), WebDataset keys and
suffix patterns, and variable-shape tensor columns in blocks."""
from __future__ import annotations

import io
import pickle
import struct

import numpy as np
import pytest

from ember.data import block as B
from ember.data._internal.datasource import tfrecords as T
from ember.data._internal.datasource import webdataset as W


def test_crc32c_check_value_and_masking():
    assert T.crc32c(b"123456789") == 0xE3069283 == T.crc32c_py(b"123456789")
    assert T.crc32c(b"") == 0 == T.crc32c_py(b"")
    blob = bytes(range(256)) * 7
    assert T.crc32c(blob) == T.crc32c_py(blob)
    c = T.crc32c(b"abc")
    assert T.masked_crc(b"abc") == ((((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def test_framing_round_trip_and_corruption():
    recs = [b"", b"x" * 300, b"\x00\x01"]
    data = b"".join(T.frame(r) for r in recs)
    assert list(T.iter_records(io.BytesIO(data), "f")) == recs
    bad = bytearray(data)
    bad[12 + 0 + 4 + 12 + 5] ^= 0xFF  # inside the second record's data
    with pytest.raises(ValueError, match="record 1's data checksum"):
        list(T.iter_records(io.BytesIO(bytes(bad)), "f"))
    with pytest.raises(ValueError, match="record 2 is cut short"):
        list(T.iter_records(io.BytesIO(data[:-1]), "f"))


def test_example_codec_round_trip():
    feats = {"i": ("int", [0, -1, 2**63 - 1, -(2**63)]), "f": ("float", [0.5, -2.0]),
             "b": ("bytes", [b"", b"\xff"]), "e": ("int", []), "n": (None, [])}
    assert T.decode_example(T.encode_example(feats)) == feats


def test_unpacked_repeated_fields_are_read():
    def tag(num, wt):
        return T._enc_varint(num << 3 | wt)

    ints = tag(1, 0) + T._enc_varint(5) + tag(1, 0) + T._enc_varint(-3)
    floats = tag(1, 5) + struct.pack("<f", 1.5) + tag(1, 5) + struct.pack("<f", 2.5)
    feature_i = T._ld(3, ints)
    feature_f = T._ld(2, floats)
    entries = (T._ld(1, T._ld(1, b"i") + T._ld(2, feature_i))
               + T._ld(1, T._ld(1, b"f") + T._ld(2, feature_f)))
    assert T.decode_example(T._ld(1, entries)) == {"i": ("int", [5, -3]),
                                                    "f": ("float", [1.5, 2.5])}
    with pytest.raises(ValueError, match="truncated"):
        T.decode_example(T._ld(1, entries)[:-2])


def test_webdataset_keys_and_patterns():
    assert W.split_key("a/b/0001.seg.png") == ("a/b/0001", "seg.png")
    assert W.split_key("a.b/README") == (None, None)
    assert W.matches("seg.png", ["*.png"]) and W.matches("txt", [".txt"])
    assert not W.matches("json", ["txt", "*.png"]) and W.matches("x", None)


def test_variable_shape_tensor_blocks():
    imgs = [np.zeros((2, 3, 3), np.uint8), np.ones((4, 5, 3), np.uint8)]
    t = B.rows_to_block([{"image": a} for a in imgs])
    back = B.column_to_numpy(t.column("image"))
    assert back.dtype == object and [a.shape for a in back] == [(2, 3, 3), (4, 5, 3)]
    assert (back[1] == 1).all()
    same = [B.rows_to_block([{"image": a}]) for a in imgs]  # fixed-shape blocks, shapes differ
    joined = pickle.loads(pickle.dumps(B.concat(same)))
    assert [r["image"].shape for r in B.iter_rows(joined)] == [(2, 3, 3), (4, 5, 3)]


def test_big_files_stream_out_in_several_tables(tmp_path, monkeypatch):
    import io as _io
    import tarfile

    import pyarrow.fs as pafs

    recs = [T.encode_example({"i": ("int", [k]), "b": ("bytes", [b"x" * 100])}) for k in range(50)]
    (tmp_path / "a.tfrecords").write_bytes(b"".join(T.frame(r) for r in recs))
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        for k in range(50):
            info = tarfile.TarInfo(f"s{k:03}.txt")
            info.size = 100
            tar.addfile(info, _io.BytesIO(b"y" * 100))
    monkeypatch.setattr(T, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(W, "CHUNK_BYTES", 1000)
    fs = pafs.LocalFileSystem()
    tables = list(T.read_tfrecords_file(fs, str(tmp_path / "a.tfrecords"), {}))
    assert len(tables) > 1 and sum(t.num_rows for t in tables) == 50
    assert [v for t in tables for v in t.column("i").to_pylist()] == [[k] for k in range(50)]
    shards = list(W.read_webdataset_file(fs, str(tmp_path / "a.tar"), {}))
    assert len(shards) == 5 and sum(t.num_rows for t in shards) == 50
