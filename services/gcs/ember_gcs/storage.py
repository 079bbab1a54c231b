"""Storage interface behind every GCS table, and the in-memory backend.

Tables are flat namespaces of bytes keys ("nodes", "jobs", "kv:<namespace>", ...). Two backends
implement it: `MemoryStorage` (the embedded default: state dies with the process) and
`EtcdStorage` (ember_gcs.etcd_storage: every table under one key prefix per cluster, so a GCS
restarted on the same etcd comes back with its state). `ember_gcs.backend.open_storage` picks
one from a URL; this module knows neither backend module (no import circle).
"""
from __future__ import annotations

import abc

from ember_common.rpc import Unavailable

# The GCS's etcd password (etcd's user/password authentication): read from the environment by
# server.py, never taken from the storage URL or the command line.
ETCD_PASSWORD_ENV = "EMBER_ETCD_PASSWORD"


class StorageUnavailable(Unavailable):
    """The backend cannot be reached right now (mapped to gRPC UNAVAILABLE)."""


class NotLeader(StorageUnavailable):
    """A fenced write refused: this GCS replica is no longer the leader (ember_gcs.leader). The
    caller's RPC fails UNAVAILABLE, and the replica steps down."""


class Storage(abc.ABC):
    """Async key-value storage with tables."""

    async def start(self) -> None:  # noqa: B027 (optional hook: in-memory storage has nothing to do)
        """Connects to the backend."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Releases connections."""

    @abc.abstractmethod
    async def get(self, table: str, key: bytes) -> bytes | None:
        """Returns the value or None."""

    @abc.abstractmethod
    async def put(self, table: str, key: bytes, value: bytes, overwrite: bool = True) -> bool:
        """Stores value; with overwrite=False keeps an existing value. Returns True if the key is new."""

    @abc.abstractmethod
    async def delete(self, table: str, key: bytes) -> bool:
        """Deletes one key. Returns True if it existed."""

    @abc.abstractmethod
    async def delete_prefix(self, table: str, prefix: bytes) -> int:
        """Deletes every key starting with prefix. Returns how many."""

    @abc.abstractmethod
    async def keys(self, table: str, prefix: bytes = b"") -> list[bytes]:
        """Keys of a table starting with prefix, sorted."""

    @abc.abstractmethod
    async def get_all(self, table: str) -> dict[bytes, bytes]:
        """Every key and value of a table."""

    @abc.abstractmethod
    async def increment(self, counter: str) -> int:
        """Atomically increments a named counter and returns the new value (first call: 1)."""


class MemoryStorage(Storage):
    """Process-local storage for the embedded cluster."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[bytes, bytes]] = {}
        self._counters: dict[str, int] = {}

    def _t(self, table: str) -> dict[bytes, bytes]:
        return self._tables.setdefault(table, {})

    async def get(self, table: str, key: bytes) -> bytes | None:
        return self._t(table).get(key)

    async def put(self, table: str, key: bytes, value: bytes, overwrite: bool = True) -> bool:
        t = self._t(table)
        added = key not in t
        if added or overwrite:
            t[key] = value
        return added

    async def delete(self, table: str, key: bytes) -> bool:
        return self._t(table).pop(key, None) is not None

    async def delete_prefix(self, table: str, prefix: bytes) -> int:
        t = self._t(table)
        doomed = [k for k in t if k.startswith(prefix)]
        for k in doomed:
            del t[k]
        return len(doomed)

    async def keys(self, table: str, prefix: bytes = b"") -> list[bytes]:
        return sorted(k for k in self._t(table) if k.startswith(prefix))

    async def get_all(self, table: str) -> dict[bytes, bytes]:
        return dict(self._t(table))

    async def increment(self, counter: str) -> int:
        self._counters[counter] = self._counters.get(counter, 0) + 1
        return self._counters[counter]
