"""Big internal-KV values in parts: what lets the GCS keep a small message limit.

A runtime-env package (up to `Config.runtime_env_max_package_bytes`, 500 MiB) or a pickled
function (up to 100 MB, as Ray) does not fit in one GCS request
(`Config.max_control_message_bytes`), nor in one etcd write (etcd refuses requests over 1.5 MiB
by default). `split` cuts a value into parts of PART_BYTES, each stored under its
own key (`<key>#part-<i>`), plus a small manifest under the key itself, written last: a reader
that finds the manifest finds every part. `parts_of` tells a manifest from a plain value (a
value stored whole, as a small package is, reads back unchanged) and `join` checks the parts'
total size and SHA-256 against it. Pure: the callers do the puts and gets, with overwrite=False
(the values are named by their content; and on etcd a put that may overwrite is a transaction
carrying the value twice, over etcd's limit for a 1 MiB part).
"""
from __future__ import annotations

import hashlib
import json

PART_BYTES = 1024 * 1024  # under etcd's default request limit, far under the GCS's
_MAGIC = b"\x00ember-kv-parts\x00"  # no zip, wheel or pickle starts with a NUL byte


class PartsError(ValueError):
    """A manifest whose parts are missing or do not match it."""


def part_key(key: bytes, index: int) -> bytes:
    """The KV key of part `index` of the value stored under key."""
    return key + b"#part-%d" % index


def split(key: bytes, value: bytes, part_bytes: int = PART_BYTES) -> list[tuple[bytes, bytes]]:
    """The (key, value) puts that store value under key, in order (the manifest last); one put
    of the value itself when it fits in one part."""
    if len(value) <= part_bytes:
        return [(key, value)]
    view = memoryview(value)
    puts = [(part_key(key, i), bytes(view[pos:pos + part_bytes]))
            for i, pos in enumerate(range(0, len(value), part_bytes))]
    manifest = {"parts": len(puts), "size": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    return [*puts, (key, _MAGIC + json.dumps(manifest, sort_keys=True).encode())]


def parts_of(key: bytes, stored: bytes) -> list[bytes] | None:
    """The part keys to read when `stored` (the value under key) is a manifest; None when it is
    the value itself."""
    if not stored.startswith(_MAGIC):
        return None
    n, _, _ = _manifest(stored)
    return [part_key(key, i) for i in range(n)]


def join(stored: bytes, parts: list[bytes | None]) -> bytes:
    """The value a manifest describes, from its parts in order; PartsError when a part is
    missing or the whole does not match the manifest's size and hash."""
    n, size, sha256 = _manifest(stored)
    if any(p is None for p in parts) or len(parts) != n:
        raise PartsError(f"a value stored in {n} parts is missing some of them")
    value = b"".join(p for p in parts if p is not None)
    if len(value) != size or hashlib.sha256(value).hexdigest() != sha256:
        raise PartsError(f"a value stored in {n} parts does not match its manifest "
                         f"({len(value)} bytes, expected {size})")
    return value


def _manifest(stored: bytes) -> tuple[int, int, str]:
    """(parts, size, sha256) of a manifest; PartsError when it is malformed."""
    try:
        manifest = json.loads(stored[len(_MAGIC):])
        return int(manifest["parts"]), int(manifest["size"]), str(manifest["sha256"])
    except (ValueError, KeyError, TypeError):
        raise PartsError("a malformed parts manifest") from None
