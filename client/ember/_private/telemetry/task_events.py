"""Task events, reporter side (Ray's TaskEventBuffer): every task's state transitions, one
coalesced record per task, batched to the GCS's TaskInfoGcsService off the hot path.

The owner sees a task's whole life, the worker's part included: `PushTaskReply` carries when
the worker started and ended it. So the owner reports every task it submits, and a worker
reports only what its owner cannot see (an actor creation, whose owner is the GCS; a task still
running at a flush, so a long one shows RUNNING before it ends).

    owner (loop thread)         submitted(entry)            PENDING_ARGS_AVAIL: opens the record
                                record(entry, STATE)        PENDING_NODE_ASSIGNMENT, ...
                                pushed(entry, address)      SUBMITTED_TO_WORKER, at that worker
                                replied(entry, reply)       RUNNING + FINISHED/FAILED from the reply
                                                            (an error's also before a retry)
                                failed(entry, error)        FAILED (cancelled, unschedulable, ...)
                                push_failed(entry, code, m) FAILED, WORKER_DIED (a retry reopens)
                                leased(address, ...)        who the worker at address is
    executor                    started(spec)               the task runs here
                                executed(spec, reply)       it ended

An open record is a list `[spec, attempt, t1..t6, where, error]` (t_k: the time of state k, 0
until reached), with an 11th item, True, while it owes the task's submit span: a submit span
left to task events (tracing.submit_left) goes with the first batch that carries the task's
first record, closed or frozen, and is taken off the record by one `list.pop` (atomic under
the GIL: the owner's loop closing the record and the reporter freezing it cannot both take
it). The owner keeps the record on the task's own `TaskEntry` (its `ev` slot), so a hook is
a flag test, an attribute read and a clock read stored in a slot (the first time of a state
stays): no table entry per task. The reporter finds the open ones through the submitter's
table of tasks in flight (`core.submitter.tasks`, which exists anyway). The final hook closes
the record into WIDTH plain values (ids, name, times, where, error) appended to one flat list
(`_closed`; `list.extend` is atomic, no lock): a closed record holds no reference to the spec,
which is freed with its task, and leaves no object of its own behind for the GC to track
(holding every spec until the next flush freed and faulted memory back in bulk at each flush;
a tuple per closed record gave the GC one more object per task). A daemon thread wakes every
`task_events_report_interval_s`, takes the closed records and frozen copies of the open ones
that moved since the last batch, encodes them as one columnar `TaskEventBatch` (`encode`:
each column is a slice of the flat list, put in with one `extend`) and sends it serialized, as
bytes the GCS keeps unparsed until a query needs it, on the core's own GCS channel (the
thread waits for the call; the core's loop only sends it).
At most `task_events_max_buffer_size` records are held open and as many closed: past that a
task is not recorded and counted against its job; a batch the GCS does not take is counted
too; the counts ride with the next batch. `EMBER_TASK_EVENTS_ENABLED=0` turns every hook into
the flag test alone.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from ember_common import tracing
from ember_common.proto import gcs_task_pb2

if TYPE_CHECKING:
    from ember_common.proto import common_pb2, core_worker_pb2

    from ..owner.task_queue_types import TaskEntry
    from .ports import EventsCore

log = logging.getLogger(__name__)
TA = gcs_task_pb2.TaskAttempt
PENDING_ARGS_AVAIL = TA.PENDING_ARGS_AVAIL
PENDING_NODE_ASSIGNMENT = TA.PENDING_NODE_ASSIGNMENT
SUBMITTED_TO_WORKER = TA.SUBMITTED_TO_WORKER
RUNNING = TA.RUNNING
FINISHED = TA.FINISHED
FAILED = TA.FAILED
# Ray's ErrorType names for the failures an owner sees (the error_type column).
ERROR_TYPES = {"TaskCancelledError": "TASK_CANCELLED", "WorkerCrashedError": "WORKER_DIED",
               "ActorDiedError": "ACTOR_DIED", "RayActorError": "ACTOR_DIED",
               "TaskUnschedulableError": "TASK_UNSCHEDULABLE_ERROR",
               "RuntimeEnvSetupError": "RUNTIME_ENV_SETUP_FAILED", "ObjectLostError": "OBJECT_LOST",
               "OutOfMemoryError": "OUT_OF_MEMORY", "RayTaskError": "TASK_EXECUTION_EXCEPTION"}
# Open record slots: the spec, its attempt, the six state times (slot = state + 1), where, error.
SPEC, ATTEMPT, WHERE, ERROR = 0, 1, 8, 9
HERE = ""  # `where` of a record the executor made: this process
Record = list[Any]
# A closed (or frozen) record: (task id, attempt, job id, name, actor id, type, trace (the spec's
# trace_parent, with a byte of spans left to the record: _FLAGS; or the 16-byte trace id of a
# context in header form; b""), t1..t6, where, error): plain values only, so the spec is freed
# with its task.
# Records are kept and passed flat, WIDTH values each, one after the other (`Flat`).
Closed = tuple[Any, ...]
Flat = list[Any]
C_TASK, C_ATTEMPT, C_JOB, C_NAME, C_ACTOR, C_TYPE, C_TRACE, C_TS, C_WHERE, C_ERROR = 0, 1, 2, 3, 4, 5, 6, 7, 13, 14
WIDTH = 15
_NORMAL, _ACTOR_TASK, _ACTOR_CREATION = TA.NORMAL_TASK, TA.ACTOR_TASK, TA.ACTOR_CREATION_TASK

on = False  # set by start(); every hook tests it first
# The owner's tasks in flight (task id -> entry; the submitter's own table, set by start()):
# an entry's open record is its `ev` (None: none open).
_tracked: dict[bytes, TaskEntry] = {}
_closed: Flat = []  # records that will not change again, flat
_running: dict[int, Record] = {}  # executor: id(spec) -> its record while it runs here
_workers: dict[str, tuple[str, str, int]] = {}  # worker address -> (node id, worker id, pid)
_max_records = 100_000
_max_flat = WIDTH * _max_records  # _closed's bound, in values
_EMPTY: tuple[Any, ...] = (None, -1, 0, 0, 0, 0, 0, 0, None, None)  # a task with no open record
_dropped: dict[str, int] = {}
_time_ns = time.time_ns
# A trace column value of trace_parent + _FLAGS[m] (26 bytes) carries spans for the GCS to export
# (tracing's derived spans): m's bit 0 the task's execute span (the worker left it: PushTaskReply.
# exec_span_left), bit 1 its submit span (tracing.submit_left).
EXEC_LEFT, SUBMIT_LEFT = 1, 2
_FLAGS = [b"", b"\x01", b"\x02", b"\x03"]
SPAN_BYTES = 26  # the length of a trace column value that carries spans
_OWES = 10  # the open record's slot of its submit span, while owed
_resource_json = ""  # this process's resource attributes (JSON), for its submit spans


def _claim(r: Record) -> int:
    """SUBMIT_LEFT when the open record r owes its submit span, taken off it now (0: it owes
    none, or another thread took it)."""
    try:
        return SUBMIT_LEFT if r.pop(_OWES) else 0
    except IndexError:
        return 0


def _submit_here(entry: TaskEntry) -> None:
    """The submit span left to entry's record, recorded here (the record will not reach the GCS)."""
    tracing.record_submit_left(entry.spec, _time_ns())


