"""TorchTrainer(datasets=...) with ember.data (the seed article's 4.3 shape): each rank's
get_dataset_shard("train") is a streaming split; over an epoch the ranks' rows are disjoint and
together cover every row once, again in the next epoch (the split re-executes); a dataset that
DataConfig does not split reaches every rank whole; iter_torch_batches gives tensors."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")

import ember  # noqa: E402
import ember as ray  # noqa: E402
from ember import train  # noqa: E402
from ember.train import DataConfig, RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402

ROWS = 200


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def loop(config):
    import json
    import os

    import torch

    shard = train.get_dataset_shard("train")
    per_epoch = []
    for _ in range(2):
        ids = []
        for batch in shard.iter_torch_batches(batch_size=16):
            assert isinstance(batch["id"], torch.Tensor)
            ids += batch["id"].tolist()
        per_epoch.append(ids)
    whole = sorted(r["id"] for r in train.get_dataset_shard("eval").iter_rows())
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump({"epochs": per_epoch, "eval": whole}, f)
    train.report({"rows": len(per_epoch[0])})


def test_dataset_shards_are_disjoint_and_cover_every_row_each_epoch(cluster, tmp_path):
    import json

    ds = ray.data.range(ROWS).map(lambda r: {"id": r["id"]})
    trainer = TorchTrainer(loop, train_loop_config={"out": str(tmp_path)},
                           datasets={"train": ds, "eval": ray.data.range(10)},
                           dataset_config=DataConfig(datasets_to_split=["train"]),
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(storage_path=str(tmp_path / "r")))
    trainer.fit()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for epoch in range(2):
        a, b = (r["epochs"][epoch] for r in ranks)
        assert len(a) == len(b) == ROWS // 2  # equal=True
        assert not set(a) & set(b) and sorted(a + b) == list(range(ROWS))
    assert [r["eval"] for r in ranks] == [list(range(10))] * 2  # not split: whole on every rank
    assert ember.get(ember.remote(lambda: 1).remote(), timeout=30) == 1
