"""Tuner.fit on an embedded cluster: function and class trainables, checkpoints, results on
disk, retries and recorded errors, concurrency limits, actor reuse, resources, with_parameters,
time budget, stop criteria, bad metrics and the status table."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import ember
from ember import train, tune
from ember.tune.schedulers import HyperBandScheduler


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, resources={"custom": 2}, object_store_memory=256 * 2**20)
    yield
    ember.shutdown()


def _run(trainable, tmp_path, name="exp", param_space=None, verbose=0, **tc):
    rc_keys = {"stop", "failure_config", "checkpoint_config"}
    rc = {k: tc.pop(k) for k in list(tc) if k in rc_keys}
    return tune.Tuner(trainable, param_space=param_space or {},
                      tune_config=tune.TuneConfig(**tc),
                      run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=verbose, **rc)).fit()


def _mark(d, what):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{what}-{os.getpid()}-{time.time_ns()}"), "w") as f:
        f.write(f"{time.time()}")


def _max_overlap(spans):
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def _spans(d):
    out = []
    for name in os.listdir(d):
        with open(os.path.join(d, name)) as f:
            out.append(json.loads(f.read()))
    return out


def test_function_trainable_reports_checkpoints_and_results(cluster, tmp_path):
    def trainable(config):
        ctx = tune.get_context()
        start = 0
        ckpt = tune.get_checkpoint()
        assert ckpt is None
        for step in range(start, 3):
            metrics = {"score": config["a"] * (step + 1), "trial": ctx.get_trial_id()}
            if step == 2:
                train.report(metrics, checkpoint=train.Checkpoint.from_dict({"step": step, "a": config["a"]}))
            else:
                tune.report(metrics)

    results = _run(trainable, tmp_path, param_space={"a": tune.grid_search([1, 2, 3]), "b": {"c": 5}},
                   metric="score", mode="max")
    assert len(results) == 3 and results.num_errors == 0 and results.num_terminated == 3
    best = results.get_best_result()
    assert best.config == {"a": 3, "b": {"c": 5}}
    assert best.metrics["score"] == 9 and best.metrics["training_iteration"] == 3
    assert best.metrics["trial"] in best.path
    assert best.checkpoint.to_dict() == {"step": 2, "a": 3}
    assert best.metrics_dataframe["score"].tolist() == [3, 6, 9]
    exp = tmp_path / "exp"
    assert (exp / "experiment_state.pkl").exists() and (exp / "tuner.pkl").exists()
    assert json.loads((exp / os.path.basename(best.path) / "params.json").read_text())["a"] == 3
    lines = (exp / os.path.basename(best.path) / "result.json").read_text().splitlines()
    assert [json.loads(x)["score"] for x in lines] == [3, 6, 9]
    assert tune.Tuner.can_restore(str(exp)) and not tune.Tuner.can_restore(str(tmp_path))


class Counter(tune.Trainable):
    """Adds config["lr"] each step; its state must survive checkpoints, pauses and restores."""

    def setup(self, config):
        self.total = 0.0
        self.steps = 0

    def step(self):
        self.total += self.config["lr"]
        self.steps += 1
        return {"score": self.total, "steps": self.steps}

    def save_checkpoint(self, checkpoint_dir):
        return {"total": self.total, "steps": self.steps}

    def load_checkpoint(self, checkpoint):
        self.total, self.steps = checkpoint["total"], checkpoint["steps"]


def test_class_trainable_with_checkpoint_frequency_and_stop(cluster, tmp_path):
    results = _run(Counter, tmp_path, param_space={"lr": tune.grid_search([1.0, 2.0])}, metric="score",
                   mode="max", stop={"training_iteration": 5},
                   checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True,
                                                           num_to_keep=2))
    best = results.get_best_result()
    assert best.metrics["score"] == 10.0 and best.metrics["training_iteration"] == 5
    assert best.checkpoint is not None
    kept = sorted(p.name for p in (tmp_path / "exp" / os.path.basename(best.path)).iterdir() if p.name.startswith("checkpoint_"))
    assert len(kept) == 2  # checkpoints at 2, 4 and at the end; num_to_keep=2 deleted the oldest
    assert best.get_best_checkpoint("score", "max") == best.checkpoint


def test_hyperband_pauses_and_resumes_trials_from_checkpoints(cluster, tmp_path):
    sched = HyperBandScheduler(max_t=9, reduction_factor=3)
    results = _run(Counter, tmp_path, param_space={"lr": tune.uniform(0.1, 1.0)}, num_samples=9,
                   metric="score", mode="max", scheduler=sched, max_concurrent_trials=3)
    assert results.num_errors == 0 and len(results) == 9
    for r in results:  # a resumed trial continues where it paused: its own step count == iteration
        df = r.metrics_dataframe
        assert (df["steps"] == df["training_iteration"]).all()
    iters = sorted(r.metrics["training_iteration"] for r in results)
    assert iters == [1, 1, 1, 1, 1, 1, 3, 3, 9]  # 9 at t=1, best 3 to t=3, best 1 to t=9


def test_failed_trials_are_retried_from_their_checkpoint(cluster, tmp_path):
    marks = tmp_path / "marks"

    def flaky(config):
        ckpt = tune.get_checkpoint()
        start = ckpt.to_dict()["step"] + 1 if ckpt else 0
        _mark(marks / tune.get_context().get_trial_id(), f"start{start}")
        for step in range(start, 4):
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_dict({"step": step}))
            if step == 1 and ckpt is None:
                raise RuntimeError("transient failure")

    results = _run(flaky, tmp_path, num_samples=2, failure_config=tune.FailureConfig(max_failures=1))
    assert results.num_errors == 0
    for r in results:
        assert r.metrics["step"] == 3 and r.metrics["training_iteration"] == 4
        starts = sorted(n.split("-")[0] for n in os.listdir(marks / r.metrics["trial_id"]))
        assert starts == ["start0", "start2"]  # the retry resumed after the checkpoint of step 1


def test_trial_errors_are_recorded_not_fatal(cluster, tmp_path):
    class Diverged(ValueError):
        pass

    def sometimes(config):
        if config["x"] == 2:
            raise Diverged("loss is nan")
        tune.report({"loss": config["x"]})

    results = _run(sometimes, tmp_path, param_space={"x": tune.grid_search([1, 2, 3])}, metric="loss", mode="min",
                   failure_config=tune.FailureConfig(max_failures=1))
    assert results.num_errors == 1 and results.num_terminated == 2
    err = results.errors[0]
    assert isinstance(err, Diverged) and "loss is nan" in str(err)
    bad = [r for r in results if r.error is not None][0]
    assert bad.config == {"x": 2}
    assert results.get_best_result().config == {"x": 1}
    with pytest.raises(Diverged):
        _run(sometimes, tmp_path, name="raise", param_space={"x": tune.grid_search([2])},
             failure_config=tune.FailureConfig(fail_fast="raise"))


def test_concurrency_limit_and_actor_reuse(cluster, tmp_path):
    spans = tmp_path / "spans"

    def timed(config):
        t0 = time.time()
        time.sleep(0.3)
        os.makedirs(spans, exist_ok=True)
        with open(spans / f"{config['i']}", "w") as f:
            json.dump([t0, time.time(), os.getpid()], f)
        tune.report({"i": config["i"]})

    results = _run(timed, tmp_path, param_space={"i": tune.grid_search(list(range(8)))}, max_concurrent_trials=2)
    assert results.num_terminated == 8
    rows = _spans(spans)
    assert _max_overlap([(s, e) for s, e, _ in rows]) <= 2
    assert len({pid for _, _, pid in rows}) <= 2  # function trainables reuse their actors
    for p in spans.iterdir():
        p.unlink()
    _run(timed, tmp_path, name="noreuse", param_space={"i": tune.grid_search(list(range(3)))}, reuse_actors=False)
    assert len({pid for _, _, pid in _spans(spans)}) == 3


def test_with_resources_limits_trials_by_custom_resource_and_rejects_infeasible(cluster, tmp_path):
    spans = tmp_path / "spans"

    def timed(config):
        t0 = time.time()
        time.sleep(0.3)
        os.makedirs(spans, exist_ok=True)
        with open(spans / f"{config['i']}", "w") as f:
            json.dump([t0, time.time()], f)
        tune.report({"res": tune.get_context().get_trial_resources()})

    results = _run(tune.with_resources(timed, {"cpu": 1, "custom": 1}), tmp_path,
                   param_space={"i": tune.grid_search(list(range(5)))})
    assert results.num_terminated == 5 and _max_overlap(_spans(spans)) <= 2
    assert results[0].metrics["res"] == {"CPU": 1.0, "custom": 1.0}
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}])
    for p in spans.iterdir():
        p.unlink()
    results = _run(tune.with_resources(timed, pgf), tmp_path, name="pgf", param_space={"i": tune.grid_search(list(range(4)))})
    assert results.num_terminated == 4 and _max_overlap(_spans(spans)) <= 2  # 2 CPUs per trial of 4
    results = _run(tune.with_resources(timed, {"custom": 5}), tmp_path, name="infeasible", param_space={"i": 0})
    assert results.num_errors == 1 and "needs" in str(results.errors[0]) and "custom" in str(results.errors[0])


def test_with_parameters_puts_large_objects_once(cluster, tmp_path):
    import cloudpickle

    data = np.arange(2_000_000, dtype=np.int64)  # 16 MB

    def uses_data(config, data=None):
        tune.report({"total": int(data[::config["step"]].sum())})

    wrapped = tune.with_parameters(uses_data, data=data)
    assert len(cloudpickle.dumps(wrapped)) < 100_000  # the array travels by reference
    results = _run(wrapped, tmp_path, param_space={"step": tune.grid_search([1, 2, 3])})
    assert sorted(r.metrics["total"] for r in results) == sorted(int(data[::s].sum()) for s in (1, 2, 3))


def test_time_budget_stops_the_experiment(cluster, tmp_path):
    def forever(config):
        while True:
            time.sleep(0.05)
            tune.report({"alive": 1})

    t0 = time.monotonic()
    results = _run(forever, tmp_path, num_samples=2, time_budget_s=4)
    assert 4 <= time.monotonic() - t0 < 60  # the trials never end by themselves
    assert results.num_terminated == 2 and results.num_errors == 0


def test_unknown_metric_fails_clearly_and_the_cluster_keeps_working(cluster, tmp_path):
    def reports_loss(config):
        tune.report({"loss": 1.0})

    with pytest.raises(ValueError, match="'acc'.*Reported metrics: .*'loss'"):
        _run(reports_loss, tmp_path, num_samples=2, metric="acc", mode="max",
             scheduler=HyperBandScheduler(max_t=3))
    with pytest.raises(ValueError, match="stopping criterion 'epochs'"):
        _run(reports_loss, tmp_path, name="stop", stop={"epochs": 3})
    assert _run(reports_loss, tmp_path, name="after").num_terminated == 1


def test_status_table_is_printed_unless_quiet(cluster, tmp_path, capsys):
    def trainable(config):
        tune.report({"loss": config["lr"]})

    results = _run(trainable, tmp_path, name="loud", param_space={"lr": tune.grid_search([0.5, 0.25])},
                   metric="loss", mode="min", verbose=1, trial_name_creator=lambda t: f"named_{t.config['lr']}",
                   trial_dirname_creator=lambda t: f"dir_{t.config['lr']}")
    out = capsys.readouterr().out
    assert "Final trial status: 2 TERMINATED" in out and "Current best trial" in out and "| lr " in out
    assert "| named_0.25 " in out and results.get_best_result().path.endswith("/loud/dir_0.25")
    _run(trainable, tmp_path, name="quiet", param_space={"lr": 0.1}, verbose=0)
    assert capsys.readouterr().out == ""


class LoopTrainer:
    """The public shape of ember.train's trainers (`train_loop_per_worker`, `train_loop_config`,
    `scaling_config`, `run_config`, `fit() -> Result`) with the loop run in the calling process.
    It checks Tune's trainer hook (config merge, resources, run_config, both ways results come
    back); a real TorchTrainer as a trainable is tested in test_tune_torch_trainer.py."""

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, scaling_config=None,
                 run_config=None, forward=True):
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.scaling_config = scaling_config or train.ScalingConfig()
        self.run_config = run_config or train.RunConfig()
        self.forward = forward

    def fit(self):
        import pandas as pd

        rows = []
        cfg = dict(self.train_loop_config, storage=self.run_config.storage_path)
        for epoch in range(cfg["epochs"]):
            row = {"loss": cfg["lr"] / (epoch + 1), "epoch": epoch, "storage": cfg["storage"]}
            rows.append(row)
            if self.forward:  # a Train controller that finds the trial's session forwards reports
                train.report(row)
        return train.Result(metrics=rows[-1], checkpoint=None, metrics_dataframe=pd.DataFrame(rows))


@pytest.mark.parametrize("forward", [True, False])
def test_a_trainer_as_trainable_gets_the_trial_config_and_resources(cluster, tmp_path, forward):
    trainer = LoopTrainer(lambda config: None, train_loop_config={"epochs": 3, "lr": 1.0},
                          scaling_config=train.ScalingConfig(num_workers=2), forward=forward)
    results = _run(trainer, tmp_path, name=f"trainer{forward}",
                   param_space={"train_loop_config": {"lr": tune.grid_search([0.5, 0.1])}},
                   metric="loss", mode="min")
    assert results.num_terminated == 2, results.errors
    best = results.get_best_result()
    assert best.config == {"train_loop_config": {"lr": 0.1}}
    assert best.metrics["epoch"] == 2 and best.metrics["training_iteration"] == 3
    assert best.metrics_dataframe["loss"].tolist() == pytest.approx([0.1, 0.05, 0.1 / 3])
    assert best.metrics["storage"] == best.path  # the trainer writes under the trial's directory
    assert trainer.train_loop_config == {"epochs": 3, "lr": 1.0}  # the user's trainer is untouched
    state = __import__("ember.tune._internal.experiment_state", fromlist=["x"]).load_experiment_state(
        results.filesystem, results.experiment_path)
    assert state["trials"][0].resources == {"CPU": 2.0}  # a bundle per worker, none for the trainer
