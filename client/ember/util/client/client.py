"""Client mode: `ember.init("ember://HOST:PORT")` (or `ray://`) connects to the client proxy.

The connection holds one gRPC channel to the proxy, a Connect stream that lasts as long as the
session, and the counts of the stubs it handed to the user (refs and actor handles); releases
of dropped stubs ride on the next call or go out within a second. The public API (`ember.get`,
`.remote()`, ...) calls the methods here when the process is in client mode.
"""
from __future__ import annotations

import concurrent.futures
import threading
import uuid
import weakref
from typing import Any, Sequence

import grpc

import ember
from ember_common import rpc

from . import protocol
from .stubs import ClientActorHandle, ClientObjectRef

# ember.init's arguments a session's driver takes; the others describe a cluster or this process.
INIT_OPTIONS = ("namespace", "runtime_env", "logging_level")
LOCAL_PATH_KEYS = ("working_dir", "py_modules")


_active: ClientConnection | None = None  # this process's connection while in client mode


def active() -> ClientConnection | None:
    """The connection when this process is in client mode, else None (for libraries such as
    Serve, whose `serve.run` then runs in the session's driver)."""
    return _active


def unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"{what} is not supported in client mode (ember.init with a "
                               "ray:// or ember:// address); run it in a driver on the cluster "
                               "(`ember job submit`)")


class ClientConnection:
    """One client's connection to its session through the proxy."""

    def __init__(self, address: str, options: dict[str, Any]) -> None:
        env = options.get("runtime_env") or {}
        bad = [k for k in LOCAL_PATH_KEYS if k in env]
        if bad:
            raise unsupported(f"runtime_env {', '.join(bad)} (local paths)")
        self.address = address.split("://", 1)[1]
        if ":" not in self.address:
            self.address += f":{protocol.DEFAULT_PORT}"
        self.client_id = uuid.uuid4().hex
        self._md = ((protocol.CLIENT_ID_HEADER, self.client_id),)
        self._channel = rpc.sync_channel(self.address)
        self._call: Any = self._channel.unary_stream(protocol.CALL)
        self._call_chunked: Any = self._channel.stream_stream(protocol.CALL_CHUNKED)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, bytes], int] = {}  # live stubs per id
        self._receipts: dict[tuple[str, bytes], int] = {}  # times the session handed the id out
        self._releases: list[tuple[str, bytes, int]] = []
        self._keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="client-get")
        self.closed = threading.Event()
        connect: Any = self._channel.unary_stream(protocol.CONNECT)
        self._stream: Any = connect(protocol.dumps(options, _none), metadata=self._md)
        try:
            status, info = protocol.loads(next(self._stream), _none)
        except grpc.RpcError as e:
            self._channel.close()
            raise _connection_error(e, self.address) from None
        if status == "err":
            self._channel.close()
            raise info
        self.info: dict[str, Any] = info
        global _active
        _active = self
        threading.Thread(target=self._watch, name="ember-client-watch", daemon=True).start()
        threading.Thread(target=self._flush_loop, name="ember-client-release", daemon=True).start()

    # --- the connection -------------------------------------------------------------------------
    def _watch(self) -> None:
        try:
            for _ in self._stream:
                pass
        except grpc.RpcError:
            pass
        self.closed.set()

    def _flush_loop(self) -> None:
        while not self.closed.wait(1.0):
            if self._releases:
                try:
                    self.call("release", [])
                except Exception:  # noqa: BLE001 - the connection is going away
                    return

    def disconnect(self) -> None:
        """Ends the session (its driver's job ends; what it owned is freed)."""
        global _active
        if _active is self:
            _active = None
        self.closed.set()
        self._stream.cancel()
        self._channel.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def call(self, op: str, *args: Any) -> Any:
        """Runs one operation in the session; re-raises its exception here."""
        if self.closed.is_set():
            raise ConnectionError(f"the connection to the Ember client proxy at {self.address} is closed")
        with self._lock:
            releases, self._releases = self._releases, []
        payload = protocol.encode((op, args, releases), self._out)
        try:
            replies = (self._call(payload[0], metadata=self._md)
                       if not payload[1] and len(payload[0]) <= protocol.chunk_bytes()
                       else self._call_chunked(protocol.frames(payload), metadata=self._md))
            stream, buffers = protocol.unframe(replies)
        except grpc.RpcError as e:
            raise _connection_error(e, self.address) from None
        status, value = protocol.loads(stream, self._in, buffers)
        if status == "err":
            if isinstance(value, ember.exceptions.RayTaskError):  # both it and the cause's type
                value = value.as_instanceof_cause()
            raise value
        return value

    # --- stubs ------------------------------------------------------------------------------------
    def _out(self, obj: Any) -> Any:
        if isinstance(obj, ClientObjectRef):
            return ("ref", obj.binary())
        if isinstance(obj, ClientActorHandle):
            return ("actor", obj._client_actor_id)
        if isinstance(obj, ember.ObjectRef):
            raise TypeError(f"{obj!r} belongs to another ember session and cannot be sent")
        return None

    def _in(self, pid: Any) -> Any:
        with self._lock:
            key = (pid[0], pid[1])
            self._receipts[key] = self._receipts.get(key, 0) + 1
        if pid[0] == "ref":
            return ClientObjectRef(pid[1], self)
        return ClientActorHandle(pid[1], pid[2], pid[3], self)

    def _hold(self, key: tuple[str, bytes]) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def _drop(self, key: tuple[str, bytes]) -> None:
        with self._lock:
            n = self._counts.get(key, 0) - 1
            if n > 0:
                self._counts[key] = n
                return
            self._counts.pop(key, None)
            received = self._receipts.pop(key, 0)
            if received and not self.closed.is_set():
                self._releases.append((key[0], key[1], received))

    def add_local_ref(self, object_id: bytes, owner: Any) -> None:
        self._hold(("ref", object_id))

    def remove_local_ref(self, object_id: bytes) -> None:
        self._drop(("ref", object_id))

    def mark_escaped(self, object_id: bytes) -> None:
        """A stub pickled outside the wire: its copy names an id only the session can resolve."""

    def hold_actor(self, actor_id: bytes) -> None:
        self._hold(("actor", actor_id))

    def drop_actor(self, actor_id: bytes) -> None:
        self._drop(("actor", actor_id))

    def future(self, ref: ClientObjectRef) -> concurrent.futures.Future[Any]:
        return self._pool.submit(self.call, "get", ref, None)

    def define(self, remote: Any, obj: Any, options: dict[str, Any]) -> str:
        """The session's key for a RemoteFunction / ActorClass, defined there on first use."""
        key = self._keys.get(remote)
        if key is None:
            key = uuid.uuid4().hex
            self.call("define", key, obj, options)
            self._keys[remote] = key
        return key

    # --- the API ----------------------------------------------------------------------------------
    def get(self, refs: Any, timeout: float | None) -> Any:
        if not isinstance(refs, (ember.ObjectRef, list)):
            raise ValueError(f"'object_refs' must either be an ObjectRef or a list of ObjectRefs, "
                             f"got {type(refs).__name__}")
        return self.call("get", refs, timeout)

    def wait(self, refs: Sequence[Any], num_returns: int, timeout: float | None,
             fetch_local: bool) -> tuple[list[Any], list[Any]]:
        refs = list(refs)
        ready = set(self.call("wait", refs, num_returns, timeout, fetch_local))
        return ([r for i, r in enumerate(refs) if i in ready],
                [r for i, r in enumerate(refs) if i not in ready])

    def serve_run(self, target: Any, kwargs: dict[str, Any]) -> ClientAppHandle:
        """serve.run in the session's driver (the controller and the HTTP proxy are actors of
        the cluster, so the application outlives this client)."""
        blocking = kwargs.pop("blocking", False)
        self.call("serve_run", target, kwargs)
        if blocking:
            while not self.closed.wait(3600):
                pass
        return ClientAppHandle(str(kwargs.get("name", "default")))

    def runtime_context(self) -> ClientRuntimeContext:
        return ClientRuntimeContext(self.call("runtime_context"))


