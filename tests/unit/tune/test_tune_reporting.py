"""Tune's pure pieces around a run, without a cluster: the callback list, the logger callbacks'
files (real files in a tmp dir), TrialPlateauStopper, CLIReporter's status block,
ResumeConfig, the trainable registry and ExperimentAnalysis over given trials."""
from __future__ import annotations

import csv
import json
import pickle

import pytest

from ember import tune
from ember.tune.callback import CallbackList
from ember.tune.experiment.trial import Trial
from ember.tune.logger import CSVLoggerCallback, JsonLoggerCallback, LoggerCallback, TBXLoggerCallback
from ember.tune.progress_reporter import psql_table
from ember.tune.stopper import TrialPlateauStopper


class Recorder(tune.Callback):
    def __init__(self):
        self.calls = []
        self.restored = None

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.calls.append(("setup", num_samples, total_num_samples))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append(("result", iteration, trial, result["x"]))

    def get_state(self):
        return {"n": len(self.calls)}

    def set_state(self, state):
        self.restored = state


def test_callback_list_calls_every_callback_with_keywords_and_keeps_state():
    a, b = Recorder(), Recorder()
    cl = CallbackList([a, b])
    cl.setup(stop=None, num_samples=3, total_num_samples=6)
    cl.call("on_trial_result", iteration=2, trials=[], trial="t", result={"x": 1})
    cl.call("on_trial_complete", iteration=2, trials=[], trial="t")  # the base hook: a no-op
    assert a.calls == b.calls == [("setup", 3, 6), ("result", 2, "t", 1)]
    assert cl.get_state() == [{"n": 2}, {"n": 2}]
    fresh = CallbackList([Recorder(), Recorder()])
    fresh.set_state([{"n": 2}, None])
    assert fresh.callbacks[0].restored == {"n": 2} and fresh.callbacks[1].restored is None
    with pytest.raises(ValueError, match="unknown callback hook 'on_nothing'"):
        cl.call("on_nothing")
    with pytest.raises(TypeError, match="tune.Callback instances"):
        CallbackList([object()])


def _trial(tmp_path, tid="t1", config=None):
    t = Trial(trial_id=tid, config=config or {"lr": 0.1, "net": {"width": 4}})
    t.path = str(tmp_path / f"trial_{tid}")
    return t


