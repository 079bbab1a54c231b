"""The Tune controller: an event loop in the driver over trial actors.

Each turn it (1) starts trials while resources and `max_concurrent_trials` allow — resuming the
trial the scheduler picks, or asking the search algorithm for a new config; (2) waits on the
in-flight `train()` calls of the running trials (`ember.wait`); (3) hands each result to the
stopper, the scheduler and the searcher and carries out the decision (continue, pause, stop);
(4) prints the status table and saves the experiment state. The `tune.Callback`s of
RunConfig(callbacks=) hear every step and trial event (`_hook`), after the searcher and scheduler. A trial's failure is retried from
its latest checkpoint per FailureConfig and recorded, not fatal. Each trial runs in a placement
group of its PlacementGroupFactory (`trial_placement.py`), removed when the trial ends; trials
start while the sum of the running groups fits the cluster, and a started trial's actor waits
for its group. With `reuse_actors` a finished trial's actor, with its group, starts the next
trial of the same request (no new process, no new group).
"""
from __future__ import annotations

import time
import traceback
import uuid
from typing import Any

import cloudpickle

import ember
from ember.air import storage

from ..callback import CallbackList
from ..experiment.trial import Trial
from ..schedulers.trial_scheduler import TrialScheduler
from ..trainable.util import request_of
from . import experiment_state as es
from .progress import ProgressPrinter
from .tracing import TrialSpans
from .trial_actor import TrialActor
from .trial_placement import TrialRequest, release, start_trial_actor

_TICK_S = 0.5


def _fits(need: dict[str, float], used: dict[str, float], total: dict[str, float]) -> bool:
    return all(used.get(k, 0.0) + v <= total.get(k, 0.0) + 1e-9 for k, v in need.items() if v)


def _add(acc: dict[str, float], res: dict[str, float], sign: float = 1.0) -> None:
    for k, v in res.items():
        acc[k] = acc.get(k, 0.0) + sign * v


