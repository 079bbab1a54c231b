"""Spill storage: where objects go when the arena is full. A local directory by default, or any
pyarrow.fs URI (e.g. s3://bucket/prefix). One file per object, removed when it is freed and,
for local directories, the whole directory when the node stops. A local directory is written with
plain file calls: pyarrow (about 40 MB per process) is loaded only for a URI."""
from __future__ import annotations

import os
import shutil
from typing import Any

from ember_common import tracing


class SpillError(Exception):
    """Writing a spill file failed (disk full, permissions): the store is full."""


class SpillReadError(Exception):
    """A spill file is missing or unreadable: the object is lost."""


class Spiller:
    def __init__(self, uri: str) -> None:
        if "://" not in uri:
            os.makedirs(uri, exist_ok=True)
            self.fs: Any = None
            self.root = os.path.abspath(uri)
            self.local = True
        else:
            import pyarrow.fs as pafs

            self.fs, self.root = pafs.FileSystem.from_uri(uri)
            self.local = False
        self.uri = uri

    def path(self, object_id: bytes) -> str:
        return f"{self.root.rstrip('/')}/{object_id.hex()}"

    def write(self, object_id: bytes, data: memoryview) -> str:
        if tracing.enabled():
            with tracing.span("objmgr spill", **self._attrs(object_id, len(data))):
                return self._write(object_id, data)
        return self._write(object_id, data)

    def _attrs(self, object_id: bytes, size: int) -> dict[str, Any]:
        return {"ember.object_id": object_id.hex(), "ember.object.size": size,
                "ember.node_id": tracing.node_id() or None, "ember.spill.uri": self.uri}

    def _write(self, object_id: bytes, data: memoryview) -> str:
        path = self.path(object_id)
        try:
            with (open(path, "wb") if self.local else self.fs.open_output_stream(path)) as f:
                f.write(data)
        except OSError as e:
            self.delete(path)
            raise SpillError(f"cannot spill {len(data)} bytes to {self.uri}: {e}") from None
        return path

    def read_into(self, path: str, dest: memoryview, object_id: bytes = b"") -> None:
        if tracing.enabled():
            with tracing.span("objmgr restore", **self._attrs(object_id, len(dest))):
                self._read_into(path, dest)
        else:
            self._read_into(path, dest)

    def _read_into(self, path: str, dest: memoryview) -> None:
        try:
            with (open(path, "rb", buffering=0) if self.local
                  else self.fs.open_input_stream(path)) as f:
                n = f.readinto(dest)
        except OSError as e:
            raise SpillReadError(f"spill file {path} is unreadable: {e}") from None
        if n != len(dest):
            raise SpillReadError(f"spill file {path} is truncated ({n} of {len(dest)} bytes)")

    def delete(self, path: str) -> None:
        try:
            if self.local:
                os.remove(path)
            else:
                self.fs.delete_file(path)
        except OSError:
            pass

    def destroy(self) -> None:
        if self.local:
            shutil.rmtree(self.root, ignore_errors=True)
