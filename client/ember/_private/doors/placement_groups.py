"""The core's public door for placement groups (used by `ember.util.placement_group`).

Libraries must not reach `global_worker().core` nor GCS protos; this module does it for them
and speaks plain Python: ids are bytes, groups are Ray's `placement_group_table` dicts. Every
call goes through the core worker's typed GcsClient (which retries while the GCS restarts).
The group's job is the caller's job (a task's, or the driver's): a non-detached group is
removed by the GCS when that job ends.

Pipelining: creating an unnamed group and removing a group this process created do not wait
for the GCS's reply (the id is chosen here and both RPCs are idempotent); they are queued on
the core's loop and sent in batches (one CreatePlacementGroups / RemovePlacementGroups for all
the calls made while the previous batch was in flight), and every later call of this process
about that group (wait, ready, table, remove) first waits for its batch, so the process sees
its own operations in order. A failed creation is raised by those later calls.
`ember.shutdown()` waits for the operations still in flight (`flush`). Named groups are
created synchronously, so a taken name raises at once, as Ray.

A wait also asks which of this process's other groups (not seen ready yet) are CREATED; a wait
for one of those within the next second answers without a call (once; a removal by this
process forgets it). So waiting for many groups in turn costs one call per GCS round, not one
per group.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from ember import exceptions as exc
from ember_common import gcs_pg_client, ids, rpc
from ember_common.proto import common_pb2

from ..objects.object_ref import ObjectRef
from ..objects.serialization import serialize

PG = common_pb2.PlacementGroupInfo
# One WaitPlacementGroupUntilReady call lasts at most this long; ready() waits in such steps.
_WAIT_STEP_S = 30.0
# A wait also asks about (at most this many of) this process's other groups not seen ready;
# a later wait for one the reply saw CREATED less than _SEEN_FRESH_S ago answers at once.
_REPORT_MAX = 256
_SEEN_FRESH_S = 1.0
_SCHEDULING_STATE = {PG.PENDING: "NO_RESOURCES", PG.PREPARED: "SCHEDULING",
                     PG.CREATED: "FINISHED", PG.REMOVED: "REMOVED",
                     PG.RESCHEDULING: "RESCHEDULING"}


def _worker() -> Any:
    from ..worker import global_worker

    return global_worker()


def _current_spec(core: Any) -> common_pb2.TaskSpec | None:
    """The spec that put this process where it is: the actor's creation, else the running task."""
    ex = core.executor
    if ex is None:
        return None
    spec: common_pb2.TaskSpec | None = ex.actor_spec if ex.actor_spec is not None else ex.running
    return spec


def current() -> tuple[bytes, bool]:
    """(group id, captures child tasks) of the current task or actor; (b"", False) outside one."""
    from ..worker import global_worker_or_none

    w = global_worker_or_none()
    spec = _current_spec(w.core) if w is not None else None
    if spec is None or not spec.placement_group_id:
        return b"", False
    return spec.placement_group_id, spec.placement_group_capture_child_tasks


