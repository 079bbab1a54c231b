"""Task events, reporter side (Ray's TaskEventBuffer): every task's state transitions, one
coalesced record per task, batched to the GCS's TaskInfoGcsService off the hot path.

The owner sees a task's whole life, the worker's part included: `PushTaskReply` carries when
the worker started and ended it. So the owner reports every task it submits, and a worker
reports only what its owner cannot see (an actor creation, whose owner is the GCS; a task still
running at a flush, so a long one shows RUNNING before it ends).

    owner (loop thread)         submitted(spec)             PENDING_ARGS_AVAIL: opens the record
                                record(spec, STATE)         PENDING_NODE_ASSIGNMENT, ...
                                pushed(spec, address)       SUBMITTED_TO_WORKER, at that worker
                                replied(spec, reply)        RUNNING + FINISHED/FAILED from the reply
                                                            (an error's also before a retry)
                                failed(spec, error)         FAILED (cancelled, unschedulable, ...)
                                push_failed(spec, code, m)  FAILED, WORKER_DIED (a retry reopens)
                                leased(address, ...)        who the worker at address is
    executor                    started(spec)               the task runs here
                                executed(spec, reply)       it ended

An open record is a list `[spec, attempt, t1..t6, where, error]` (t_k: the time of state k, 0
until reached). The owner keeps its open records by spec; a hook is a flag test, a dict
look-up and a clock read stored in a slot (the first time of a state stays). The final hook
closes the record into a tuple of plain values (`Closed`: ids, name, times, where, error) on a
deque (atomic, no lock): a closed record holds no reference to the spec, which is freed with
its task. (Holding every spec until the next flush, ~10,000 a second, cost the owner a page
fault every ~2.5 tasks and more CPU per task than the hooks themselves: docs/perf.md.) A
daemon thread wakes every `task_events_report_interval_s`, takes the closed records and
frozen copies of the open ones that moved since the last batch, encodes them as one columnar
`TaskEventBatch` (`encode`: parallel lists filled with `extend`, no message per record) and
sends it serialized, as bytes the GCS keeps unparsed until a query needs it, with a blocking
call outside the core's loop.
At most `task_events_max_buffer_size` records are held open and as many closed: past that a
task is not recorded and counted against its job; a batch the GCS does not take is counted
too; the counts ride with the next batch. `EMBER_TASK_EVENTS_ENABLED=0` turns every hook into
the flag test alone.
"""
from __future__ import annotations

import collections
import itertools
import logging
import operator
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from ember_common import tracing
from ember_common.proto import gcs_task_pb2

if TYPE_CHECKING:
    from ember_common.proto import common_pb2, core_worker_pb2

    from .core_worker import CoreWorker

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
# A closed (or frozen) record: (task id, attempt, job id, name, actor id, type, trace id,
# t1..t6, where, error): plain values only, so the spec is freed with its task.
Closed = tuple[Any, ...]
C_TASK, C_ATTEMPT, C_JOB, C_NAME, C_ACTOR, C_TYPE, C_TRACE, C_TS, C_WHERE, C_ERROR = 0, 1, 2, 3, 4, 5, 6, 7, 13, 14
_NORMAL, _ACTOR_TASK, _ACTOR_CREATION = TA.NORMAL_TASK, TA.ACTOR_TASK, TA.ACTOR_CREATION_TASK

on = False  # set by start(); every hook tests it first
# Open records are found by id(spec): the owner passes the same spec object to every hook of a
# task (the record holds it, so the id stays its own), and an id costs less than reading the
# task id out of the message.
_open: dict[int, Record] = {}  # owner: id(spec) -> its current attempt's record while in flight
_closed: collections.deque[Closed] = collections.deque()  # records that will not change again
_running: dict[int, Record] = {}  # executor: id(spec) -> its record while it runs here
_workers: dict[str, tuple[str, str, int]] = {}  # worker address -> (node id, worker id, pid)
_max_records = 100_000
_EMPTY: tuple[Any, ...] = (None, -1, 0, 0, 0, 0, 0, 0, None, None)  # a task with no open record
_dropped: dict[str, int] = {}
_time_ns = time.time_ns


def _new(spec: common_pb2.TaskSpec) -> Record | None:
    """Opens spec's record (its first hook, or a retry's)."""
    if len(_open) >= _max_records:
        _drop(spec)
        return None
    r = _open[id(spec)] = [spec, -1, 0, 0, 0, 0, 0, 0, None, None]
    return r


def submitted(spec: common_pb2.TaskSpec) -> None:
    """The owner took the task (PENDING_ARGS_AVAIL)."""
    if on:
        if len(_open) < _max_records:
            _open[id(spec)] = [spec, -1, _time_ns(), 0, 0, 0, 0, 0, None, None]
        else:
            _drop(spec)


def record(spec: common_pb2.TaskSpec, state: int) -> None:
    """The owner moved spec's current attempt to state (first time kept)."""
    if on:
        r = _open.get(id(spec)) or _new(spec)
        if r is not None and not r[state + 1]:
            r[state + 1] = _time_ns()


