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

import asyncio
import functools
import logging
import os
import threading
import types
from typing import Any

from ember._private.doors import placement_groups as pg_door
from ember._private.api import scheduling, signatures
from ember._private.api.actor_options import (STREAMING, call_retries, check_name, concurrency_groups, method,
                                              method_retries, method_table)
from ember._private.execution.executor import ActorExit
from ember._private.objects.object_ref import ObjectRef, OwnerAddress
from ember._private.api.options import ACTOR_OPTIONS, fallback_selectors, resource_request, validate
from ember._private.runtime_env import context as runtime_env
from ember._private.api.remote_function import (
    build_args,
    by_reference,
    hand_over,
    import_object,
    label_placement,
)
from ember._private.owner.task_errors import split as split_retry_exceptions
from ember._private.owner.task_queue import TaskEntry
from ember_common import ids, rpc, tracing
from ember_common.proto import common_pb2

__all__ = ["ActorClass", "ActorHandle", "exit_actor", "list_named_actors", "method"]
log = logging.getLogger(__name__)


class ActorClass:
    """What @ember.remote makes of a class."""

    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        validate(options, ACTOR_OPTIONS, f"actor class {cls.__name__}")
        lifetime = options.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"lifetime must be 'detached' or 'non_detached', got {lifetime!r}")
        check_name(options.get("name"))
        mpc = options.get("max_pending_calls")
        if mpc is None:
            mpc = -1
        if isinstance(mpc, bool) or not isinstance(mpc, int) or not (mpc == -1 or mpc > 0):
            raise ValueError(f"max_pending_calls must be -1 (no limit) or an int > 0, got {mpc!r}")
        if options.get("get_if_exists") and not options.get("name"):
            raise ValueError(f"get_if_exists=True for actor class {cls.__name__} needs a name "
                             "(the actor name must be specified to use get_if_exists)")
        mc = options.get("max_concurrency")
        if mc is not None and (not isinstance(mc, int) or mc < 1):
            raise ValueError(f"max_concurrency must be an int >= 1, got {mc!r}")
        self._cls = cls
        self._options = options
        self._methods = method_table(cls)
        self._retries = method_retries(cls)  # per-method max_task_retries / retry_exceptions
        self._groups = concurrency_groups(options.get("concurrency_groups"), cls.__name__)
        for m in self._methods:
            if m.concurrency_group and m.concurrency_group not in self._groups:
                raise ValueError(
                    f"method {cls.__name__}.{m.name} is in concurrency group "
                    f"{m.concurrency_group!r}, which the class does not declare (its "
                    f"concurrency_groups: {sorted(self._groups) or 'none'})")
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__

    def __reduce__(self) -> tuple[Any, ...]:
        target = by_reference(self, self._cls)
        if target is not None:
            return (import_object, target)
        return (ActorClass, (self._cls, self._options))

    def __getattr__(self, name: str) -> Any:
        """The user class's own attributes (constants, classmethods, staticmethods) read through
        the actor class, as Ray's ActorClass inherits them; dunder names are not forwarded."""
        if name.startswith("__") or name == "_cls":
            raise AttributeError(name)
        try:
            value = getattr(self._cls, name)
        except AttributeError:
            raise AttributeError(f"actor class {self.__name__!r} has no attribute {name!r}") from None
        # A plain function (a method, a staticmethod) comes back wrapped: cloudpickle, pickling
        # the class by value, looks its methods up by qualified name through this attribute, and
        # finding the very function there would pickle it by reference (its worker would then
        # import the whole defining module).
        return functools.partial(value) if isinstance(value, types.FunctionType) else value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actors cannot be instantiated directly. Instead of '{self.__name__}()', "
                        f"use '{self.__name__}.remote()'.")

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        from ember._private import worker as _w

        client = _w.client_connection()
        if client is not None:  # client mode: the session's driver creates it
            handle: ActorHandle = client.call("create_actor", client.define(self, self._cls, self._options),
                                              args, kwargs)
            return handle
        return _create(_w.global_worker(), self, args, kwargs)

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        """A ClassNode of a lazy graph (ember.dag): the actor is created on dag.execute()."""
        from ember.dag.class_node import ClassNode

        return ClassNode(self, args, kwargs, dict(self._options))


def _place(core: Any, ac: ActorClass, spec: common_pb2.TaskSpec, opts: dict[str, Any]) -> None:
    """Writes the actor's placement into its creation spec: a placement group bundle (the GCS
    leases inside it, also on restarts), or the node the GCS asks first (node affinity, SPREAD
    in turn over the alive nodes). Hard affinity to a dead or unknown node raises
    ActorUnschedulableError (at creation: Ray raises it at the first call's get)."""
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
            from ember.exceptions import ActorUnschedulableError

            raise ActorUnschedulableError(f"{what} cannot be scheduled: NodeAffinity"
                                          f"SchedulingStrategy(soft=False) names node "
                                          f"{p.node_id}, which is {state}")


