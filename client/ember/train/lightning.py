"""PyTorch Lightning inside a TorchTrainer (Ray's `ray.train.lightning`).

    def train_func(config):
        trainer = pl.Trainer(accelerator="auto", devices="auto", strategy=RayDDPStrategy(),
                             plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
                             enable_checkpointing=False)
        trainer = prepare_trainer(trainer)
        trainer.fit(model, datamodule=dm)

The TorchTrainer has set torchrun's environment and joined the process group on each rank;
`RayLightningEnvironment` tells Lightning the ranks and world size Ember Train gave the worker
(Lightning launches no processes), `RayDDPStrategy` is Lightning's DDP on that group, and
`RayTrainReportCallback` reports `trainer.callback_metrics` with a checkpoint
(`checkpoint.ckpt`, Lightning's format) at the end of every training epoch. Needs `lightning`
(`pip install 'ember[train]'`).

`RayFSDPStrategy` is Lightning's FSDPStrategy (torch's FullyShardedDataParallel) on the same
group: on CPU ranks (gloo) too, with `accelerator="cpu"`. `RayDeepSpeedStrategy` is Lightning's
DeepSpeedStrategy; it needs the `deepspeed` package, which Ember does not install (PyPI ships it
as a source build only), and raises ImportError naming it when absent.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments.lightning import LightningEnvironment
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy

from ember.air.checkpoint import Checkpoint

__all__ = ["RayDDPStrategy", "RayDeepSpeedStrategy", "RayFSDPStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback", "prepare_trainer"]


def _context() -> Any:
    from ember import train

    return train.get_context()


class RayLightningEnvironment(LightningEnvironment):
    """Lightning's cluster environment read from the Ember Train worker's context."""

    def world_size(self) -> int:
        return int(_context().get_world_size())

    def global_rank(self) -> int:
        return int(_context().get_world_rank())

    def local_rank(self) -> int:
        return int(_context().get_local_rank())

    def node_rank(self) -> int:
        return int(_context().get_node_rank())

    def set_world_size(self, size: int) -> None:
        """Ember Train fixed the world size; Lightning's value is ignored."""

    def set_global_rank(self, rank: int) -> None:
        """Ember Train fixed the rank; Lightning's value is ignored."""

    def teardown(self) -> None:
        """The process group belongs to the TorchTrainer, which tears it down."""


class RayDDPStrategy(DDPStrategy):
    """Lightning's DDPStrategy on the process group the TorchTrainer set up."""

    @property
    def root_device(self) -> torch.device:
        from ember.train.torch import get_device

        device: torch.device = get_device()
        return device

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}


class RayFSDPStrategy(FSDPStrategy):
    """Lightning's FSDPStrategy on the process group the TorchTrainer set up (every FSDP option
    of Lightning's class: `sharding_strategy`, `auto_wrap_policy`, `state_dict_type`, ...)."""

    @property
    def root_device(self) -> torch.device:
        from ember.train.torch import get_device

        device: torch.device = get_device()
        return device

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        if self.root_device.type == "cpu" and not any(isinstance(m, FullyShardedDataParallel)
                                                      for m in model.modules()):
            # Lightning gives FSDP no device on CPU, and FSDP then looks for an accelerator:
            # wrap here with the CPU as the device (FSDP shards over gloo); Lightning's own
            # set-up then takes the wrapped module as it is.
            kwargs = dict(self.kwargs)
            self.kwargs.pop("auto_wrap_policy", None)  # applied here
            model = FullyShardedDataParallel(
                module=model, cpu_offload=self.cpu_offload, mixed_precision=self.mixed_precision_config,
                sharding_strategy=self.sharding_strategy, device_id=torch.device("cpu"), **kwargs)
        wrapped: torch.nn.Module = super()._setup_model(model)
        return wrapped

    def lightning_module_state_dict(self) -> dict[str, Any]:
        if self.root_device.type != "cpu" or self._state_dict_type != "full":
            state: dict[str, Any] = super().lightning_module_state_dict()
            return state
        # Lightning gathers the full state dict with offload_to_cpu=True, which on a CPU device
        # leaves rank 0 cloning freed memory (a segfault): the tensors are on the CPU already.
        from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

        assert self.model is not None
        with FullyShardedDataParallel.state_dict_type(self.model, StateDictType.FULL_STATE_DICT,
                                                      FullStateDictConfig(offload_to_cpu=False, rank0_only=True)):
            full: dict[str, Any] = self.model.state_dict()
            return full


class RayDeepSpeedStrategy(DeepSpeedStrategy):
    """Lightning's DeepSpeedStrategy on the process group the TorchTrainer set up; needs the
    `deepspeed` package."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise ImportError("RayDeepSpeedStrategy needs the 'deepspeed' package, which is not installed "
                              "(pip install deepspeed; Ember does not ship it); RayFSDPStrategy shards "
                              "parameters without it")
        super().__init__(*args, **kwargs)

    @property
    def root_device(self) -> torch.device:
        from ember.train.torch import get_device

        device: torch.device = get_device()
        return device

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}


class RayTrainReportCallback(pl.Callback):
    """Reports the epoch's metrics and a Lightning checkpoint to Ember Train after each epoch."""

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from ember import train

        metrics = {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in trainer.callback_metrics.items()}
        metrics.update(epoch=trainer.current_epoch, step=trainer.global_step)
        with tempfile.TemporaryDirectory() as tmp:
            trainer.save_checkpoint(os.path.join(tmp, self.CHECKPOINT_NAME), weights_only=False)
            train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


def prepare_trainer(trainer: pl.Trainer) -> pl.Trainer:
    """Checks that the Trainer runs on Ember's strategy and environment (as Ray's does)."""
    if not isinstance(trainer, pl.Trainer):
        raise TypeError(f"prepare_trainer expects a lightning Trainer, got {type(trainer).__name__}")
    if not isinstance(trainer.strategy, (RayDDPStrategy, RayFSDPStrategy, RayDeepSpeedStrategy)):
        raise ValueError("the Trainer's strategy must be RayDDPStrategy, RayFSDPStrategy or RayDeepSpeedStrategy, "
                         f"got {type(trainer.strategy).__name__}")
    env = getattr(trainer.strategy, "cluster_environment", None)
    if not isinstance(env, RayLightningEnvironment):
        raise ValueError("the Trainer needs plugins=[RayLightningEnvironment()], got "
                         f"{type(env).__name__}")
    return trainer
