"""A run's directory in storage (`storage_path/<name>/`) and what is recorded there so that
`TorchTrainer.restore(path)` can resume it:

    trainer.pkl          the trainer's arguments (loop, config, scaling, run config; no datasets)
    trainer_state.json   reports made, kept checkpoints with their metrics, failures, status
    result.json          one JSON line per completed report (rank 0's metrics)
    checkpoint_000000/   checkpoints, named by report index (or the reporter's checkpoint_dir_name)
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import pyarrow.fs

from ember.air import storage

TRAINER_FILE = "trainer.pkl"
STATE_FILE = "trainer_state.json"
RESULT_FILE = "result.json"


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    item = getattr(v, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return repr(v)


class RunStorage:
    """Reads and writes one run's files."""

    def __init__(self, fs: pyarrow.fs.FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path
        self._rows: list[dict[str, Any]] | None = None

    @classmethod
    def create(cls, storage_path: str | None, name: str,
               filesystem: pyarrow.fs.FileSystem | None = None) -> RunStorage:
        fs, root = storage.resolve(storage_path or storage.DEFAULT_STORAGE_PATH, filesystem)
        run = cls(fs, storage.join(root, name))
        storage.makedirs(fs, run.path)
        return run

    @classmethod
    def open(cls, path: str, filesystem: pyarrow.fs.FileSystem | None = None) -> RunStorage:
        fs, p = storage.resolve(os.fspath(path), filesystem)
        return cls(fs, p.rstrip("/"))

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def uri(self) -> str:
        """The run's path as a user passes it back to `restore` (a URI off the local disk)."""
        if isinstance(self.fs, pyarrow.fs.LocalFileSystem):
            return self.path
        if isinstance(self.fs, pyarrow.fs.S3FileSystem):
            return f"s3://{self.path}"
        return f"{self.fs.type_name}://{self.path}"

    def file(self, name: str) -> str:
        return storage.join(self.path, name)

    def checkpoint_path(self, index: int, dir_name: str | None = None) -> str:
        return self.file(dir_name or f"checkpoint_{index:06d}")

    # --- trainer + state ------------------------------------------------------------------

    def has_trainer(self) -> bool:
        return storage.exists(self.fs, self.file(TRAINER_FILE))

    def save_trainer(self, blob: bytes) -> None:
        storage.write_bytes(self.fs, self.file(TRAINER_FILE), blob)

    def load_trainer(self) -> bytes:
        return storage.read_bytes(self.fs, self.file(TRAINER_FILE))

    def save_state(self, state: dict[str, Any]) -> None:
        storage.write_bytes(self.fs, self.file(STATE_FILE), json.dumps(_jsonable(state)).encode())

    def load_state(self) -> dict[str, Any]:
        if not storage.exists(self.fs, self.file(STATE_FILE)):
            return {}
        state: dict[str, Any] = json.loads(storage.read_bytes(self.fs, self.file(STATE_FILE)))
        return state

    # --- metrics rows ---------------------------------------------------------------------

    def load_rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            target = self.file(RESULT_FILE)
            text = storage.read_bytes(self.fs, target).decode() if storage.exists(self.fs, target) else ""
            self._rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return self._rows

    def truncate_rows(self, n: int) -> None:
        """Keeps the first n rows (a restored run drops reports made after its last state)."""
        rows = self.load_rows()
        if len(rows) > n:
            del rows[n:]
            self._write_rows()

    def append_row(self, row: dict[str, Any]) -> None:
        """Adds one metrics row: appended in place on a local disk, the file rewritten whole
        elsewhere (object stores have no append)."""
        rows = self.load_rows()
        rows.append(_jsonable(row))
        if isinstance(self.fs, pyarrow.fs.LocalFileSystem):
            with open(self.file(RESULT_FILE), "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
        else:
            self._write_rows()

    def _write_rows(self) -> None:
        data = "".join(json.dumps(r) + "\n" for r in self.load_rows()).encode()
        storage.write_bytes(self.fs, self.file(RESULT_FILE), data)

    # --- checkpoints ----------------------------------------------------------------------

    def delete_checkpoint(self, path: str) -> None:
        storage.delete_dir(self.fs, path)

    def stray_checkpoints(self, kept: set[str], from_index: int) -> list[str]:
        """Checkpoint directories named for reports at or after from_index that no kept
        checkpoint points to: left by ranks of a failed group before their report completed."""
        out = []
        for name in storage.list_dir(self.fs, self.path):
            if name.startswith("checkpoint_") and name[len("checkpoint_"):].isdigit():
                p = self.file(name)
                if int(name[len("checkpoint_"):]) >= from_index and p not in kept:
                    out.append(p)
        return out
