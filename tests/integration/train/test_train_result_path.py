"""Train's Ray-named doors on an embedded cluster with real files: `Result.from_path` reads back
what a 2-worker run wrote (metrics, every row, the kept checkpoints with their metrics), also
for a Tune trial's directory; `get_dataset_shard(dataset_name=...)` by Ray's keyword."""
from __future__ import annotations

import pytest

import ember
from ember import train, tune
from ember.train import CheckpointConfig, DataParallelTrainer, Result, RunConfig, ScalingConfig


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, object_store_memory=128 * 2**20)  # 2 workers, and CPUs for the data tasks
    yield
    ember.shutdown()


def loop(config):
    rows = sum(1 for _ in train.get_dataset_shard(dataset_name="train").iter_rows())
    for epoch in range(3):
        train.report({"epoch": epoch, "rows": rows, "score": [5, 9, 7][epoch]},
                     checkpoint=train.Checkpoint.from_dict({"epoch": epoch}))


def test_result_from_path_reads_back_a_train_run(cluster, tmp_path):
    trainer = DataParallelTrainer(
        loop, scaling_config=ScalingConfig(num_workers=2), datasets={"train": ember.data.range(10)},
        run_config=RunConfig(name="run", storage_path=str(tmp_path),
                             checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score")))
    result = trainer.fit()
    assert 0 < result.metrics["rows"] < 10  # rank 0 read its shard of the 10 rows, not all
    back = Result.from_path(result.path)
    assert back.metrics == result.metrics and back.path == result.path
    assert back.metrics_dataframe["epoch"].tolist() == [0, 1, 2]
    kept = [(c.to_dict()["epoch"], m["score"]) for c, m in back.best_checkpoints]
    assert kept == [(1, 9), (2, 7)]  # the best by score, and the latest
    assert back.checkpoint.to_dict() == {"epoch": 2}
    assert back.get_best_checkpoint("score", "max").to_dict() == {"epoch": 1}
    with pytest.raises(RuntimeError, match="does not exist"):
        Result.from_path(str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="no result.json"):
        Result.from_path(str(tmp_path))


def test_result_from_path_reads_a_tune_trial_directory(cluster, tmp_path):
    def fn(config):
        for i in range(2):
            tune.report({"v": config["a"] * i}, checkpoint=tune.Checkpoint.from_dict({"i": i}))

    grid = tune.Tuner(fn, param_space={"a": 3}, run_config=tune.RunConfig(
        storage_path=str(tmp_path), name="t", verbose=0)).fit()
    back = Result.from_path(grid[0].path)
    assert back.config == {"a": 3} and back.metrics["v"] == 3
    assert back.metrics_dataframe["v"].tolist() == [0, 3]
    assert back.checkpoint.to_dict() == {"i": 1}
