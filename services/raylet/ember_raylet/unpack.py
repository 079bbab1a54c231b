"""Safe unpacking of runtime-env packages (working_dir, py_modules zips) into the node's shared
package cache. Pure: no sockets, no asyncio; the raylet's runtime-env module calls it in a thread.

A package comes from any client of the cluster, so unpacking it trusts nothing in it:
- the uncompressed total is capped (MAX_UNPACKED_BYTES) and so is each entry's and the whole
  archive's compression ratio (MAX_RATIO), counting the bytes actually written, so a small
  "zip bomb" is refused before it fills the disk;
- symlink entries are refused (the package is rejected, naming the entry), never created and
  never followed; entries whose path leaves the target directory are refused too;
- files are written 0644, or 0755 when the archive marks them executable for their owner;
  directories 0755; nothing is group- or world-writable, whatever mode bits the archive carries.
"""
from __future__ import annotations

import os
import stat
import zipfile
from typing import IO

MAX_UNPACKED_BYTES = 2 * 2**30
"""The most bytes a package may unpack to (2 GiB: four times the largest package the client
uploads, EMBER_RUNTIME_ENV_MAX_PACKAGE_BYTES' default of 500 MiB)."""

MAX_RATIO = 200
"""The highest uncompressed/compressed ratio allowed, per entry and for the whole archive, once
the entry (or total) is past RATIO_FLOOR_BYTES; ordinary source and data compress far less."""

RATIO_FLOOR_BYTES = 1 * 2**20
"""Below this many uncompressed bytes the ratio is not checked (tiny, repetitive files may
compress well past MAX_RATIO without harm)."""

_CHUNK = 1 << 16


class UnpackError(Exception):
    """A package was refused; the message names the entry and the limit."""


def unpack_zip(path_or_file: str | IO[bytes], dest: str, name: str, *,
               max_bytes: int = MAX_UNPACKED_BYTES, max_ratio: float = MAX_RATIO) -> int:
    """Unpacks a zip (a path or binary file object) into the existing directory dest with the
    limits above; returns the bytes written. UnpackError names what was refused; dest may then
    hold a partial tree, which the caller removes."""
    root = os.path.realpath(dest)
    total = 0
    try:
        with zipfile.ZipFile(path_or_file) as zf:
            compressed = sum(i.compress_size for i in zf.infolist())
            _check_declared(zf.infolist(), name, compressed, max_bytes, max_ratio)
            for info in zf.infolist():
                _check_kind(info, name)
                rel = info.filename.replace("\\", "/")
                target = os.path.realpath(os.path.join(root, rel))
                if target != root and not target.startswith(root + os.sep):
                    raise UnpackError(f"package {name}: entry {info.filename!r} escapes the "
                                      f"package directory; refused")
                if info.is_dir():
                    _mkdirs(root, target)
                    continue
                _mkdirs(root, os.path.dirname(target))
                total = _write(zf, info, target, name, total, compressed, max_bytes, max_ratio)
    except zipfile.BadZipFile as e:
        raise UnpackError(f"package {name} is not a valid zip: {e}") from None
    return total


def _check_declared(infos: list[zipfile.ZipInfo], name: str, compressed: int, max_bytes: int,
                    max_ratio: float) -> None:
    """The limits on the sizes the archive declares, before anything is written (the writes
    are counted again: a declared size is only what the archive claims)."""
    declared = 0
    for info in infos:
        declared += info.file_size
        if declared > max_bytes:
            raise _total(name, info.filename, max_bytes)
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > max_ratio * max(info.compress_size, 1):
            raise _ratio(name, info.filename, max_ratio)
    if declared > RATIO_FLOOR_BYTES and declared > max_ratio * max(compressed, 1):
        raise _ratio(name, infos[-1].filename, max_ratio)


def _check_kind(info: zipfile.ZipInfo, name: str) -> None:
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise UnpackError(f"package {name}: entry {info.filename!r} is a symlink; symlinks in "
                          f"working_dir/py_modules packages are refused (package the files "
                          f"themselves: zip without -y/--symlinks)")
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise UnpackError(f"package {name}: entry {info.filename!r} is not a regular file or "
                          f"directory; refused")


def _mkdirs(root: str, path: str) -> None:
    """Creates path (inside root) and its parents 0755, refusing to pass through a symlink."""
    rel = os.path.relpath(path, root)
    cur = root
    for part in ([] if rel == "." else rel.split(os.sep)):
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            raise UnpackError(f"package path {rel!r} passes through a symlink; refused")
        if not os.path.isdir(cur):
            os.mkdir(cur, 0o755)
        os.chmod(cur, 0o755)


def _write(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: str, name: str, total: int,
           compressed: int, max_bytes: int, max_ratio: float) -> int:
    mode = 0o755 if (info.external_attr >> 16) & stat.S_IXUSR else 0o644
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, mode)
    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _total(name, info.filename, max_bytes)
            if written > RATIO_FLOOR_BYTES and written > max_ratio * max(info.compress_size, 1):
                raise _ratio(name, info.filename, max_ratio)
            if total > RATIO_FLOOR_BYTES and total > max_ratio * max(compressed, 1):
                raise _ratio(name, info.filename, max_ratio)
            out.write(chunk)
    os.chmod(target, mode)
    return total


def _ratio(name: str, entry: str, max_ratio: float) -> UnpackError:
    return UnpackError(f"package {name}: entry {entry!r} expands more than {max_ratio:g}x its "
                       f"compressed size (the limit on a runtime-env package's compression "
                       f"ratio, against zip bombs); refused")


def _total(name: str, entry: str, max_bytes: int) -> UnpackError:
    return UnpackError(f"package {name} unpacks to more than {max_bytes} bytes "
                       f"({max_bytes / 2**30:.2f} GiB, the limit on a runtime-env package's "
                       f"uncompressed size); refused at entry {entry!r}")
