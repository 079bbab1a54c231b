"""The GCS's task-event store (Ray's GcsTaskManager), pure: serialized batches of task records
in, task attempts out. No I/O and no clock: every time comes with its record.

- Lazy: a reporter's batch is kept as the bytes it came in (`add_raw`, no parsing on the
  reporters' path) and decoded and merged only when a query asks (`merge_pending`, run by
  `query` and `summary`); the merged attempts stay as the view until the next batch. The
  oldest pending batch goes unread, its records counted against their jobs, once the newer
  ones alone hold `max_attempts` records (merged, they would evict it anyway) or past
  `max_pending_bytes`.
- One attempt per (task id, attempt number), merging every record of it (the owner's, open
  or final; the executor's while it ran) in any arrival order: each state keeps its first
  time, and the state is the furthest reached (Ray's order; FAILED wins over FINISHED).
- What a task is (name, type, job, actor, trace id) comes with every record and is kept once
  per task id.
- Bounded by `max_attempts`: past it the oldest *finished* attempt goes first, then the oldest
  of any state; every eviction is counted against the attempt's job, as are the events
  reporters could not send (`dropped_by_job`). The last `max_attempts` evicted attempts are
  remembered (at least EVICTED_MEMORY), so late records about them do not bring them back.
- Indexes by job, state and name answer filtered lists without a scan; counts per
  (function, type, state) are kept as attempts change, so a summary costs one pass over the
  functions, not over the attempts.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

from google.protobuf.message import DecodeError

from ember_common import rpc
from ember_common.proto import gcs_task_pb2

TA = gcs_task_pb2.TaskAttempt
STATE_NAMES = {v: k for k, v in TA.State.items()}
TYPE_NAMES = {v: k for k, v in TA.Type.items()}
FINAL = {TA.FINISHED, TA.FAILED}
# Columns a filter may name (Ray's TaskState filterable columns that Ember records).
FILTER_COLUMNS = ("task_id", "attempt_number", "name", "state", "job_id", "actor_id", "type",
                  "func_or_class_name", "node_id", "worker_id", "worker_pid", "error_type")
PREDICATES = ("=", "!=")
Key = tuple[bytes, int]
EVICTED_MEMORY = 100_000  # evicted attempts remembered, at least (~100 bytes each)
ENDED_JOBS_MEMORY = 10_000  # ended jobs remembered, so that their late records close at once
_NONE: Mapping[str, int] = MappingProxyType({})


@dataclass(slots=True)
class TaskInfo:
    """What a task is; shared by its attempts."""
    name: str = ""
    type: int = TA.NORMAL_TASK
    job_id: bytes = b""
    actor_id: bytes = b""
    trace_id: str = ""


@dataclass(slots=True)
class Attempt:
    """One task attempt's merged record."""
    task_id: bytes
    attempt: int
    info: TaskInfo
    seq: int = 0  # arrival order (newest first in lists)
    key: Key = (b"", 0)  # (task_id, attempt), one tuple shared by the store and its indexes
    state: int = TA.NIL
    node_id: str = ""
    worker_id: str = ""
    pid: int = 0
    error_type: str = ""
    error_message: str = ""
    times: list[int] = field(default_factory=lambda: [0] * 6)  # state k's first time at k - 1 (0: not yet)

    @property
    def state_ts_ns(self) -> dict[int, int]:
        """State -> its first time (ns since the epoch), for the states reached."""
        return {s: t for s, t in enumerate(self.times, 1) if t}