def _new(entry: TaskEntry) -> Record | None:
    """Opens entry's record (its first hook, or a retry's)."""
    if len(_tracked) > _max_records:
        _drop(entry.spec)
        return None
    r = entry.ev = [entry.spec, -1, 0, 0, 0, 0, 0, 0, None, None]
    return r


def submitted(entry: TaskEntry) -> None:
    """The owner took the task (PENDING_ARGS_AVAIL); entry is in its table of tasks already.
    Its record owes the task's submit span when that was left to it (entry.span_left)."""
    if on:
        if len(_tracked) <= _max_records:
            if entry.span_left:
                entry.ev = [entry.spec, -1, _time_ns(), 0, 0, 0, 0, 0, None, None, True]
            else:
                entry.ev = [entry.spec, -1, _time_ns(), 0, 0, 0, 0, 0, None, None]
        else:
            _drop(entry.spec)
            if entry.span_left:
                _submit_here(entry)
    elif entry.span_left:  # stopped meanwhile
        _submit_here(entry)


def record(entry: TaskEntry, state: int) -> None:
    """The owner moved entry's current attempt to state (first time kept)."""
    if on:
        r = entry.ev or _new(entry)
        if r is not None and not r[state + 1]:
            r[state + 1] = _time_ns()


def pushed(entry: TaskEntry, address: str) -> None:
    """The owner sent the task to the worker at address (SUBMITTED_TO_WORKER)."""
    if on:
        r = entry.ev or _new(entry)
        if r is not None:
            if not r[4]:
                r[4] = _time_ns()
            r[WHERE] = address


