"""The internal KV: namespaced keys over the GCS storage (table `kv:<namespace>`).

Used by the function table, job import paths, Serve's state and the metrics endpoints. A missing
key is NotFound (the client turns it back into None).
"""
from __future__ import annotations

from ember_common.rpc import NotFound

from .storage import Storage


def kv_table(namespace: str) -> str:
    """The storage table behind a KV namespace."""
    return f"kv:{namespace}"


class InternalKV:
    """Get/put/delete/list over one Storage; no state of its own."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def get(self, namespace: str, key: bytes) -> bytes:
        """The value of key; NotFound when it is absent."""
        value = await self.storage.get(kv_table(namespace), key)
        if value is None:
            raise NotFound(f"key {key!r} is not in KV namespace {namespace!r}")
        return value

    async def put(self, namespace: str, key: bytes, value: bytes, overwrite: bool = True) -> bool:
        """Stores value (overwrite=False keeps an existing one); True if the key was new."""
        return await self.storage.put(kv_table(namespace), key, value, overwrite)

    async def delete(self, namespace: str, key: bytes, by_prefix: bool = False) -> int:
        """Deletes key, or every key starting with it; returns how many."""
        table = kv_table(namespace)
        if by_prefix:
            return await self.storage.delete_prefix(table, key)
        return int(await self.storage.delete(table, key))

    async def keys(self, namespace: str, prefix: bytes = b"") -> list[bytes]:
        """Keys starting with prefix, sorted."""
        return await self.storage.keys(kv_table(namespace), prefix)

    async def exists(self, namespace: str, key: bytes) -> bool:
        """Whether key is present."""
        return await self.storage.get(kv_table(namespace), key) is not None
