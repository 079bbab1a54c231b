"""Size-capped rotation of the node's log files (EMBER_LOG_MAX_BYTES, EMBER_LOG_BACKUP_COUNT;
Ray's RAY_ROTATION_MAX_BYTES / RAY_ROTATION_BACKUP_COUNT).

The writers are other processes (workers, the node's services) whose stdout/stderr is the file,
opened with O_APPEND, so the file cannot be renamed under them: rotation copies and truncates
(logrotate's copytruncate). NAME.(k) becomes NAME.(k+1) (the oldest beyond backup_count is
deleted), NAME is copied to NAME.1 (0600), then NAME is truncated to 0 and the writers' next
writes land at its start. What a writer appends between the copy and the truncation is lost;
that window is one copy_file_range call. A file then holds at most about max_bytes plus what is
written between two checks, and each file with its backups at most (backup_count + 1) times that.
"""
from __future__ import annotations

import os
import shutil
from typing import Any


def backup_name(path: str, k: int) -> str:
    """The k-th backup of `path` (1 = the newest)."""
    return f"{path}.{k}"


def is_backup(name: str) -> bool:
    """Whether a file name is a rotated backup (ends in .N)."""
    head, dot, tail = name.rpartition(".")
    return bool(dot and head and tail.isdigit())


def rotate(path: str, backup_count: int) -> int:
    """Rotates `path` now; returns how many bytes went to the backup (0 with backup_count 0: the
    content is dropped)."""
    if backup_count > 0:
        oldest = backup_name(path, backup_count)
        if os.path.exists(oldest):
            os.unlink(oldest)
        for k in range(backup_count - 1, 0, -1):
            src = backup_name(path, k)
            if os.path.exists(src):
                os.replace(src, backup_name(path, k + 1))
    copied = 0
    with open(path, "rb") as src_f:
        if backup_count > 0:
            fd = os.open(backup_name(path, 1), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as dst:
                copied = _copy(src_f, dst)
        os.truncate(path, 0)
    return copied


def _copy(src: Any, dst: Any) -> int:
    """The rest of src into dst, in the kernel where it can (copy_file_range), else through a buffer."""
    copied = 0
    try:
        while n := os.copy_file_range(src.fileno(), dst.fileno(), 1 << 30):
            copied += n
        return copied
    except OSError:  # a filesystem without it: the plain way, from where it stopped
        src.seek(copied)
        dst.seek(copied)
        shutil.copyfileobj(src, dst, 1 << 20)
        return int(dst.tell())


def rotate_if_big(path: str, max_bytes: int, backup_count: int) -> bool:
    """Rotates `path` when it holds max_bytes or more (max_bytes <= 0: never); whether it did.
    A file that is gone or unreadable is left alone."""
    if max_bytes <= 0:
        return False
    try:
        if os.stat(path).st_size < max_bytes:
            return False
        rotate(path, backup_count)
    except OSError:
        return False
    return True