_spread_next = 0


def _create(w: Any, ac: ActorClass, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ActorHandle:
    sigs = signatures.of_class(ac._cls)
    if "__init__" in sigs:  # Ray's check, in the caller, before anything is submitted
        sigs["__init__"].check(args, kwargs, f"{ac.__name__}.__init__")
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
    signatures.remember(fid, sigs)
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
            methods=ac._methods, owner_node_id=core.node_id, concurrency_groups=ac._groups))
    fallbacks = fallback_selectors(opts.get("fallback_strategy"), f"actor class {ac.__name__}")
    if opts.get("label_selector") or fallbacks:
        spec.labels.CopyFrom(label_placement(opts.get("label_selector"), fallbacks))
    _place(core, ac, spec, opts)
    if tracing.enabled():
        tracing.inject_task(spec)
    md = tracing.metadata()
    try:
        core.gcs_call(lambda: core.gcs.register_actor(spec, timeout_s=30, metadata=md))
    except rpc.AlreadyExists as e:
        if opts.get("get_if_exists"):
            return get_actor(name, namespace)
        raise ValueError(str(e)) from None
    return ActorHandle(spec.actor_id, ac.__name__, list(ac._methods), max_task_retries,
                       None if spec.actor_creation.detached else _own_handles(core, spec),
                       tuple(ac._groups), sigs, opts.get("max_pending_calls") or -1, ac._retries)


def _own_handles(core: Any, spec: common_pb2.TaskSpec) -> ObjectRef:
    """The creator owns the actor's handle count (Ray's protocol): a ref to the id of the
    creation task's return, carried by every handle and by every call in flight, counted like
    any object ref (handles passed to tasks and actors borrow it). When nothing holds it any
    more the owner tells the GCS, which destroys the (non-detached) actor."""
    oid, aid = spec.return_ids[0], spec.actor_id
    core.register_owned(oid)
    core.ref_table.on_free(oid, functools.partial(_out_of_scope, core, aid))
    return ObjectRef(oid, core.address, core)


def _out_of_scope(core: Any, actor_id: bytes) -> None:
    """No handle to the actor is left (any thread): the GCS destroys it."""
    if core.is_shutdown:
        return  # the job is ending: the GCS ends its actors anyway

    async def tell() -> None:
        try:
            await core.gcs.kill_actor(actor_id, True, out_of_scope=True, timeout_s=30)
        except Exception as e:  # the GCS is gone too (cluster shutting down)
            log.debug("actor %s out of scope: %s", actor_id.hex()[:8], e)
        core.actor_submitter.queues.pop(actor_id, None)

    core.post(lambda: asyncio.ensure_future(tell()))


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
                 max_task_retries: int, ref: ObjectRef | None = None,
                 groups: tuple[str, ...] = (),
                 method_signatures: dict[str, signatures.Signature] | None = None,
                 max_pending_calls: int = -1,
                 method_retries: dict[str, dict[str, Any]] | None = None) -> None:
        self._ember_retries = method_retries or {}  # @ember.method(max_task_retries=...) per name
        self._ember_signatures = method_signatures or {}  # checked at submission when known
        # Calls of this actor this process may have unfinished at once (-1: no limit); one
        # more raises PendingCallsLimitExceeded (Ray's max_pending_calls).
        self._ember_max_pending_calls = max_pending_calls
        self._ember_actor_id = actor_id
        self._ember_class_name = class_name
        self._ember_methods = {m.name: m for m in methods}
        self._ember_max_task_retries = max_task_retries
        # Counts this handle in the owner's handle count (None: detached, not counted).
        self._ember_ref = ref
        self._ember_groups = groups  # the actor's concurrency groups

    @property
    def _actor_id(self) -> ActorID:
        return ActorID(self._ember_actor_id)

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_ember_"):
            raise AttributeError(name)
        m = self._ember_methods.get(name)
        if m is None:
            raise AttributeError(f"'{self._ember_class_name}' object has no attribute '{name}'")
        return ActorMethod(self, m, m.num_returns, m.concurrency_group, self._ember_retries.get(name))

    def __repr__(self) -> str:
        return f"Actor({self._ember_class_name}, {self._ember_actor_id.hex()})"

    def __hash__(self) -> int:
        return hash(self._ember_actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._ember_actor_id == self._ember_actor_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_handle, (self._ember_actor_id, self._ember_class_name,
                                  [m.SerializeToString() for m in self._ember_methods.values()],
                                  self._ember_max_task_retries, self._ember_ref,
                                  self._ember_groups, self._ember_signatures,
                                  self._ember_max_pending_calls, self._ember_retries))