class TaskEventStore:
    """Bounded task attempts with per-job drop counts; see the module docstring."""

    def __init__(self, max_attempts: int = 100_000, max_pending_bytes: int = 64 << 20) -> None:
        if max_attempts <= 0 or max_pending_bytes <= 0:
            raise ValueError(f"max_attempts and max_pending_bytes must be positive, got {max_attempts} "
                             f"and {max_pending_bytes}")
        self.max_attempts = max_attempts
        self.attempts: OrderedDict[Key, Attempt] = OrderedDict()  # oldest first
        self.finished: OrderedDict[Key, None] = OrderedDict()  # final attempts, in finishing order
        self.infos: dict[bytes, TaskInfo] = {}
        self.attempts_of: dict[bytes, list[int]] = {}  # task id -> its stored attempt numbers
        self._seq = 0
        self.by_job: dict[bytes, set[Key]] = {}
        self.by_state: dict[int, set[Key]] = {}
        self.by_name: dict[str, set[Key]] = {}
        self.counts: dict[tuple[str, int], dict[int, int]] = {}  # (name, type) -> state -> n
        # Attempts evicted lately: their late events (an executor reports on its own schedule)
        # must not bring them back as nameless attempts (bounded like the store).
        self.evicted: OrderedDict[Key, None] = OrderedDict()
        self.dropped_by_job: dict[str, int] = {}
        self.num_dropped = 0
        # Batches as they came, oldest first: (serialized batch, its records, per job).
        self.max_pending_bytes = max_pending_bytes
        self.pending: deque[tuple[bytes, int, dict[str, int]]] = deque()
        self.pending_bytes = 0
        self.pending_records = 0
        self.bad_batches = 0
        self.last_bad = ""
        # Jobs that ended, oldest first: job id -> (end time in ns, why). Their attempts still
        # open are FAILED then, and as late records bring more of them (Ray's GCS does the same
        # when a job's driver exits).
        self.ended_jobs: OrderedDict[bytes, tuple[int, str]] = OrderedDict()

    def end_job(self, job_id: bytes, time_ns: int, message: str) -> None:
        """The job ended: each of its attempts not final yet is FAILED (WORKER_DIED, `message`)."""
        self.merge_pending()  # (the records that came before the end, merged as they are)
        self.ended_jobs[job_id] = (time_ns, message)
        if len(self.ended_jobs) > ENDED_JOBS_MEMORY:
            self.ended_jobs.popitem(last=False)
        for key in list(self.by_job.get(job_id, ())):
            self._close_ended(self.attempts[key], time_ns, message)

    def _close_ended(self, a: Attempt, time_ns: int, message: str) -> None:
        if a.state in FINAL:
            return
        a.times[TA.FAILED - 1] = a.times[TA.FAILED - 1] or time_ns
        if not a.error_type:
            a.error_type, a.error_message = "WORKER_DIED", message
        self._move(a, TA.FAILED)

    def __len__(self) -> int:
        """Attempts merged (merge_pending first for all)."""
        return len(self.attempts)

    # ------------------------------------------------------------------ ingest
    def add_raw(self, blob: bytes, records_by_job: Mapping[str, int],
                dropped_by_job: Mapping[str, int] = _NONE) -> None:
        """Keeps one reporter's serialized batch as it came (decoded when a query needs it);
        counts the sender's drops. Past the pending budget (module docstring) the oldest
        batches go unread, their records counted per job. InvalidArgument for a negative
        count."""
        for job, k in (*records_by_job.items(), *dropped_by_job.items()):
            if k < 0:
                raise rpc.InvalidArgument(f"task event batch: negative count {k} for job {job!r}")
        n = sum(records_by_job.values())
        for job, k in dropped_by_job.items():
            self._drop(job, k)
        if not blob:
            return
        self.pending.append((blob, n, dict(records_by_job)))
        self.pending_bytes += len(blob)
        self.pending_records += n
        # The oldest goes unread when the newer ones alone fill the store (merged, they would
        # evict it anyway), or past the byte budget.
        while self.pending and (self.pending_records - self.pending[0][1] >= self.max_attempts
                                or self.pending_bytes > self.max_pending_bytes):
            old, k, jobs = self.pending.popleft()
            self.pending_bytes -= len(old)
            self.pending_records -= k
            for job, m in jobs.items():
                self._drop(job, m)

    def merge_pending(self) -> None:
        """Decodes and merges the batches received since the last query (the merged view is
        kept until the next batch). One that does not decode, or whose columns differ in
        length, is dropped whole, its records counted (`bad_batches`, `last_bad`)."""
        while self.pending:
            blob, n, jobs = self.pending.popleft()
            self.pending_bytes -= len(blob)
            self.pending_records -= n
            try:
                self.add(gcs_task_pb2.TaskEventBatch.FromString(blob))
            except (DecodeError, rpc.InvalidArgument) as e:
                self.bad_batches += 1
                self.last_bad = f"{type(e).__name__}: {e}"
                for job, m in jobs.items():
                    self._drop(job, m)

    def stored(self) -> int:
        """Attempts merged plus records waiting to be (the gauge: it decodes nothing)."""
        return len(self.attempts) + self.pending_records

    def add(self, batch: gcs_task_pb2.TaskEventBatch) -> None:
        """Merges one decoded batch of task records; InvalidArgument (nothing merged) when its
        columns differ in length."""
        _check_columns(batch)
        errors = {i: (t, m) for i, t, m in zip(batch.error_index, batch.error_type, batch.error_message,
                                               strict=True)}
        where = list(zip(batch.where_node_id, batch.where_worker_id, batch.where_pid, strict=True))
        if any(w > len(where) or w < 0 for w in batch.where):
            raise rpc.InvalidArgument(f"task event batch: a where index is past its {len(where)} workers")
        ts = list(batch.ts_ns)
        attempts = self.attempts
        n = len(batch.task_id)
        types = batch.type or itertools.repeat(TA.NORMAL_TASK, n)  # (optional columns)
        actors = batch.actor_id or itertools.repeat(b"", n)
        traces = batch.trace_id or (map(_trace_hex, batch.trace_parent) if batch.trace_parent
                                    else itertools.repeat("", n))
        for i, (tid, attempt, w, job, name, typ, actor, trace) in enumerate(zip(
                batch.task_id, batch.attempt, batch.where, batch.job_id, batch.name, types, actors,
                traces, strict=True)):
            times = ts[6 * i:6 * i + 6]
            # The furthest state reached (State values are Ray's order; FAILED beats FINISHED).
            top = (6 if times[5] else 5 if times[4] else 4 if times[3] else 3 if times[2] else
                   2 if times[1] else 1 if times[0] else 0)
            key = (tid, attempt)
            a = attempts.get(key)
            if a is None:  # (most records: a task that lived within one report interval)
                if key in self.evicted:
                    continue
                a = self._new(tid, attempt, TaskInfo(name, typ, job, actor, trace), top, times)
            else:
                info = a.info
                if not info.name and name:  # seen before, nameless: fill it in (indexes follow)
                    mine = [attempts[(tid, k)] for k in self.attempts_of.get(tid, ())]
                    for m in mine:
                        self._unindex(m)
                    info.name, info.type, info.job_id, info.actor_id, info.trace_id = name, typ, job, actor, trace
                    for m in mine:
                        self._index(m)
                got = a.times
                for k, t in enumerate(times):
                    if t and not got[k]:
                        got[k] = t
            if w:
                a.node_id, a.worker_id, a.pid = where[w - 1]
            if errors:
                err = errors.get(i)
                if err is not None and not a.error_type:
                    a.error_type, a.error_message = err
            if top > a.state:
                self._move(a, top)
            if self.ended_jobs and a.state not in FINAL:
                ended = self.ended_jobs.get(a.info.job_id)
                if ended is not None:
                    self._close_ended(a, *ended)

    def _new(self, tid: bytes, attempt: int, described: TaskInfo, state: int,
             times: list[int]) -> Attempt:
        while len(self.attempts) >= self.max_attempts:
            self._evict()
        info = self.infos.get(tid)
        if info is None:
            info = self.infos[tid] = described
        self._seq += 1
        key = (tid, attempt)
        a = Attempt(tid, attempt, info, self._seq, key, state, times=times)
        self.attempts[key] = a
        self.attempts_of.setdefault(tid, []).append(attempt)
        self._index(a)
        if state in FINAL:
            self.finished[key] = None
        return a

    def _evict(self) -> None:
        if self.finished:
            key, _ = self.finished.popitem(last=False)
            a = self.attempts.pop(key)
        else:
            key, a = self.attempts.popitem(last=False)
        self.evicted[key] = None
        if len(self.evicted) > max(self.max_attempts, EVICTED_MEMORY):
            self.evicted.popitem(last=False)
        self._unindex(a)
        left = self.attempts_of[a.task_id]
        left.remove(a.attempt)
        if not left:
            del self.attempts_of[a.task_id]
            del self.infos[a.task_id]
        self._drop(a.info.job_id.hex(), 1)

    def _drop(self, job: str, n: int) -> None:
        self.dropped_by_job[job] = self.dropped_by_job.get(job, 0) + n
        self.num_dropped += n

    def _move(self, a: Attempt, state: int) -> None:
        """A new state: only the state index and the counts change."""
        key = a.key
        old = a.state
        s = self.by_state[old]
        s.discard(key)
        if not s:
            del self.by_state[old]
        self.by_state.setdefault(state, set()).add(key)
        c = self.counts[(a.info.name, a.info.type)]
        c[old] -= 1
        if not c[old]:
            del c[old]
        c[state] = c.get(state, 0) + 1
        a.state = state
        if state in FINAL:
            self.finished[key] = None

    def _index(self, a: Attempt) -> None:
        key = a.key
        self.by_job.setdefault(a.info.job_id, set()).add(key)
        self.by_state.setdefault(a.state, set()).add(key)
        self.by_name.setdefault(a.info.name, set()).add(key)
        c = self.counts.setdefault((a.info.name, a.info.type), {})
        c[a.state] = c.get(a.state, 0) + 1

    def _unindex(self, a: Attempt) -> None:
        key = a.key
        indexes: tuple[tuple[dict[Any, set[Key]], Any], ...] = (
            (self.by_job, a.info.job_id), (self.by_state, a.state), (self.by_name, a.info.name))
        for index, k in indexes:
            s = index[k]
            s.discard(key)
            if not s:
                del index[k]
        c = self.counts[(a.info.name, a.info.type)]
        c[a.state] -= 1
        if not c[a.state]:
            del c[a.state]
            if not c:
                del self.counts[(a.info.name, a.info.type)]

    # ------------------------------------------------------------------ queries
    def query(self, filters: Iterable[tuple[str, str, str]] = (), limit: int = 0) -> tuple[list[Attempt], int]:
        """Attempts matching every (column, predicate, value), newest first, at most limit (0:
        all), and how many matched. InvalidArgument names a bad column or predicate."""
        checked = check_filters(filters)
        if limit < 0:
            raise rpc.InvalidArgument(f"limit must be >= 0, got {limit}")
        self.merge_pending()
        if not checked:  # everything matches: no need to walk past the limit
            newest = reversed(self.attempts.values())
            return list(newest if not limit else itertools.islice(newest, limit)), len(self.attempts)
        out: list[Attempt] = []
        total = 0
        for a in self._candidates(checked):
            if all(_matches(a, c, p, v) for c, p, v in checked):
                total += 1
                if not limit or len(out) < limit:
                    out.append(a)
        return out, total

    def _candidates(self, filters: list[tuple[str, str, str]]) -> Iterator[Attempt]:
        """Newest first; through the smallest index an '=' filter names when there is one."""
        best: set[Key] | None = None
        for column, predicate, value in filters:
            if predicate != "=":
                continue
            keys: set[Key] | None = None
            if column == "job_id":
                keys = self.by_job.get(_unhex(value), set())
            elif column == "state":
                state = TA.State.keys().index(value.upper()) if value.upper() in TA.State.keys() else -1
                keys = self.by_state.get(TA.State.values()[state], set()) if state >= 0 else set()
            elif column in ("name", "func_or_class_name"):
                keys = set().union(*(s for n, s in self.by_name.items() if n.lower() == value.lower()))
            if keys is not None and (best is None or len(keys) < len(best)):
                best = keys
        if best is None:
            yield from reversed(self.attempts.values())
            return
        order = self.attempts
        if len(best) * 8 < len(order):  # a small set: sort it by arrival
            yield from sorted((order[k] for k in best), key=lambda a: a.seq, reverse=True)
            return
        for key, a in reversed(order.items()):  # a large one: walk the store, newest first
            if key in best:
                yield a

    def summary(self, filters: Iterable[tuple[str, str, str]] = ()) -> dict[tuple[str, int], dict[int, int]]:
        """(function, type) -> state -> attempts; from the kept counts when unfiltered."""
        checked = check_filters(filters)
        self.merge_pending()
        if not checked:
            return {k: dict(v) for k, v in self.counts.items()}
        out: dict[tuple[str, int], dict[int, int]] = {}
        for a in self._candidates(checked):
            if all(_matches(a, c, p, v) for c, p, v in checked):
                c = out.setdefault((a.info.name, a.info.type), {})
                c[a.state] = c.get(a.state, 0) + 1
        return out


