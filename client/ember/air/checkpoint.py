"""`Checkpoint`: a directory of files in local or remote storage (any `pyarrow.fs` filesystem).

Follows Ray's `ray.train.Checkpoint` (path + filesystem, `from_directory`, `to_directory`,
`as_directory`, metadata in `.metadata.json`) and keeps the seed article's dict form, which
today's Ray dropped: `Checkpoint.from_dict({...})` writes the dict (pickled, so tensors and state
dicts work) into a fresh local directory and `to_dict()` reads it back.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Iterator

import pyarrow.fs

from . import storage

METADATA_FILE = ".metadata.json"
DICT_FILE = "dict_checkpoint.pkl"
TEMP_PREFIX = "checkpoint_tmp_"


class Checkpoint:
    """A reference to checkpoint data persisted as a directory (local or remote)."""

    def __init__(self, path: str | os.PathLike[str], filesystem: pyarrow.fs.FileSystem | None = None) -> None:
        self.filesystem, self.path = storage.resolve(os.fspath(path), filesystem)

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """A checkpoint of a local directory (which must exist)."""
        path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory: {path} is not a directory")
        return cls(path, pyarrow.fs.LocalFileSystem())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """A checkpoint holding `data` (pickled into a fresh local directory)."""
        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict expects a dict, got {type(data).__name__}")
        import cloudpickle

        path = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        with open(os.path.join(path, DICT_FILE), "wb") as f:
            cloudpickle.dump(data, f)
        return cls(path, pyarrow.fs.LocalFileSystem())

    def to_dict(self) -> dict[str, Any]:
        """The dict of a checkpoint made by `from_dict`."""
        import pickle

        with self.as_directory() as d:
            target = os.path.join(d, DICT_FILE)
            if not os.path.exists(target):
                raise ValueError(f"{self!r} was not created with Checkpoint.from_dict (no {DICT_FILE}); "
                                 "use to_directory() or as_directory()")
            with open(target, "rb") as f:
                data: dict[str, Any] = pickle.load(f)
                return data

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copies the checkpoint into local `path` (default: a new temporary directory)."""
        dest = os.path.abspath(os.fspath(path)) if path is not None else os.path.join(
            tempfile.gettempdir(), TEMP_PREFIX + uuid.uuid4().hex)
        os.makedirs(dest, exist_ok=True)
        storage.download_dir(self.filesystem, self.path, dest)
        return dest

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local directory with the checkpoint's files: the checkpoint itself when it is local
        (do not modify it), else a temporary download removed on exit."""
        if isinstance(self.filesystem, pyarrow.fs.LocalFileSystem):
            yield self.path
            return
        tmp = self.to_directory()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def get_metadata(self) -> dict[str, Any]:
        """User metadata stored with the checkpoint ({} when none)."""
        target = f"{self.path}/{METADATA_FILE}"
        if self.filesystem.get_file_info(target).type == pyarrow.fs.FileType.NotFound:
            return {}
        with self.filesystem.open_input_stream(target) as f:
            metadata: dict[str, Any] = json.loads(f.read().decode())
            return metadata

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replaces the stored metadata (must be JSON-serializable)."""
        blob = json.dumps(metadata).encode()
        with self.filesystem.open_output_stream(f"{self.path}/{METADATA_FILE}") as f:
            f.write(blob)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merges `metadata` into the stored metadata."""
        self.set_metadata({**self.get_metadata(), **metadata})

    def __repr__(self) -> str:
        return f"Checkpoint(filesystem={self.filesystem.type_name}, path={self.path})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Checkpoint) and other.path == self.path
                and other.filesystem.type_name == self.filesystem.type_name)

    def __hash__(self) -> int:
        return hash((self.path, self.filesystem.type_name))
