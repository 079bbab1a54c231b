"""read_webdataset / write_webdataset on a real embedded cluster: a tar shard built with tarfile
in the test (samples grouped by key, default decoding of txt/cls/json/npy/png, fileselect,
suffixes, filerename, a custom decoder), a write/read round trip, and refusals by name."""
from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

import ember

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


def _png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _shard(path, members):
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def shard_dir(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    img = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    buf = io.BytesIO()
    np.save(buf, np.array([1.5, 2.5]))
    _shard(d / "shard-0.tar", [
        ("dir/s0.txt", b"hello"), ("dir/s0.cls", b"3"), ("dir/s0.png", _png(img)),
        ("dir/s0.meta.json", json.dumps({"w": 5}).encode()), ("dir/s0.npy", buf.getvalue()),
        ("dir/s1.txt", b"world"), ("dir/s1.cls", b"7"), ("dir/s1.png", _png(img + 1)),
        ("dir/s1.meta.json", json.dumps({"w": 6}).encode()), ("dir/s1.npy", buf.getvalue()),
        ("README", b"no dot: skipped"),
    ])
    _shard(d / "shard-1.tar", [("s2.txt", b"third"), ("s2.cls", b"9"), ("s2.bin", b"\x00\x01")])
    return d, img


def test_read_groups_and_decodes(cluster, shard_dir):
    d, img = shard_dir
    rows = sorted(ember.data.read_webdataset(str(d)).take_all(), key=lambda r: r["__key__"])
    assert [r["__key__"] for r in rows] == ["dir/s0", "dir/s1", "s2"]
    s0, s1, s2 = rows
    assert s0["txt"] == "hello" and s0["cls"] == 3 and s1["cls"] == 7
    np.testing.assert_array_equal(s0["png"], img)
    np.testing.assert_array_equal(s1["png"], img + 1)
    assert s0["meta.json"] == {"w": 5}
    np.testing.assert_array_equal(s0["npy"], [1.5, 2.5])
    assert s0["__url__"].endswith("shard-0.tar") and s2["__url__"].endswith("shard-1.tar")
    assert s2["bin"] == b"\x00\x01" and s2["txt"] == "third" and "png" not in s2
    raw = ember.data.read_webdataset(str(d / "shard-1.tar"), decoder=None).take_all()
    assert raw[0]["txt"] == b"third" and raw[0]["cls"] == b"9"


def test_selection_renaming_and_custom_decoder(cluster, shard_dir):
    d, _ = shard_dir
    rows = ember.data.read_webdataset(str(d), suffixes=["txt", "*.cls"]).take_all()
    assert all(set(r) == {"__key__", "__url__", "txt", "cls"} for r in rows)
    none = ember.data.read_webdataset(str(d / "shard-1.tar"), suffixes=["nope"]).take_all()
    assert [set(r) for r in none] == [{"__key__", "__url__"}]  # as Ray: the key stays a sample
    sel = ember.data.read_webdataset(str(d), fileselect=lambda n: n.endswith(".txt")).take_all()
    assert sorted(r["txt"] for r in sel) == ["hello", "third", "world"] and "cls" not in sel[0]
    renamed = ember.data.read_webdataset(
        str(d / "shard-1.tar"), filerename=lambda n: n.replace(".cls", ".label")).take_all()
    assert renamed[0]["label"] == b"9"  # no decoding rule for .label

    def upper(sample):
        return {k: (v.upper() if k == "txt" else v) for k, v in sample.items()}

    dec = ember.data.read_webdataset(str(d / "shard-1.tar"), decoder=[True, upper]).take_all()
    assert dec[0]["txt"] == "THIRD" and dec[0]["cls"] == 9


def test_round_trip_and_refusals(cluster, shard_dir, tmp_path):
    d, img = shard_dir
    src = ember.data.read_webdataset(str(d / "shard-0.tar")).drop_columns(["__url__"])
    out = tmp_path / "out"
    src.write_webdataset(str(out))
    (tar,) = [f for f in os.listdir(out) if not f.startswith(".")]
    with tarfile.open(out / tar) as t:
        names = sorted(t.getnames())
    assert "dir/s0.txt" in names and "dir/s1.png" in names and "dir/s0.meta.json" in names
    back = sorted(ember.data.read_webdataset(str(out)).take_all(), key=lambda r: r["__key__"])
    assert [r["txt"] for r in back] == ["hello", "world"] and [r["cls"] for r in back] == [3, 7]
    np.testing.assert_array_equal(back[0]["png"], img)
    assert back[1]["meta.json"] == {"w": 6}
    ember.data.from_items([{"txt": f"t{i}"} for i in range(10)], override_num_blocks=5) \
        .write_webdataset(str(tmp_path / "keys"), min_rows_per_file=5)
    keyed = ember.data.read_webdataset(str(tmp_path / "keys")).take_all()
    assert sorted(r["txt"] for r in keyed) == [f"t{i}" for i in range(10)]
    assert len(os.listdir(tmp_path / "keys")) == 2 and len({r["__key__"] for r in keyed}) == 10
    with pytest.raises(ValueError, match="'expand_json'"):
        ember.data.read_webdataset(str(d), expand_json=True)
    with pytest.raises(ValueError, match="'PIL'"):
        ember.data.read_webdataset(str(d), decoder="PIL")
    with pytest.raises(Exception, match="key 'a.b' cannot be read back"):
        ember.data.from_items([{"__key__": "a.b", "txt": "x"}]).write_webdataset(
            str(tmp_path / "bad"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.tar").write_bytes(b"\x01" * 700)
    with pytest.raises(Exception, match="not a tar file"):
        ember.data.read_webdataset(str(tmp_path / "junk")).take_all()
