"""A PyTorch Lightning Trainer on 2 workers of a TorchTrainer: RayDDPStrategy and
RayLightningEnvironment give Lightning Ember's ranks (each rank trains on its half of the data
through the distributed sampler), RayTrainReportCallback reports each epoch with a Lightning
checkpoint that loads back, and prepare_trainer refuses a Trainer without them."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")
pytest.importorskip("lightning", reason="the train extra (lightning) is not installed")

import ember  # noqa: E402
from ember.train import RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def _module():
    import lightning.pytorch as pl
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.seen = 0

        def training_step(self, batch, _):
            x, y = batch
            self.seen += len(x)
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, sync_dist=True)
            self.log("seen", float(self.seen))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Tiny


def loop(config):
    import lightning.pytorch as pl
    import torch

    from ember.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer

    torch.manual_seed(0)
    x = torch.randn(16, 2)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices="auto", strategy=RayDDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
                         enable_checkpointing=False, enable_progress_bar=False, logger=False,
                         enable_model_summary=False)
    trainer = prepare_trainer(trainer)
    trainer.fit(_module()(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=4))


def test_lightning_trainer_on_two_workers(cluster, tmp_path):
    result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(name="pl", storage_path=str(tmp_path))).fit()
    assert result.metrics_dataframe["epoch"].tolist() == [0, 1]
    assert result.metrics["seen"] == 16.0  # 2 epochs of rank 0's half (8 rows) of the 16
    assert result.metrics["train_loss"] > 0
    with result.checkpoint.as_directory() as d:
        import torch

        state = torch.load(os.path.join(d, "checkpoint.ckpt"), weights_only=False)
        assert state["epoch"] == 1 and "layer.weight" in state["state_dict"]


def test_prepare_trainer_needs_rays_strategy_and_environment():
    import lightning.pytorch as pl

    from ember.train.lightning import prepare_trainer

    with pytest.raises(ValueError, match="RayDDPStrategy"):
        prepare_trainer(pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False))
    with pytest.raises(TypeError, match="expects a lightning Trainer"):
        prepare_trainer(object())


def _sharded_module():
    import lightning.pytorch as pl
    import torch

    class Sharded(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 8)

        def on_train_batch_start(self, batch, batch_idx):
            # outside forward/backward FSDP keeps 1/world of the flattened parameters on a rank
            local = sum(p.numel() for p in self.trainer.strategy.model.parameters())
            self.log("local_params", float(local))

        def training_step(self, batch, _):
            (x,) = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), x)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.1)  # with state to gather

    return Sharded


def fsdp_loop(config):
    import lightning.pytorch as pl
    import torch

    from ember.train.lightning import RayFSDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 8))
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices="auto", strategy=RayFSDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
                         enable_checkpointing=False, enable_progress_bar=False, logger=False,
                         enable_model_summary=False)
    trainer = prepare_trainer(trainer)
    trainer.fit(_sharded_module()(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=4))


def test_fsdp_strategy_shards_the_model_on_cpu_ranks(cluster, tmp_path):
    result = TorchTrainer(fsdp_loop, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(name="plfsdp", storage_path=str(tmp_path))).fit()
    assert result.metrics["local_params"] == (8 * 8 + 8) / 2  # half of the 72 parameters on rank 0
    with result.checkpoint.as_directory() as d:
        import torch

        state = torch.load(os.path.join(d, "checkpoint.ckpt"), weights_only=False)
        assert state["state_dict"]["layer.weight"].shape == (8, 8)  # the full state dict, gathered


def test_deepspeed_strategy_names_the_missing_package():
    import importlib.util

    from ember.train.lightning import RayDeepSpeedStrategy

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    with pytest.raises(ImportError, match="needs the 'deepspeed' package"):
        RayDeepSpeedStrategy()
