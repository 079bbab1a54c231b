"""One rank of a worker group: the `TrainWorker` actor and the session it installs.

The driver's controller calls the actor's methods: `node_info` and `execute` (a backend's
set-up step) while the group is set up, `start` to run the user's training function on a thread of its own, then
`next_events` (a long poll: the rank's reports, then "done" or "error") and `ack` (a report every
rank made has been recorded; the waiting `report()` calls return). `report()` thus works as a
barrier across ranks, as in Ray Train: when it returns, the controller has the report and its
checkpoint.

A checkpoint passed to `report()` is uploaded by the rank itself into
`<run>/checkpoint_<index>` (ranks merge into one directory); a directory made by
`Checkpoint.from_dict` is removed after the upload.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import pickle
import queue
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow.fs

from ember.air import checkpoint as checkpoint_mod
from ember.air import session as session_mod
from ember.air import storage
from ember.air.checkpoint import Checkpoint
from ember.air.session import TrainContext

from . import logs as train_logs
from .policy import RankReport

log = logging.getLogger(__name__)  # under `ember.train`: RunConfig.logging_config sets its level


@dataclass
class WorkerRun:
    """What `start` needs: the function, its config and where the run lives."""

    fn: Callable[..., Any]
    config: dict[str, Any] | None
    context: TrainContext
    run_fs: pyarrow.fs.FileSystem
    run_path: str
    start_index: int
    checkpoint: Checkpoint | None
    dataset_shards: dict[str, Any] = field(default_factory=dict)
    trace_carrier: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"
    log_level: str = "INFO"


class WorkerSession:
    """The Session (see session.py) of one Train rank."""

    def __init__(self, run: WorkerRun, events: queue.Queue[tuple[str, Any]], acked: Callable[[int, float], bool],
                 kept: Callable[[], list[tuple[str, dict[str, Any]]]] = list) -> None:
        self.run = run
        self._kept = kept
        self._events = events
        self._wait_acked = acked
        self._count = 0
        self._latest = run.checkpoint

    @property
    def next_index(self) -> int:
        return self.run.start_index + self._count

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None,
               checkpoint_dir_name: str | None) -> None:
        self.report_with(metrics, checkpoint, checkpoint_dir_name)

    def report_with(self, metrics: dict[str, Any], checkpoint: Checkpoint | None, checkpoint_dir_name: str | None,
                    delete_local: bool = False, upload_fn: Callable[[Checkpoint, str], Any] | None = None) -> None:
        """`ember.train.report` with Ray's upload options: `upload_fn(checkpoint, dir_name)`
        persists the checkpoint instead of the copy into the run directory (the Checkpoint it
        returns is recorded); `delete_local` removes a local checkpoint directory afterwards."""
        index = self.next_index
        self._count += 1
        rank = self.run.context.world_rank
        path = None
        if checkpoint is not None:
            dir_name = checkpoint_dir_name or f"checkpoint_{index:06d}"
            path = storage.join(self.run.run_path, dir_name)
            t0 = time.monotonic()
            with _span("ember.train.checkpoint", self.run.trace_carrier,
                       {"ember.train.rank": rank, "ember.train.checkpoint": path}):
                if upload_fn is None:
                    storage.merge_tree(checkpoint.filesystem, checkpoint.path, self.run.run_fs, path)
                else:
                    persisted = upload_fn(checkpoint, dir_name)
                    if not isinstance(persisted, Checkpoint):
                        raise ValueError("checkpoint_upload_fn must return an ember.train.Checkpoint, got "
                                         f"{type(persisted).__name__}")
                    path = persisted.path
            log.debug("rank %d: checkpoint of report %d uploaded to %s in %.3f s", rank, index, path,
                      time.monotonic() - t0)
            local = isinstance(checkpoint.filesystem, pyarrow.fs.LocalFileSystem)
            if local and (delete_local or os.path.basename(checkpoint.path).startswith(checkpoint_mod.TEMP_PREFIX)):
                import shutil

                shutil.rmtree(checkpoint.path, ignore_errors=True)
        self._events.put(("report", RankReport(index, dict(metrics), path)))
        log.debug("rank %d: report %d sent, waiting for every rank", rank, index)
        while not self._wait_acked(index, 1.0):
            pass
        log.debug("rank %d: report %d recorded", rank, index)
        if path is not None:
            self._latest = Checkpoint(path, self.run.run_fs)

    def get_checkpoint(self) -> Checkpoint | None:
        return self._latest

    def reported_checkpoints(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        """The run's kept checkpoints with their metrics as of this rank's last report."""
        return [(Checkpoint(path, self.run.run_fs), dict(metrics)) for path, metrics in self._kept()]

    def get_context(self) -> TrainContext:
        return self.run.context

    def get_dataset_shard(self, name: str) -> Any:
        shards = self.run.dataset_shards
        if name not in shards:
            have = ", ".join(sorted(shards)) or "none"
            raise KeyError(f"get_dataset_shard({name!r}): the trainer has no dataset {name!r} "
                           f"(datasets given: {have})")
        return shards[name]


class _RankPrefixed:
    """sys.stdout/sys.stderr while a rank trains: lines written by the training thread (and
    threads it starts) begin with "[rank N] ", so the driver's output says which rank wrote them."""

    def __init__(self, stream: Any, prefix: str, threads: set[int]) -> None:
        self._stream = stream
        self._prefix = prefix
        self._threads = threads
        self._at_line_start = True

    def write(self, text: str) -> int:
        if threading.get_ident() not in self._threads or not text:
            written: int = self._stream.write(text)
            return written
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        self._stream.write("".join(out))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _span(name: str, carrier: dict[str, str], attributes: dict[str, Any]) -> Any:
    """An OpenTelemetry span under the run's trace (a no-op when tracing is off)."""
    from opentelemetry import propagate, trace

    ctx = propagate.extract(carrier) if carrier else None
    return trace.get_tracer("ember.train").start_as_current_span(name, context=ctx, attributes=attributes)