def _rebuild_handle(actor_id: bytes, class_name: str, methods: list[bytes], retries: int,
                    ref: ObjectRef | None = None, groups: tuple[str, ...] = (),
                    sigs: dict[str, signatures.Signature] | None = None,
                    max_pending_calls: int = -1,
                    method_retries: dict[str, dict[str, Any]] | None = None) -> ActorHandle:
    return ActorHandle(actor_id, class_name, [common_pb2.ActorMethod.FromString(m) for m in methods],
                       retries, ref, groups, sigs, max_pending_calls, method_retries)


class ActorMethod:
    def __init__(self, handle: ActorHandle, meta: common_pb2.ActorMethod | bytes,
                 num_returns: int, concurrency_group: str = "",
                 retries: dict[str, Any] | None = None) -> None:
        self._retries = retries or {}  # max_task_retries / retry_exceptions of its calls
        self._handle = handle
        self._meta = common_pb2.ActorMethod.FromString(meta) if isinstance(meta, bytes) else meta
        self._num_returns = num_returns
        self._group = concurrency_group

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorMethod, (self._handle, self._meta.SerializeToString(), self._num_returns,
                              self._group, self._retries))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly. Instead of "
                        f"'{self._meta.name}()', try '{self._meta.name}.remote()'.")

    def options(self, **options: Any) -> ActorMethod:
        for k in options:
            if k not in ("num_returns", "name", "concurrency_group", "max_task_retries",
                         "retry_exceptions"):
                raise ValueError(f"Invalid option keyword {k!r} for actor method {self._meta.name}")
        nr = options.get("num_returns", self._num_returns)
        group = options.get("concurrency_group") or self._group
        if group and group not in self._handle._ember_groups:
            raise ValueError(
                f"concurrency_group={group!r} for {self._handle._ember_class_name}."
                f"{self._meta.name}: the actor has no such group (its concurrency_groups: "
                f"{sorted(self._handle._ember_groups) or 'none'})")
        retries = {**self._retries, **call_retries(options, f"actor method {self._meta.name}")}
        return ActorMethod(self._handle, self._meta, STREAMING if nr == "streaming" else nr, group,
                           retries)

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        """A ClassMethodNode of a lazy graph (ember.dag): this call, on this actor, made on
        dag.execute()."""
        from ember.dag.class_node import PARENT_CLASS_NODE_KEY, ClassMethodNode

        options: dict[str, Any] = {}
        if self._num_returns != self._meta.num_returns:
            options["num_returns"] = "streaming" if self._num_returns == STREAMING else self._num_returns
        if self._group != self._meta.concurrency_group:
            options["concurrency_group"] = self._group
        return ClassMethodNode(self._meta.name, args, kwargs, options,
                               {PARENT_CLASS_NODE_KEY: self._handle})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        from ember._private import worker as _w

        core = _w.global_worker().core
        h = self._handle
        name = f"{h._ember_class_name}.{self._meta.name}"
        sig = h._ember_signatures.get(self._meta.name)
        if sig is not None:
            sig.check(args, kwargs, name)
        task_args, kwarg_names, keep = build_args(core, args, kwargs, f"{name}()")
        task_id = ids.new_task_id()
        n = self._num_returns
        streaming = n == STREAMING
        return_ids = [] if streaming else [ids.object_id_for_return(task_id, i + 1) for i in range(max(n, 1))]
        spec = common_pb2.TaskSpec(
            task_id=task_id, job_id=core.job_id, name=name, args=task_args, kwarg_names=kwarg_names,
            return_ids=return_ids, actor_id=h._ember_actor_id, method_name=self._meta.name,
            caller=core.address_proto, streaming=streaming, concurrency_group=self._group)
        retry_flag, allowlist = split_retry_exceptions(self._retries.get("retry_exceptions", False))
        spec.retry_exceptions = retry_flag
        if tracing.enabled():
            tracing.task_submitted(spec, f"submit {name}", "ember.actor_id", h._ember_actor_id)
        if h._ember_ref is not None:  # the call keeps the actor alive until it is done
            keep.append(h._ember_ref)
        if h._ember_max_pending_calls > 0:
            _pending_calls.take(h._ember_actor_id, h._ember_max_pending_calls, name)
        entry = TaskEntry(spec, keep, self._retries.get("max_task_retries"), retry_allowlist=allowlist)
        out = hand_over(core, entry, n, core.actor_submitter.submit, h._ember_max_task_retries)
        if h._ember_max_pending_calls > 0:
            _pending_calls.release_when_done(h._ember_actor_id, out)
        return out


