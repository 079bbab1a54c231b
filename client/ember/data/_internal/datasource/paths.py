"""Path resolution: files, directories, globs, lists, hive-partitioned directories and any
`pyarrow.fs` URI (`s3://bucket/prefix`, `file:///...`), as Ray Data accepts them."""
from __future__ import annotations

import fnmatch
import os
import urllib.parse
from typing import Any

import pyarrow.fs as pafs


def resolve_filesystem(path: str, filesystem: Any = None) -> tuple[Any, str]:
    """(filesystem, path inside it) for a path or URI."""
    if filesystem is not None:
        if "://" in path:
            parsed = urllib.parse.urlparse(path)
            path = (parsed.netloc + parsed.path) if parsed.scheme != "file" else parsed.path
        return filesystem, path
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    try:
        fs, inner = pafs.FileSystem.from_uri(path)
    except Exception as e:
        raise ValueError(f"cannot open {path!r}: {e}") from None
    return fs, inner


def _has_glob(p: str) -> bool:
    return any(ch in p for ch in "*?[")


def _base_of_glob(p: str) -> str:
    parts = p.split("/")
    base = []
    for part in parts:
        if _has_glob(part):
            break
        base.append(part)
    return "/".join(base) or "/"


def expand_paths(paths: str | list[str], filesystem: Any = None,
                 file_extensions: list[str] | None = None,
                 ignore_missing_paths: bool = False) -> tuple[Any, list[tuple[str, int, str]]]:
    """Every file under paths: (filesystem, [(path, size, base_dir)]), sorted within a dir.

    base_dir is the directory the user named (for hive partition parsing). A path that does not
    exist raises FileNotFoundError naming it (unless ignore_missing_paths)."""
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        raise ValueError("no paths given")
    fs = None
    out: list[tuple[str, int, str]] = []
    for raw in paths:
        if not isinstance(raw, str):
            raise ValueError(f"paths must be strings, got {type(raw).__name__}")
        pfs, p = resolve_filesystem(raw, filesystem)
        fs = fs or pfs
        if _has_glob(p):
            base = _base_of_glob(p)
            sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
            infos = [i for i in pfs.get_file_info(sel)
                     if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, p)]
            if not infos and not ignore_missing_paths:
                raise FileNotFoundError(f"no files match {raw!r}")
            out.extend((i.path, i.size or 0, base) for i in sorted(infos, key=lambda i: i.path))
            continue
        info = pfs.get_file_info(p)
        if info.type == pafs.FileType.NotFound:
            if ignore_missing_paths:
                continue
            raise FileNotFoundError(f"no such file or directory: {raw!r}")
        if info.type == pafs.FileType.File:
            out.append((info.path, info.size or 0, os.path.dirname(info.path)))
            continue
        sel = pafs.FileSelector(p, recursive=True)
        infos = [i for i in pfs.get_file_info(sel) if i.type == pafs.FileType.File
                 and not _hidden(i.path, p)]
        out.extend((i.path, i.size or 0, p) for i in sorted(infos, key=lambda i: i.path))
    if file_extensions:
        exts = tuple("." + e.lower().lstrip(".") for e in file_extensions)
        out = [f for f in out if f[0].lower().endswith(exts)]
    if not out and not ignore_missing_paths:
        raise FileNotFoundError(f"no files found in {paths!r}"
                                + (f" with extensions {file_extensions}" if file_extensions else ""))
    return fs, out


def _hidden(path: str, base: str) -> bool:
    rel = path[len(base):].lstrip("/")
    return any(part.startswith((".", "_")) for part in rel.split("/"))
