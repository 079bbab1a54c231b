"""Actors: `@ember.remote` on a class makes an ActorClass; `.remote()` creates the actor through
the GCS and returns an ActorHandle whose method calls go straight to the actor's worker.

    @ember.remote(max_restarts=1)
    class Counter:
        def __init__(self): self.n = 0
        def incr(self): self.n += 1; return self.n

    c = Counter.options(name="counter", lifetime="detached").remote()
    ember.get(c.incr.remote())
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Callable

from ember._private import placement_groups as pg_door
from ember._private import scheduling
from ember._private.executor import ActorExit
from ember._private.options import ACTOR_OPTIONS, resource_request, validate
from ember._private.runtime_env import context as runtime_env
from ember._private.remote_function import (
    build_args,
    by_reference,
    hand_over,
    import_object,
    streaming_default,
)
from ember._private.task_queue import TaskEntry
from ember_common import ids, rpc, tracing
from ember_common.proto import common_pb2

__all__ = ["ActorClass", "ActorHandle", "exit_actor", "method"]

STREAMING = -1  # ActorMethod.num_returns of a streaming generator method


def method(*args: Any, **options: Any) -> Any:
    """Decorates an actor method with options: `@ember.method(num_returns=2)`."""
    if args:
        raise TypeError("use @ember.method(num_returns=...) with keyword arguments")
    for k in options:
        if k not in ("num_returns", "concurrency_group", "max_task_retries", "retry_exceptions"):
            raise ValueError(f"Invalid option keyword {k!r} for ember.method")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__ember_num_returns__ = options.get("num_returns")  # type: ignore[attr-defined]
        return fn

    return decorate


def _methods(cls: type) -> list[common_pb2.ActorMethod]:
    out = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name != "__call__":
            continue
        if not (inspect.isfunction(member) or inspect.ismethod(member)):
            continue
        nr = streaming_default(member, getattr(member, "__ember_num_returns__", None))
        out.append(common_pb2.ActorMethod(
            name=name, num_returns=STREAMING if nr == "streaming" else nr,
            is_async=inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member),
            is_generator=inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)))
    return out


class ActorClass:
    """What @ember.remote makes of a class."""

    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        validate(options, ACTOR_OPTIONS, f"actor class {cls.__name__}")
        lifetime = options.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"lifetime must be 'detached' or 'non_detached', got {lifetime!r}")
        mc = options.get("max_concurrency")
        if mc is not None and (not isinstance(mc, int) or mc < 1):
            raise ValueError(f"max_concurrency must be an int >= 1, got {mc!r}")
        self._cls = cls
        self._options = options
        self._methods = _methods(cls)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__

    def __reduce__(self) -> tuple[Any, ...]:
        target = by_reference(self, self._cls)
        if target is not None:
            return (import_object, target)
        return (ActorClass, (self._cls, self._options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actors cannot be instantiated directly. Instead of '{self.__name__}()', "
                        f"use '{self.__name__}.remote()'.")

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        from ember._private import worker as _w

        return _create(_w.global_worker(), self, args, kwargs)


def _place(core: Any, ac: ActorClass, spec: common_pb2.TaskSpec, opts: dict[str, Any]) -> None:
    """Writes the actor's placement into its creation spec: a placement group bundle (the GCS
    leases inside it, also on restarts), or the node the GCS asks first (node affinity, SPREAD
    in turn over the alive nodes). Hard affinity to a dead or unknown node is a ValueError."""
    parent_pg, parent_capture = b"", False
    if core.executor is not None and scheduling.needs_context(opts):
        parent_pg, parent_capture = pg_door.current()
    what = f"actor {ac.__name__}"
    p = scheduling.resolve(opts, what, parent_pg, parent_capture, request=dict(spec.resources))
    if p.pg_id:
        spec.placement_group_id = p.pg_id
        spec.placement_group_bundle_index = p.bundle_index
        spec.placement_group_capture_child_tasks = p.capture
    elif p.node_id or p.spread:
        nodes = core.run(lambda: core.nodes(max_age_s=1.0))
        alive = sorted(n.node_id for n in nodes.values() if n.state == common_pb2.NodeInfo.ALIVE)
        if p.spread:
            if alive:
                global _spread_next
                _spread_next = (_spread_next + 1) % len(alive)
                spec.actor_creation.owner_node_id = alive[_spread_next]
        elif p.node_id in alive:
            spec.actor_creation.owner_node_id = p.node_id
        elif not p.soft:
            state = "unknown to the cluster" if p.node_id not in nodes else "dead"
            raise ValueError(f"{what} cannot be scheduled: NodeAffinitySchedulingStrategy("
                             f"soft=False) names node {p.node_id}, which is {state}")


_spread_next = 0


def _create(w: Any, ac: ActorClass, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ActorHandle:
    core = w.core
    opts = ac._options
    name = opts.get("name") or ""
    namespace = opts.get("namespace") or w.current_namespace()
    if opts.get("get_if_exists") and name:
        try:
            return get_actor(name, namespace)
        except ValueError:
            pass
    fid = w.functions.export(ac._cls, f"actor class {ac.__name__}")
    renv = runtime_env.resolve(opts.get("runtime_env"), f"runtime_env of actor {ac.__name__}")
    task_args, kwarg_names, keep = build_args(core, args, kwargs, f"{ac.__name__}.__init__()")
    for r in keep:  # the GCS and the actor's worker read these, possibly after restarts
        core.mark_escaped(r.binary())
    is_async = any(m.is_async for m in ac._methods)
    max_concurrency = opts.get("max_concurrency") or (1000 if is_async else 1)
    max_task_retries = opts.get("max_task_retries") or 0
    task_id = ids.new_task_id()
    spec = common_pb2.TaskSpec(
        task_id=task_id, job_id=core.job_id, name=f"{ac.__name__}.__init__",
        function=common_pb2.FunctionDescriptor(module=ac._cls.__module__ or "",
                                               qualname=ac._cls.__qualname__, function_id=fid),
        args=task_args, kwarg_names=kwarg_names,
        return_ids=[ids.object_id_for_return(task_id, 1)],
        resources=resource_request(opts, 0.0),
        caller=core.address_proto, serialized_runtime_env=renv,
        actor_id=os.urandom(16),
        actor_creation=common_pb2.ActorCreationSpec(
            max_restarts=opts.get("max_restarts") or 0, max_task_retries=max_task_retries,
            max_concurrency=max_concurrency, name=name, namespace=namespace,
            detached=opts.get("lifetime") == "detached", is_async=is_async, class_name=ac.__name__,
            methods=ac._methods, owner_node_id=core.node_id))
    _place(core, ac, spec, opts)
    if tracing.enabled():
        tracing.inject(spec.trace_context)
    md = tracing.metadata()
    try:
        core.gcs_call(lambda: core.gcs.register_actor(spec, timeout_s=30, metadata=md))
    except rpc.AlreadyExists as e:
        if opts.get("get_if_exists"):
            return get_actor(name, namespace)
        raise ValueError(str(e)) from None
    return ActorHandle(spec.actor_id, ac.__name__, list(ac._methods), max_task_retries)


class ActorID:
    def __init__(self, b: bytes) -> None:
        self._b = b

    def hex(self) -> str:
        return self._b.hex()

    def binary(self) -> bytes:
        return self._b

    def __repr__(self) -> str:
        return f"ActorID({self._b.hex()})"


class ActorHandle:
    """A reference to an actor; pass it to tasks and other actors freely."""

    def __init__(self, actor_id: bytes, class_name: str, methods: list[common_pb2.ActorMethod],
                 max_task_retries: int) -> None:
        self._ember_actor_id = actor_id
        self._ember_class_name = class_name
        self._ember_methods = {m.name: m for m in methods}
        self._ember_max_task_retries = max_task_retries

    @property
    def _actor_id(self) -> ActorID:
        return ActorID(self._ember_actor_id)

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_ember_"):
            raise AttributeError(name)
        m = self._ember_methods.get(name)
        if m is None:
            raise AttributeError(f"'{self._ember_class_name}' object has no attribute '{name}'")
        return ActorMethod(self, m, m.num_returns)

    def __repr__(self) -> str:
        return f"Actor({self._ember_class_name}, {self._ember_actor_id.hex()})"

    def __hash__(self) -> int:
        return hash(self._ember_actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._ember_actor_id == self._ember_actor_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_handle, (self._ember_actor_id, self._ember_class_name,
                                  [m.SerializeToString() for m in self._ember_methods.values()],
                                  self._ember_max_task_retries))


def _rebuild_handle(actor_id: bytes, class_name: str, methods: list[bytes], retries: int) -> ActorHandle:
    return ActorHandle(actor_id, class_name, [common_pb2.ActorMethod.FromString(m) for m in methods],
                       retries)


class ActorMethod:
    def __init__(self, handle: ActorHandle, meta: common_pb2.ActorMethod | bytes,
                 num_returns: int) -> None:
        self._handle = handle
        self._meta = common_pb2.ActorMethod.FromString(meta) if isinstance(meta, bytes) else meta
        self._num_returns = num_returns

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorMethod, (self._handle, self._meta.SerializeToString(), self._num_returns))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly. Instead of "
                        f"'{self._meta.name}()', try '{self._meta.name}.remote()'.")

    def options(self, **options: Any) -> ActorMethod:
        for k in options:
            if k not in ("num_returns", "name"):
                raise ValueError(f"Invalid option keyword {k!r} for actor method {self._meta.name}")
        nr = options.get("num_returns", self._num_returns)
        return ActorMethod(self._handle, self._meta, STREAMING if nr == "streaming" else nr)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        from ember._private import worker as _w

        core = _w.global_worker().core
        h = self._handle
        name = f"{h._ember_class_name}.{self._meta.name}"
        task_args, kwarg_names, keep = build_args(core, args, kwargs, f"{name}()")
        task_id = ids.new_task_id()
        n = self._num_returns
        streaming = n == STREAMING
        return_ids = [] if streaming else [ids.object_id_for_return(task_id, i + 1) for i in range(max(n, 1))]
        spec = common_pb2.TaskSpec(
            task_id=task_id, job_id=core.job_id, name=name, args=task_args, kwarg_names=kwarg_names,
            return_ids=return_ids, actor_id=h._ember_actor_id, method_name=self._meta.name,
            caller=core.address_proto, streaming=streaming)
        if tracing.enabled():
            tracing.submit_span(f"submit {name}", spec.trace_context,
                                **{"ember.actor_id": h._ember_actor_id.hex()})
        return hand_over(core, TaskEntry(spec, keep, None), n, core.actor_submitter.submit,
                         h._ember_max_task_retries)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of a live named actor; ValueError if there is none."""
    from ember._private import worker as _w

    if not isinstance(name, str) or not name:
        raise ValueError("get_actor() needs a non-empty actor name")
    w = _w.global_worker()
    core = w.core
    ns = namespace if namespace is not None else w.current_namespace()
    try:
        a = core.gcs_call(lambda: core.gcs.get_named_actor_info(name, ns, timeout_s=30))
    except rpc.NotFound:
        raise ValueError(f"Failed to look up actor with name '{name}' in namespace '{ns}'. "
                         "Check the name and the namespace.") from None
    c = a.creation_spec.actor_creation
    return ActorHandle(a.actor_id, a.class_name, list(c.methods), c.max_task_retries)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kills an actor (its pending calls fail with RayActorError); with no_restart=False it
    restarts if max_restarts allows."""
    from ember._private import worker as _w

    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ember.kill() only supports actors, got {type(actor).__name__}")
    core = _w.global_worker().core
    core.gcs_call(lambda: core.gcs.kill_actor(actor._ember_actor_id, no_restart, timeout_s=30))


def exit_actor() -> None:
    """Ends the current actor after this call; it is not restarted."""
    from ember._private import worker as _w

    w = _w.global_worker_or_none()
    if w is None or w.core.executor is None or w.core.executor.actor is None:
        raise TypeError("exit_actor() was called outside an actor")
    raise ActorExit(0)