class _PendingCalls:
    """Unfinished calls per actor in this process, for handles with max_pending_calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[bytes, int] = {}

    def take(self, actor_id: bytes, limit: int, name: str) -> None:
        """Counts one more call, or raises PendingCallsLimitExceeded at the limit."""
        with self.lock:
            n = self.count.get(actor_id, 0)
            if n >= limit:
                from ember.exceptions import PendingCallsLimitExceeded

                raise PendingCallsLimitExceeded(
                    f"{name}(): the actor has {n} calls pending from this process, its "
                    f"max_pending_calls={limit}; wait for some to finish")
            self.count[actor_id] = n + 1

    def release(self, actor_id: bytes, *_: Any) -> None:
        """One call finished."""
        with self.lock:
            n = self.count.get(actor_id, 1) - 1
            if n > 0:
                self.count[actor_id] = n
            else:
                self.count.pop(actor_id, None)

    def release_when_done(self, actor_id: bytes, out: Any) -> None:
        """Releases the call's count when its (first) result is ready or failed."""
        ref = out[0] if isinstance(out, list) and out else out
        if isinstance(ref, ObjectRef):
            ref.future().add_done_callback(functools.partial(self.release, actor_id))
        else:  # num_returns=0 or a stream: nothing to wait on, so it does not count
            self.release(actor_id)


_pending_calls = _PendingCalls()


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of a live named actor; ValueError if there is none."""
    from ember._private import worker as _w

    if not isinstance(name, str) or not name:
        raise ValueError("get_actor() needs a non-empty actor name")
    client = _w.client_connection()
    if client is not None:
        handle: ActorHandle = client.call("get_actor", name, namespace)
        return handle
    w = _w.global_worker()
    core = w.core
    ns = namespace if namespace is not None else w.current_namespace()
    try:
        a = core.gcs_call(lambda: core.gcs.get_named_actor_info(name, ns, timeout_s=30))
    except rpc.NotFound:
        raise ValueError(f"Failed to look up actor with name '{name}' in namespace '{ns}'. "
                         "Check the name and the namespace.") from None
    c = a.creation_spec.actor_creation
    ref = None
    if not c.detached:  # counted in its owner's handle count, as a borrowed ref
        o = a.creation_spec.caller
        ref = ObjectRef(a.creation_spec.return_ids[0],
                        OwnerAddress(o.ip, o.port, o.worker_id, o.node_id), core)
    return ActorHandle(a.actor_id, a.class_name, list(c.methods), c.max_task_retries, ref,
                       tuple(c.concurrency_groups),
                       signatures.known(a.creation_spec.function.function_id))


def list_named_actors(all_namespaces: bool = False) -> list[str] | list[dict[str, str]]:
    """The live named actors: their names in the current namespace, or with all_namespaces
    `{"name": ..., "namespace": ...}` for every namespace (as `ray.util.list_named_actors`)."""
    from ember._private import worker as _w

    client = _w.client_connection()
    if client is not None:
        names: list[str] | list[dict[str, str]] = client.call("list_named_actors", all_namespaces)
        return names
    w = _w.global_worker()
    core = w.core
    actors = core.gcs_call(lambda: core.gcs.get_all_actor_info(timeout_s=30))
    named = sorted((a.namespace, a.name) for a in actors
                   if a.name and a.state != common_pb2.ActorInfo.DEAD)
    if all_namespaces:
        return [{"name": name, "namespace": ns} for ns, name in named]
    mine = w.current_namespace()
    return [name for ns, name in named if ns == mine]


KILLED = "killed by ember.kill()"  # the death cause the GCS records (actor_policy.py)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kills an actor, interrupting what it runs. With no_restart (the default) it is DEAD:
    its queued, in-flight and later calls raise ActorDiedError ("killed by ember.kill()");
    with no_restart=False it restarts if max_restarts allows."""
    from ember._private import worker as _w

    client = _w.client_connection()
    if client is not None:
        client.call("kill", actor, bool(no_restart))
        return
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ember.kill() only supports actors, got {type(actor).__name__}")
    core = _w.global_worker().core
    aid = actor._ember_actor_id
    core.gcs_call(lambda: core.gcs.kill_actor(aid, no_restart, timeout_s=30))
    if no_restart:
        core.post(core.actor_submitter.killed, aid, KILLED)


def exit_actor() -> None:
    """Ends the current actor after this call; it is not restarted."""
    from ember._private import worker as _w

    w = _w.global_worker_or_none()
    if w is None or w.core.executor is None or w.core.executor.actor is None:
        raise TypeError("exit_actor() was called outside an actor")
    raise ActorExit(0)