def test_csv_and_json_loggers_write_rays_files(tmp_path):
    t = _trial(tmp_path)
    loggers = [CSVLoggerCallback(), JsonLoggerCallback()]
    for lg in loggers:
        lg.on_trial_start(iteration=0, trials=[t], trial=t)
    for i in (1, 2):
        r = {"loss": 1.0 / i, "training_iteration": i, "nested": {"a": i}, "__checkpoint__": None}
        t.update_last_result(r)
        for lg in loggers:
            lg.on_trial_result(iteration=i, trials=[t], trial=t, result=r)
    # a key missing from the first result is left out of progress.csv, as in Ray
    extra = {"loss": 0.25, "training_iteration": 3, "nested": {"a": 3}, "late": 1}
    for lg in loggers:
        lg.on_trial_result(iteration=3, trials=[t], trial=t, result=extra)
        lg.on_trial_complete(iteration=3, trials=[t], trial=t)
    with open(tmp_path / "trial_t1" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["loss", "training_iteration", "nested/a"]
    assert [r["loss"] for r in rows] == ["1.0", "0.5", "0.25"] and rows[2]["nested/a"] == "3"
    lines = [json.loads(x) for x in (tmp_path / "trial_t1" / "result.json").read_text().splitlines()]
    assert [x["loss"] for x in lines] == [1.0, 0.5, 0.25] and lines[2]["late"] == 1
    assert lines[0]["config"] == {"lr": 0.1, "net": {"width": 4}} and "__checkpoint__" not in lines[0]
    assert json.loads((tmp_path / "trial_t1" / "params.json").read_text()) == {"lr": 0.1, "net": {"width": 4}}
    assert pickle.loads((tmp_path / "trial_t1" / "params.pkl").read_bytes()) == t.config


def test_a_restarted_trial_appends_to_its_progress_csv(tmp_path):
    t = _trial(tmp_path)
    first = CSVLoggerCallback()
    t.update_last_result({"loss": 1.0, "training_iteration": 1})
    first.on_trial_result(iteration=1, trials=[t], trial=t, result=t.last_result)
    first.on_trial_error(iteration=1, trials=[t], trial=t)
    again = CSVLoggerCallback()  # e.g. a restored experiment: the trial is past iteration 0
    again.on_trial_start(iteration=2, trials=[t], trial=t)
    again.on_trial_result(iteration=2, trials=[t], trial=t, result={"loss": 0.5, "training_iteration": 2})
    text = (tmp_path / "trial_t1" / "progress.csv").read_text().splitlines()
    assert text == ["loss,training_iteration", "1.0,1", "0.5,2"]


def test_a_logger_callback_subclass_gets_start_result_and_end():
    seen = []

    class Mine(LoggerCallback):
        def log_trial_start(self, trial):
            seen.append(("start", trial))

        def log_trial_result(self, iteration, trial, result):
            seen.append(("result", trial, result["v"]))

        def log_trial_end(self, trial, failed=False):
            seen.append(("end", trial, failed))

    m = Mine()
    m.on_trial_start(iteration=0, trials=[], trial="a")
    m.on_trial_result(iteration=1, trials=[], trial="a", result={"v": 7})
    m.on_trial_error(iteration=1, trials=[], trial="a")
    m.on_trial_complete(iteration=1, trials=[], trial="b")
    assert seen == [("start", "a"), ("result", "a", 7), ("end", "a", True), ("end", "b", False)]


def test_tbx_logger_writes_event_files_or_names_the_missing_package(tmp_path):
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="tensorboardX"):
            TBXLoggerCallback()
        return
    t = _trial(tmp_path)
    tbx = TBXLoggerCallback()
    tbx.on_trial_result(iteration=1, trials=[t], trial=t, result={"loss": 0.5, "training_iteration": 1})
    tbx.on_trial_complete(iteration=1, trials=[t], trial=t)
    events = list((tmp_path / "trial_t1").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_trial_plateau_stopper_stops_on_a_flat_metric_after_the_grace_period():
    s = TrialPlateauStopper("loss", std=0.01, num_results=3, grace_period=4)
    assert [s("a", {"loss": v}) for v in (5.0, 1.0, 1.0, 1.0, 1.0)] == [False, False, False, True, True]
    noisy = TrialPlateauStopper("loss", std=0.01, num_results=3, grace_period=1)
    assert not any(noisy("b", {"loss": v}) for v in (1.0, 2.0, 1.0, 2.0))
    gated = TrialPlateauStopper("loss", num_results=2, grace_period=1, metric_threshold=0.5, mode="min")
    assert [gated("c", {"loss": v}) for v in (1.0, 1.0, 0.4, 0.4)] == [False, False, False, True]
    with pytest.raises(ValueError, match="needs mode"):
        TrialPlateauStopper("loss", metric_threshold=1.0)
    with pytest.raises(ValueError, match="'loss' is not a number"):
        s("d", {"acc": 1})


def test_cli_reporter_prints_rays_status_block():
    trials = []
    for i, (lr, loss) in enumerate([(0.1, 0.5), (0.01, 0.25)]):
        t = Trial(trial_id=f"0000{i}", config={"lr": lr, "fixed": 1}, trainable_name="train_fn")
        t.status = Trial.TERMINATED
        t.update_last_result({"loss": loss, "training_iteration": 3, "time_total_s": 1.5, "custom": i})
        trials.append(t)
    r = tune.CLIReporter(metric_columns=["loss"], parameter_columns=["lr"], metric="loss", mode="min")
    text = r._progress_str(trials, True)
    lines = text.splitlines()
    assert lines[0] == "== Status ==" and lines[1].startswith("Current time: ")
    assert "Current best trial: 00001 with loss=0.25 and parameters={'lr': 0.01, 'fixed': 1}" in text
    assert "Number of trials: 2/2 (2 TERMINATED)" in text
    header = next(x for x in lines if x.startswith("| Trial name"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["Trial name", "status", "loc", "lr", "loss"]
    row = next(x for x in lines if x.startswith("| train_fn_00001"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["train_fn_00001", "TERMINATED", "", "0.01", "0.25"]
    # default columns: Ray's known metrics present in results (iter, total time, loss), varying params
    auto = tune.CLIReporter()._table(trials).splitlines()[1]
    cells = [c.strip() for c in auto.strip("|").split("|")]
    assert cells[:4] == ["Trial name", "status", "loc", "lr"] and "fixed" not in cells
    assert {"loss", "iter", "total time (s)", "custom"} <= set(cells)
    r.add_metric_column("custom")
    assert "custom" in r._table(trials)
    assert r.should_report(trials, done=True)


def test_psql_table_right_aligns_numbers():
    assert psql_table(["name", "n"], [["a", 1], ["bb", 10]]).splitlines() == [
        "+------+----+", "| name |  n |", "|------+----|", "| a    |  1 |", "| bb   | 10 |", "+------+----+"]


def test_resume_config_maps_to_restore_flags_and_refuses_what_ember_lacks():
    assert tune.ResumeConfig().restore_flags() == {"resume_unfinished": True, "resume_errored": False,
                                                   "restart_errored": False}
    rc = tune.ResumeConfig(errored=tune.ResumeConfig.ResumeType.RESTART)
    assert rc.restore_flags()["restart_errored"]
    with pytest.raises(ValueError, match="ResumeConfig.finished='RESUME' is not supported"):
        tune.ResumeConfig(finished="RESUME")


def test_register_trainable_names_a_trainable():
    def fn(config):
        pass

    tune.register_trainable("unit_fn", fn)
    from ember.tune.registry import get_trainable_cls
    assert get_trainable_cls("unit_fn") is fn
    with pytest.raises(ValueError, match="unknown trainable 'nope'"):
        get_trainable_cls("nope")
    with pytest.raises(TypeError, match="trainable must be"):
        tune.register_trainable("bad", 3)


def test_experiment_analysis_over_trials(tmp_path):
    trials = []
    for i, hist in enumerate([[3.0, 1.0], [1.5, 1.5], [float("nan")]]):
        t = Trial(trial_id=f"t{i}", config={"i": i})
        for it, v in enumerate(hist, 1):
            t.update_last_result({"loss": v, "training_iteration": it})
        trials.append(t)
    a = tune.ExperimentAnalysis(str(tmp_path), trials=trials, default_metric="loss", default_mode="min")
    assert a.best_trial is trials[0] and a.best_config == {"i": 0} and a.best_result["loss"] == 1.0
    assert a.get_best_trial("loss", "min", scope="avg") is trials[1]
    assert a.get_best_config("loss", "max", scope="all") == {"i": 0}
    assert a.results_df.loc["t1", "config/i"] == 1
    assert a.dataframe(metric="loss", mode="max")["loss"].tolist()[:2] == [3.0, 1.5]
    assert a.trial_dataframes["t0"]["loss"].tolist() == [3.0, 1.0]
    assert a.best_dataframe["training_iteration"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        tune.ExperimentAnalysis(str(tmp_path), trials=trials).get_best_trial()
    with pytest.raises(ValueError, match="experiment_state.pkl is missing"):
        tune.ExperimentAnalysis(str(tmp_path))


def test_run_config_fields_ember_cannot_honour_raise_naming_them():
    from ember import train

    for field in ({"log_to_file": True}, {"sync_config": object()}, {"worker_runtime_env": {"pip": ["x"]}}):
        name = next(iter(field))
        with pytest.raises(NotImplementedError, match=f"RunConfig\\({name}="):
            tune.RunConfig(**field)
    with pytest.raises(NotImplementedError, match="RunConfig\\(callbacks=...\\) is not supported by an Ember Trainer"):
        train.DataParallelTrainer(lambda: None, run_config=train.RunConfig(callbacks=[tune.Callback()]))
