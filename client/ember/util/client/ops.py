"""What a session does for its client: each operation of the wire, run with the public `ember` API.

The session keeps the real refs and actor handles its client holds, each with the number of
times it was handed out; the client releases ids with the count it received, so an id handed
out again while a release is on its way stays alive.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import ember
from ember.actor import ActorHandle

from . import protocol

_NOT_IN_CLIENT_MODE = "is not supported in client mode (ray:// / ember:// addresses)"


class Operations:
    """The session's tables and one method per operation (`op_<name>`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refs: dict[bytes, list[Any]] = {}  # id -> [ObjectRef, times handed out]
        self.actors: dict[bytes, list[Any]] = {}  # actor id -> [ActorHandle, times handed out]
        self.remotes: dict[str, Any] = {}  # client key -> RemoteFunction / ActorClass

    # --- pickling: the session's refs and handles travel as ids ---------------------------
    def _out(self, obj: Any) -> Any:
        if isinstance(obj, ember.ObjectRef):
            key = obj.binary()
            with self.lock:
                e = self.refs.setdefault(key, [obj, 0])
                e[1] += 1
            return ("ref", key)
        if isinstance(obj, ActorHandle):
            key = obj._ember_actor_id
            with self.lock:
                e = self.actors.setdefault(key, [obj, 0])
                e[1] += 1
            return ("actor", key, obj._ember_class_name, sorted(obj._ember_methods))
        if isinstance(obj, ember.ObjectRefGenerator):
            raise TypeError(f"streaming generators (num_returns='streaming') {_NOT_IN_CLIENT_MODE}")
        return None

    def _in(self, pid: Any) -> Any:
        table = self.refs if pid[0] == "ref" else self.actors
        with self.lock:
            e = table.get(pid[1])
        if e is None:
            raise ValueError(f"{pid[0]} {pid[1].hex()} is not held by this client's session")
        return e[0]

    def handle(self, data: bytes, buffers: list[Any]) -> protocol.Payload:
        """One Call: (op, args, releases) in, ("ok", value) or ("err", exception) out."""
        try:
            op, args, releases = protocol.loads(data, self._in, buffers)
            self.op_release(releases)
            fn: Callable[..., Any] | None = getattr(self, f"op_{op}", None)
            if fn is None:
                raise ValueError(f"unknown client operation {op!r}")
            return protocol.encode(("ok", fn(*args)), self._out)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the client
            return protocol.encode_error(e, self._out)

    # --- session ------------------------------------------------------------------------------
    def init(self, gcs_address: str, options: dict[str, Any]) -> dict[str, Any]:
        ember.init(address=gcs_address, **options)
        return self.op_runtime_context()

    def shutdown(self) -> None:
        with self.lock:
            self.refs.clear()
            self.actors.clear()
        ember.shutdown()

    def op_release(self, releases: list[tuple[str, bytes, int]]) -> None:
        with self.lock:
            for kind, key, count in releases:
                table = self.refs if kind == "ref" else self.actors
                e = table.get(key)
                if e is not None:
                    e[1] -= count
                    if e[1] <= 0:
                        del table[key]

    def op_held(self) -> dict[str, int]:
        """How many refs and actor handles the session holds for its client (diagnostics)."""
        with self.lock:
            return {"refs": len(self.refs), "actors": len(self.actors)}

    # --- tasks and actors -----------------------------------------------------------------
    def op_define(self, key: str, obj: Any, options: dict[str, Any]) -> None:
        """Defines a remote function or actor class under the client's key."""
        self.remotes[key] = ember.remote(**options)(obj) if options else ember.remote(obj)

    def _remote(self, key: str) -> Any:
        r = self.remotes.get(key)
        if r is None:
            raise ValueError(f"remote function or class {key} was not defined in this session")
        return r

    def op_task(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._remote(key).remote(*args, **kwargs)

    def op_create_actor(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._remote(key).remote(*args, **kwargs)

    def op_actor_call(self, actor: Any, method: str, options: dict[str, Any],
                      args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        m = getattr(actor, method)
        if options:
            m = m.options(**options)
        return m.remote(*args, **kwargs)

    def op_get_actor(self, name: str, namespace: str | None) -> Any:
        return ember.get_actor(name, namespace=namespace)

    def op_kill(self, actor: Any, no_restart: bool) -> None:
        ember.kill(actor, no_restart=no_restart)

    def op_list_named_actors(self, all_namespaces: bool) -> Any:
        return ember.util.list_named_actors(all_namespaces=all_namespaces)

    # --- objects ------------------------------------------------------------------------------
    def op_put(self, value: Any) -> Any:
        return ember.put(value)

    def op_get(self, refs: Any, timeout: float | None) -> Any:
        return ember.get(refs, timeout=timeout)

    def op_wait(self, refs: list[Any], num_returns: int, timeout: float | None,
                fetch_local: bool) -> list[int]:
        """The indices of the ready refs (the client keeps its own ref objects)."""
        ready, _ = ember.wait(refs, num_returns=num_returns, timeout=timeout, fetch_local=fetch_local)
        done = {r.binary() for r in ready}
        return [i for i, r in enumerate(refs) if r.binary() in done]

    def op_cancel(self, ref: Any, force: bool, recursive: bool) -> None:
        ember.cancel(ref, force=force, recursive=recursive)

    # --- the cluster ---------------------------------------------------------------------------
    def op_resources(self, field: str) -> dict[str, float]:
        """ember.cluster_resources() ("total_resources") or ember.available_resources()."""
        return ember.cluster_resources() if field == "total_resources" else ember.available_resources()

    def op_nodes(self) -> list[dict[str, Any]]:
        return ember.nodes()

    def op_runtime_context(self) -> dict[str, Any]:
        ctx = ember.get_runtime_context()
        return {"job_id": ctx.get_job_id(), "node_id": ctx.get_node_id(),
                "namespace": ctx.get_namespace(), "gcs_address": ctx.gcs_address,
                "worker_id": ctx.get_worker_id(), "runtime_env": dict(ctx.runtime_env or {})}

    def op_serve_run(self, app: Any, kwargs: dict[str, Any]) -> None:
        """serve.run on the session's driver; the handle it returns stays on this side."""
        from ember import serve

        serve.run(app, **kwargs)