class ClientRuntimeContext:
    """`ember.get_runtime_context()` in client mode: the session driver's job, node and namespace."""

    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    def get_job_id(self) -> str:
        return str(self._info["job_id"])

    def get_node_id(self) -> str:
        return str(self._info["node_id"])

    def get_worker_id(self) -> str:
        return str(self._info["worker_id"])

    def get_namespace(self) -> str:
        return str(self._info["namespace"])

    @property
    def namespace(self) -> str:
        return self.get_namespace()

    @property
    def gcs_address(self) -> str:
        return str(self._info["gcs_address"])

    def get(self) -> dict[str, Any]:
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(),
                "namespace": self.get_namespace()}

    def __getattr__(self, name: str) -> Any:
        raise unsupported(f"get_runtime_context().{name}")


class ClientAppHandle:
    """What serve.run returns in client mode: the application is deployed; calls through a
    handle are not relayed (send HTTP requests to the Serve proxy instead)."""

    def __init__(self, app_name: str) -> None:
        self.app_name = app_name

    def __getattr__(self, name: str) -> Any:
        raise unsupported(f"DeploymentHandle.{name} (application {self.app_name!r})")


class ClientInfo(dict[str, Any]):
    """What `ember.init("ember://...")` returns; `with` it to disconnect at the block's end."""

    def __init__(self, conn: ClientConnection) -> None:
        super().__init__(address=conn.address, node_id=conn.info["node_id"],
                         job_id=conn.info["job_id"], namespace=conn.info["namespace"],
                         dashboard_url=None)
        self.address_info = dict(self)

    def __enter__(self) -> ClientInfo:
        return self

    def __exit__(self, *a: Any) -> None:
        ember.shutdown()

    def disconnect(self) -> None:
        ember.shutdown()


def _none(x: Any) -> None:
    return None


def _connection_error(e: grpc.RpcError, address: str) -> Exception:
    exc = rpc.status_to_exception(e)
    if isinstance(exc, rpc.AuthenticationError):
        return exc
    return ConnectionError(f"Ember client proxy at {address}: {exc}")
