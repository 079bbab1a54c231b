"""The driver-side controller of a Train run: the I/O shell around `policy.py`.

One attempt: start the worker group (span `ember.train.start`), set up the backend, start the
training function on every rank, then follow the ranks' events with one long poll per rank.
A report every rank made is recorded (span `ember.train.report`): rank 0's metrics appended to
`result.json`, its checkpoint registered (old ones deleted per `CheckpointConfig`), the state
file written, a console line printed, and the ranks released (`ack`). A rank that raises or
dies ends the attempt: the group is killed and, while `FailureConfig.max_failures` allows, a new
group starts from the latest checkpoint; otherwise the run fails with the cause.

Inside a Tune trial (a session is installed in the process that calls `fit()`), each recorded
report is also the trial's result: it goes through that session's `report`, which may block
until Tune asks for the next result or raise to stop the trial (the group is then shut down).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import ember
from ember.air.checkpoint import Checkpoint
from ember.air.config import DataConfig, FailureConfig, RunConfig, ScalingConfig
from ember.air.session import TrainContext, get_session

from ..backend import BackendConfig
from ..callback import TrainRunContext
from ..exceptions import ControllerError, WorkerGroupError
from . import data_shards
from .policy import (
    CheckpointManager,
    CompletedReport,
    FailurePolicy,
    ReportBarrier,
    ReportMismatchError,
    TrackedCheckpoint,
)
from .run_state import RunStorage
from .worker import WorkerRun
from .worker_group import WorkerGroup, WorkerStartError

POLL_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)  # under `ember.train`: RunConfig.logging_config sets its level


def _tracer() -> Any:
    from opentelemetry import trace

    return trace.get_tracer("ember.train")


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


class TrainController:
    """Runs one Train run to its end (success or failure past max_failures)."""

    def __init__(self, *, fn: Callable[..., Any], config: dict[str, Any] | None, scaling: ScalingConfig,
                 run_config: RunConfig, backend: BackendConfig, datasets: dict[str, Any],
                 dataset_config: DataConfig | None, run: RunStorage, trainer_name: str,
                 resume_from: Checkpoint | None = None) -> None:
        self.fn, self.config, self.scaling, self.run_config = fn, config, scaling, run_config
        self.backend, self.datasets, self.dataset_config = backend, datasets, dataset_config
        self.run, self.trainer_name = run, trainer_name
        state = run.load_state()
        self.next_index = int(state.get("next_index", 0))
        self.checkpoints = CheckpointManager(run_config.checkpoint_config, [
            TrackedCheckpoint.from_json(c) for c in state.get("checkpoints", [])])
        failure_config = run_config.failure_config or FailureConfig()  # RunConfig defaults it
        self.failures = FailurePolicy(failure_config.max_failures, int(state.get("failures", 0)))
        self.last_metrics: dict[str, Any] | None = state.get("last_metrics")
        self.resume_from = resume_from
        self.callbacks = list(run_config.callbacks or [])
        self.run_context = TrainRunContext(run_config, config, scaling, backend, dataset_config)
        self.outer_session = get_session()  # Tune's, when fit() runs as a trial
        self.error: BaseException | None = None
        self.attempts = 0
        run.truncate_rows(self.next_index)

    # --- state -----------------------------------------------------------------------------

    def _save_state(self, status: str) -> None:
        self.run.save_state({
            "status": status, "next_index": self.next_index, "failures": self.failures.failures,
            "checkpoints": self.checkpoints.to_json(), "last_metrics": self.last_metrics,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}"})

    def start_checkpoint(self) -> Checkpoint | None:
        latest = self.checkpoints.latest
        if latest is not None:
            return Checkpoint(latest.path, self.run.fs)
        return self.resume_from

    # --- the run ---------------------------------------------------------------------------

    def run_to_end(self) -> None:
        """Attempts until success or until the failure policy says stop (self.error set)."""
        with _tracer().start_as_current_span("ember.train.run", attributes={
                "ember.train.name": self.run.name, "ember.train.num_workers": self.scaling.num_workers}):
            while True:
                self._drop_stray_checkpoints()
                self._save_state("RUNNING")
                try:
                    self._attempt()
                    self._save_state("FINISHED")
                    return
                except ControllerError as e:
                    self.error = e
                    self._save_state("ERRORED")
                    return
                except WorkerGroupError as e:
                    try:
                        if e.worker_failures:
                            self._call_hooks("after_exception", dict(e.worker_failures))
                    except ControllerError as ce:
                        self.error = ce
                        self._save_state("ERRORED")
                        return
                    restart = self.failures.on_failure()
                    log.warning(f"({self.trainer_name} {self.run.name}) worker group failed, "
                                f"{self.failures.describe()}: {e.args[0].splitlines()[0]}"
                                + (" - restarting from the latest checkpoint" if restart else ""))
                    if not restart:
                        self.error = e
                        self._save_state("ERRORED")
                        return

    def _drop_stray_checkpoints(self) -> None:
        kept = {c.path for c in self.checkpoints.checkpoints}
        for p in self.run.stray_checkpoints(kept, self.next_index):
            self.run.delete_checkpoint(p)

    def _attempt(self) -> None:
        t0 = time.monotonic()
        self.attempts += 1
        log.debug("attempt %d: starting %d workers with %s each (%s)", self.attempts, self.scaling.num_workers,
                  self.scaling.worker_resources, self.scaling.placement_strategy)
        with _tracer().start_as_current_span("ember.train.start") as span:
            try:
                group = WorkerGroup.start(self.scaling, self.backend.worker_env(self.scaling),
                                          self.backend.preload_modules(),
                                          runtime_env=self.run_config.worker_runtime_env or None)
            except (ValueError, WorkerStartError) as e:
                if self.attempts > 1:  # a restart that cannot start counts as a failed attempt
                    raise WorkerGroupError(f"the worker group could not be started again: {e}", {}) from e
                if isinstance(e, ValueError):
                    raise  # bad input: fit() raises it as it is
                raise ControllerError(e) from e
            for m in group.metas:
                log.debug("rank %d: pid %d on node %s (local rank %d of %d, node rank %d)", m.rank, m.pid,
                          m.node_id[:12], m.local_rank, m.local_world_size, m.node_rank)
            try:
                devices = self.backend.on_start(group, self.scaling)
                log.debug("backend %s set up: devices %s", type(self.backend).__name__, devices)
                carrier: dict[str, str] = {}
                from opentelemetry import propagate

                propagate.inject(carrier)
                shards = data_shards.make_shards(self.datasets, self.dataset_config, group.world_size)
                start_ckpt = self.start_checkpoint()
                runs = [(WorkerRun(
                    fn=self.fn, config=self.config, context=self._context(m), run_fs=self.run.fs,
                    run_path=self.run.path, start_index=self.next_index, checkpoint=start_ckpt,
                    dataset_shards=shards[m.rank], trace_carrier=carrier, device=devices[m.rank],
                    log_level=self._log_level()),)
                    for m in group.metas]
                group.call_each("start", runs)
                span.set_attribute("ember.train.world_size", group.world_size)
            except BaseException:
                group.shutdown(graceful=False)
                raise
        log.info(f"({self.trainer_name} {self.run.name}) started {group.world_size} workers in "
                 f"{time.monotonic() - t0:.2f} s" + (f", resuming from {start_ckpt.path}" if start_ckpt else ""))
        ok = False
        try:
            self._follow(group)
            ok = True
        finally:
            if ok:
                self.backend.on_shutdown(group)
            group.shutdown(graceful=ok)

    def _log_level(self) -> str:
        lc = self.run_config.logging_config
        return lc.log_level if lc is not None else "INFO"

    def _context(self, m: Any) -> TrainContext:
        return TrainContext(
            world_rank=m.rank, world_size=self.scaling.num_workers, local_rank=m.local_rank,
            local_world_size=m.local_world_size, node_rank=m.node_rank, experiment_name=self.run.name,
            trial_name=self.run.name, trial_dir=self.run.path, storage_path=self.run.uri(),
            trial_resources=dict(self.scaling.worker_resources),
            metadata={"node_id": m.node_id, "pid": m.pid})

    def _follow(self, group: WorkerGroup) -> None:
        barrier = ReportBarrier(group.world_size, self.next_index)
        polls = {a.next_events.remote(POLL_TIMEOUT_S): rank for rank, a in enumerate(group.actors)}
        while polls:
            ready, _ = ember.wait(list(polls), num_returns=1, timeout=POLL_TIMEOUT_S + 30)
            for ref in ready:
                rank = polls.pop(ref)
                try:
                    events = ember.get(ref)
                except ember.exceptions.RayActorError as e:
                    m = group.metas[rank]
                    raise WorkerGroupError(f"rank {rank} (pid {m.pid}, node {m.node_id[:8]}) died: {e}",
                                           {rank: e}) from e
                finished = False
                for kind, payload in events:
                    if kind == "report":
                        try:
                            done = barrier.add(rank, payload)
                        except (ReportMismatchError, ValueError) as e:
                            raise WorkerGroupError(str(e), {rank: e}) from None
                        if done is not None:
                            self._record(done)
                            kept = [(c.path, dict(c.metrics)) for c in
                                    sorted(self.checkpoints.checkpoints, key=lambda c: c.index)]
                            for a in group.actors:
                                a.ack.remote(done.index, kept)
                    elif kind == "done":
                        finished = True
                        try:
                            barrier.finish(rank, payload)
                        except ReportMismatchError as e:
                            raise WorkerGroupError(str(e), {rank: e}) from None
                    elif kind == "error":
                        exc, tb = payload
                        raise WorkerGroupError(f"rank {rank}'s training function raised "
                                               f"{type(exc).__name__}: {exc}\n{tb}", {rank: exc}) from exc
                if not finished:
                    polls[group.actors[rank].next_events.remote(POLL_TIMEOUT_S)] = rank

    def _record(self, done: CompletedReport) -> None:
        with _tracer().start_as_current_span("ember.train.report", attributes={
                "ember.train.report_index": done.index,
                "ember.train.checkpoint": done.checkpoint_path or ""}):
            self.next_index = done.index + 1
            self.last_metrics = done.metrics
            self.run.append_row({**done.metrics, "_report_index": done.index,
                                 "_timestamp": time.time(), "_checkpoint": done.checkpoint_path})
            if done.checkpoint_path:
                for gone in self.checkpoints.register(done.index, done.checkpoint_path, done.metrics):
                    self.run.delete_checkpoint(gone.path)
            self._save_state("RUNNING")
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in done.metrics.items())
        where = f" [{done.checkpoint_path.rsplit('/', 1)[-1]}]" if done.checkpoint_path else ""
        log.info(f"({self.trainer_name} {self.run.name}) report {done.index}: {shown}{where}")
        log.debug("report %d recorded in %s; checkpoints kept: %s", done.index, self.run.path,
                  [c.path.rsplit("/", 1)[-1] for c in self.checkpoints.checkpoints])
        ckpt = Checkpoint(done.checkpoint_path, self.run.fs) if done.checkpoint_path else None
        self._call_hooks("after_report", [dict(m) for m in done.rank_metrics], ckpt)
        if self.outer_session is not None:
            self.outer_session.report(dict(done.metrics), ckpt, None)

    def _call_hooks(self, hook: str, *args: Any) -> None:
        """Calls `hook` on every UserCallback; one that raises ends the run with a ControllerError
        (Ray's behaviour: a callback's failure is the controller's, never retried)."""
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(self.run_context, *args)
            except Exception as e:  # noqa: BLE001 - the user's hook: any failure ends the run
                log.error(f"({self.trainer_name} {self.run.name}) {type(cb).__name__}.{hook} raised "
                          f"{type(e).__name__}: {e}")
                raise ControllerError(e) from e

    # --- the outcome -----------------------------------------------------------------------

    def best_checkpoints(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        return [(Checkpoint(c.path, self.run.fs), dict(c.metrics))
                for c in sorted(self.checkpoints.checkpoints, key=lambda c: c.index)]

