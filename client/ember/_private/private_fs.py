"""Per-user files under Ember's temp dir, safe on a host shared with other users.

Ember keeps session dirs, node files (`ember stop` acts on them) and the current-cluster
pointer (drivers send the auth token to the GCS it names) under one temp root. Another user
who created that root, or planted a file or symlink in it, could redirect the token, make
`ember stop` signal a victim's process, or overwrite a victim's file. So every directory Ember
uses there must be a real directory owned by the current user and not writable by group or
others (created 0700), every file Ember trusts must be a regular file owned by the current user
(opened with O_NOFOLLOW), and the files Ember writes are created 0600. A violation raises
`UnsafePathError` naming the path and its owner.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import Any


class UnsafePathError(RuntimeError):
    """A path under Ember's temp dir that another user controls (or could): refused."""


def default_temp_root() -> str:
    """`<system tmp>/ember-<uid>`: one root per user, so users never share a directory."""
    return os.path.join(tempfile.gettempdir(), f"ember-{os.geteuid()}")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _check(path: str, st: os.stat_result, want_dir: bool) -> None:
    kind = "directory" if want_dir else "file"
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"refusing to use {path}: it is a symlink, not a {kind} (owner "
                              f"{_owner(st.st_uid)}); remove it or set EMBER_TEMP_DIR")
    if want_dir and not stat.S_ISDIR(st.st_mode) or not want_dir and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"refusing to use {path}: it is not a regular {kind}")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"refusing to use {path}: it is owned by {_owner(st.st_uid)}, not by "
                              f"the current user {_owner(os.geteuid())}; another user may control "
                              f"it (remove it or set EMBER_TEMP_DIR)")
    if want_dir and st.st_mode & 0o022:
        raise UnsafePathError(f"refusing to use {path}: it is writable by group or others (mode "
                              f"{stat.S_IMODE(st.st_mode):o}); make it 0700 or remove it")


def ensure_private_dir(path: str) -> str:
    """Creates `path` 0700 (missing parents too) or checks the existing one: a directory, not a
    symlink, owned by the current user, not group/world-writable. UnsafePathError otherwise."""
    parent = os.path.dirname(os.path.abspath(path))
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    _check(path, os.lstat(path), want_dir=True)
    return path


def check_private_dir(path: str) -> bool:
    """True when `path` exists and passes `ensure_private_dir`'s checks, False when it is
    missing; UnsafePathError when it exists but is not safe."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    _check(path, st, want_dir=True)
    return True


def open_private(path: str, mode: str = "ab") -> Any:
    """Opens a file to write ("ab", "a", "wb" or "w"): created 0600, never through a symlink,
    refused when it exists and belongs to someone else."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if mode.startswith("a") else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if os.path.islink(path):
            _check(path, os.lstat(path), want_dir=False)
        raise UnsafePathError(f"cannot open {path} safely: {e}") from e
    try:
        st = os.fstat(fd)
        _check(path, st, want_dir=False)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, mode)


def write_private_json(path: str, data: Any) -> None:
    """Writes JSON to `path` atomically: a new 0600 file (O_EXCL) renamed over it, so a planted
    file or symlink at `path` is replaced, never written through."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_private(path: str) -> str:
    """The text of a file Ember wrote: FileNotFoundError when missing, UnsafePathError when it
    is a symlink, not a regular file, or owned by another user."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        if os.path.islink(path):
            _check(path, os.lstat(path), want_dir=False)
        raise UnsafePathError(f"cannot read {path} safely: {e}") from e
    with os.fdopen(fd, "r") as f:
        _check(path, os.fstat(f.fileno()), want_dir=False)
        return f.read()


def owned_by_me(pid: int) -> bool:
    """True when process `pid` exists and its real uid is the current user's (`ember stop` only
    signals those)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        pass
    try:
        import psutil

        return bool(psutil.Process(pid).uids().real == os.geteuid())
    except Exception:
        return False
