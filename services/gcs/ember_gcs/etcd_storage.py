"""etcd-backed GCS storage, so a restarted GCS finds its tables again.

Every table lives under `/ember/<cluster_name>/<table>/` followed by the raw key bytes, and counters
under `/ember/<cluster_name>/__counters__/<name>`. Every backend failure (connection refused, etcd
down, timeout) surfaces as `StorageUnavailable` naming the endpoint. A client that errored is
dropped; the next operation connects afresh, so the storage recovers once etcd is back.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable

import aetcd
from aetcd import transactions as tx

from .storage import Storage, StorageUnavailable

# gRPC's reconnect backoff grows to minutes by default; keep it short so a restarted etcd is
# picked up quickly even by a channel that saw it go away.
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.min_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 1000,
}


def _prefix_end(prefix: bytes) -> bytes:
    """The range end covering every key that starts with prefix.

    aetcd's own `utils.prefix_range_end` keeps trailing 0xff bytes, which yields a wrong range.
    """
    s = bytearray(prefix)
    while s and s[-1] == 0xFF:
        s.pop()
    if not s:
        return b"\0"  # etcd: every key >= start
    s[-1] += 1
    return bytes(s)


class EtcdStorage(Storage):
    """Storage in etcd (v3 API over gRPC, via aetcd). Use it from a single event loop."""

    def __init__(self, endpoints: str, cluster_name: str = "default", timeout: float = 3.0) -> None:
        self._endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not self._endpoints:
            raise ValueError(f"no etcd endpoint in {endpoints!r}")
        self._root = f"/ember/{cluster_name}/".encode()
        self._timeout = timeout
        self._client: aetcd.Client | None = None
        self._endpoint = self._endpoints[0]
        self._lock: asyncio.Lock | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    # -- connection management ---------------------------------------------------------------

    async def start(self) -> None:
        """Connects to the first reachable endpoint; raises StorageUnavailable if none answers."""
        await self._get_client()

    async def close(self) -> None:
        """Closes the client and any client still being retired."""
        if self._client is not None:
            self._retire(self._client)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)

    async def _get_client(self) -> aetcd.Client:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None:
                return self._client
            errors = []
            for endpoint in self._endpoints:
                host, _, port = endpoint.rpartition(":")
                client = aetcd.Client(host=host or "localhost", port=int(port),
                                      timeout=self._timeout, options=_CHANNEL_OPTIONS)
                try:  # aetcd's connect() only builds the channel: a read proves etcd answers.
                    await asyncio.wait_for(client.get(self._root), self._timeout + 1)
                except (aetcd.ClientError, asyncio.TimeoutError, OSError) as e:
                    self._retire(client)
                    errors.append(f"{endpoint}: {type(e).__name__}: {e}")
                    continue
                self._client, self._endpoint = client, endpoint
                return client
            where = ",".join(self._endpoints)
            raise StorageUnavailable(f"etcd unreachable at {where} ({'; '.join(errors)})")

    def _retire(self, client: aetcd.Client) -> None:
        """Closes a client in the background (other calls may still be running on it)."""
        if self._client is client:
            self._client = None

        async def _close() -> None:
            try:
                if client.channel is not None:
                    await client.channel.close(grace=self._timeout)
                await client.close()
            except Exception:  # noqa: BLE001 - closing a broken channel may fail; nothing to do
                pass

        task = asyncio.get_running_loop().create_task(_close())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _call(self, op: Callable[[aetcd.Client], Awaitable[Any]]) -> Any:
        """Runs one etcd call; retries once on a fresh client if the connection had failed."""
        for attempt in (0, 1):
            client = await self._get_client()
            try:
                return await asyncio.wait_for(op(client), self._timeout + 1)
            except (aetcd.ClientError, asyncio.TimeoutError, OSError) as e:
                self._retire(client)
                if attempt == 0 and isinstance(e, aetcd.ConnectionFailedError):
                    continue
                msg = f"etcd at {self._endpoint} unavailable: {type(e).__name__}: {e}"
                raise StorageUnavailable(msg) from e
        raise AssertionError("unreachable")

    def _key(self, table: str, key: bytes = b"") -> bytes:
        return self._root + table.encode() + b"/" + key

    # -- Storage API ---------------------------------------------------------------------------

    async def get(self, table: str, key: bytes) -> bytes | None:
        """Returns the value or None."""
        kv = await self._call(lambda c: c.get(self._key(table, key)))
        return None if kv is None else kv.value

    async def put(self, table: str, key: bytes, value: bytes, overwrite: bool = True) -> bool:
        """Stores value (overwrite=False atomically keeps an existing one); True if the key is new."""
        k = self._key(table, key)
        put = [tx.Put(k, value)]
        is_new = [tx.Create(k) == 0]
        new, _ = await self._call(lambda c: c.transaction(is_new, put, put if overwrite else []))
        return bool(new)

    async def delete(self, table: str, key: bytes) -> bool:
        """Deletes one key. Returns True if it existed."""
        return await self._call(lambda c: c.delete(self._key(table, key))) is not None

    async def delete_prefix(self, table: str, prefix: bytes) -> int:
        """Deletes every key of the table starting with prefix. Returns how many."""
        start = self._key(table, prefix)
        res = await self._call(lambda c: c.delete_range(start, _prefix_end(start)))
        return int(res.deleted)

    async def _range(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        start, strip = self._key(table, prefix), len(self._key(table))
        res = await self._call(lambda c: c.get_range(start, _prefix_end(start), sort_order="ascend"))
        return [(kv.key[strip:], kv.value) for kv in res.kvs]

    async def keys(self, table: str, prefix: bytes = b"") -> list[bytes]:
        """Keys of a table starting with prefix, sorted."""
        return [k for k, _ in await self._range(table, prefix)]

    async def get_all(self, table: str) -> dict[bytes, bytes]:
        """Every key and value of a table."""
        return dict(await self._range(table, b""))

    async def increment(self, counter: str) -> int:
        """Atomically increments a counter (compare-and-swap on its mod revision); first call: 1."""
        k = self._root + b"__counters__/" + counter.encode()
        while True:
            kv = await self._call(lambda c: c.get(k))
            if kv is None:
                new, cond = 1, tx.Create(k) == 0
            else:
                new, cond = int(kv.value) + 1, tx.Mod(k) == kv.mod_revision
            ok, _ = await self._call(functools.partial(_transact, cond, [tx.Put(k, str(new).encode())]))
            if ok:
                return new


def _transact(cond: Any, puts: list[Any], client: aetcd.Client) -> Any:
    """One compare-and-swap transaction (bound with functools.partial: no loop variable captured)."""
    return client.transaction([cond], puts, [])
