"""Big internal-KV values in parts (ember_common.kv_parts), without a GCS: a value over one part
is cut into parts plus a manifest written last, and reads back whole; a small value is stored as
it is; missing or altered parts are an error, never a silently wrong value."""
from __future__ import annotations

import os

import pytest

from ember_common import kv_parts


def _store(key: bytes, value: bytes, part_bytes: int) -> dict[bytes, bytes]:
    return dict(kv_parts.split(key, value, part_bytes))


def _read(kv: dict[bytes, bytes], key: bytes) -> bytes:
    stored = kv[key]
    keys = kv_parts.parts_of(key, stored)
    return stored if keys is None else kv_parts.join(stored, [kv.get(k) for k in keys])


def test_a_big_value_goes_in_parts_with_the_manifest_last_and_reads_back_whole():
    value = os.urandom(10_000)
    puts = kv_parts.split(b"gcs://_ray_pkg_x.zip", value, 4096)
    assert [len(v) for _, v in puts[:-1]] == [4096, 4096, 1808]
    assert puts[-1][0] == b"gcs://_ray_pkg_x.zip"  # a reader that sees the manifest sees every part
    assert _read(dict(puts), b"gcs://_ray_pkg_x.zip") == value


@pytest.mark.parametrize("value", [b"", b"PK\x03\x04zip", b"\x80\x05pickle", b"x" * 4096])
def test_a_value_that_fits_one_part_is_stored_as_it_is(value):
    assert kv_parts.split(b"k", value, 4096) == [(b"k", value)]
    assert kv_parts.parts_of(b"k", value) is None


def test_a_missing_or_altered_part_is_an_error():
    kv = _store(b"k", os.urandom(9000), 4096)
    del kv[kv_parts.part_key(b"k", 1)]
    with pytest.raises(kv_parts.PartsError, match="missing"):
        _read(kv, b"k")
    kv = _store(b"k", os.urandom(9000), 4096)
    kv[kv_parts.part_key(b"k", 2)] = b"y" * len(kv[kv_parts.part_key(b"k", 2)])
    with pytest.raises(kv_parts.PartsError, match="does not match"):
        _read(kv, b"k")
