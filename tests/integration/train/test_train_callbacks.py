"""`RunConfig(callbacks=[UserCallback])` on an embedded cluster: `after_report` gets every rank's
metrics and the persisted checkpoint of each recorded report, `after_exception` the failing ranks'
exceptions at each failed attempt; the hooks write real files (in Ray they run in the controller
actor, so a file is what a user's callback would write too)."""
from __future__ import annotations

import json

import pytest

import ember
from ember import train
from ember.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig, UserCallback


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


class Recorder(UserCallback):
    def __init__(self, path):
        self.path = path

    def _write(self, row):
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def after_report(self, run_context, metrics, checkpoint):
        self._write({"hook": "report", "run": run_context.get_run_config().name, "metrics": metrics,
                     "checkpoint": None if checkpoint is None else checkpoint.to_dict()})

    def after_exception(self, run_context, worker_exceptions):
        self._write({"hook": "exception", "errors": {str(r): f"{type(e).__name__}: {e}"
                                                     for r, e in worker_exceptions.items()}})


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def report_loop():
    rank = train.get_context().get_world_rank()
    train.report({"rank": rank, "step": 0})
    train.report({"rank": rank, "step": 1}, checkpoint=train.Checkpoint.from_dict({"by": rank}) if rank == 0 else None)


def test_after_report_gets_every_ranks_metrics_and_the_checkpoint(cluster, tmp_path):
    log = tmp_path / "hooks.jsonl"
    rc = RunConfig(name="cb", storage_path=str(tmp_path), callbacks=[Recorder(str(log))])
    DataParallelTrainer(report_loop, scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert _rows(log) == [
        {"hook": "report", "run": "cb", "metrics": [{"rank": 0, "step": 0}, {"rank": 1, "step": 0}], "checkpoint": None},
        {"hook": "report", "run": "cb", "metrics": [{"rank": 0, "step": 1}, {"rank": 1, "step": 1}],
         "checkpoint": {"by": 0}},
    ]


def failing_loop():
    if train.get_context().get_world_rank() == 1:
        raise ValueError("rank one breaks")
    train.report({"ok": 1})


def test_after_exception_gets_the_failing_ranks_at_each_attempt(cluster, tmp_path):
    log = tmp_path / "hooks.jsonl"
    rc = RunConfig(name="cbfail", storage_path=str(tmp_path), callbacks=[Recorder(str(log))],
                   failure_config=FailureConfig(max_failures=1))
    with pytest.raises(train.WorkerGroupError, match="rank one breaks") as info:  # as Ray 2.60's fit() raises
        DataParallelTrainer(failing_loop, scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert isinstance(info.value, train.TrainingFailedError)
    assert {r: type(e) for r, e in info.value.worker_failures.items()} == {1: ValueError}
    assert info.value.result.error.worker_failures.keys() == {1}
    rows = [r for r in _rows(log) if r["hook"] == "exception"]
    assert rows == [{"hook": "exception", "errors": {"1": "ValueError: rank one breaks"}}] * 2


def test_a_callback_that_is_not_a_user_callback_is_refused():
    class NotOne:
        def after_report(self, *a):
            pass

    with pytest.raises(NotImplementedError, match="not supported by an Ember Trainer for NotOne.*UserCallback"):
        DataParallelTrainer(report_loop, run_config=RunConfig(callbacks=[NotOne()]))


class Breaks(UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        raise KeyError("hook breaks")


def test_a_hook_that_raises_ends_the_run_with_a_controller_error(cluster, tmp_path):
    rc = RunConfig(name="cbbreak", storage_path=str(tmp_path), callbacks=[Breaks()],
                   failure_config=FailureConfig(max_failures=3))  # a controller failure is never retried
    with pytest.raises(train.ControllerError, match="controller error:\n'hook breaks'") as info:
        DataParallelTrainer(report_loop, scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert isinstance(info.value, train.TrainingFailedError)
    assert not isinstance(info.value, train.WorkerGroupError)
    assert isinstance(info.value.controller_failure, KeyError)
    assert info.value.result.error.controller_failure is info.value.controller_failure
    assert json.loads((tmp_path / "cbbreak" / "result.json").read_text().splitlines()[0])["step"] == 0
    assert len((tmp_path / "cbbreak" / "result.json").read_text().splitlines()) == 1  # no second attempt
