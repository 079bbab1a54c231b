"""ObjectRef: a future for a value in the cluster, with owner-based reference counting."""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable, Generator, NamedTuple


class OwnerAddress(NamedTuple):
    """Where the process that owns an object listens, and who it is."""

    ip: str
    port: int
    worker_id: str
    node_id: str


# The process's core worker, or None before init (set by worker.py; this module imports no
# other core module, so that every core module may import it).
_current_core: Callable[[], Any] = lambda: None  # noqa: E731


def set_core_resolver(fn: Callable[[], Any]) -> None:
    """Tells ObjectRef how to find the process's core worker (unpickling, futures)."""
    global _current_core
    _current_core = fn


def current_core() -> Any:
    """The process's core worker, or None when it is not connected to a cluster (the doors ask
    here rather than import `worker`, which imports them)."""
    return _current_core()


class ObjectRef:
    """A reference to an object. Creating one counts a local reference; dropping it uncounts it."""

    __slots__ = ("_id", "_owner", "_worker", "__weakref__")

    def __init__(self, object_id: bytes, owner: OwnerAddress, worker: Any = None,
                 _register: bool = True) -> None:
        self._id = object_id
        self._owner = owner
        self._worker = worker
        if worker is not None and _register:
            worker.add_local_ref(object_id, owner)

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self) -> bytes:
        return self._id[:16]

    @property
    def owner_address(self) -> OwnerAddress:
        return self._owner

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __del__(self) -> None:
        w = self._worker
        if w is not None:
            try:
                w.remove_local_ref(self._id)
            except Exception:  # interpreter shutdown: nothing left to count
                return

    def __reduce__(self) -> tuple[Any, ...]:
        from .serialization import contained_refs_sink

        sink = contained_refs_sink()
        if sink is not None:
            sink.append(self)  # the serializer's caller hands it over (references.py)
        elif self._worker is not None:  # pickled out of band: nobody can track the copy
            self._worker.mark_escaped(self._id)
        return (_rebuild_ref, (self._id, tuple(self._owner)))

    def future(self) -> concurrent.futures.Future[Any]:
        """A concurrent.futures.Future that resolves to the value."""
        core = _current_core()
        if core is None:
            raise RuntimeError("ObjectRef.future() needs ember.init() first")
        fut: concurrent.futures.Future[Any] = core.get_future(self)
        return fut

    def __await__(self) -> Generator[Any, None, Any]:
        core = _current_core()
        if core is not None and core.in_loop():
            # Awaited on the core loop itself (the Serve proxy's requests run there): the
            # value straight from the store, no future in between, no thread hop.
            direct: Generator[Any, None, Any] = core.get_async(self).__await__()
            return direct
        return asyncio.wrap_future(self.future()).__await__()


# Unpickled owner tuples, interned: a value holding thousands of refs names a few owners, and a
# dict hit is cheaper than building a NamedTuple per ref.
_owners: dict[tuple[str, int, str, str], OwnerAddress] = {}


def _rebuild_ref(object_id: bytes, owner: tuple[str, int, str, str]) -> ObjectRef:
    o = _owners.get(owner)
    if o is None:
        if len(_owners) > 4096:
            _owners.clear()
        o = _owners[owner] = OwnerAddress(*owner)
    return ObjectRef(object_id, o, _current_core())
