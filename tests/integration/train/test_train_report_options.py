"""`ember.train.report`'s upload options of Ray 2.60 on an embedded cluster with real files:
`checkpoint_upload_fn` persists the checkpoint itself (its returned Checkpoint is the one
recorded), `delete_local_checkpoint_after_upload` (default on only with ASYNC) removes the local
directory, and `validation` / NO_UPLOAD, which Ember does not implement, fail naming themselves."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

import ember
from ember import train
from ember.train import CheckpointUploadMode, DataParallelTrainer, RunConfig, ScalingConfig


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def _local_checkpoint(tag: str) -> train.Checkpoint:
    d = tempfile.mkdtemp(prefix="user_ckpt_")
    with open(os.path.join(d, "weights.txt"), "w") as f:
        f.write(tag)
    return train.Checkpoint.from_directory(d)


def delete_loop(config):
    kept = {}
    for i, (mode, delete) in enumerate(config["cases"]):
        ckpt = _local_checkpoint(f"case{i}")
        kwargs = {} if delete == "default" else {"delete_local_checkpoint_after_upload": delete}
        train.report({"i": i}, checkpoint=ckpt, checkpoint_upload_mode=CheckpointUploadMode[mode], **kwargs)
        kept[f"{mode}-{delete}"] = os.path.isdir(ckpt.path)
        shutil.rmtree(ckpt.path, ignore_errors=True)
    train.report({"kept": kept})


def test_delete_local_checkpoint_after_upload_follows_rays_defaults(cluster, tmp_path):
    cases = [("SYNC", "default"), ("ASYNC", "default"), ("SYNC", True), ("ASYNC", False)]
    result = DataParallelTrainer(delete_loop, train_loop_config={"cases": cases},
                                 run_config=RunConfig(name="del", storage_path=str(tmp_path))).fit()
    assert result.metrics["kept"] == {"SYNC-default": True, "ASYNC-default": False, "SYNC-True": False,
                                      "ASYNC-False": True}
    for i in range(4):  # every checkpoint was persisted whatever happened to the local copy
        with open(tmp_path / "del" / f"checkpoint_{i:06d}" / "weights.txt") as f:
            assert f.read() == f"case{i}"


def upload_loop(config):
    calls = []

    def upload(checkpoint, dir_name):
        calls.append(dir_name)
        dest = os.path.join(config["dest"], f"{dir_name}-rank{train.get_context().get_world_rank()}")
        shutil.copytree(checkpoint.path, dest)
        with open(os.path.join(dest, "uploaded_by_fn"), "w") as f:
            f.write("yes")
        return train.Checkpoint(dest)

    train.report({"step": 0}, checkpoint=_local_checkpoint("a"), checkpoint_upload_fn=upload)
    train.report({"step": 1, "calls": calls}, checkpoint=_local_checkpoint("b"), checkpoint_dir_name="mine",
                 checkpoint_upload_fn=upload)


def test_checkpoint_upload_fn_persists_and_its_checkpoint_is_recorded(cluster, tmp_path):
    dest = tmp_path / "elsewhere"
    dest.mkdir()
    result = DataParallelTrainer(upload_loop, train_loop_config={"dest": str(dest)},
                                 run_config=RunConfig(name="up", storage_path=str(tmp_path / "runs"))).fit()
    assert result.metrics["calls"] == ["checkpoint_000000", "mine"]
    assert result.checkpoint.path == str(dest / "mine-rank0")
    with result.checkpoint.as_directory() as d:
        for name, text in (("uploaded_by_fn", "yes"), ("weights.txt", "b")):
            with open(os.path.join(d, name)) as f:
                assert f.read() == text
    assert not (tmp_path / "runs" / "up" / "mine").exists()  # Ember's own copy did not run


def bad_upload_loop():
    train.report({"x": 1}, checkpoint=_local_checkpoint("c"), checkpoint_upload_fn=lambda c, n: "not a checkpoint")


def validation_loop():
    train.report({"x": 1}, checkpoint=_local_checkpoint("v"), validation=True)


def no_upload_loop():
    train.report({"x": 1}, checkpoint=_local_checkpoint("n"), checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD)


@pytest.mark.parametrize("loop, message", [
    (bad_upload_loop, "checkpoint_upload_fn must return an ember.train.Checkpoint, got str"),
    (validation_loop, "report\\(validation=...\\) is not supported by Ember"),
    (no_upload_loop, "checkpoint_upload_mode=NO_UPLOAD\\) is not supported by Ember"),
])
def test_unsupported_or_bad_report_options_fail_the_run_naming_them(cluster, tmp_path, loop, message):
    with pytest.raises(train.TrainingFailedError, match=message):
        DataParallelTrainer(loop, run_config=RunConfig(name="bad", storage_path=str(tmp_path))).fit()


def test_upload_options_in_a_tune_trial_fail_naming_them(cluster, tmp_path):
    from ember import tune

    def fn(config):
        train.report({"a": 1}, checkpoint_upload_fn=lambda c, n: c)

    grid = tune.Tuner(fn, run_config=tune.RunConfig(name="t", storage_path=str(tmp_path), verbose=0)).fit()
    assert "apply in a Train worker, not in a Tune trial" in str(grid[0].error)


def reported_loop():
    before = train.get_all_reported_checkpoints()
    for i, score in enumerate([5, 9, 7]):
        train.report({"i": i, "score": score}, checkpoint=train.Checkpoint.from_dict({"i": i}))
    seen = [[r.checkpoint.to_dict()["i"], r.metrics["score"], r.status.value]
            for r in train.get_all_reported_checkpoints(consistency_mode=train.CheckpointConsistencyMode.COMMITTED)]
    if seen != [[1, 9, "COMMITTED"], [2, 7, "COMMITTED"]]:  # every rank sees the run's list
        raise AssertionError(f"rank {train.get_context().get_world_rank()} saw {seen}")
    train.report({"before": len(before), "seen": seen})


def test_get_all_reported_checkpoints_lists_the_kept_ones_on_every_rank(cluster, tmp_path):
    from ember.train import CheckpointConfig

    rc = RunConfig(name="all", storage_path=str(tmp_path),
                   checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score"))
    result = DataParallelTrainer(reported_loop, scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert result.metrics["before"] == 0
    # The two best by score, and the latest (always kept), in report order, as the run keeps them.
    assert result.metrics["seen"] == [[1, 9, "COMMITTED"], [2, 7, "COMMITTED"]]
    assert [c.to_dict()["i"] for c, _ in result.best_checkpoints] == [1, 2]
