"""Train's RunConfig fields of Ray 2.60 on an embedded cluster: `worker_runtime_env` reaches every
rank's `os.environ`; `logging_config=LoggingConfig(log_level)` sets what Train's own logger
(`ember.train`) shows on the console (the driver's controller and the workers) and writes to its
application log files, while its system log files keep every level; the Tune-era fields raise
DeprecationWarning as Ray 2.60's Train RunConfig does."""
from __future__ import annotations

import json
import logging
import os
import time

import pytest

import ember
from ember import train
from ember._private.doors import driver
from ember.train import DataParallelTrainer, LoggingConfig, RunConfig, ScalingConfig


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def env_loop():
    value = os.environ.get("EMBER_TRAIN_TEST_VALUE")
    rank = train.get_context().get_world_rank()
    if value != "from-run-config":
        raise RuntimeError(f"rank {rank} sees EMBER_TRAIN_TEST_VALUE={value!r}")
    train.report({"value": value, "rank": rank})


def test_worker_runtime_env_reaches_every_rank(cluster, tmp_path):
    rc = RunConfig(name="env", storage_path=str(tmp_path),
                   worker_runtime_env={"env_vars": {"EMBER_TRAIN_TEST_VALUE": "from-run-config"}})
    result = DataParallelTrainer(env_loop, scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert result.metrics == {"value": "from-run-config", "rank": 0}
    assert "EMBER_TRAIN_TEST_VALUE" not in os.environ  # the driver's environment is left alone


def test_without_worker_runtime_env_the_variable_is_absent(cluster, tmp_path):
    rc = RunConfig(name="noenv", storage_path=str(tmp_path))
    with pytest.raises(train.TrainingFailedError, match="sees EMBER_TRAIN_TEST_VALUE=None"):
        DataParallelTrainer(env_loop, run_config=rc).fit()


def log_loop(config):
    logging.getLogger("user.code").info("user-line %s rank %d", config["tag"], train.get_context().get_world_rank())
    train.report({"step": 0})


def _fit_and_read(capfd, tmp_path, tag: str, level: str) -> str:
    capfd.readouterr()
    rc = RunConfig(name=tag, storage_path=str(tmp_path), logging_config=LoggingConfig(log_level=level))
    DataParallelTrainer(log_loop, train_loop_config={"tag": tag}, scaling_config=ScalingConfig(num_workers=2),
                        run_config=rc).fit()
    out, deadline = "", time.time() + 20
    while time.time() < deadline:  # worker lines reach the driver through the log monitor
        cap = capfd.readouterr()
        out += cap.out + cap.err
        if f"user-line {tag} rank 0" in out and f"user-line {tag} rank 1" in out:
            break
        time.sleep(0.2)
    assert f"user-line {tag} rank 0" in out and f"user-line {tag} rank 1" in out, out
    return out


def _records(tag: str, kind: str, component: str) -> list[dict]:
    directory = os.path.join(driver.session_dir(), "logs", "train")
    out = []
    for name in os.listdir(directory):
        if name.startswith(f"ember-train-{kind}-{component}-"):
            with open(os.path.join(directory, name)) as f:
                out += [r for r in map(json.loads, f) if r.get("run_name") == tag]
    return out


def test_debug_level_shows_trains_debug_lines_and_info_hides_them(cluster, tmp_path, capfd):
    out = _fit_and_read(capfd, tmp_path, "dbg", "DEBUG")
    assert "attempt 1: starting 2 workers" in out  # the controller, in the driver
    assert "rank 0: starting the training function" in out  # a worker, through the log monitor
    assert "rank 1: report 0 recorded" in out
    assert "(DataParallelTrainer dbg) report 0: step=0" in out

    out = _fit_and_read(capfd, tmp_path, "inf", "INFO")
    assert "(DataParallelTrainer inf) report 0: step=0" in out  # INFO lines still shown
    assert "attempt 1: starting" not in out and "starting the training function" not in out
    assert "report 0 recorded" not in out and "rank 0: pid" not in out

    out = _fit_and_read(capfd, tmp_path, "warn", "warning")
    assert "(DataParallelTrainer warn) report 0" not in out  # Train's INFO hidden, user's INFO shown

    # The system files keep every level, the application files follow log_level.
    for component, debug_line in (("controller", "attempt 1: starting"),
                                  ("worker", "starting the training function")):
        for tag, in_app in (("dbg", True), ("inf", False)):
            sys_msgs = [r["message"] for r in _records(tag, "sys", component)]
            app_msgs = [r["message"] for r in _records(tag, "app", component)]
            assert any(debug_line in m for m in sys_msgs), (component, tag, sys_msgs)
            assert any(debug_line in m for m in app_msgs) == in_app, (component, tag, app_msgs)
    worker = _records("dbg", "app", "worker")
    assert {r["world_rank"] for r in worker if r["name"].startswith("ember.train")} == {0, 1}
    assert any(r["name"] == "user.code" and r["message"].startswith("user-line dbg") for r in worker)
    # The driver's loggers are as they were before fit().
    assert logging.getLogger("ember.train").handlers == [] and logging.getLogger("ember.train").propagate


@pytest.mark.parametrize("field", [{"verbose": 1}, {"stop": {"training_iteration": 2}}, {"sync_config": train.SyncConfig()},
                                   {"progress_reporter": object()}, {"log_to_file": True}])
def test_tune_era_fields_raise_deprecation_warning_as_ray(field):
    with pytest.raises(DeprecationWarning, match=f"RunConfig\\({next(iter(field))}=...\\) is deprecated"):
        RunConfig(**field)


def test_train_checkpoint_and_failure_config_refuse_tune_fields_as_ray():
    from ember import tune

    for field in ({"checkpoint_frequency": 2}, {"checkpoint_at_end": True}):
        with pytest.raises(DeprecationWarning, match=f"CheckpointConfig\\({next(iter(field))}=...\\) is deprecated"):
            train.CheckpointConfig(**field)
        assert getattr(tune.CheckpointConfig(**field), next(iter(field))) == field[next(iter(field))]
    with pytest.raises(DeprecationWarning, match="FailureConfig\\(fail_fast=...\\) is deprecated"):
        train.FailureConfig(fail_fast=True)
    assert tune.FailureConfig(fail_fast="raise").fail_fast == "raise"


def test_storage_path_may_be_a_pathlib_path(tmp_path):
    assert RunConfig(storage_path=tmp_path).storage_path == str(tmp_path)


def test_logging_config_levels_are_checked():
    assert LoggingConfig("debug").log_level == "DEBUG"
    assert RunConfig().logging_config == LoggingConfig("INFO") and RunConfig().worker_runtime_env == {}
    with pytest.raises(ValueError, match="log_level must be a logging level name.*got 'LOUD'"):
        LoggingConfig("LOUD")
    with pytest.raises(ValueError, match="got 5"):
        LoggingConfig(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="logging_config must be an ember.train.LoggingConfig, got str"):
        RunConfig(logging_config="DEBUG")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="worker_runtime_env must be a dict"):
        RunConfig(worker_runtime_env=["EMBER_X=1"])  # type: ignore[arg-type]