def _check_columns(b: gcs_task_pb2.TaskEventBatch) -> None:
    n = len(b.task_id)
    for name in ("type", "actor_id", "trace_id", "trace_parent"):  # optional: empty when every record has the default
        if len(getattr(b, name)) not in (0, n):
            raise rpc.InvalidArgument(f"task event batch: {len(getattr(b, name))} {name} for {n} records")
    groups = {"record": ("task_id", "attempt", "where", "job_id", "name"),
              "error": ("error_index", "error_type", "error_message"),
              "where": ("where_node_id", "where_worker_id", "where_pid")}
    for what, names in groups.items():
        sizes = {n: len(getattr(b, n)) for n in names}
        if len(set(sizes.values())) > 1:
            raise rpc.InvalidArgument(f"task event batch: the {what} columns differ in length: {sizes}")
    if len(b.ts_ns) != 6 * len(b.task_id):
        raise rpc.InvalidArgument(f"task event batch: {len(b.ts_ns)} times for {len(b.task_id)} records "
                                  f"(6 each)")


def _trace_hex(trace_parent: bytes) -> str:
    """The trace id (hex) of a record's trace_parent column (25 or 26 bytes, or a 16-byte trace id)."""
    return trace_parent[:16].hex() if len(trace_parent) >= 16 else ""