def _portable_error(exc: BaseException) -> BaseException:
    """The exception itself when it pickles, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _interfaces() -> dict[str, list[str]]:
    """This machine's network interfaces and their IPv4 addresses."""
    import psutil

    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in psutil.net_if_addrs().items()}


def _import_all(modules: tuple[str, ...]) -> None:
    import importlib

    for m in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(m)


class TrainWorker:
    """The actor of one rank (made remote by the worker group with the rank's resources)."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = ()) -> None:
        # The environment the framework reads at import (OMP_NUM_THREADS), then its import on a
        # background thread: it overlaps the rest of the group's start-up (torch takes seconds).
        os.environ.update(env or {})
        self._preload = threading.Thread(target=_import_all, args=(preload,), daemon=True, name="preload")
        self._preload.start()
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._acked = -1
        self._kept: list[tuple[str, dict[str, Any]]] = []  # the run's kept checkpoints at the last ack
        self._ack_cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._threads: set[int] = set()
        self._logs: train_logs.TrainLogging | None = None

    def node_info(self) -> dict[str, Any]:
        import ember

        return {"node_id": ember.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "gpu_ids": [int(g) for g in ember.get_gpu_ids()], "hostname": socket.gethostname(),
                "interfaces": _interfaces(), "free_port": self.free_port("")}

    def free_port(self, ip: str) -> int:
        """A port free on this node for the process group's rendezvous (rank 0)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip if ip not in ("", "0.0.0.0") else "", 0))
            port: int = s.getsockname()[1]
            return port

    def execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs fn(*args, **kwargs) in this worker (a backend's setup step), once the preloaded
        modules are in."""
        self._preload.join()
        return fn(*args, **kwargs)

    def start(self, run: WorkerRun) -> None:
        """Starts the training function on its own thread and returns at once."""
        if self._thread is not None:
            raise RuntimeError("this worker already ran a training function")
        ctx = run.context
        if self._logs is None:
            self._logs = train_logs.configure("worker", run.log_level, {
                "run_name": ctx.experiment_name, "world_rank": ctx.world_rank, "local_rank": ctx.local_rank,
                "node_rank": ctx.node_rank})
        sess = WorkerSession(run, self._events, self._wait_acked, lambda: list(self._kept))
        self._thread = threading.Thread(target=self._train, args=(sess,), daemon=True,
                                        name=f"train-rank-{run.context.world_rank}")
        self._thread.start()

    def _train(self, sess: WorkerSession) -> None:
        run = sess.run
        self._threads.add(threading.get_ident())
        prefix = f"[rank {run.context.world_rank}] "
        saved = sys.stdout, sys.stderr
        sys.stdout = _RankPrefixed(sys.stdout, prefix, self._threads)
        sys.stderr = _RankPrefixed(sys.stderr, prefix, self._threads)
        session_mod.set_session(sess)
        try:
            n_params = len(inspect.signature(run.fn).parameters)
            log.debug("rank %d: starting the training function on %s%s", run.context.world_rank, run.device,
                      f", resuming from {run.checkpoint.path}" if run.checkpoint else "")
            with _span("ember.train.worker", run.trace_carrier, {"ember.train.rank": run.context.world_rank}):
                run.fn(run.config or {}) if n_params >= 1 else run.fn()
            log.debug("rank %d: the training function returned after %d reports", run.context.world_rank,
                      sess.next_index - run.start_index)
            self._events.put(("done", sess.next_index))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the controller
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            self._events.put(("error", (_portable_error(e), tb)))
        finally:
            session_mod.set_session(None)
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = saved

    def _wait_acked(self, index: int, timeout: float) -> bool:
        with self._ack_cv:
            return self._ack_cv.wait_for(lambda: self._acked >= index, timeout)

    def ack(self, index: int, kept: list[tuple[str, dict[str, Any]]] | None = None) -> None:
        """Every rank's report `index` is recorded: report() calls up to it return. `kept` is
        the run's kept checkpoints then (path, metrics), in report order."""
        with self._ack_cv:
            if index > self._acked and kept is not None:
                self._kept = list(kept)
            self._acked = max(self._acked, index)
            self._ack_cv.notify_all()

    def next_events(self, timeout_s: float) -> list[tuple[str, Any]]:
        """Waits up to timeout_s for events (reports, "done", "error"); returns all queued."""
        out = []
        with contextlib.suppress(queue.Empty):
            out.append(self._events.get(timeout=timeout_s))
            while True:
                out.append(self._events.get_nowait())
        return out

    def shutdown(self) -> None:
        """Leaves the process group (if any) and flushes this rank's spans before the actor is
        killed."""
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            with contextlib.suppress(Exception):
                flush(5000)
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
