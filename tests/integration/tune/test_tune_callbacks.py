"""tune.run and tune.Callback on an embedded cluster, with real files in tmp dirs: every hook in
Ray's order, the logger files in each trial directory, ExperimentAnalysis, TuneError on failed
trials, resume="AUTO", register_trainable, CLIReporter, TrialPlateauStopper and Repeater."""
from __future__ import annotations

import csv
import json
import os

import pytest

import ember
from ember import tune
from ember.tune.search import Repeater
from ember.tune.search.optuna import OptunaSearch
from ember.tune.stopper import TrialPlateauStopper


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


class Hooks(tune.Callback):
    """Records each hook as (hook, trial id or None)."""

    def __init__(self):
        self.events = []
        self.setup_args = None

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.setup_args = (num_samples, total_num_samples)

    def _rec(self, name, trial=None):
        self.events.append((name, None if trial is None else trial.trial_id))

    def on_step_begin(self, iteration, trials, **info):
        self._rec("step_begin")

    def on_trial_start(self, iteration, trials, trial, **info):
        self._rec("start", trial)

    def on_trial_restore(self, iteration, trials, trial, **info):
        self._rec("restore", trial)

    def on_trial_save(self, iteration, trials, trial, **info):
        self._rec("save", trial)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        assert isinstance(checkpoint, tune.Checkpoint)
        self._rec("checkpoint", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        assert trial in trials and result["training_iteration"] == trial.last_result["training_iteration"]
        self._rec("result", trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._rec("recover", trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._rec("complete", trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._rec("error", trial)

    def on_experiment_end(self, trials, **info):
        self._rec("end")

    def of(self, tid):
        return [e for e, t in self.events if t == tid]


def _steps(config):
    ckpt = tune.get_checkpoint()
    start = ckpt.to_dict()["i"] + 1 if ckpt else 1
    for i in range(start, 4):
        if config.get("fail_at") == i and not ckpt:
            raise RuntimeError("boom")
        tune.report({"loss": config["x"] / i, "i": i},
                    checkpoint=tune.Checkpoint.from_dict({"i": i}) if i == 2 else None)


def test_tune_run_calls_every_hook_and_returns_an_analysis(cluster, tmp_path):
    hooks = Hooks()
    analysis = tune.run(_steps, config={"x": tune.grid_search([1.0, 2.0]), "fail_at": 3}, metric="loss",
                        mode="min", storage_path=str(tmp_path), name="exp", callbacks=[hooks], verbose=0,
                        max_failures=1)
    assert isinstance(analysis, tune.ExperimentAnalysis) and len(analysis.trials) == 2
    assert analysis.best_config["x"] == 1.0 and analysis.best_result["loss"] == pytest.approx(1 / 3)
    assert analysis.best_trial.status == "TERMINATED" and analysis.experiment_path == str(tmp_path / "exp")
    assert analysis.get_best_config("loss", "max", scope="all")["x"] == 2.0
    assert hooks.setup_args == (1, 2)
    tid = analysis.trials[0].trial_id
    # fails at 3 after checkpointing at 2 (the checkpoint is taken in before its result is
    # handed out), is retried from that checkpoint, finishes
    assert hooks.of(tid) == ["start", "result", "save", "checkpoint", "result", "recover", "start",
                             "restore", "result", "complete"]
    assert hooks.events[0] == ("step_begin", None) and hooks.events[-1] == ("end", None)
    trial_dir = analysis.trials[0].path
    with open(os.path.join(trial_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["i"] for r in rows] == ["1", "2", "3"] and "loss" in rows[0]
    with open(os.path.join(trial_dir, "result.json")) as f:
        lines = [json.loads(x) for x in f]
    assert [x["i"] for x in lines] == [1, 2, 3] and lines[0]["config"]["x"] == 1.0
    # the same analysis, read back from the directory
    again = tune.ExperimentAnalysis(str(tmp_path / "exp"), default_metric="loss", default_mode="min")
    assert again.best_config == analysis.best_config
    assert sorted(again.results_df["config/x"]) == [1.0, 2.0]
    assert again.trial_dataframes[tid]["i"].tolist() == [1, 2, 3]


def test_failed_trials_raise_tune_error_unless_told_not_to(cluster, tmp_path):
    hooks = Hooks()
    with pytest.raises(tune.TuneError, match="Trials did not complete"):
        tune.run(_steps, config={"x": 1.0, "fail_at": 1}, storage_path=str(tmp_path), name="bad",
                 callbacks=[hooks], verbose=0)
    tid = next(t for e, t in hooks.events if e == "error")
    assert hooks.of(tid) == ["start", "error"]
    analysis = tune.run(_steps, config={"x": 1.0, "fail_at": 1}, storage_path=str(tmp_path), name="bad2",
                        verbose=0, raise_on_failed_trial=False)
    assert [t.status for t in analysis.trials] == ["ERROR"]


def test_resume_auto_continues_a_finished_experiment_and_registered_names_run(cluster, tmp_path):
    tune.register_trainable("steps", _steps)
    first = tune.run("steps", config={"x": tune.grid_search([1.0, 3.0])}, storage_path=str(tmp_path),
                     name="r", verbose=0, resources_per_trial={"cpu": 1})
    assert {t.trainable_name for t in first.trials} == {"steps"}
    hooks = Hooks()
    again = tune.run("steps", config={"x": tune.grid_search([1.0, 3.0])}, storage_path=str(tmp_path),
                     name="r", verbose=0, resume="AUTO", callbacks=[hooks])
    assert [t.trial_id for t in again.trials] == [t.trial_id for t in first.trials]
    assert not [e for e in hooks.events if e[0] == "start"]  # finished trials are not rerun
    with pytest.raises(ValueError, match="no experiment to resume"):
        tune.run("steps", config={}, storage_path=str(tmp_path), name="none", resume=True, verbose=0)
    with pytest.raises(NotImplementedError, match="sync_config"):
        tune.run("steps", sync_config=object())
    with pytest.raises(TypeError, match="'nonsense'"):
        tune.run("steps", nonsense=1)


def test_cli_reporter_prints_the_status_block(cluster, tmp_path, capsys):
    reporter = tune.CLIReporter(metric_columns=["loss"], parameter_columns=["x"])
    tune.run(_steps, config={"x": tune.grid_search([1.0, 2.0])}, metric="loss", mode="min",
             storage_path=str(tmp_path), name="cli", progress_reporter=reporter)
    out = capsys.readouterr().out
    final = out[out.rindex("== Status =="):]
    assert "Number of trials: 2/2 (2 TERMINATED)" in final
    assert "Current best trial: " in final and "with loss=0.3333" in final
    header = next(x for x in final.splitlines() if x.startswith("| Trial name"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["Trial name", "status", "loc", "x", "loss"]
    with pytest.raises(TypeError, match="progress_reporter must be a tune.ProgressReporter"):
        tune.run(_steps, config={"x": 1.0}, storage_path=str(tmp_path), name="cli2", progress_reporter=3)


def _flat(config):
    for i in range(1, 30):
        tune.report({"loss": 1.0 if i > 2 else 10.0 * i})


def test_trial_plateau_stopper_and_repeater_in_a_run(cluster, tmp_path):
    analysis = tune.run(_flat, config={}, storage_path=str(tmp_path), name="plateau", verbose=0,
                        stop=TrialPlateauStopper("loss", num_results=3, grace_period=3))
    assert analysis.trials[0].last_result["training_iteration"] == 5  # 1.0 three times: iterations 3-5
    searcher = Repeater(OptunaSearch(seed=1), repeat=2)
    analysis = tune.run(_steps, config={"x": tune.uniform(1.0, 2.0)}, metric="loss", mode="min",
                        num_samples=4, search_alg=searcher, storage_path=str(tmp_path), name="rep", verbose=0)
    xs = sorted(t.config["x"] for t in analysis.trials)
    assert len(xs) == 4 and xs[0] == xs[1] and xs[2] == xs[3] and xs[1] != xs[2]


def test_optuna_search_keeps_its_study_in_the_given_storage(cluster, tmp_path):
    import optuna
    url = f"sqlite:///{tmp_path / 'study.db'}"
    searcher = OptunaSearch(study_name="ember-study", storage=url, seed=0)
    tune.run(_steps, config={"x": tune.uniform(1.0, 2.0)}, metric="loss", mode="min", num_samples=3,
             search_alg=searcher, storage_path=str(tmp_path), name="opt", verbose=0)
    study = optuna.load_study(study_name="ember-study", storage=url)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3 and all(1.0 / 3 <= t.value <= 2.0 / 3 for t in done)


def test_bayesopt_search_drives_a_run_and_survives_the_experiment_state(cluster, tmp_path):
    from ember.tune.search.bayesopt import BayesOptSearch

    searcher = BayesOptSearch(random_search_steps=2, random_state=0)
    analysis = tune.run(_steps, config={"x": tune.uniform(1.0, 2.0)}, metric="loss", mode="min", num_samples=4,
                        search_alg=searcher, storage_path=str(tmp_path), name="bo", verbose=0,
                        max_concurrent_trials=1)
    assert len(analysis.trials) == 4 and all(1.0 <= t.config["x"] <= 2.0 for t in analysis.trials)
    state = tune.ExperimentAnalysis(str(tmp_path / "bo"))  # the pickled state (searcher included) reads back
    assert len(state.trials) == 4
    assert len(searcher.optimizer.space) == 4  # every finished trial was registered


def test_hyperopt_search_drives_a_run(cluster, tmp_path):
    from ember.tune.search.hyperopt import HyperOptSearch

    analysis = tune.run(_steps, config={"x": tune.uniform(1.0, 2.0), "tag": tune.choice(["a", "b"])},
                        metric="loss", mode="min", num_samples=3, verbose=0, storage_path=str(tmp_path),
                        name="hyperopt", search_alg=HyperOptSearch(n_initial_points=2, random_state_seed=0))
    assert len(analysis.trials) == 3 and all(t.status == "TERMINATED" for t in analysis.trials)
    assert all(1.0 <= t.config["x"] <= 2.0 and t.config["tag"] in ("a", "b") for t in analysis.trials)
