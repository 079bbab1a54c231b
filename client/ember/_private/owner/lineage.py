"""Lineage: how the owner rebuilds a lost task return, as a pure policy (Ray's object fault
tolerance).

The owner of a task's returns keeps the task's spec (its *lineage*) while anything may still
need the returns: when every copy of a return in shared memory is lost with its node, `get`
runs the task again (`plan`), first rebuilding the arguments it owns that were lost too (each
one's own lineage, recursively). What it keeps and for how long:

- only tasks with a return in shared memory are recorded (small returns live inline in the
  owner's memory and go only with the owner); streaming generators and actor calls are not;
- an entry lives while one of its returns is referenced (`release` at each return's last
  reference) *or* while the entry of a task that took one of its returns as an argument lives
  (`lineage_refs`, Ray's lineage ref count): an intermediate object whose value was freed can
  still be rebuilt for a later task that needs it;
- the specs' bytes are bounded (`max_bytes`, Ray's `max_lineage_bytes`): past it the oldest
  specs are evicted and their returns, once lost, fail with
  `ObjectReconstructionFailedLineageEvictedError`;
- a re-execution costs one of the task's `max_retries`, the budget its worker crashes already
  drew from (-1: forever); with none left, `ObjectReconstructionFailedMaxAttemptsExceededError`;
- `put()` objects have no lineage: `ObjectLostError` saying so.

Pure: no I/O; one lock, because returns are released on whichever thread drops the last
`ObjectRef` while the core loop records and plans. reconstruction.py carries the plans out.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Callable, NamedTuple

from ember import exceptions as exc
from ember_common.proto import common_pb2

TASK_ID_LEN = 16  # ember_common.ids: an object id is its task id + a 4-byte return index
PUT_INDEX = b"\x00\x00\x00\x00"
# Ray's default max_lineage_bytes (1 GiB).
DEFAULT_MAX_LINEAGE_BYTES = 1024 ** 3
ENV_VAR = "EMBER_MAX_LINEAGE_BYTES"


class Resubmit(NamedTuple):
    """Run the task again: a copy of its spec (attempt counted), its queue key, its
    retry_exceptions allowlist and the retries left after this one."""

    task_id: bytes
    spec: common_pb2.TaskSpec
    key: Any
    allowlist: Any
    retries_left: int


class InFlight(NamedTuple):
    """The task is already being run again: wait for its returns."""

    task_id: bytes


class _Entry:
    __slots__ = ("spec", "key", "allowlist", "retries_left", "name", "max_retries", "live",
                 "deps", "lineage_refs", "size", "evicted")

    def __init__(self, spec: common_pb2.TaskSpec | None, key: Any, allowlist: Any,
                 retries_left: int, live: set[bytes], deps: list[bytes], size: int) -> None:
        self.spec = spec
        self.key = key
        self.allowlist = allowlist
        self.retries_left = retries_left
        self.name = spec.name if spec is not None else ""
        self.max_retries = spec.max_retries if spec is not None else 0
        self.live = live  # returns still referenced
        self.deps = deps  # task ids of recorded entries whose returns are arguments here
        self.lineage_refs = 0  # live entries that take one of our returns as an argument
        self.size = size
        self.evicted = False


def task_of(oid: bytes) -> bytes:
    """The id of the task that made oid."""
    return oid[:TASK_ID_LEN]


def is_put(oid: bytes) -> bool:
    """True for an object made by put() (return index 0)."""
    return oid[TASK_ID_LEN:] == PUT_INDEX


class Lineage:
    """The lineage one owner keeps (see the module docstring)."""

    def __init__(self, owner_worker_id: str,
                 max_bytes: int = DEFAULT_MAX_LINEAGE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_lineage_bytes must be >= 0, got {max_bytes}")
        self.owner = owner_worker_id
        self.max_bytes = max_bytes
        # Reentrant: an ObjectRef collected while this thread holds it releases through here.
        self._lock = threading.RLock()
        self._entries: dict[bytes, _Entry] = {}  # task id -> entry
        self._specs: collections.OrderedDict[bytes, None] = collections.OrderedDict()  # eviction order
        self._pending: set[bytes] = set()  # task ids being run again
        self.bytes = 0
        self.reconstructions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._entries

    # ------------------------------------------------------------------ recording
    def record(self, spec: common_pb2.TaskSpec, key: Any, allowlist: Any,
               retries_left: int | None, referenced: Callable[[bytes], bool]) -> bool:
        """A task finished with a return in shared memory: keep what rebuilding it needs.
        A task run again replaces its spec (new argument locations) and its retry budget.
        Returns whether the task is recorded (False when none of its returns is referenced)."""
        left = retries_left if retries_left is not None else 0
        tid = spec.task_id
        with self._lock:
            e = self._entries.get(tid)
            if e is not None:  # run again: new spec, what is left of the budget
                self._pending.discard(tid)
                e.retries_left = left
                if e.spec is not None:
                    self._set_spec(tid, e, spec if left != 0 else None)
                return True
            live = {r for r in spec.return_ids if referenced(r)}
            if not live:
                return False
            deps = []
            for arg in spec.args:
                if arg.HasField("ref") and arg.ref.owner.worker_id == self.owner:
                    d = self._entries.get(task_of(arg.ref.object_id))
                    if d is not None and task_of(arg.ref.object_id) not in deps:
                        d.lineage_refs += 1
                        deps.append(task_of(arg.ref.object_id))
            e = self._entries[tid] = _Entry(None, key, allowlist, left, live, deps, 0)
            e.name, e.max_retries = spec.name, spec.max_retries
            if left != 0:  # with no retry left only the reason is kept
                self._set_spec(tid, e, spec)
            return True

    def _set_spec(self, tid: bytes, e: _Entry, spec: common_pb2.TaskSpec | None) -> None:
        self.bytes -= e.size
        self._specs.pop(tid, None)
        e.spec, e.size = spec, 0
        if spec is not None:
            e.size = spec.ByteSize()
            self.bytes += e.size
            self._specs[tid] = None
        while self.bytes > self.max_bytes and self._specs:
            old, _ = self._specs.popitem(last=False)
            victim = self._entries[old]
            self.bytes -= victim.size
            victim.spec, victim.size, victim.evicted = None, 0, True
            self.evictions += 1

    def release(self, oid: bytes) -> None:
        """oid's last reference is gone here (any thread). Its entry goes once no return of it
        is referenced and no kept entry depends on it, and so, in turn, may its arguments'."""
        if not self._entries:
            return
        with self._lock:
            e = self._entries.get(task_of(oid))
            if e is None:
                return
            e.live.discard(oid)
            self._drop_unneeded(task_of(oid))

    def _drop_unneeded(self, tid: bytes) -> None:
        todo = [tid]
        while todo:
            t = todo.pop()
            e = self._entries.get(t)
            if e is None or e.live or e.lineage_refs > 0 or t in self._pending:
                continue
            del self._entries[t]
            self._specs.pop(t, None)
            self.bytes -= e.size
            for d in e.deps:
                dep = self._entries.get(d)
                if dep is not None:
                    dep.lineage_refs -= 1
                    todo.append(d)

    # ------------------------------------------------------------------ reconstruction
    def plan(self, oid: bytes) -> Resubmit | InFlight:
        """Every copy of the owned object oid is lost: run its task again (a Resubmit, which
        draws one retry and marks the task in flight until `finished`), wait for the run
        already going on (InFlight), or raise why it cannot be rebuilt (an ObjectLostError)."""
        h = oid.hex()
        if is_put(oid):
            raise exc.ObjectLostError(h, f"Object {h} is lost: it was created by put(), which "
                                      "records no lineage, so it cannot be reconstructed")
        tid = task_of(oid)
        with self._lock:
            if tid in self._pending:
                return InFlight(tid)
            e = self._entries.get(tid)
            if e is None:
                raise exc.ObjectReconstructionFailedError(
                    h, f"Object {h} is lost and cannot be reconstructed: its owner keeps no "
                    "lineage for it (only the returns of normal tasks stored in shared memory "
                    "are kept, while they are referenced)")
            if e.evicted:
                raise exc.ObjectReconstructionFailedLineageEvictedError(
                    h, f"Object {h} (a return of {e.name}()) is lost and cannot be "
                    f"reconstructed: its lineage was evicted to keep the owner's lineage under "
                    f"{self.max_bytes} bytes (raise {ENV_VAR})")
            if e.retries_left == 0 or e.spec is None:
                raise exc.ObjectReconstructionFailedMaxAttemptsExceededError(
                    h, f"Object {h} (a return of {e.name}()) is lost and cannot be "
                    f"reconstructed: the task has no retries left (max_retries="
                    f"{e.max_retries}); every run of it, crashed or reconstructing, draws on them")
            if e.retries_left > 0:
                e.retries_left -= 1
            spec = common_pb2.TaskSpec()
            spec.CopyFrom(e.spec)
            spec.attempt += 1
            self._pending.add(tid)
            self.reconstructions += 1
            return Resubmit(tid, spec, e.key, e.allowlist, e.retries_left)

    def finished(self, task_id: bytes) -> None:
        """A run started by `plan` ended (its returns are stored: values or errors)."""
        with self._lock:
            self._pending.discard(task_id)
            self._drop_unneeded(task_id)

    def in_flight(self, task_id: bytes) -> bool:
        """The task is being run again."""
        return task_id in self._pending

    def stats(self) -> dict[str, int]:
        """Entries, spec bytes, reconstructions started and specs evicted so far."""
        return {"entries": len(self._entries), "bytes": self.bytes,
                "reconstructions": self.reconstructions, "evictions": self.evictions}
