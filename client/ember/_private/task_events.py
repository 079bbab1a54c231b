"""Task events, reporter side (Ray's TaskEventBuffer): the owner's and the executor's state
transitions of every task, batched to the GCS's TaskInfoGcsService off the hot path.

    submitted(spec)             owner: PENDING_ARGS_AVAIL, and what the task is (name, job, ...)
    record(spec, STATE)         owner: PENDING_NODE_ASSIGNMENT, SUBMITTED_TO_WORKER; executor: RUNNING
    executed(spec, reply)       owner and executor: FINISHED, or FAILED for an application error
    failed(spec, error)         owner: FAILED (cancelled, unschedulable, retries exhausted, ...)
    push_failed(spec, code, m)  owner: this attempt's worker did not answer (FAILED, WORKER_DIED)

A hook costs one flag test, a clock read and one tuple appended to a deque (no lock: a deque's
append and popleft are atomic). A daemon thread wakes every `task_events_report_interval_s`,
takes what is there, turns it into one columnar `TaskEventBatch` (parallel lists filled with
`extend`, no message per event) and sends it with a blocking call, outside the core's loop.
The buffer holds at most `task_events_max_buffer_size` events: past it an event is dropped and
counted against its task's job; a batch the GCS does not take is dropped and counted too
(against this process's job), and the counts ride with the next batch.
`EMBER_TASK_EVENTS_ENABLED=0` turns every hook into the flag test alone.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

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

on = False  # set by start(); every hook tests it first
_events: collections.deque[tuple[bytes, int, int, int, tuple[str, str] | None]] = collections.deque()
_infos: collections.deque[common_pb2.TaskSpec] = collections.deque()
_max_events = 100_000
_dropped: dict[str, int] = {}
_time_ns = time.time_ns


def record(spec: common_pb2.TaskSpec, state: int) -> None:
    """A transition of spec's current attempt."""
    if on:
        if len(_events) < _max_events:
            _events.append((spec.task_id, spec.attempt, state, _time_ns(), None))
        else:
            _drop(spec)


def submitted(spec: common_pb2.TaskSpec) -> None:
    """The owner took the task (PENDING_ARGS_AVAIL); its description goes with the next batch."""
    if on:
        if len(_events) < _max_events:
            _infos.append(spec)
            _events.append((spec.task_id, spec.attempt, PENDING_ARGS_AVAIL, _time_ns(), None))
        else:
            _drop(spec)


def started(spec: common_pb2.TaskSpec) -> None:
    """The executor runs the task (RUNNING; an actor creation also says what it is: the GCS,
    its owner, reports nothing)."""
    if on:
        if len(_events) < _max_events:
            if spec.HasField("actor_creation"):
                _infos.append(spec)
            _events.append((spec.task_id, spec.attempt, RUNNING, _time_ns(), None))
        else:
            _drop(spec)


def executed(spec: common_pb2.TaskSpec, reply: core_worker_pb2.PushTaskReply) -> None:
    """The task's reply: FINISHED, or FAILED when the user's code raised."""
    if on:
        if len(_events) < _max_events:
            if reply.is_application_error:
                error = ("TASK_EXECUTION_EXCEPTION", reply.error_message[:4096])
                _events.append((spec.task_id, spec.attempt, FAILED, _time_ns(), error))
            else:
                _events.append((spec.task_id, spec.attempt, FINISHED, _time_ns(), None))
        else:
            _drop(spec)


def failed(spec: common_pb2.TaskSpec, error: BaseException) -> None:
    """The owner gives the task up with error."""
    if on:
        if len(_events) < _max_events:
            name = type(error).__name__
            what = (ERROR_TYPES.get(name, name), str(error)[:4096])
            _events.append((spec.task_id, spec.attempt, FAILED, _time_ns(), what))
        else:
            _drop(spec)


def push_failed(spec: common_pb2.TaskSpec, code: str, details: str) -> None:
    """The attempt's worker did not answer (it died, or the stream broke): the attempt FAILED
    (a retry, if any, is the next attempt)."""
    if on:
        if len(_events) < _max_events:
            what = ("WORKER_DIED", f"the worker running the task did not answer ({code}: {details})"[:4096])
            _events.append((spec.task_id, spec.attempt, FAILED, _time_ns(), what))
        else:
            _drop(spec)


def _drop(spec: common_pb2.TaskSpec) -> None:
    job = spec.job_id.hex()
    _dropped[job] = _dropped.get(job, 0) + 1