def pushed(spec: common_pb2.TaskSpec, address: str) -> None:
    """The owner sent the task to the worker at address (SUBMITTED_TO_WORKER)."""
    if on:
        r = _open.get(id(spec)) or _new(spec)
        if r is not None:
            if not r[4]:
                r[4] = _time_ns()
            r[WHERE] = address


def leased(address: str, node_id: str, worker_id: str, pid: int) -> None:
    """The worker at address is worker_id on node_id (a lease grant, an actor's address)."""
    if on:
        _workers[address] = (node_id, worker_id, pid)


def _freeze(spec: common_pb2.TaskSpec, r: Sequence[Any], running: int, finished: int, failed: int,
            error: tuple[str, str] | None) -> Closed:
    """The record r of spec's attempt as plain values (the last three times given)."""
    aid = spec.actor_id
    kind = (_ACTOR_CREATION if spec.HasField("actor_creation") else _ACTOR_TASK) if aid else _NORMAL
    trace = tracing.trace_id_hex(spec) if tracing.enabled() else ""
    return (spec.task_id, spec.attempt, spec.job_id, spec.name, aid, kind, trace,
            r[2], r[3], r[4], running, finished, failed, r[8], error)


def _closing(spec: common_pb2.TaskSpec) -> Sequence[Any] | None:
    """Takes spec's open record out (_EMPTY if none is open: events turned on meanwhile, or a
    full buffer); None: past the bound."""
    r: Sequence[Any] = _open.pop(id(spec), _EMPTY)
    if len(_closed) >= _max_records:
        _drop(spec)
        return None
    return r


def replied(spec: common_pb2.TaskSpec, reply: core_worker_pb2.PushTaskReply) -> None:
    """The task's reply reached its owner: it ran from reply.start_time_ns to end_time_ns, and
    FINISHED, or FAILED when the user's code raised."""
    if on:
        if reply.is_application_error:
            _replied_error(spec, reply)
            return
        # _closing and _freeze inlined: this runs once per task.
        r = _open.pop(id(spec), _EMPTY)
        if len(_closed) < _max_records:
            aid = spec.actor_id
            _closed.append((spec.task_id, spec.attempt, spec.job_id, spec.name, aid,
                            (_ACTOR_CREATION if spec.HasField("actor_creation") else _ACTOR_TASK) if aid else _NORMAL,
                            tracing.trace_id_hex(spec) if tracing.enabled() else "",
                            r[2], r[3], r[4], reply.start_time_ns, reply.end_time_ns or _time_ns(), 0, r[8], None))
        else:
            _drop(spec)


def _replied_error(spec: common_pb2.TaskSpec, reply: core_worker_pb2.PushTaskReply) -> None:
    if id(spec) not in _open:
        return  # recorded already (the push's reply, before a retry could be decided)
    r = _closing(spec)
    if r is not None:
        _closed.append(_freeze(spec, r, reply.start_time_ns, 0, reply.end_time_ns or _time_ns(),
                               ("TASK_EXECUTION_EXCEPTION", reply.error_message[:4096])))


def _fail(spec: common_pb2.TaskSpec, what: tuple[str, str]) -> None:
    r = _closing(spec)
    if r is not None:
        _closed.append(_freeze(spec, r, r[5], 0, _time_ns(), what))


def failed(spec: common_pb2.TaskSpec, error: BaseException) -> None:
    """The owner gives the task up with error."""
    if on:
        name = type(error).__name__
        _fail(spec, (ERROR_TYPES.get(name, name), str(error)[:4096]))


def push_failed(spec: common_pb2.TaskSpec, code: str, details: str) -> None:
    """The attempt's worker did not answer (it died, or the stream broke): the attempt FAILED
    (a retry, if any, is the next attempt, with a record of its own)."""
    if on:
        _fail(spec, ("WORKER_DIED", f"the worker running the task did not answer ({code}: {details})"[:4096]))


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
            if len(_closed) >= _max_records:
                _drop(spec)
            elif reply.is_application_error:
                _closed.append(_freeze(spec, r, r[5], 0, _time_ns(),
                                       ("TASK_EXECUTION_EXCEPTION", reply.error_message[:4096])))
            else:
                _closed.append(_freeze(spec, r, r[5], _time_ns(), 0, None))


def _drop(spec: common_pb2.TaskSpec) -> None:
    job = spec.job_id.hex()
    _dropped[job] = _dropped.get(job, 0) + 1