def leased(address: str, node_id: str, worker_id: str, pid: int) -> None:
    """The worker at address is worker_id on node_id (a lease grant, an actor's address)."""
    if on:
        _workers[address] = (node_id, worker_id, pid)


def _trace(spec: common_pb2.TaskSpec, left: int = 0) -> bytes:
    """The trace column value of spec's record, with the spans left to it (_FLAGS)."""
    tp = spec.trace_parent
    if len(tp) == 25:
        return tp + _FLAGS[left] if left else tp
    trace = tracing.trace_id_hex(spec)  # (a context in header form: its 16-byte trace id)
    try:
        return bytes.fromhex(trace) if len(trace) == 32 else b""
    except ValueError:  # not a trace id
        return b""


def _freeze(spec: common_pb2.TaskSpec, r: Sequence[Any], running: int, finished: int, failed: int,
            error: tuple[str, str] | None, left: int = 0) -> Closed:
    """The record r of spec's attempt as plain values (the last three times given; left: the
    spans it carries, _FLAGS)."""
    aid = spec.actor_id
    kind = (_ACTOR_CREATION if spec.HasField("actor_creation") else _ACTOR_TASK) if aid else _NORMAL
    trace = _trace(spec, left) if tracing.enabled() else b""
    return (spec.task_id, spec.attempt, spec.job_id, spec.name, aid, kind, trace,
            r[2], r[3], r[4], running, finished, failed, r[8], error)


def _closing(entry: TaskEntry) -> tuple[Sequence[Any], int] | None:
    """Takes entry's open record out (_EMPTY if none is open: events turned on meanwhile, or a
    full buffer), with the spans it carries (_FLAGS: its submit span, if it owed it); None:
    past the bound (a submit span it owed is recorded here)."""
    r: Sequence[Any] = entry.ev or _EMPTY
    entry.ev = None
    left = _claim(r) if len(r) > _OWES else 0  # type: ignore[arg-type]
    if len(_closed) >= _max_flat:
        _drop(entry.spec)
        if left:
            _submit_here(entry)
        return None
    return r, left