# ---------------------------------------------------------------------- the reporter thread
class _Reporter:
    """Sends the buffer to the GCS every interval (and once more at stop)."""

    def __init__(self, core: CoreWorker, interval_s: float) -> None:
        from ember_common.gcs_task_client import TaskEventsClient

        self.core = core
        self.interval_s = interval_s
        self.client = TaskEventsClient(core.gcs_address, timeout_s=10.0)
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # one flush at a time (the thread's, or stop()'s last one)
        self.sent_events = 0
        self.thread = threading.Thread(target=self._run, name="ember-task-events", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.flush()

    def flush(self) -> None:
        """Sends what is buffered now (nothing when there is nothing)."""
        with self.lock:
            n = len(_events)
            if not n and not _dropped:
                return
            pop = _events.popleft
            items = [pop() for _ in range(n)]
            infos = [_infos.popleft() for _ in range(len(_infos))]
            dropped = dict(_dropped)
            for job, k in dropped.items():  # only what was read: drops counted meanwhile stay
                left = _dropped.get(job, 0) - k
                if left > 0:
                    _dropped[job] = left
                else:
                    _dropped.pop(job, None)
            batch = _batch(self.core, items, infos, dropped)
            try:
                self.client.add_task_event_data(batch)
                self.sent_events += n
            except Exception as e:  # the GCS is away: these events are lost, and counted
                log.debug("task events: batch of %d not sent (%s)", n, e)
                job = self.core.job_id.hex()
                _dropped[job] = _dropped.get(job, 0) + n
                for j, k in dropped.items():
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


def _batch(core: CoreWorker, items: list[Any], infos: list[Any],
           dropped: dict[str, int]) -> gcs_task_pb2.TaskEventBatch:
    b = gcs_task_pb2.TaskEventBatch(worker_id=core.worker_id, node_id=core.node_id, pid=os.getpid(),
                                    dropped_by_job=dropped)
    # Column by column with comprehensions and extend: far cheaper than zip(*items) or one
    # append per field (this thread shares the GIL with the process's hot path).
    if items:
        b.task_id.extend([e[0] for e in items])
        b.attempt.extend([e[1] for e in items])
        b.state.extend([e[2] for e in items])
        b.time_ns.extend([e[3] for e in items])
        errors = [(i, e[4]) for i, e in enumerate(items) if e[4] is not None]
        if errors:
            b.error_index.extend([i for i, _ in errors])
            b.error_type.extend([err[0] for _, err in errors])
            b.error_message.extend([err[1] for _, err in errors])
    if infos:
        actor_ids = [s.actor_id for s in infos]
        b.info_task_id.extend([s.task_id for s in infos])
        b.info_job_id.extend([s.job_id for s in infos])
        b.info_name.extend([s.name for s in infos])
        b.info_actor_id.extend(actor_ids)
        b.info_type.extend([(TA.ACTOR_CREATION_TASK if s.HasField("actor_creation") else TA.ACTOR_TASK)
                            if a else TA.NORMAL_TASK for s, a in zip(infos, actor_ids)])
        b.info_trace_id.extend([_trace_id(s) if s.trace_context else "" for s in infos])
    return b


def _trace_id(spec: common_pb2.TaskSpec) -> str:
    tp = spec.trace_context.get("traceparent", "")
    return tp.split("-")[1] if tp.count("-") >= 2 else ""


_reporter: _Reporter | None = None


def start(core: CoreWorker) -> None:
    """Turns the hooks on for this process (unless EMBER_TASK_EVENTS_ENABLED=0) and starts the
    reporter thread."""
    global on, _reporter, _max_events
    cfg = core.config
    if not cfg.task_events_enabled or _reporter is not None:
        return
    if cfg.task_events_report_interval_s <= 0 or cfg.task_events_max_buffer_size <= 0:
        raise ValueError("EMBER_TASK_EVENTS_REPORT_INTERVAL_S and EMBER_TASK_EVENTS_MAX_BUFFER_SIZE "
                         "must be positive")
    _max_events = cfg.task_events_max_buffer_size
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
    """Sends what is buffered now (tests; `ember list tasks` right after the work)."""
    if _reporter is not None:
        _reporter.flush()


def stats() -> dict[str, int]:
    """Events waiting, sent so far and dropped but not yet reported (this process)."""
    r = _reporter
    return {"buffered": len(_events), "sent": r.sent_events if r else 0,
            "dropped_unreported": sum(_dropped.values())}
