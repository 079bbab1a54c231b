"""`TorchTrainer`: a DataParallelTrainer whose workers form a torch.distributed process group
(`TorchConfig`: gloo on CPU, NCCL on GPU)."""
from __future__ import annotations

from typing import Any, Callable

from ember.air.checkpoint import Checkpoint
from ember.air.config import DataConfig, RunConfig, ScalingConfig

from ..data_parallel_trainer import DataParallelTrainer
from .config import TorchConfig


class TorchTrainer(DataParallelTrainer):
    """Runs `train_loop_per_worker` (no argument, or `train_loop_config`) on
    `scaling_config.num_workers` ranks with torch.distributed set up; see DataParallelTrainer."""

    _default_backend = TorchConfig

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: dict[str, Any] | None = None,
                 torch_config: TorchConfig | None = None, scaling_config: ScalingConfig | None = None,
                 run_config: RunConfig | None = None, datasets: dict[str, Any] | None = None,
                 dataset_config: DataConfig | None = None, resume_from_checkpoint: Checkpoint | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise TypeError(f"torch_config must be a TorchConfig, got {type(torch_config).__name__}")
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=torch_config or TorchConfig(), scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata)

    def _kwargs(self) -> dict[str, Any]:
        return {**super()._kwargs(), "torch_config": self.backend_config}
