"""WebDataset tar shards (Ray's read_webdataset / write_webdataset).

A shard is a tar file; its members are grouped into samples by key: the member name up to the
first dot of its last path part (`a/b/0001.seg.png` has key `a/b/0001` and suffix `seg.png`).
Consecutive members with one key make one sample, one row: `__key__`, `__url__` (the shard) and a
column per suffix. `fileselect` picks members by name (after `filerename`), `suffixes` picks the
suffixes kept. The default decoder turns `txt`/`text` into str, `cls`/`cls2` into int, `json`
into objects, `npy` into arrays, `jpg`/`png`/`ppm`/`pgm`/`pbm`/`pnm` into image arrays,
`pickle`/`pkl`, `pt`/`pth` and `mp` (msgpack) into objects; other suffixes stay bytes. A
callable decoder gets the sample dict and returns it; a list applies each in turn.

Writing is the reverse: each write task makes one tar; each row one sample, keyed by its
`__key__` (a fresh uuid when absent), each other column a member `{key}.{column}` encoded by
the column's suffix as above (a str or bytes value is written as it is).
"""
from __future__ import annotations

import fnmatch
import io
import json
import re
import tarfile
import time
import uuid
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from ember.data import block as B

from .sinks import FileDatasink

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_IMAGE_EXT = {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm"}


def split_key(name: str) -> tuple[str | None, str | None]:
    """(key, suffix) of a member name; (None, None) when its last part has no dot."""
    m = _KEY.match(name)
    return (m.group(1), m.group(2)) if m else (None, None)


def matches(name: str, patterns: Any) -> bool:
    """Ray's suffix test: None accepts all; a callable decides; else a list of literal names or
    glob patterns (matched against "." + name)."""
    if patterns is None:
        return True
    if callable(patterns):
        return bool(patterns(name))
    for p in patterns:
        if "*" in p or "?" in p:
            if fnmatch.fnmatch("." + name, p):
                return True
        elif name == p or "." + name == p:
            return True
    return False


def check_selector(name: str, value: Any) -> None:
    if value is None or callable(value):
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(f"read_webdataset: {name} must be a callable or a list of patterns, got "
                        f"{type(value).__name__}")


def check_decoder(decoder: Any, what: str = "decoder") -> None:
    for d in decoder if isinstance(decoder, list) else [decoder]:
        if d == "PIL":
            raise ValueError(f"{what}='PIL' gives PIL images, which Arrow blocks cannot hold; use "
                             "the default (numpy arrays)")
        if not (callable(d) or d is None or isinstance(d, (bool, str))):
            raise TypeError(f"{what} must be True, a callable or a list of them, got "
                            f"{type(d).__name__}")


def _apply(fns: Any, sample: dict[str, Any], default: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    for f in fns if isinstance(fns, list) else [fns]:
        if f is None:
            continue
        sample = f(sample) if callable(f) else default(sample)
        if not isinstance(sample, dict):
            raise TypeError(f"a webdataset decoder/encoder must return the sample dict, got "
                            f"{type(sample).__name__}")
    return sample


def decode_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """The default decoder: values decoded by the last part of their suffix."""
    out = dict(sample)
    for key, value in sample.items():
        if key.startswith("__") or not isinstance(value, bytes):
            continue
        ext = key.rsplit(".", 1)[-1]
        if ext in ("txt", "text"):
            out[key] = value.decode("utf-8")
        elif ext in ("cls", "cls2"):
            out[key] = int(value.decode("utf-8"))
        elif ext in _IMAGE_EXT:
            from .images import decode_image

            out[key] = decode_image(value, key, None, None)
        elif ext == "json":
            out[key] = json.loads(value)
        elif ext == "npy":
            out[key] = np.load(io.BytesIO(value))
        elif ext in ("pickle", "pkl"):
            import pickle

            out[key] = pickle.loads(value)
        elif ext in ("pt", "pth"):
            import torch

            out[key] = torch.load(io.BytesIO(value), weights_only=False)
        elif ext == "mp":
            import msgpack

            out[key] = msgpack.unpackb(value, raw=False)
    return out


def _members(f: Any, opts: dict[str, Any], url: str) -> Iterator[tuple[str, bytes]]:
    rename = opts.get("filerename")
    with tarfile.open(fileobj=f, mode="r|*") as tar:
        for info in tar:
            if not info.isreg():
                continue
            member = tar.extractfile(info)
            data = member.read() if member is not None else b""
            name = info.name
            for r in rename if isinstance(rename, list) else [rename]:
                if r is not None:
                    name = r(name)
            if not isinstance(name, str):
                raise TypeError(f"{url}: filerename returned {type(name).__name__}, not a str")
            if matches(name, opts.get("fileselect")):
                yield name, data


def samples(f: Any, opts: dict[str, Any], url: str) -> Iterator[dict[str, Any]]:
    """The samples of one shard, grouped by key, before decoding."""
    cur: dict[str, Any] | None = None
    for name, data in _members(f, opts, url):
        key, suffix = split_key(name)
        if key is None or suffix is None:
            continue
        if cur is None or key != cur["__key__"]:
            if cur is not None:
                yield cur
            cur = {"__key__": key, "__url__": url}
        if suffix in cur:
            raise ValueError(f"{url}: the member {name!r} repeats suffix {suffix!r} of key {key!r}")
        if matches(suffix, opts.get("suffixes")):
            cur[suffix] = data
    if cur is not None:
        yield cur


CHUNK_BYTES = 16 * 2**20  # a table per this many member bytes: big shards are not held whole


def read_webdataset_file(fs: Any, path: str, opts: dict[str, Any]) -> Iterator[pa.Table]:
    """One shard's samples as tables, a row per sample, a table per CHUNK_BYTES of members."""
    with fs.open_input_stream(path, **opts.get("open_stream_args", {})) as f:
        if opts.get("verbose_open"):
            print(f"start {{'__url__': {path!r}}}")
        rows: list[dict[str, Any]] = []
        size = 0
        try:
            for s in samples(f, opts, path):
                size += sum(len(v) for v in s.values() if isinstance(v, bytes))
                s = _apply(opts.get("decoder", True), s, decode_sample)
                rows.append({k: v[0] if isinstance(v, list) and len(v) == 1 else v
                             for k, v in s.items()})
                if size >= CHUNK_BYTES:
                    yield B.rows_to_block(rows)
                    rows, size = [], 0
        except tarfile.TarError as e:
            raise ValueError(f"not a tar file ({e})") from None
        if rows:
            yield B.rows_to_block(rows)
        if opts.get("verbose_open"):
            print(f"done {{'__url__': {path!r}}}")


def encode_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """The default encoder: values encoded by the last part of their column's suffix."""
    out = dict(sample)
    for key, value in sample.items():
        if key.startswith("__") or value is None:
            continue
        ext = key.rsplit(".", 1)[-1].lower()
        if ext in ("txt", "text") and isinstance(value, str):
            out[key] = value.encode("utf-8")
        elif ext in ("cls", "cls2"):
            out[key] = str(int(value)).encode("utf-8")
        elif ext in _IMAGE_EXT and not isinstance(value, bytes):
            from PIL import Image

            buf = io.BytesIO()
            Image.fromarray(np.asarray(value)).save(buf, format="jpeg" if ext == "jpg" else ext)
            out[key] = buf.getvalue()
        elif ext == "json" and not isinstance(value, bytes):
            out[key] = json.dumps(value).encode("utf-8")
        elif ext == "npy" and not isinstance(value, bytes):
            buf = io.BytesIO()
            np.save(buf, np.asarray(value))
            out[key] = buf.getvalue()
        elif ext in ("pickle", "pkl"):
            import pickle

            out[key] = pickle.dumps(value)
        elif ext in ("pt", "pth"):
            import torch

            buf = io.BytesIO()
            torch.save(value, buf)
            out[key] = buf.getvalue()
        elif ext == "mp":
            import msgpack

            out[key] = msgpack.dumps(value)
    return out


class WebDatasetDatasink(FileDatasink):
    """One tar shard per write task."""

    def __init__(self, path: str, encoder: Any = True, **kwargs: Any) -> None:
        super().__init__(path, "webdataset", **kwargs)
        check_decoder(encoder, "encoder")
        self.encoder = encoder

    def get_name(self) -> str:
        return "WebDataset"

    @property
    def ext(self) -> str:
        return "tar"

    def _encode(self, out: Any, first: pa.Table, rest: Iterator[pa.Table]) -> int:
        rows = 0
        with tarfile.open(fileobj=out, mode="w|") as tar:
            for block in (first, *rest):
                for row in B.iter_rows(block):
                    self._add(tar, row)
                    rows += 1
        return rows

    def _add(self, tar: tarfile.TarFile, row: dict[str, Any]) -> None:
        sample = _apply(self.encoder, row, encode_sample)
        key = str(sample.get("__key__") or uuid.uuid4().hex)
        if split_key(f"{key}.x") != (key, "x"):
            raise ValueError(f"write_webdataset: key {key!r} cannot be read back: readers split a "
                             "member name at the first dot of its last path part")
        for col, value in sample.items():
            if value is None or col.startswith("__"):
                continue
            if isinstance(value, str):
                value = value.encode("utf-8")
            if not isinstance(value, bytes):
                raise ValueError(f"write_webdataset: column {col!r} holds a "
                                 f"{type(value).__name__}, and its suffix names no encoding; "
                                 "give str or bytes, or an encoder")
            info = tarfile.TarInfo(f"{key}.{col}")
            info.size, info.mtime, info.mode = len(value), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(value))
