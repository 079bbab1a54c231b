"""The one door to the GCS's internal KV, as Ray's `ray.experimental.internal_kv`.

    from ember.experimental import internal_kv as kv

    kv._internal_kv_put(b"state", blob, namespace="serve")         # overwrite=True
    kv._internal_kv_put("lock", "me", overwrite=False)             # True: someone else had it
    kv._internal_kv_get("state", namespace="serve")                # bytes, or None when absent
    kv._internal_kv_list(b"proxies/", namespace="serve")           # keys with that prefix, sorted
    kv._internal_kv_del(b"proxies/", del_by_prefix=True, namespace="serve")

Libraries (Serve, Data, Train, Tune) and the CLI keep their state here instead of reaching for
the GCS client or its protos. Keys, values and namespaces are `bytes` or `str` (str is UTF-8
encoded); keys and values may hold any bytes. `namespace=None` is the default namespace.

Where the calls go:
- in a driver, worker or actor connected to a cluster (`ember.init()` ran, or the process is a
  worker), through that process's core worker and its GCS client, which retries while the GCS
  restarts on etcd;
- in a process that is not a driver (the CLI), through a GCS client of its own, set up with
  `_initialize_internal_kv(address)` and dropped with `_internal_kv_reset()`.

Anything else raises `RuntimeError` naming the problem: the KV is never what starts a cluster.
Errors of the GCS arrive as the kit's `ember_common.rpc` exceptions (`Unavailable`,
`DeadlineExceeded`, ...).

Differences from Ray: `_initialize_internal_kv` takes the GCS address (Ember has no public GCS
client object); every call also takes `timeout=` (seconds for the whole call, retries included;
None = the client's policy: a connected process keeps retrying for up to 60 s while the GCS is
unreachable), which Ray's GCS client has and its `internal_kv` module does not pass on.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Protocol, TypeVar, cast

from ember_common import backoff
from ember_common.gcs_client import GcsClient

from ..objects import object_ref

T = TypeVar("T")

__all__ = ["_initialize_internal_kv", "_internal_kv_del", "_internal_kv_exists", "_internal_kv_get",
           "_internal_kv_initialized", "_internal_kv_list", "_internal_kv_put", "_internal_kv_reset"]


class _StandaloneKV:
    """A GCS client of its own on a private event loop, for processes that are not drivers."""

    def __init__(self, address: str, timeout_s: float, retry: backoff.Backoff) -> None:
        self.address = address
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()  # one call at a time on the private loop

        async def make() -> GcsClient:
            return GcsClient(address, retry=retry, timeout_s=timeout_s)

        self.client = self.loop.run_until_complete(make())

    def call(self, fn: Callable[[GcsClient], Awaitable[T]]) -> T:
        with self.lock:
            return self.loop.run_until_complete(fn(self.client))

    def close(self) -> None:
        with self.lock:
            try:
                self.loop.run_until_complete(self.client.close())
            finally:
                self.loop.close()


_standalone: _StandaloneKV | None = None
_standalone_lock = threading.Lock()


def _initialize_internal_kv(address: str, *, timeout_s: float = 5.0,
                            retry: backoff.Backoff = backoff.NO_RETRY) -> None:
    """Points the KV at the GCS at `address` (HOST:PORT) for a process that is not a driver,
    e.g. the CLI. Each call tries once with a `timeout_s` deadline unless `retry` says otherwise.
    Replaces an earlier standalone client."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"internal KV: the GCS address must be 'HOST:PORT', got {address!r}")
    global _standalone
    with _standalone_lock:
        old, _standalone = _standalone, _StandaloneKV(address, timeout_s, retry)
    if old is not None:
        old.close()


def _internal_kv_reset() -> None:
    """Drops the standalone client set up by `_initialize_internal_kv` (a connected driver or
    worker keeps using its own)."""
    global _standalone
    with _standalone_lock:
        old, _standalone = _standalone, None
    if old is not None:
        old.close()


class KvCore(Protocol):
    """What the door needs of a connected process's core worker (CoreWorker)."""

    gcs: GcsClient

    def in_loop(self) -> bool: ...

    def gcs_call(self, factory: Callable[[], Awaitable[T]]) -> T: ...