def check_filters(filters: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The filters, or InvalidArgument naming an unknown column or predicate."""
    out = []
    for column, predicate, value in filters:
        if column not in FILTER_COLUMNS:
            raise rpc.InvalidArgument(f"Given filter column {column!r} is not supported. Enter filters with "
                                      f"one of following columns: {sorted(FILTER_COLUMNS)}")
        if predicate not in PREDICATES:
            raise rpc.InvalidArgument(f"Unsupported filter predicate {predicate!r}: use '=' or '!='")
        out.append((column, predicate, str(value)))
    return out


def _unhex(value: str) -> bytes:
    try:
        return bytes.fromhex(value)
    except ValueError:
        return b"\x00invalid"


def column(a: Attempt, name: str) -> Any:
    """A Ray TaskState column of an attempt (ids in hex, state and type by name)."""
    if name == "task_id":
        return a.task_id.hex()
    if name == "attempt_number":
        return a.attempt
    if name in ("name", "func_or_class_name"):
        return a.info.name
    if name == "state":
        return STATE_NAMES[a.state]
    if name == "job_id":
        return a.info.job_id.hex()
    if name == "actor_id":
        return a.info.actor_id.hex()
    if name == "type":
        return TYPE_NAMES[a.info.type]
    if name == "worker_pid":
        return a.pid
    return getattr(a, name)


def _matches(a: Attempt, col: str, predicate: str, value: str) -> bool:
    have = column(a, col)
    equal = str(have).lower() == value.lower()
    return equal if predicate == "=" else not equal


def to_proto(a: Attempt) -> gcs_task_pb2.TaskAttempt:
    """The attempt as the wire record."""
    return TA(task_id=a.task_id, attempt=a.attempt, state=a.state, name=a.info.name,  # type: ignore[arg-type]
              func_name=a.info.name, type=a.info.type, job_id=a.info.job_id,  # type: ignore[arg-type]
              actor_id=a.info.actor_id, node_id=a.node_id, worker_id=a.worker_id, pid=a.pid,
              error_type=a.error_type, error_message=a.error_message, trace_id=a.info.trace_id,
              state_ts_ns={STATE_NAMES[s]: t for s, t in a.state_ts_ns.items()})
