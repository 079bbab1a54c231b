"""The client's stand-ins for the session's refs and actor handles: each names a real one there.

`ClientObjectRef` is an `ember.ObjectRef` (so `isinstance(ref, ember.ObjectRef)`, hashing and
equality by id hold) whose reference counting goes to the client connection instead of a core
worker: when the last stub of an id is dropped, the connection releases it in the session.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Generator, Protocol

import ember

_NO_OWNER = ("", 0, "", "")  # the owner is the session's driver, out of the client's reach


class Connection(Protocol):
    """What a stub needs of the client connection (client.ClientConnection)."""

    def add_local_ref(self, object_id: bytes, owner: Any) -> None: ...
    def remove_local_ref(self, object_id: bytes) -> None: ...
    def mark_escaped(self, object_id: bytes) -> None: ...
    def hold_actor(self, actor_id: bytes) -> None: ...
    def drop_actor(self, actor_id: bytes) -> None: ...
    def call(self, op: str, *args: Any) -> Any: ...
    def future(self, ref: ClientObjectRef) -> concurrent.futures.Future[Any]: ...


class ClientObjectRef(ember.ObjectRef):
    """A ref held by a remote client: the id of a ref its session holds."""

    __slots__ = ()

    def __init__(self, object_id: bytes, conn: Connection) -> None:
        super().__init__(object_id, _NO_OWNER, conn)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ClientObjectRef({self.hex()})"

    def future(self) -> concurrent.futures.Future[Any]:
        """A concurrent.futures.Future that resolves to the value (fetched through the proxy)."""
        conn: Connection = self._worker
        return conn.future(self)

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self.future()).__await__()


class ClientActorHandle:
    """An actor handle held by a remote client: calls go to the session's real handle."""

    def __init__(self, actor_id: bytes, class_name: str, methods: list[str], conn: Connection) -> None:
        self._client_actor_id = actor_id
        self._client_class_name = class_name
        self._client_methods = frozenset(methods)
        self._client_conn = conn
        conn.hold_actor(actor_id)

    def __getattr__(self, name: str) -> ClientActorMethod:
        if name.startswith("_client_") or name not in self._client_methods:
            raise AttributeError(f"'{self._client_class_name}' object has no attribute '{name}'")
        return ClientActorMethod(self, name, {})

    def __repr__(self) -> str:
        return f"Actor({self._client_class_name}, {self._client_actor_id.hex()})"

    def __hash__(self) -> int:
        return hash(self._client_actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientActorHandle) and other._client_actor_id == self._client_actor_id

    def __del__(self) -> None:
        try:
            self._client_conn.drop_actor(self._client_actor_id)
        except Exception:  # interpreter shutdown
            return


class ClientActorMethod:
    """`handle.method`: `.remote(...)` calls it in the session; `.options(...)` as Ember's."""

    def __init__(self, handle: ClientActorHandle, name: str, options: dict[str, Any]) -> None:
        self._handle = handle
        self._name = name
        self._options = options

    def options(self, **options: Any) -> ClientActorMethod:
        return ClientActorMethod(self._handle, self._name, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        h = self._handle
        return h._client_conn.call("actor_call", h, self._name, self._options, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._name}()', try 'object.{self._name}.remote()'.")
