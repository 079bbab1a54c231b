"""The node's log directory as the log service sees it, as pure functions over files: listing,
resolving a name (never outside the directory), finding where the last N lines start, and
reading a file in bounded chunks. No sockets here (log_service.py serves them).

Confinement: a name is one path component (no "/", "\\", NUL, "." or ".."), and the file it
names, with every symlink resolved, must be a regular file directly in the directory; anything
else is "no log file", the same answer as a name that is not there.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass

CHUNK_BYTES = 256 * 1024  # one LogChunk
_SCAN_BLOCK = 64 * 1024


class NoLogFile(LookupError):
    """A name that does not resolve to a regular file directly in the log directory."""


@dataclass(frozen=True)
class LogFile:
    """One file of the log directory."""

    name: str
    size: int
    mtime: float


def list_files(root: str, glob: str = "") -> list[LogFile]:
    """The regular files directly in `root` (symlinks left out) whose names match `glob`
    (fnmatch; "" or "*" = all), by name. A missing directory lists nothing."""
    out = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for e in entries:
        if glob not in ("", "*") and not fnmatch.fnmatchcase(e.name, glob):
            continue
        try:
            if not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        out.append(LogFile(e.name, st.st_size, st.st_mtime))
    return sorted(out, key=lambda f: f.name)


def check_name(name: str) -> None:
    """ValueError unless `name` is one plain path component."""
    if (not name or "/" in name or "\\" in name or "\x00" in name or name in (".", "..")
            or len(name) > 255):
        raise ValueError(f"bad log file name {name!r}: a file name in the node's log directory")


def resolve(root: str, name: str) -> str:
    """The path of log file `name` in `root`: ValueError for a name that is not a plain file
    name, NoLogFile when it does not resolve (symlinks followed) to a regular file directly in
    `root`."""
    check_name(name)
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, name))
    if os.path.dirname(real) != real_root or not os.path.isfile(real):
        raise NoLogFile(f"no log file {name!r} in the node's log directory")
    return real


def tail_offset(path: str, lines: int) -> int:
    """Where the last `lines` lines of the file start (negative: 0, the whole file; 0: its
    end). A last line without its newline counts as a line."""
    size = os.path.getsize(path)
    if lines < 0:
        return 0
    if lines == 0 or size == 0:
        return size
    with open(path, "rb") as f:
        f.seek(size - 1)
        # The file's final newline ends the last line; it does not start a new one.
        end = size - 1 if f.read(1) == b"\n" else size
        need, pos = lines, end
        while pos > 0:
            start = max(0, pos - _SCAN_BLOCK)
            f.seek(start)
            block = f.read(pos - start)
            idx = len(block)
            while need:
                idx = block.rfind(b"\n", 0, idx)
                if idx < 0:
                    break
                need -= 1
                if not need:
                    return start + idx + 1
            pos = start
    return 0


def read_chunk(path: str, offset: int, limit: int = CHUNK_BYTES) -> tuple[bytes, int]:
    """Up to `limit` bytes of the file from `offset`, and the offset after them. When the file is
    now shorter than `offset` (truncated: rotated), reading starts again at 0."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < offset:
            offset = 0
        f.seek(offset)
        data = f.read(limit)
    return data, offset + len(data)


def worker_file(worker_id: str, suffix: str) -> str:
    """The name of a worker's output file (suffix "out" or "err")."""
    if suffix not in ("out", "err"):
        raise ValueError(f"suffix must be 'out' or 'err', got {suffix!r}")
    return f"worker-{worker_id}.{suffix}"
