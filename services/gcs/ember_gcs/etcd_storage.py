"""etcd-backed GCS storage, so a restarted GCS finds its tables again.

Every table lives under `/ember/<cluster_name>/<table>/` followed by the raw key bytes, and counters
under `/ember/<cluster_name>/__counters__/<name>`. Every backend failure (connection refused, etcd
down, timeout) surfaces as `StorageUnavailable` naming the endpoint. A client that errored is
dropped; the next operation connects afresh, so the storage recovers once etcd is back.

Authentication: with a password the client logs in as `user` (etcd's user/password auth; the
ember-etcd image turns it on, and the GCS is the one holder of the password). etcd's tokens end
with the etcd process (and after an idle TTL), so a call refused for an invalid token is retried
once on a fresh client, which logs in again. Credential problems fail at start with one line
saying what to set: etcd wants a login and none was given, the password is refused, or a
password is given but etcd has authentication off (refused: the operator expects a locked etcd).

Fencing (a replicated GCS, ember_gcs.leader): after `fence(key, create_revision)` every write is
one transaction that first compares the leader key's create revision with the one this replica
created. A deposed leader's key is gone (its lease expired) or another replica's (another
create revision), so its writes are refused as a whole and raise `NotLeader`; nothing of them
is applied. The election's own primitives (`grant_lease`, `create_with_lease`, ...) live here
too, over the same client.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable

import aetcd
from aetcd import transactions as tx

from .storage import ETCD_PASSWORD_ENV, NotLeader, Storage, StorageUnavailable

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


PASSWORD_ENV = ETCD_PASSWORD_ENV
# Worth one more try on a fresh client: a dropped connection, or a login token that ended with a
# restarted etcd (or its idle TTL), which the fresh client's login replaces.
_RETRY_ON_FRESH_CLIENT = (aetcd.ConnectionFailedError, aetcd.exceptions.UnauthenticatedError)
_NO_CREDENTIALS = (f"etcd requires authentication and this GCS has no credentials: set {PASSWORD_ENV} "
                   "to the password of etcd's user (compose: `make compose-env` writes it into .env; "
                   "Kubernetes: the Secret ember-etcd-auth)")


def explain_auth_error(error: BaseException, user: str | None) -> str | None:
    """What an authentication error of etcd means for the operator, or None for other errors."""
    text = str(error)
    if "user name is empty" in text:
        return _NO_CREDENTIALS
    if "invalid user ID or password" in text:
        return (f"etcd refused the password of user {user!r}: {PASSWORD_ENV} is not the one etcd was "
                "set up with (its data volume keeps the first one)")
    if "authentication is not enabled" in text:
        return (f"{PASSWORD_ENV} is set but etcd has authentication off, so any client on its network "
                "could read and write the cluster's state: turn it on (the ember-etcd image does) "
                f"or unset {PASSWORD_ENV}")
    if "permission denied" in text:
        return f"etcd user {user!r} may not read or write the cluster's keys (grant it the root role)"
    return None


class EtcdStorage(Storage):
    """Storage in etcd (v3 API over gRPC, via aetcd). Use it from a single event loop."""

    def __init__(self, endpoints: str, cluster_name: str = "default", timeout: float = 3.0,
                 user: str | None = None, password: str | None = None) -> None:
        self._endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not self._endpoints:
            raise ValueError(f"no etcd endpoint in {endpoints!r}")
        if user and not password:
            raise ValueError(f"etcd user {user!r} given without a password ({PASSWORD_ENV})")
        self._user = (user or "root") if password else None
        self._password = password or None
        self._root = f"/ember/{cluster_name}/".encode()
        self._timeout = timeout
        self._client: aetcd.Client | None = None
        self._endpoint = self._endpoints[0]
        self._lock: asyncio.Lock | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._fence: tuple[bytes, int] | None = None  # (leader key, its create revision)
        self.on_fenced: Callable[[], None] | None = None  # called when the fence refuses a write

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
                client = aetcd.Client(host=host or "localhost", port=int(port), username=self._user,
                                      password=self._password, timeout=self._timeout,
                                      options=_CHANNEL_OPTIONS)
                try:  # aetcd's connect() logs in and builds the channel: a read proves etcd answers.
                    await asyncio.wait_for(client.get(self._root), self._timeout + 1)
                except (aetcd.ClientError, asyncio.TimeoutError, OSError) as e:
                    self._retire(client)
                    why = explain_auth_error(e, self._user)
                    if why is not None:  # no other endpoint answers differently: one line, now
                        raise StorageUnavailable(f"etcd at {endpoint}: {why}") from None
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
                if attempt == 0 and isinstance(e, _RETRY_ON_FRESH_CLIENT):
                    continue
                why = explain_auth_error(e, self._user)
                msg = (f"etcd at {self._endpoint}: {why}" if why is not None else
                       f"etcd at {self._endpoint} unavailable: {type(e).__name__}: {e}")
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
        inner = tx.Txn([tx.Create(k) == 0], put, put if overwrite else [])
        reply = await self._write(inner)
        return bool(reply.response_txn.succeeded)

    async def delete(self, table: str, key: bytes) -> bool:
        """Deletes one key. Returns True if it existed."""
        reply = await self._write(tx.Delete(self._key(table, key)))
        return int(reply.response_delete_range.deleted) > 0

    async def delete_prefix(self, table: str, prefix: bytes) -> int:
        """Deletes every key of the table starting with prefix. Returns how many."""
        start = self._key(table, prefix)
        reply = await self._write(tx.Delete(start, _prefix_end(start)))
        return int(reply.response_delete_range.deleted)

    # -- fencing --------------------------------------------------------------------------------

    def fence(self, leader_key: bytes, create_revision: int) -> None:
        """Guards every later write with this replica's leadership (see the module docstring)."""
        self._fence = (leader_key, create_revision)

    async def _write(self, op: Any) -> Any:
        """Runs one write operation (a Put, Delete or Txn) in a transaction, behind the fence
        when there is one; returns its response. NotLeader when the fence refused it."""
        guard = [] if self._fence is None else [tx.Create(self._fence[0]) == self._fence[1]]
        ok, responses = await self._call(functools.partial(_transact, guard, [op]))
        if not ok:
            if self.on_fenced is not None:
                self.on_fenced()
            raise NotLeader(f"write refused by etcd at {self._endpoint}: this GCS replica no longer "
                            "holds the leadership it was elected with")
        return responses[0]

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
            reply = await self._write(tx.Txn([cond], [tx.Put(k, str(new).encode())], []))
            if reply.response_txn.succeeded:
                return new

    # -- the election's primitives (ember_gcs.leader) ---------------------------------------------

    def root_key(self, name: str) -> bytes:
        """The etcd key of name under this cluster's prefix (beside the tables)."""
        return self._root + name.encode()

    async def grant_lease(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (its id, the TTL etcd granted, which may be above ttl_s)."""
        lease = await self._call(lambda c: c.lease(ttl_s))
        return int(lease.id), int(lease.ttl)

    async def refresh_lease(self, lease_id: int) -> int:
        """Renews a lease; returns its new TTL (<= 0: the lease has expired)."""
        reply = await self._call(lambda c: c.refresh_lease(lease_id))
        return -1 if reply is None else int(reply.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        """Ends a lease now (etcd deletes the keys attached to it)."""
        await self._call(lambda c: c.revoke_lease(lease_id))

    async def create_with_lease(self, key: bytes, value: bytes, lease_id: int) -> tuple[int, bytes]:
        """Creates key (attached to the lease) unless it exists: (its create revision if this
        call created it, else 0; the value it holds now)."""
        ok, responses = await self._call(lambda c: c.transaction(
            [tx.Create(key) == 0], [tx.Put(key, value, lease=lease_id)], [tx.Get(key)]))
        if ok:
            return int(responses[0].response_put.header.revision), value
        held = responses[0]
        return 0, (held[0][0] if held else b"")

    async def get_raw(self, key: bytes) -> bytes | None:
        """The value of a key outside the tables (the leader key), or None."""
        kv = await self._call(lambda c: c.get(key))
        return None if kv is None else kv.value


def _transact(cond: list[Any], ops: list[Any], client: aetcd.Client) -> Any:
    """One transaction (bound with functools.partial: no loop variable captured)."""
    return client.transaction(cond, ops, [])
