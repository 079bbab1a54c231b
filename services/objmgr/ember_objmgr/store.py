"""ObjectStore: bookkeeping of the sealed objects in this node's store dir (a tmpfs directory).

Creators write and seal object files themselves (ember._private.plasma) and then report them
here; this class tracks sizes against the capacity and deletes files when objects are freed.
"""
from __future__ import annotations

import os
import shutil

from ember._private.rpc import NotFound, ResourceExhausted


class ObjectStore:
    def __init__(self, store_dir: str, capacity_bytes: int) -> None:
        self.store_dir = store_dir
        self.capacity = capacity_bytes
        self.sizes: dict[bytes, int] = {}
        self.used = 0
        os.makedirs(store_dir, exist_ok=True)

    def path(self, object_id: bytes) -> str:
        return os.path.join(self.store_dir, object_id.hex())

    def seal(self, object_id: bytes, size: int) -> None:
        if object_id in self.sizes:
            return
        if not os.path.exists(self.path(object_id)):
            raise NotFound(f"object {object_id.hex()} was not written to {self.store_dir}")
        self.sizes[object_id] = size
        self.used += size

    def reserve_check(self, size: int) -> None:
        if self.capacity and self.used + size > self.capacity:
            raise ResourceExhausted(f"object store full: {size} bytes requested, "
                                    f"{self.capacity - self.used} of {self.capacity} free")

    def contains(self, object_id: bytes) -> bool:
        return object_id in self.sizes or os.path.exists(self.path(object_id))

    def free(self, object_id: bytes) -> None:
        size = self.sizes.pop(object_id, None)
        if size is not None:
            self.used -= size
        try:
            os.unlink(self.path(object_id))
        except FileNotFoundError:
            pass

    def destroy(self) -> None:
        shutil.rmtree(self.store_dir, ignore_errors=True)
        parent = os.path.dirname(self.store_dir)
        try:
            os.rmdir(parent)  # the session's store root, once its last node is gone
        except OSError:
            pass