def replied(entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> None:
    """The task's reply reached its owner: it ran from reply.start_time_ns to end_time_ns, and
    FINISHED, or FAILED when the user's code raised. A worker's execute span left to this
    record goes with it to the GCS (tracing's derived spans); with this process's task events off, the
    owner records that span itself."""
    if on:
        if reply.is_application_error:
            _replied_error(entry, reply)
            return
        # _closing and _freeze inlined: this runs once per task.
        r = entry.ev or _EMPTY
        entry.ev = None
        spec = entry.spec
        left = _claim(r) if len(r) > _OWES else 0  # type: ignore[arg-type]
        if len(_closed) < _max_flat:
            aid = spec.actor_id
            if tracing.enabled():
                tp = spec.trace_parent
                left |= reply.exec_span_left
                trace = (tp + _FLAGS[left] if left else tp) if len(tp) == 25 else _trace(spec)
            else:
                trace = b""
            _closed.extend((spec.task_id, spec.attempt, spec.job_id, spec.name, aid,
                            (_ACTOR_CREATION if spec.HasField("actor_creation") else _ACTOR_TASK) if aid else _NORMAL,
                            trace, r[2], r[3], r[4], reply.start_time_ns, reply.end_time_ns or _time_ns(), 0,
                            r[8], None))
        else:
            _drop(spec)
            if left:
                _submit_here(entry)
    elif reply.exec_span_left:
        _record_left(entry.spec, reply)


def _record_left(spec: common_pb2.TaskSpec, reply: core_worker_pb2.PushTaskReply) -> None:
    """The execute span a worker left to its owner, recorded here (no task events to carry it:
    the worker's node and id are not known here)."""
    if tracing.enabled():
        tracing.record_exec_from_reply(spec, reply.start_time_ns, reply.end_time_ns or _time_ns())


def _replied_error(entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> None:
    if entry.ev is None:
        return  # recorded already (the push's reply, before a retry could be decided)
    closing = _closing(entry)
    if closing is not None:
        r, left = closing
        _closed.extend(_freeze(entry.spec, r, reply.start_time_ns, 0, reply.end_time_ns or _time_ns(),
                               ("TASK_EXECUTION_EXCEPTION", reply.error_message[:4096]), left))


def _fail(entry: TaskEntry, what: tuple[str, str]) -> None:
    closing = _closing(entry)
    if closing is not None:
        r, left = closing
        _closed.extend(_freeze(entry.spec, r, r[5], 0, _time_ns(), what, left))


def failed(entry: TaskEntry, error: BaseException) -> None:
    """The owner gives the task up with error."""
    if on:
        name = type(error).__name__
        _fail(entry, (ERROR_TYPES.get(name, name), str(error)[:4096]))


def push_failed(entry: TaskEntry, code: str, details: str) -> None:
    """The attempt's worker did not answer (it died, or the stream broke): the attempt FAILED
    (a retry, if any, is the next attempt, with a record of its own)."""
    if on:
        _fail(entry, ("WORKER_DIED", f"the worker running the task did not answer ({code}: {details})"[:4096]))


def started(spec: common_pb2.TaskSpec, now_ns: int = 0) -> None:
    """Executor: the task runs here since now_ns (default: now); reported only while it still
    runs at a flush, or when it is an actor creation: the GCS, its owner, reports nothing."""
    if on:
        _running[id(spec)] = [spec, -1, 0, 0, 0, now_ns or _time_ns(), 0, 0, HERE, None]


def executed(spec: common_pb2.TaskSpec, reply: core_worker_pb2.PushTaskReply) -> None:
    """Executor: the task ended (its owner records how, from the reply; an actor creation's
    record is closed here)."""
    if on:
        r = _running.pop(id(spec), None)
        if r is not None and spec.actor_id and spec.HasField("actor_creation"):
            if len(_closed) >= _max_flat:
                _drop(spec)
            elif reply.is_application_error:
                _closed.extend(_freeze(spec, r, r[5], 0, _time_ns(),
                                       ("TASK_EXECUTION_EXCEPTION", reply.error_message[:4096])))
            else:
                _closed.extend(_freeze(spec, r, r[5], _time_ns(), 0, None))


def _drop(spec: common_pb2.TaskSpec) -> None:
    job = spec.job_id.hex()
    _dropped[job] = _dropped.get(job, 0) + 1


# ---------------------------------------------------------------------- encoding (pure)
def encode(records: Flat, me: tuple[str, str, int], workers: dict[str, tuple[str, str, int]],
           traced: bool = True) -> tuple[gcs_task_pb2.TaskEventBatch, dict[str, int]]:
    """records (closed or frozen, flat: WIDTH values each) as one columnar batch from the
    process me = (node id, worker id, pid), and its records per job (hex). A record's `where`
    is a worker address (looked up in workers), HERE (me) or None (not pushed yet). The actor,
    type and trace columns stay empty when no record has one (traced=False leaves the trace
    column out)."""
    b = gcs_task_pb2.TaskEventBatch(node_id=me[0], worker_id=me[1], pid=me[2])
    if not records:
        return b, {}
    if len(records) % WIDTH:
        raise ValueError(f"task events: {len(records)} values are not whole records of {WIDTH}")
    # Each column is a slice of the flat list (in C) put in with one extend: no Python loop
    # runs per record but the error scan, and that only when a record has one. (This thread
    # shares the GIL with the process's hot path.)
    W = WIDTH
    b.task_id.extend(records[C_TASK::W])
    b.attempt.extend(records[C_ATTEMPT::W])
    b.ts_ns.extend(itertools.chain.from_iterable(zip(*[records[C_TS + k::W] for k in range(6)], strict=True)))
    wheres = records[C_WHERE::W]
    index: dict[Any, int] = {}
    for w in dict.fromkeys(wheres):  # the distinct workers, once each
        found = me if w == HERE else workers.get(w) if w is not None else None
        if found is None:
            index[w] = 0
            continue
        b.where_node_id.append(found[0])
        b.where_worker_id.append(found[1])
        b.where_pid.append(found[2])
        index[w] = len(b.where_pid)
    b.where.extend(map(index.__getitem__, wheres))
    jobs = records[C_JOB::W]
    b.job_id.extend(jobs)
    b.name.extend(records[C_NAME::W])
    types = records[C_TYPE::W]
    if any(types):  # an actor task or creation (NORMAL_TASK is 0)
        b.actor_id.extend(records[C_ACTOR::W])
        b.type.extend(types)
    if traced:
        traces = records[C_TRACE::W]
        if any(traces):  # the bytes as they are (the GCS makes hex of them when a query needs it)
            b.trace_parent.extend(traces)
            if _resource_json and SPAN_BYTES in map(len, traces):  # spans left to records
                b.span_resource = _resource_json
    errors = records[C_ERROR::W]
    if errors.count(None) != len(errors):
        found_errors = [(i, e) for i, e in enumerate(errors) if e is not None]
        b.error_index.extend([i for i, _ in found_errors])
        b.error_type.extend([e[0] for _, e in found_errors])
        b.error_message.extend([e[1] for _, e in found_errors])
    return b, {job.hex(): n for job, n in collections.Counter(jobs).items()}


def spans_in(records: Flat) -> int:
    """How many of the (flat) records carry spans for the GCS to export."""
    return list(map(len, records[C_TRACE::WIDTH])).count(SPAN_BYTES)


def take(sent_open: dict[Any, tuple[Any, ...]]) -> Flat:
    """The records a batch carries now (flat): the closed ones, and frozen copies of the open
    and running ones that moved since they were last sent (sent_open: task id -> the times
    then; updated). Reporter thread only."""
    n = len(_closed)  # whole records: the hooks' extends are atomic
    out = _closed[:n]
    del _closed[:n]  # (what the hooks add meanwhile goes after n and stays)
    now: dict[Any, tuple[Any, ...]] = {}
    for key, entry in _tracked.copy().items():  # dict.copy: atomic against the hot path's hooks
        r = entry.ev
        if r is not None:
            _moved(key, r, sent_open, now, out)
    for ikey, r in _running.copy().items():
        _moved(ikey, r, sent_open, now, out)
    sent_open.clear()
    sent_open.update(now)
    return out


def _moved(key: Any, r: Record, sent_open: dict[Any, tuple[Any, ...]], now: dict[Any, tuple[Any, ...]],
           out: Flat) -> None:
    copy = r[:]
    times = tuple(copy[2:8])
    now[key] = times
    if sent_open.get(key) != times:  # (its first time: always)
        left = _claim(r) if len(copy) > _OWES else 0
        out.extend(_freeze(copy[0], copy, copy[5], copy[6], copy[7], copy[9], left))


# ---------------------------------------------------------------------- the reporter thread
class _Reporter:
    """Sends the records to the GCS every interval (and once more at stop)."""

    def __init__(self, core: EventsCore, interval_s: float) -> None:
        self.core = core
        self.interval_s = interval_s
        self.timeout_s = 10.0  # for one batch (2 s for the last one, at stop)
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # one flush at a time (the thread's, or stop()'s last one)
        self.sent_records = 0
        self.sent_open: dict[Any, tuple[Any, ...]] = {}
        self.thread = threading.Thread(target=self._run, name="ember-task-events", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.flush()

    def flush(self) -> None:
        """Sends what is recorded now (nothing when nothing moved)."""
        with self.lock:
            records = take(self.sent_open)
            if not records and not _dropped:
                return
            dropped = dict(_dropped)
            for job, k in dropped.items():  # only what was read: drops counted meanwhile stay
                left = _dropped.get(job, 0) - k
                if left > 0:
                    _dropped[job] = left
                else:
                    _dropped.pop(job, None)
            core = self.core
            batch, by_job = encode(records, (core.node_id, core.worker_id, os.getpid()), _workers)
            data = batch.SerializeToString()
            try:
                # On the core's own GCS channel, from this thread (the loop only sends it).
                spans = spans_in(records)
                self.core.run(lambda: core.gcs.add_task_event_data(data, by_job, dropped, spans=spans,
                                                                   timeout_s=self.timeout_s),
                              timeout=self.timeout_s + 1)
                self.sent_records += len(records) // WIDTH
            except Exception as e:  # the GCS is away: these records are lost, and counted
                log.debug("task events: batch of %d not sent (%s)", len(records) // WIDTH, e)
                for j, k in (*by_job.items(), *dropped.items()):
                    _dropped[j] = _dropped.get(j, 0) + k

    def stop(self) -> None:
        """Stops the thread after one last flush."""
        self.stopping.set()
        self.thread.join(timeout=2)
        self.timeout_s = 2.0  # exiting: one short try
        self.flush()


_reporter: _Reporter | None = None


def start(core: EventsCore) -> None:
    """Turns the hooks on for this process (unless EMBER_TASK_EVENTS_ENABLED=0) and starts the
    reporter thread."""
    global on, _reporter, _max_records, _max_flat, _tracked, _resource_json
    cfg = core.config
    if not cfg.task_events_enabled or _reporter is not None:
        return
    if cfg.task_events_report_interval_s <= 0 or cfg.task_events_max_buffer_size <= 0:
        raise ValueError("EMBER_TASK_EVENTS_REPORT_INTERVAL_S and EMBER_TASK_EVENTS_MAX_BUFFER_SIZE "
                         "must be positive")
    _max_records = cfg.task_events_max_buffer_size
    _max_flat = WIDTH * _max_records
    _tracked = core.submitter.tasks
    _reporter = _Reporter(core, cfg.task_events_report_interval_s)
    on = True
    if tracing.enabled():  # may this process leave execute and submit spans to the GCS?
        # Asked before the first task runs, so that a worker's spans do not depend on a race
        # (one GCS call at start, with tracing on only).
        import json

        _resource_json = json.dumps({k: list(v) if isinstance(v, tuple) else v
                                     for k, v in tracing.resource_attributes().items()})
        core.run(lambda: _ask_gcs_for_exec_spans(core), timeout=15)


async def _ask_gcs_for_exec_spans(core: EventsCore) -> None:
    """Leaves this process's spans to task events (tracing.leave_spans_to_gcs) when the GCS
    exports spans from them, to where this process would send them; until then, and if the GCS
    cannot say, this process records every span itself."""
    try:
        value = await core.gcs.internal_kv_get(tracing.DERIVED_KV_NAMESPACE, tracing.DERIVED_KV_KEY,
                                               timeout_s=10)
    except Exception as e:
        log.debug("tracing: cannot ask the GCS whether it exports spans (%s)", e)
        return
    tracing.leave_spans_to_gcs(value if on else None)


def stop() -> None:
    """Sends what is left and stops the reporter (the core worker's shutdown)."""
    global on, _reporter
    r = _reporter
    if r is None:
        return
    _reporter = None
    on = False
    tracing.keep_spans()  # this process records every span itself from now on
    try:
        r.stop()
    except Exception as e:  # the GCS is gone (the cluster is stopping): nothing more to do
        log.debug("task events: last batch not sent (%s)", e)


def flush() -> None:
    """Sends what is recorded now (tests; `ember list tasks` right after the work)."""
    if _reporter is not None:
        _reporter.flush()


def stats() -> dict[str, int]:
    """Records open, closed and waiting, sent so far, and dropped but not yet reported."""
    r = _reporter
    return {"buffered": len(_closed) // WIDTH,
            "open": sum(1 for e in _tracked.copy().values() if e.ev is not None) + len(_running),
            "sent": r.sent_records if r else 0, "dropped_unreported": sum(_dropped.values())}