# ---------------------------------------------------------------------- encoding (pure)
def encode(records: list[Closed], me: tuple[str, str, int], workers: dict[str, tuple[str, str, int]],
           traced: bool = True) -> tuple[gcs_task_pb2.TaskEventBatch, dict[str, int]]:
    """records (closed or frozen) as one columnar batch from the process me = (node id, worker
    id, pid), and its records per job (hex). A record's `where` is a worker address (looked up
    in workers), HERE (me) or None (not pushed yet). The actor, type and trace columns stay
    empty when no record has one (traced=False leaves the trace column out)."""
    b = gcs_task_pb2.TaskEventBatch(node_id=me[0], worker_id=me[1], pid=me[2])
    if not records:
        return b, {}
    # Records are transposed into columns by zip (in C) and each column goes in with one
    # extend: no Python loop runs per record but the error scan, and that only when a record
    # has one. (This thread shares the GIL with the process's hot path.)
    cols = list(zip(*records, strict=True))
    b.task_id.extend(cols[C_TASK])
    b.attempt.extend(cols[C_ATTEMPT])
    b.ts_ns.extend(itertools.chain.from_iterable(zip(*cols[C_TS:C_TS + 6], strict=True)))
    wheres = cols[C_WHERE]
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
    jobs = cols[C_JOB]
    b.job_id.extend(jobs)
    b.name.extend(cols[C_NAME])
    if any(cols[C_TYPE]):  # an actor task or creation (NORMAL_TASK is 0)
        b.actor_id.extend(cols[C_ACTOR])
        b.type.extend(cols[C_TYPE])
    if traced and any(cols[C_TRACE]):
        b.trace_id.extend(cols[C_TRACE])
    errors = cols[C_ERROR]
    if errors.count(None) != len(errors):
        found_errors = [(i, e) for i, e in enumerate(errors) if e is not None]
        b.error_index.extend([i for i, _ in found_errors])
        b.error_type.extend([e[0] for _, e in found_errors])
        b.error_message.extend([e[1] for _, e in found_errors])
    return b, {job.hex(): n for job, n in collections.Counter(jobs).items()}


def take(sent_open: dict[int, tuple[Any, ...]]) -> list[Closed]:
    """The records a batch carries now: the closed ones, and frozen copies of the open and
    running ones that moved since they were last sent (sent_open: task id -> the times then;
    updated). Reporter thread only."""
    out = list(map(operator.call, itertools.repeat(_closed.popleft, len(_closed))))  # (a loop in C)
    now: dict[int, tuple[Any, ...]] = {}
    for table in (_open, _running):
        for key, r in table.copy().items():  # dict.copy: atomic against the hot path's hooks
            copy = r[:]
            times = tuple(copy[2:8])
            now[key] = times
            if sent_open.get(key) != times:
                out.append(_freeze(copy[0], copy, copy[5], copy[6], copy[7], copy[9]))
    sent_open.clear()
    sent_open.update(now)
    return out


# ---------------------------------------------------------------------- the reporter thread
class _Reporter:
    """Sends the records to the GCS every interval (and once more at stop)."""

    def __init__(self, core: CoreWorker, interval_s: float) -> None:
        from ember_common.gcs_task_client import TaskEventsClient

        self.core = core
        self.interval_s = interval_s
        self.client = TaskEventsClient(core.gcs_address, timeout_s=10.0)
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # one flush at a time (the thread's, or stop()'s last one)
        self.sent_records = 0
        self.sent_open: dict[int, tuple[Any, ...]] = {}
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
            try:
                self.client.add_task_event_data(batch.SerializeToString(), by_job, dropped)
                self.sent_records += len(records)
            except Exception as e:  # the GCS is away: these records are lost, and counted
                log.debug("task events: batch of %d not sent (%s)", len(records), e)
                for j, k in (*by_job.items(), *dropped.items()):
                    _dropped[j] = _dropped.get(j, 0) + k

    def stop(self) -> None:
        """Stops the thread after one last flush."""
        self.stopping.set()
        self.thread.join(timeout=2)
        self.client.timeout_s = 2.0  # exiting: one short try
        try:
            self.flush()
        finally:
            self.client.close()


_reporter: _Reporter | None = None


def start(core: CoreWorker) -> None:
    """Turns the hooks on for this process (unless EMBER_TASK_EVENTS_ENABLED=0) and starts the
    reporter thread."""
    global on, _reporter, _max_records
    cfg = core.config
    if not cfg.task_events_enabled or _reporter is not None:
        return
    if cfg.task_events_report_interval_s <= 0 or cfg.task_events_max_buffer_size <= 0:
        raise ValueError("EMBER_TASK_EVENTS_REPORT_INTERVAL_S and EMBER_TASK_EVENTS_MAX_BUFFER_SIZE "
                         "must be positive")
    _max_records = cfg.task_events_max_buffer_size
    _reporter = _Reporter(core, cfg.task_events_report_interval_s)
    on = True


def stop() -> None:
    """Sends what is left and stops the reporter (the core worker's shutdown)."""
    global on, _reporter
    r = _reporter
    if r is None:
        return
    _reporter = None
    on = False
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
    return {"buffered": len(_closed), "open": len(_open) + len(_running),
            "sent": r.sent_records if r else 0, "dropped_unreported": sum(_dropped.values())}