def _connected_core() -> KvCore | None:
    """The core worker of this process when it is connected to a cluster, else None (set by
    `worker`, which this door does not import: it imports runtime_env, which uses this door)."""
    return cast("KvCore | None", object_ref.current_core())


def _internal_kv_initialized() -> bool:
    """Whether KV calls have somewhere to go: a connected driver/worker or a standalone client."""
    return _standalone is not None or _connected_core() is not None


def _policy(timeout: float | None) -> dict[str, Any]:
    """Per-call timeout_s/retry for the kit client's methods."""
    if timeout is None:
        return {}
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"internal KV: timeout must be a positive number of seconds, got {timeout!r}")
    return {"timeout_s": timeout, "retry": backoff.SERVICE_RESTART.replace(deadline_s=timeout)}


def _run(fn: Callable[[GcsClient], Awaitable[T]]) -> T:
    standalone = _standalone
    if standalone is not None:
        return standalone.call(fn)
    core = _connected_core()
    if core is None:
        raise RuntimeError("the internal KV is not initialized: call ember.init() first (or, in a "
                           "process that is not a driver, internal_kv._initialize_internal_kv("
                           "'HOST:PORT'))")
    if core.in_loop():
        raise RuntimeError("the internal KV is blocking and cannot be called from the core "
                           "worker's event loop thread")
    return core.gcs_call(lambda: fn(core.gcs))


def _as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"internal KV: {what} must be bytes or str, got {type(value).__name__}")


def _namespace(namespace: Any) -> str:
    if namespace is None:
        return ""
    if isinstance(namespace, str):
        return namespace
    if isinstance(namespace, bytes):
        try:
            return namespace.decode()
        except UnicodeDecodeError:
            raise ValueError(f"internal KV: namespace must be UTF-8, got {namespace!r}") from None
    raise TypeError(f"internal KV: namespace must be bytes, str or None, got "
                    f"{type(namespace).__name__}")


def _internal_kv_get(key: str | bytes, *, namespace: str | bytes | None = None,
                     timeout: float | None = None) -> bytes | None:
    """The value stored under key, or None when the key is absent."""
    k, ns, kw = _as_bytes(key, "key"), _namespace(namespace), _policy(timeout)
    return _run(lambda gcs: gcs.internal_kv_get(ns, k, **kw))


def _internal_kv_exists(key: str | bytes, *, namespace: str | bytes | None = None,
                        timeout: float | None = None) -> bool:
    """Whether key has a value."""
    k, ns, kw = _as_bytes(key, "key"), _namespace(namespace), _policy(timeout)
    return _run(lambda gcs: gcs.internal_kv_exists(ns, k, **kw))


def _internal_kv_put(key: str | bytes, value: str | bytes, overwrite: bool = True, *,
                     namespace: str | bytes | None = None, timeout: float | None = None) -> bool:
    """Stores value under key; with overwrite=False an existing value is kept. Returns whether
    the key already had a value (already_exists)."""
    k, v, ns = _as_bytes(key, "key"), _as_bytes(value, "value"), _namespace(namespace)
    if not isinstance(overwrite, bool):
        raise TypeError(f"internal KV: overwrite must be a bool, got {type(overwrite).__name__}")
    kw = _policy(timeout)
    added = _run(lambda gcs: gcs.internal_kv_put(ns, k, v, overwrite, **kw))
    return not added


def _internal_kv_del(key: str | bytes, *, del_by_prefix: bool = False,
                     namespace: str | bytes | None = None, timeout: float | None = None) -> int:
    """Deletes key (every key starting with it when del_by_prefix); returns how many went."""
    k, ns, kw = _as_bytes(key, "key"), _namespace(namespace), _policy(timeout)
    if not del_by_prefix and not k:
        raise ValueError("internal KV: an empty key can only be deleted with del_by_prefix=True")
    return _run(lambda gcs: gcs.internal_kv_del(ns, k, bool(del_by_prefix), **kw))


def _internal_kv_list(prefix: str | bytes, *, namespace: str | bytes | None = None,
                      timeout: float | None = None) -> list[bytes]:
    """The keys of the namespace that start with prefix, sorted."""
    p, ns, kw = _as_bytes(prefix, "prefix"), _namespace(namespace), _policy(timeout)
    return _run(lambda gcs: gcs.internal_kv_keys(ns, p, **kw))
