"""Driver-side packaging of `working_dir` and `py_modules`: a local directory is zipped
(deterministically: sorted entries, fixed timestamps, `excludes` left out), named by its content
hash as Ray names it (`gcs://_ray_pkg_<hash>.zip`) and uploaded once to the GCS internal KV
(namespace "runtime_env", key = the URI). A `.zip` or `.whl` file is uploaded as it is.

`excludes` are gitignore-style patterns relative to the packaged directory: `*`/`?` stay within
one path component, `**` spans several, a leading or inner `/` anchors the pattern at the
root, a trailing `/` matches directories only, `!` re-includes, the last matching pattern wins.
A package bigger than the limit (Config.runtime_env_max_package_bytes, EMBER_RUNTIME_ENV_MAX_
PACKAGE_BYTES; Ray's is 500 MiB) is refused with an error that names it and its size.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import zipfile
from dataclasses import dataclass
from typing import Callable, Iterator

NAMESPACE = "runtime_env"
URI_PREFIX = "gcs://_ray_pkg_"
_EPOCH = (1980, 1, 1, 0, 0, 0)


class PackageTooLargeError(ValueError):
    """A working_dir or py_modules package is over the size limit."""


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


class Excludes:
    """gitignore-style patterns; `excluded(relpath, is_dir)` answers for one path."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in patterns:
            p = raw.strip()
            if not p or p.startswith("#"):
                continue
            negate = p.startswith("!")
            p = p[1:] if negate else p
            dir_only = p.endswith("/")
            p = p.rstrip("/")
            anchored = "/" in p
            p = p.lstrip("/")
            body = _translate(p)
            rx = ("^" if anchored else "^(?:.*/)?") + body + "$"
            self.patterns.append(_Pattern(re.compile(rx), negate, dir_only))

    def excluded(self, relpath: str, is_dir: bool) -> bool:
        """Whether relpath (with '/' separators) is left out (the last matching pattern wins)."""
        out = False
        for pat in self.patterns:
            if pat.dir_only and not is_dir:
                continue
            if pat.regex.match(relpath):
                out = not pat.negate
        return out


def _translate(p: str) -> str:
    out, i = [], 0
    while i < len(p):
        if p.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif p.startswith("/**", i) and i + 3 == len(p):
            out.append("(?:/.*)?")
            i += 3
        elif p.startswith("**", i):
            out.append(".*")
            i += 2
        elif p[i] == "*":
            out.append("[^/]*")
            i += 1
        elif p[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(p[i]))
            i += 1
    return "".join(out)


def walk(root: str, excludes: Excludes) -> Iterator[tuple[str, str]]:
    """(absolute path, relative path) of every file kept, in sorted order; excluded
    directories are not entered."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not excludes.excluded(rel_dir + d, True))
        for name in sorted(filenames):
            rel = rel_dir + name
            if not excludes.excluded(rel, False):
                yield os.path.join(dirpath, name), rel


def zip_directory(root: str, excludes: list[str], max_bytes: int, prefix: str = "",
                  what: str = "working_dir") -> bytes:
    """The zip of root's kept files (under prefix/ inside the archive), deterministic for equal
    contents. PackageTooLargeError once it grows past max_bytes."""
    buf = io.BytesIO()
    ex = Excludes(excludes)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, rel in walk(root, ex):
            info = zipfile.ZipInfo((prefix + "/" + rel) if prefix else rel, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (os.stat(path).st_mode & 0o777 | 0o100000) << 16
            with open(path, "rb") as f:
                zf.writestr(info, f.read())
            if buf.tell() > max_bytes:
                raise _too_large(what, root, buf.tell(), max_bytes, partial=True)
    data = buf.getvalue()
    if len(data) > max_bytes:
        raise _too_large(what, root, len(data), max_bytes, partial=False)
    return data


def _too_large(what: str, root: str, size: int, limit: int, partial: bool) -> PackageTooLargeError:
    more = "more than " if partial else ""
    return PackageTooLargeError(
        f"{what} {root!r} is {more}{size / 2**20:.1f} MiB zipped, over the limit of "
        f"{limit / 2**20:.1f} MiB (EMBER_RUNTIME_ENV_MAX_PACKAGE_BYTES). Leave large files out "
        f"with runtime_env['excludes'] (gitignore-style patterns) or raise the limit.")


def uri_for(data: bytes, suffix: str = ".zip") -> str:
    """The content-addressed URI of a package (Ray's gcs://_ray_pkg_<hash>.zip)."""
    return f"{URI_PREFIX}{hashlib.sha1(data).hexdigest()}{suffix}"


KvExists = Callable[[str], bool]
KvPut = Callable[[str, bytes], None]


class Uploader:
    """Packages local paths once per process and uploads each package once to the KV."""

    def __init__(self, exists: KvExists, put: KvPut, max_bytes: Callable[[], int]) -> None:
        self.exists = exists
        self.put = put
        self.max_bytes = max_bytes
        self._done: dict[tuple[str, tuple[str, ...], str], str] = {}
        self._lock = threading.Lock()

    def package(self, path: str, excludes: list[str], *, module: bool, what: str) -> str:
        """The URI of a local directory, .zip or (py_modules) .whl, uploaded if the KV lacks
        it. module=True keeps the directory's name inside the zip (a py_modules package)."""
        if path.startswith(URI_PREFIX):
            return path  # already a package (inherited from a parent)
        if "://" in path:
            raise ValueError(f"{what}: remote URIs ({path!r}) are not supported by Ember; give a "
                             f"local directory or .zip file")
        full = os.path.abspath(os.path.expanduser(path))
        key = (full, tuple(excludes), what)
        with self._lock:
            if key in self._done:
                return self._done[key]
            uri = self._build_and_upload(full, excludes, module, what)
            self._done[key] = uri
            return uri

    def _build_and_upload(self, full: str, excludes: list[str], module: bool, what: str) -> str:
        limit = self.max_bytes()
        if os.path.isdir(full):
            prefix = os.path.basename(full.rstrip(os.sep)) if module else ""
            data = zip_directory(full, excludes, limit, prefix=prefix, what=what)
            suffix = ".zip"
        elif os.path.isfile(full) and full.endswith((".zip", ".whl")):
            size = os.path.getsize(full)
            if size > limit:
                raise _too_large(what, full, size, limit, partial=False)
            with open(full, "rb") as f:
                data = f.read()
            suffix = ".whl" if full.endswith(".whl") else ".zip"
            if suffix == ".whl" and not module:
                raise ValueError(f"{what}: {full!r} is a wheel; wheels go in py_modules")
        elif os.path.exists(full):
            kinds = "a directory, .zip or .whl file" if module else "a directory or .zip file"
            raise ValueError(f"{what}: {full!r} must be {kinds}")
        else:
            raise ValueError(f"{what}: {full!r} does not exist")
        uri = uri_for(data, suffix)
        if not self.exists(uri):
            self.put(uri, data)
        return uri