class TuneController:
    """Runs one experiment to its end (or to its time budget / stop_all)."""

    def __init__(self, *, trainable_cls: type, trainable_name: str, param_space: dict[str, Any],
                 tune_config: Any, run_config: Any, search_alg: Any, scheduler: TrialScheduler,
                 stopper: Any, fs: Any, exp_path: str, experiment_name: str, reuse_actors: bool,
                 trials: list[Trial] | None = None, elapsed_s: float = 0.0, trial_index: int = 0,
                 callbacks: CallbackList | None = None) -> None:
        self._cls = trainable_cls
        self._name = trainable_name
        self._space = param_space
        self._tc = tune_config
        self._rc = run_config
        self._search = search_alg
        self._scheduler = scheduler
        self._stopper = stopper
        self._fs, self._exp_path, self._exp_name = fs, exp_path, experiment_name
        self._reuse = reuse_actors
        self._trials: list[Trial] = list(trials or [])
        self._by_id = {t.trial_id: t for t in self._trials}
        self._index = trial_index
        self._exp_id = uuid.uuid4().hex[:5]
        self._elapsed_before = elapsed_s
        self._live: dict[str, dict[str, Any]] = {}  # trial_id -> {"actor", "ref", "req", "pg", "need"}
        self._ref_trial: dict[Any, str] = {}
        self._idle: list[tuple[Any, TrialRequest, Any]] = []  # (actor, its request, its group)
        self._nodes: list[dict[str, Any]] = []
        self._never: dict[TrialRequest, str | None] = {}
        self._search_done = False
        self._metric_checked = False
        self._spans = TrialSpans()
        self._last_save = 0.0
        self._save_cost = 0.0
        self._dirty = False
        self._actor_cls = ember.remote(TrialActor)
        self._blob_ref: Any = None
        self._total: dict[str, float] = {}
        self._cb = callbacks if callbacks is not None else CallbackList(None)
        self._iteration = 0
        self.progress = ProgressPrinter(1 if run_config.verbose is None else run_config.verbose,
                                        tune_config.metric, tune_config.mode, param_space,
                                        reporter=getattr(run_config, "progress_reporter", None))
        if self.progress.reporter is not None:
            self.progress.reporter.setup(total_samples=search_alg.total_samples, metric=tune_config.metric,
                                         mode=tune_config.mode, experiment_path=exp_path)

    # ---- what schedulers see --------------------------------------------------------------
    def get_trials(self) -> list[Trial]:
        """The experiment's trials, in creation order."""
        return self._trials

    def stop_trial(self, trial: Trial) -> None:
        """Stops a trial at the scheduler's request (a paused or running one)."""
        if trial.trial_id in self._live:
            self._terminate(trial, Trial.TERMINATED)
        elif not trial.is_finished:
            trial.set_status(Trial.TERMINATED)
            self._search.on_trial_complete(trial.trial_id, trial.last_result)
            self._spans.end(trial)
            self.progress.on_trial_end(trial)
            self._hook("on_trial_complete", trial=trial)

    def _hook(self, name: str, **info: Any) -> None:
        if self._cb:
            self._cb.call(name, iteration=self._iteration, trials=self._trials, **info)

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> list[Trial]:
        """Runs the loop until every trial ended (or the budget/stopper ended the run); returns the trials."""
        self._total = {k: float(v) for k, v in ember.cluster_resources().items()}
        self._nodes = ember.nodes()
        self._blob_ref = ember.put(cloudpickle.dumps(self._cls))
        self._start_time = time.monotonic()
        budget = self._tc.time_budget_s
        deadline = None if budget is None else self._start_time + max(budget - self._elapsed_before, 0.0)
        try:
            while True:
                self._hook("on_step_begin")
                if deadline is not None and time.monotonic() >= deadline:
                    self._stop_everything("time budget")
                    break
                if self._stopper is not None and self._stopper.stop_all():
                    self._stop_everything("stopper")
                    break
                self._start_trials()
                if not self._live:
                    break
                timeout = _TICK_S if deadline is None else max(0.0, min(_TICK_S, deadline - time.monotonic()))
                ready, _ = ember.wait(list(self._ref_trial), num_returns=1, timeout=timeout)
                for ref in ready:
                    self._on_ready(ref)
                self.progress.maybe_print(self._trials)
                self._save()
                self._iteration += 1
                self._hook("on_step_end")
        finally:
            self._shutdown_actors()
            self._save(final=True)
        self.progress.final(self._trials)
        if self._cb:
            self._cb.call("on_experiment_end", trials=self._trials)
        return self._trials

    def _stop_everything(self, why: str) -> None:
        for tid in list(self._live):
            self._terminate(self._by_id[tid], Trial.TERMINATED)
        self._search_done = True

    # ---- starting trials ----------------------------------------------------------------
    def _start_trials(self) -> None:
        limit = self._tc.max_concurrent_trials
        while limit is None or len(self._live) < limit:
            trial = self._scheduler.choose_trial_to_run(self)
            if trial is None:
                if not self._new_trial():
                    return
                continue
            try:
                req = TrialRequest.of(request_of(self._cls, trial.config))
            except ValueError as e:
                self._fail_trial(trial, e, retry=False)
                continue
            if req not in self._never:
                self._never[req] = req.infeasible(self._nodes)
            why = self._never[req]
            if why is not None:
                self._fail_trial(trial, ValueError(
                    f"trial {trial.trial_id} needs a placement group of {req.bundle_dicts} "
                    f"({req.strategy}) that this cluster can never place: {why}"), retry=False)
                continue
            if not _fits(req.need, self._used(exclude_idle=req), self._total):
                if not self._evict_idle():
                    return
                continue
            self._launch(trial, req)

    def _new_trial(self) -> bool:
        if self._search_done:
            return False
        trial_id = f"{self._exp_id}_{self._index:05d}"
        config = self._search.next_config(trial_id)
        if config is None:
            if self._search.is_finished() or not self._live:
                self._search_done = True
            return False
        self._index += 1
        from ..search.variant_generator import format_vars

        tag = f"{self._index - 1}_{format_vars(config, self._space)}"
        trial = Trial(trial_id=trial_id, config=config, trainable_name=self._name, experiment_tag=tag)
        if self._tc.trial_name_creator is not None:
            trial.custom_name = str(self._tc.trial_name_creator(trial))
        creator = self._tc.trial_dirname_creator
        dirname = creator(trial) if creator else f"{self._name}_{trial_id}"
        trial.local_dir_name = dirname
        trial.path = storage.join(self._exp_path, dirname)
        trial.filesystem = self._fs
        self._trials.append(trial)
        self._by_id[trial_id] = trial
        self._scheduler.on_trial_add(self, trial)
        es.write_trial_files(self._fs, trial, params_only=True)
        return True

    def _used(self, exclude_idle: TrialRequest | None = None) -> dict[str, float]:
        used: dict[str, float] = {}
        for live in self._live.values():
            _add(used, live["need"])
        skipped = False
        for _, req, _ in self._idle:
            if req == exclude_idle and not skipped:
                skipped = True  # the trial about to start will take this actor (and group) over
                continue
            _add(used, req.need)
        return used

    def _evict_idle(self) -> bool:
        if not self._idle:
            return False
        actor, _, pg = self._idle.pop(0)
        release(actor, pg)
        return True

    def _actor_for(self, req: TrialRequest) -> tuple[Any, Any]:
        for i, (actor, r, pg) in enumerate(self._idle):
            if r == req:
                del self._idle[i]
                return actor, pg
        return start_trial_actor(self._actor_cls, req, self._blob_ref)

    def _launch(self, trial: Trial, req: TrialRequest) -> None:
        need = req.need
        restore = trial.restore_checkpoint or trial.checkpoint
        trial.restore_checkpoint = None
        if restore is not None and restore is trial.checkpoint:
            ckpt_iter = next((m.get("training_iteration") for c, m in reversed(trial.checkpoints)
                              if c == restore), None)
            if ckpt_iter is not None:  # results after the checkpoint will be reported again
                trial.metric_history = [r for r in trial.metric_history
                                        if r.get("training_iteration", 0) <= ckpt_iter]
        trial.resources = need
        cc = self._rc.checkpoint_config
        info = {"trial_id": trial.trial_id, "trial_name": str(trial), "experiment_name": self._exp_name,
                "trial_dir": trial.path, "filesystem": self._fs, "storage_path": self._exp_path,
                "resources": need, "checkpoint_index": trial.checkpoint_count,
                "checkpoint_frequency": cc.checkpoint_frequency, "checkpoint_at_end": bool(cc.checkpoint_at_end)}
        actor, pg = self._actor_for(req)
        trial.set_status(Trial.RUNNING)
        self._spans.start(trial, self._exp_name, restored=restore is not None)
        with self._spans.active(trial):
            actor.start.remote(trial.config, info, restore)
            ref = actor.train.remote()
        # "restoring" protects the checkpoint from retention until the trial has loaded it.
        self._live[trial.trial_id] = {"actor": actor, "ref": ref, "req": req, "pg": pg, "need": need,
                                      "restoring": restore}
        self._ref_trial[ref] = trial.trial_id
        self._hook("on_trial_start", trial=trial)
        if restore is not None:
            self._hook("on_trial_restore", trial=trial)

    # ---- results ------------------------------------------------------------------------
    def _on_ready(self, ref: Any) -> None:
        tid = self._ref_trial.pop(ref)
        trial = self._by_id[tid]
        try:
            result = ember.get(ref)
        except Exception as e:  # noqa: BLE001 - the trial's failure
            self._fail_trial(trial, e)
            return
        if tid in self._live:
            self._live[tid]["restoring"] = None
        if result.get("__duplicate__"):
            trial.last_result = {**trial.last_result, "done": True}
            self._complete(trial)
            return
        ckpt = result.pop("__checkpoint__", None)
        if ckpt is not None:
            self._add_checkpoint(trial, ckpt, result)
        trial.update_last_result(result)
        self._check_metric(result)
        self.progress.on_result(trial, result)
        self._search.on_trial_result(tid, result)
        decision = self._scheduler.on_trial_result(self, trial, result)
        self._hook("on_trial_result", trial=trial, result=result)
        if trial.is_finished or tid not in self._live:
            return
        if result.get("done") or (self._stopper is not None and self._stopper(tid, result)):
            decision = TrialScheduler.STOP
        if decision == TrialScheduler.STOP:
            self._complete(trial)
        elif decision == TrialScheduler.PAUSE:
            self._pause(trial)
        else:
            live = self._live[tid]
            with self._spans.active(trial):
                nxt = live["actor"].train.remote()
            live["ref"] = nxt
            self._ref_trial[nxt] = tid

    def _check_metric(self, result: dict[str, Any]) -> None:
        if self._metric_checked:
            return
        self._metric_checked = True
        for who, metric in ((type(self._scheduler).__name__, self._scheduler.metric
                             if self._scheduler.requires_metric() else None),
                            ("the search algorithm", getattr(self._search, "metric", None))):
            if metric and metric not in result:
                reported = sorted(k for k in result if not k.startswith("__") and k != "config")
                raise ValueError(f"Trial returned a result which did not include the specified metric "
                                 f"{metric!r} that {who} expects. Reported metrics: {reported}. Make sure "
                                 f"the trainable reports {metric!r} or fix TuneConfig(metric=...).")

    def _add_checkpoint(self, trial: Trial, ckpt: Any, metrics: dict[str, Any]) -> None:
        trial.checkpoint = ckpt
        trial.checkpoints.append((ckpt, {k: v for k, v in metrics.items() if k != "config"}))
        trial.checkpoint_count += 1
        cc = self._rc.checkpoint_config
        drop = es.checkpoints_to_delete(trial.checkpoints, cc.num_to_keep, cc.checkpoint_score_attribute,
                                        cc.checkpoint_score_order)
        in_use = {t.restore_checkpoint for t in self._trials if t.restore_checkpoint is not None}
        in_use |= {live["restoring"] for live in self._live.values() if live["restoring"] is not None}
        for i in sorted(drop, reverse=True):
            c, _ = trial.checkpoints[i]
            if c in in_use:
                continue
            storage.delete_dir(c.filesystem, c.path)
            del trial.checkpoints[i]
        self._hook("on_trial_save", trial=trial)
        self._hook("on_checkpoint", trial=trial, checkpoint=ckpt)

    def _complete(self, trial: Trial) -> None:
        self._scheduler.on_trial_complete(self, trial, trial.last_result)
        self._search.on_trial_complete(trial.trial_id, trial.last_result)
        self._terminate(trial, Trial.TERMINATED)

    def _terminate(self, trial: Trial, status: str) -> None:
        live = self._live.pop(trial.trial_id, None)
        if live is not None:
            self._ref_trial.pop(live["ref"], None)
            if self._rc.checkpoint_config.checkpoint_at_end and status == Trial.TERMINATED:
                self._save_trial(trial, live["actor"])
            self._release(live, healthy=status != Trial.ERROR)
        trial.set_status(status)
        self._spans.end(trial)
        self.progress.on_trial_end(trial)
        es.write_trial_files(self._fs, trial)
        if status == Trial.TERMINATED:
            self._hook("on_trial_complete", trial=trial)
        self._save(force=True)

    def _save_trial(self, trial: Trial, actor: Any) -> None:
        try:
            ckpt = ember.get(actor.save.remote(), timeout=600)
        except Exception:  # noqa: BLE001 - a trial that cannot save keeps its older checkpoint
            return
        if ckpt is not None and ckpt != trial.checkpoint:
            self._add_checkpoint(trial, ckpt, trial.last_result)

    def _pause(self, trial: Trial) -> None:
        live = self._live.pop(trial.trial_id)
        self._ref_trial.pop(live["ref"], None)
        if trial.restore_checkpoint is None:
            self._save_trial(trial, live["actor"])
        self._release(live, healthy=True)
        trial.set_status(Trial.PAUSED)
        self._spans.event(trial, "paused")

    def _release(self, live: dict[str, Any], healthy: bool) -> None:
        actor = live["actor"]
        if self._reuse and healthy:
            self._idle.append((actor, live["req"], live["pg"]))  # its next start() stops the old trial
            return
        try:
            ember.get(actor.stop.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the actor is killed below either way
            pass
        release(actor, live["pg"])

    def _fail_trial(self, trial: Trial, error: BaseException, retry: bool = True) -> None:
        live = self._live.pop(trial.trial_id, None)
        if live is not None:
            self._ref_trial.pop(live["ref"], None)
            release(live["actor"], live["pg"])
        trial.error = error
        trial.error_msg = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        trial.num_failures += 1
        fc = self._rc.failure_config
        if retry and (fc.max_failures == -1 or trial.num_failures <= fc.max_failures):
            trial.set_status(Trial.PENDING)
            self._spans.event(trial, "retrying", error=trial.error_msg)
            self._hook("on_trial_recover", trial=trial)
            return
        self._scheduler.on_trial_error(self, trial)
        self._search.on_trial_complete(trial.trial_id, trial.last_result or None, error=True)
        trial.set_status(Trial.ERROR)
        self._spans.end(trial, error=error)
        self.progress.on_trial_end(trial)
        es.write_trial_files(self._fs, trial)
        self._hook("on_trial_error", trial=trial)
        self._save(force=True)
        if fc.fail_fast == "raise":
            raise error
        if fc.fail_fast:
            self._stop_everything("fail_fast")

    # ---- state ----------------------------------------------------------------------------
    def _save(self, force: bool = False, final: bool = False) -> None:
        """Writes the experiment state: always when `final`; else when something important changed
        (`force`) or a second passed, but never sooner than 10x the last write's cost after it,
        so saving costs the run at most ~10%."""
        self._dirty = self._dirty or force
        gap = time.monotonic() - self._last_save
        if not final and not (self._dirty and gap >= 10 * self._save_cost) and gap < max(1.0, 10 * self._save_cost):
            return
        t0 = time.monotonic()
        es.save_experiment_state(self._fs, self._exp_path, self._trials, self._search, self._scheduler,
                                 {"elapsed_s": self.elapsed_s, "trial_index": self._index,
                                  "callbacks": self._cb.get_state()})
        self._save_cost = time.monotonic() - t0
        self._last_save = time.monotonic()
        self._dirty = False

    @property
    def elapsed_s(self) -> float:
        """Seconds the experiment has run, restored runs included."""
        start = getattr(self, "_start_time", None)
        return self._elapsed_before + (0.0 if start is None else time.monotonic() - start)

    def _shutdown_actors(self) -> None:
        for tid, live in list(self._live.items()):
            release(live["actor"], live["pg"])
            trial = self._by_id[tid]
            if not trial.is_finished:
                trial.set_status(Trial.PAUSED if trial.status == Trial.RUNNING else trial.status)
        self._live.clear()
        self._ref_trial.clear()
        # Idle actors still hold their last trial: let it clean up (bounded), then kill them.
        stops = [actor.stop.remote() for actor, _, _ in self._idle]
        if stops:
            try:
                ember.wait(stops, num_returns=len(stops), timeout=10)
            except Exception:  # noqa: BLE001 - they are killed below either way
                pass
        for actor, _, pg in self._idle:
            release(actor, pg)
        self._idle.clear()
        self._spans.end_all()