class _InFlight:
    """State of one core worker (loop thread only, but `mine`): the create/remove calls not
    answered yet, by group, queued and sent in batches (one CreatePlacementGroups and one
    RemovePlacementGroups per batch, in order; a batch is sent while the previous one is in
    flight, so calls made meanwhile share the next); the groups this process created (their
    removal may be pipelined); which of them a wait's reply saw CREATED."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.ops: dict[bytes, asyncio.Future[None]] = {}
        self.mine: set[bytes] = set()
        self.queue: list[tuple[bytes, common_pb2.PlacementGroupInfo | None, asyncio.Future[None]]] = []
        self.flushing = False
        self.unready: dict[bytes, None] = {}  # created here, not seen CREATED yet (in order)
        self.seen_ready: dict[bytes, float] = {}  # -> when a wait's reply saw it CREATED

    def enqueue(self, pg_id: bytes, spec: common_pb2.PlacementGroupInfo | None) -> None:
        """Loop thread: queues a creation (spec) or a removal (None) of the group."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.append((pg_id, spec, fut))
        self.ops[pg_id] = fut

        def done(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is None and self.ops.get(pg_id) is f:
                del self.ops[pg_id]  # a failure stays: later calls raise it

        fut.add_done_callback(done)
        if spec is None:
            self.unready.pop(pg_id, None)
            self.seen_ready.pop(pg_id, None)
        else:
            self.unready[pg_id] = None
        if not self.flushing:
            self.flushing = True
            asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while self.queue:
                batch, self.queue = self.queue, []
                await self._send([(i, s, f) for i, s, f in batch if s is not None], create=True)
                await self._send([(i, s, f) for i, s, f in batch if s is None], create=False)
        finally:
            self.flushing = False

    async def _send(self, items: list[tuple[bytes, Any, asyncio.Future[None]]], create: bool) -> None:
        if not items:
            return
        gcs = self.core.gcs
        errors: list[str | Exception]
        try:
            if create:
                errors = list(await gcs.create_placement_groups([s for _, s, _ in items], timeout_s=30))
            else:
                await gcs.remove_placement_groups([i for i, _, _ in items], timeout_s=30)
                errors = [""] * len(items)
            if len(errors) != len(items):
                raise rpc.Internal(f"the GCS answered {len(errors)} of {len(items)} placement groups")
        except rpc.ServiceError as e:
            errors = [e] * len(items)
        for (pg_id, _, f), err in zip(items, errors, strict=True):
            if f.done():
                continue
            if not err:
                f.set_result(None)
                continue
            self.unready.pop(pg_id, None)
            f.set_exception(err if isinstance(err, Exception) else rpc.InvalidArgument(err))

    async def settled(self, pg_id: bytes | None) -> None:
        """Waits for the group's (None: every group's) operations; raises a failed creation."""
        futs = list(self.ops.values()) if pg_id is None else [self.ops.get(pg_id)]
        for f in futs:
            if f is not None:
                try:
                    await asyncio.shield(f)
                except (rpc.AlreadyExists, rpc.InvalidArgument) as e:
                    if pg_id is not None:
                        raise ValueError(f"placement group {pg_id.hex()} could not be created: {e}") from None

    def take_seen(self, pg_id: bytes) -> bool:
        """Whether a recent wait's reply (within _SEEN_FRESH_S) saw the group CREATED; once."""
        t = self.seen_ready.pop(pg_id, None)
        return t is not None and time.monotonic() - t < _SEEN_FRESH_S

    def others(self, pg_id: bytes) -> list[bytes]:
        """This process's other groups not seen ready yet (at most _REPORT_MAX): a wait asks
        about them too."""
        return [i for i in itertools.islice(self.unready, _REPORT_MAX + 1) if i != pg_id][:_REPORT_MAX]

    def saw(self, ready_ids: list[bytes]) -> None:
        """A wait's reply saw these groups CREATED."""
        now = time.monotonic()
        for i in ready_ids:
            if i in self.unready:  # still ours and not removed since
                del self.unready[i]
                self.seen_ready[i] = now
        if len(self.seen_ready) > 4 * _REPORT_MAX:
            self.seen_ready = {i: t for i, t in self.seen_ready.items() if now - t < _SEEN_FRESH_S}


_inflight: _InFlight | None = None


def _state(core: Any) -> _InFlight:
    global _inflight
    if _inflight is None or _inflight.core is not core:
        _inflight = _InFlight(core)
        from ..worker import global_worker_or_none

        w = global_worker_or_none()
        if w is not None and w.core is core:
            w.before_shutdown.append(lambda: flush(core))
    return _inflight


def flush(core: Any, timeout_s: float = 10.0) -> None:
    """Waits (up to timeout_s) for the create/remove RPCs still in flight (ember.shutdown)."""
    st = _inflight
    if st is None or st.core is not core or not st.ops:
        return

    async def wait_all() -> None:
        await asyncio.wait(list(st.ops.values()), timeout=timeout_s)

    core.run(wait_all, timeout=timeout_s + 1)


def create(bundles: list[dict[str, float]], strategy: str, name: str, detached: bool,
           label_selectors: list[dict[str, str]] | None = None) -> bytes:
    """Creates a group (PENDING; the GCS places it) in the caller's job and namespace; its id.
    label_selectors: one per bundle (Ray's bundle_label_selector). ValueError for a name
    already taken in the namespace or bundles the GCS refuses."""
    w = _worker()
    core = w.core
    spec = _current_spec(core)
    job_id = spec.job_id if spec is not None else core.job_id
    group = gcs_pg_client.spec(bundles, strategy, name=name, namespace=w.current_namespace(),
                               job_id=job_id, detached=detached, label_selectors=label_selectors)
    pg_id = group.placement_group_id
    st = _state(core)
    if name:
        try:
            core.gcs_call(lambda: core.gcs.create_placement_group(group, timeout_s=30))
        except (rpc.AlreadyExists, rpc.InvalidArgument) as e:
            raise ValueError(str(e)) from None
    else:
        core.post(st.enqueue, pg_id, group)
    st.mine.add(pg_id)  # (a set's add/contains are atomic; no loop hop needed)
    return pg_id


def remove(pg_id: bytes) -> None:
    """Removes a group: its bundles are released, the workers leased from them killed.
    ValueError when the GCS does not know it."""
    core = _worker().core
    st = _state(core)

    if pg_id in st.mine:  # created by this process: pipelined after its creation
        core.post(st.enqueue, pg_id, None)
        return
    try:
        core.gcs_call(lambda: core.gcs.remove_placement_group(pg_id, timeout_s=30))
    except rpc.NotFound:
        raise ValueError(f"placement group {pg_id.hex()} does not exist") from None


def table(pg_id: bytes | None = None) -> dict[str, Any]:
    """One group's table entry (Ray's dict), or every group's keyed by hex id."""
    core = _worker().core
    core.run(lambda: _state(core).settled(pg_id))
    if pg_id is not None:
        try:
            g = core.gcs_call(lambda: core.gcs.get_placement_group(pg_id, timeout_s=30))
        except rpc.NotFound:
            return {}
        return to_dict(g)
    groups = core.gcs_call(lambda: core.gcs.get_all_placement_groups(timeout_s=30))
    return {g.placement_group_id.hex(): to_dict(g) for g in groups}


def get_named(name: str, namespace: str | None) -> dict[str, Any]:
    """The live group with that name in namespace (default: the caller's). ValueError if none."""
    w = _worker()
    core = w.core
    ns = w.current_namespace() if namespace is None else namespace
    try:
        g = core.gcs_call(lambda: core.gcs.get_named_placement_group(name, ns, timeout_s=30))
    except rpc.NotFound:
        raise ValueError(f"Failed to look up placement group with name: {name} "
                         f"(namespace {ns!r})") from None
    return to_dict(g)


def wait(pg_id: bytes, timeout_s: float) -> bool:
    """True once the group is CREATED within timeout_s; False on timeout or removal."""
    core = _worker().core
    st = _state(core)

    async def settled_then_wait() -> bool:
        await st.settled(pg_id)
        if st.take_seen(pg_id):
            return True
        ready, _, seen = await core.gcs.wait_placement_group_and_report(pg_id, timeout_s, st.others(pg_id))
        st.saw(seen)
        if ready:
            st.unready.pop(pg_id, None)
        return bool(ready)

    try:
        ready = core.run(settled_then_wait)
    except rpc.NotFound:
        raise ValueError(f"placement group {pg_id.hex()} does not exist") from None
    return bool(ready)


def ready_ref(pg_id: bytes, value: Any) -> ObjectRef:
    """An ObjectRef owned by this process that resolves to value once the group is CREATED
    (an error if it is removed first)."""
    core = _worker().core
    oid = ids.object_id_for_return(ids.new_task_id(), 1)
    core.register_owned(oid)
    ref = ObjectRef(oid, core.address, core)
    payload = serialize(value).to_proto()
    st = _state(core)

    async def watch() -> None:
        try:
            await st.settled(pg_id)
        except ValueError as e:
            core.set_error(oid, exc.RaySystemError(str(e)))
            return
        if st.take_seen(pg_id):
            core.set_object(common_pb2.ReturnObject(object_id=oid, value=payload))
            return
        while True:
            try:
                ready, g, seen = await core.gcs.wait_placement_group_and_report(
                    pg_id, _WAIT_STEP_S, st.others(pg_id))
                st.saw(seen)
            except rpc.NotFound:
                core.set_error(oid, exc.RaySystemError(f"placement group {pg_id.hex()} does not exist"))
                return
            except rpc.ServiceError:
                if core.is_shutdown:
                    return
                await asyncio.sleep(1.0)
                continue
            if ready:
                st.unready.pop(pg_id, None)
                core.set_object(common_pb2.ReturnObject(object_id=oid, value=payload))
                return
            if g.state == PG.REMOVED:
                core.set_error(oid, exc.RaySystemError(
                    f"placement group {pg_id.hex()} was removed before it was ready"
                    + (f": {g.state_message}" if g.state_message else "")))
                return

    core.post(lambda: asyncio.ensure_future(watch()))
    return ref


def to_dict(g: common_pb2.PlacementGroupInfo) -> dict[str, Any]:
    """Ray's placement_group_table entry for a group (plus namespace, job, lifetime and why a
    group waits)."""
    return {
        "placement_group_id": g.placement_group_id.hex(),
        "name": g.name,
        "namespace": g.namespace,
        "job_id": g.job_id.hex(),
        "bundles": {b.index: dict(b.resources) for b in g.bundles},
        "bundles_to_node_id": {b.index: b.node_id for b in g.bundles if b.node_id},
        "strategy": PG.Strategy.Name(g.strategy),
        "state": PG.State.Name(g.state),
        "is_detached": g.detached,
        "state_message": g.state_message,
        "stats": {"scheduling_state": _SCHEDULING_STATE.get(g.state, "UNKNOWN"),
                  "create_time": g.create_time,
                  "placement_version": g.placement_version},
    }
