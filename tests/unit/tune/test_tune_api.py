"""Tune's API without a cluster: exported names, bad configuration caught before anything runs,
ResultGrid over recorded trials, checkpoint retention, and the status table."""
from __future__ import annotations

import math

import pytest

import ember
from ember import train, tune
from ember.train import Checkpoint
from ember.tune._internal.experiment_state import checkpoints_to_delete
from ember.tune._internal.progress import format_status
from ember.tune.experiment.trial import Trial
from ember.tune.result_grid import ResultGrid
from ember.tune.schedulers import ASHAScheduler, MedianStoppingRule
from ember.tune.search.optuna import OptunaSearch


def _noop(config):
    tune.report({"x": 1})


def test_exported_names_match_ray_tune():
    for name in ("Tuner", "TuneConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "Checkpoint",
                 "ResultGrid", "Trainable", "report", "get_checkpoint", "get_context", "with_resources",
                 "with_parameters", "PlacementGroupFactory", "uniform", "quniform", "loguniform",
                 "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint", "qlograndint",
                 "choice", "grid_search", "sample_from", "Stopper"):
        assert hasattr(tune, name), name
    assert tune.Checkpoint is train.Checkpoint
    assert issubclass(tune.RunConfig, train.RunConfig) and issubclass(tune.CheckpointConfig, train.CheckpointConfig)
    assert ember.tune is tune


@pytest.mark.parametrize("make, error, message", [
    (lambda: tune.TuneConfig(mode="best"), ValueError, "mode"),
    (lambda: tune.TuneConfig(num_samples=0), ValueError, "num_samples"),
    (lambda: tune.TuneConfig(max_concurrent_trials=0), ValueError, "max_concurrent_trials"),
    (lambda: tune.TuneConfig(time_budget_s=-1), ValueError, "time_budget_s"),
    (lambda: tune.Tuner(None), TypeError, "needs a trainable"),
    (lambda: tune.Tuner(42), TypeError, "trainable must be"),
    (lambda: tune.Tuner(_noop, tune_config={"metric": "x"}), TypeError, "TuneConfig"),
    (lambda: tune.Tuner(_noop, run_config=object()), TypeError, "RunConfig"),
    (lambda: tune.Tuner(_noop, tune_config=tune.TuneConfig(scheduler="asha")), TypeError, "TrialScheduler"),
    (lambda: tune.Tuner(_noop, run_config=tune.RunConfig(stop=3)), ValueError, "RunConfig.stop"),
    (lambda: tune.Tuner(_noop, run_config=tune.RunConfig(stop={"loss": "low"})), ValueError, "number"),
    (lambda: tune.with_resources(_noop, {"CPU": -1}), ValueError, ">= 0"),
    (lambda: tune.with_resources(_noop, 3), ValueError, "with_resources"),
    (lambda: tune.PlacementGroupFactory([]), ValueError, "bundles"),
])
def test_bad_configuration_fails_clearly(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("tune_config, message", [
    (tune.TuneConfig(scheduler=ASHAScheduler()), "AsyncHyperBandScheduler needs a metric and a mode"),
    (tune.TuneConfig(metric="loss", scheduler=MedianStoppingRule()), "needs a metric and a mode"),
    (tune.TuneConfig(metric="a", mode="max", scheduler=ASHAScheduler(metric="b", mode="max")), "one place"),
    (tune.TuneConfig(search_alg=OptunaSearch()), "needs a metric and a mode"),
])
def test_schedulers_and_searchers_without_metric_fail_before_any_trial(tune_config, message):
    assert not ember.is_initialized()
    with pytest.raises(ValueError, match=message):
        tune.Tuner(_noop, param_space={"x": tune.uniform(0, 1)}, tune_config=tune_config).fit()
    assert not ember.is_initialized()  # nothing was started


def _trial(tid, values, status=Trial.TERMINATED, **config):
    t = Trial(trial_id=tid, config=config, status=status)
    for i, v in enumerate(values):
        t.update_last_result({"loss": v, "training_iteration": i + 1})
    return t


def test_result_grid_best_result_scopes_and_dataframe():
    a = _trial("a", [5.0, 1.0, 4.0], lr=0.1)  # best ever 1.0, last 4.0
    b = _trial("b", [3.0, 3.0, 3.0], lr=0.2)
    c = _trial("c", [float("nan")], lr=0.3)
    err = _trial("e", [], status=Trial.ERROR, lr=0.4)
    err.error = RuntimeError("boom")
    grid = ResultGrid([a, b, c, err], metric="loss", mode="min", experiment_path="/x", filesystem=None)
    assert grid.get_best_result().config == {"lr": 0.2}
    assert grid.get_best_result(scope="all").config == {"lr": 0.1}
    assert grid.get_best_result(metric="loss", mode="max").config == {"lr": 0.1}
    assert len(grid) == 4 and grid.num_errors == 1 and grid.num_terminated == 3
    assert [str(e) for e in grid.errors] == ["boom"]
    assert grid[0].metrics_dataframe["loss"].tolist() == [5.0, 1.0, 4.0]
    df = grid.get_dataframe()
    assert list(df["config/lr"]) == [0.1, 0.2, 0.3, 0.4] and df["loss"].tolist()[:2] == [4.0, 3.0]
    assert grid.get_dataframe(filter_metric="loss", filter_mode="min")["loss"].tolist()[0] == 1.0
    assert math.isnan(df["loss"].tolist()[2])
    with pytest.raises(ValueError, match="scope"):
        grid.get_best_result(scope="best")
    with pytest.raises(RuntimeError, match="No best trial"):
        grid.get_best_result(metric="acc", mode="max")
    with pytest.raises(ValueError, match="needs a metric"):
        ResultGrid([a, b], metric=None, mode=None, experiment_path="/x", filesystem=None).get_best_result()


def test_result_grid_of_one_trial_is_its_best_without_a_metric():
    """Ray's ResultGrid returns the only trial's result when there is one, metric or not."""
    only = _trial("a", [5.0, 1.0], lr=0.1)
    grid = ResultGrid([only], metric=None, mode=None, experiment_path="/x", filesystem=None)
    assert grid.get_best_result().config == {"lr": 0.1}
    assert grid.get_best_result(metric="never_reported", mode="max").metrics["loss"] == 1.0


def test_checkpoint_retention_keeps_the_best_and_the_latest():
    ck = [(Checkpoint(f"/tmp/c{i}"), {"acc": acc}) for i, acc in enumerate([0.5, 0.9, 0.1, 0.7, 0.2])]
    assert checkpoints_to_delete(ck, None, None, "max") == []
    assert checkpoints_to_delete(ck, 2, None, "max") == [0, 1, 2]  # the two most recent stay
    assert checkpoints_to_delete(ck, 2, "acc", "max") == [0, 2]  # best 0.9, 0.7 and the latest
    assert checkpoints_to_delete(ck, 1, "acc", "min") == [0, 1, 3]  # best 0.1 and the latest


def test_status_table_counts_states_and_shows_the_best_trial():
    a = _trial("a", [0.5], status=Trial.RUNNING, lr=0.1)
    b = _trial("b", [0.2], lr=0.01)
    c = _trial("c", [], status=Trial.ERROR, lr=1.0)
    c.error_msg = "Traceback...\nValueError: diverged"
    text = format_status([a, b, c], metric="loss", mode="min", elapsed_s=3.0,
                         param_space={"lr": tune.loguniform(1e-3, 1)})
    assert "1 RUNNING" in text and "1 TERMINATED" in text and "1 ERROR" in text
    assert "Current best trial: b with loss=0.2" in text
    assert "| lr " in text and "ValueError: diverged" in text
