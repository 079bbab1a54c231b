"""Persistent storage for Train and Tune: a `storage_path` (local directory or any `pyarrow.fs`
URI such as `s3://bucket/prefix`) resolved to a (filesystem, path) pair, and directory copies
between it and local disk. Uploads write under a temporary name and rename where the filesystem
allows, so a reader never sees half a checkpoint on local disks."""
from __future__ import annotations

import os
import uuid

import pyarrow.fs

DEFAULT_STORAGE_PATH = os.path.join(os.path.expanduser("~"), "ember_results")


def resolve(path: str, filesystem: pyarrow.fs.FileSystem | None = None) -> tuple[pyarrow.fs.FileSystem, str]:
    """(filesystem, path within it). A URI picks its filesystem; a plain path is local and made
    absolute; an explicit `filesystem` takes `path` as is."""
    if not path:
        raise ValueError("storage path must not be empty")
    if filesystem is not None:
        return filesystem, path
    if "://" in path and not path.startswith("file://"):
        try:
            fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        except (pyarrow.ArrowInvalid, ValueError, OSError) as e:
            raise ValueError(f"cannot open storage {path!r}: {e}") from e
        return fs, inner.rstrip("/")
    if path.startswith("file://"):
        path = path[len("file://"):]
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def join(*parts: str) -> str:
    """Joins path parts with '/', as every pyarrow filesystem expects."""
    return "/".join(p.rstrip("/") for p in parts if p)


def exists(fs: pyarrow.fs.FileSystem, path: str) -> bool:
    found: bool = fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound
    return found


def makedirs(fs: pyarrow.fs.FileSystem, path: str) -> None:
    fs.create_dir(path, recursive=True)


def copy_tree(src_fs: pyarrow.fs.FileSystem, src: str, dst_fs: pyarrow.fs.FileSystem, dst: str) -> None:
    """Copies every file under src to the same relative path under dst, creating directories
    (pyarrow's copy_files does not create them on every filesystem)."""
    dst_fs.create_dir(dst, recursive=True)
    infos = src_fs.get_file_info(pyarrow.fs.FileSelector(src, recursive=True))
    for info in sorted(infos, key=lambda i: i.path):
        rel = info.path[len(src.rstrip("/")) + 1:]
        target = join(dst, rel)
        if info.type == pyarrow.fs.FileType.Directory:
            dst_fs.create_dir(target, recursive=True)
        elif info.type == pyarrow.fs.FileType.File:
            with src_fs.open_input_stream(info.path) as fin, dst_fs.open_output_stream(target) as fout:
                while chunk := fin.read(8 << 20):
                    fout.write(chunk)


def upload_dir(local_dir: str, fs: pyarrow.fs.FileSystem, dest: str) -> None:
    """Copies local_dir's contents to dest (replacing what was there). On a local filesystem the
    copy goes to a sibling temporary directory first and is renamed into place."""
    local = pyarrow.fs.LocalFileSystem()
    if isinstance(fs, pyarrow.fs.LocalFileSystem):
        parent = os.path.dirname(dest) or "."
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}")
        copy_tree(local, os.path.abspath(local_dir), fs, tmp)
        if os.path.exists(dest):
            delete_dir(fs, dest)
        os.replace(tmp, dest)
        return
    delete_dir(fs, dest)
    copy_tree(local, os.path.abspath(local_dir), fs, dest)


def merge_tree(src_fs: pyarrow.fs.FileSystem, src: str, fs: pyarrow.fs.FileSystem, dest: str) -> None:
    """Copies every file under src into dest, keeping files already there that src does not
    have (several ranks upload into one checkpoint directory). Each file is written whole: on a
    local disk under a temporary name renamed into place, elsewhere as one object put, so two
    ranks writing the same name leave one complete copy."""
    src = src.rstrip("/")
    if isinstance(src_fs, pyarrow.fs.LocalFileSystem) and isinstance(fs, pyarrow.fs.LocalFileSystem) \
            and os.path.abspath(src) == os.path.abspath(dest):
        return
    fs.create_dir(dest, recursive=True)
    for info in sorted(src_fs.get_file_info(pyarrow.fs.FileSelector(src, recursive=True)),
                       key=lambda i: i.path):
        target = join(dest, info.path[len(src) + 1:])
        if info.type == pyarrow.fs.FileType.Directory:
            fs.create_dir(target, recursive=True)
        elif info.type == pyarrow.fs.FileType.File:
            tmp = f"{target}.tmp-{uuid.uuid4().hex}" if isinstance(fs, pyarrow.fs.LocalFileSystem) else target
            with src_fs.open_input_stream(info.path) as fin, fs.open_output_stream(tmp) as fout:
                while chunk := fin.read(8 << 20):
                    fout.write(chunk)
            if tmp != target:
                os.replace(tmp, target)


def list_dir(fs: pyarrow.fs.FileSystem, path: str) -> list[str]:
    """Names directly under path ([] when it does not exist)."""
    if not exists(fs, path):
        return []
    return sorted(i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector(path)))


def download_dir(fs: pyarrow.fs.FileSystem, src: str, local_dir: str) -> None:
    """Copies src's contents into local_dir (which may exist)."""
    if not exists(fs, src):
        raise FileNotFoundError(f"checkpoint directory {src} does not exist on {fs.type_name}")
    os.makedirs(local_dir, exist_ok=True)
    if isinstance(fs, pyarrow.fs.LocalFileSystem) and os.path.abspath(src) == os.path.abspath(local_dir):
        return
    copy_tree(fs, src, pyarrow.fs.LocalFileSystem(), os.path.abspath(local_dir))


def delete_dir(fs: pyarrow.fs.FileSystem, path: str) -> None:
    """Removes a directory tree; a missing one is not an error."""
    if exists(fs, path):
        fs.delete_dir(path)


def write_bytes(fs: pyarrow.fs.FileSystem, path: str, data: bytes) -> None:
    """Writes a small file whole (state files: written to a temporary name and renamed on local
    disks so a crash never leaves a truncated one)."""
    if isinstance(fs, pyarrow.fs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    with fs.open_output_stream(path) as out:
        out.write(data)


def read_bytes(fs: pyarrow.fs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        data: bytes = f.read()
        return data
