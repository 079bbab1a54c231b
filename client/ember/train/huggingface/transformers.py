"""Hugging Face `transformers.Trainer` inside a TorchTrainer (Ray's
`ray.train.huggingface.transformers`).

    def train_func(config):
        trainer = transformers.Trainer(model=..., args=..., train_dataset=...)
        trainer.add_callback(RayTrainReportCallback())
        trainer = prepare_trainer(trainer)
        trainer.train()

The TorchTrainer sets torchrun's environment on each rank (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT) and joins the process group first, so the Hugging Face Trainer runs its own
DistributedDataParallel over it. `RayTrainReportCallback` reports at every checkpoint the
Trainer saves: the latest logged metrics, with the saved checkpoint directory as the
`Checkpoint` (every rank reports; rank 0's checkpoint files are persisted). `prepare_trainer`
lets the Trainer take `ember.train.get_dataset_shard(...)` iterators as datasets.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import transformers

from ember.air.checkpoint import Checkpoint

__all__ = ["CHECKPOINT_NAME", "RayTrainReportCallback", "prepare_trainer"]

# The name under which the Hugging Face checkpoint sits inside the reported Checkpoint (Ray's).
CHECKPOINT_NAME = "checkpoint"


class RayTrainReportCallback(transformers.TrainerCallback):
    """Reports the latest metrics and the just-saved checkpoint to Ember Train on each save."""

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, Any] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Keeps the latest logged values (loss, learning rate, eval metrics)."""
        self.metrics.update({k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Reports the metrics with the checkpoint the Trainer just wrote."""
        from ember import train

        metrics = {**self.metrics, "step": state.global_step, "epoch": state.epoch}
        source = os.path.join(args.output_dir, f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-"
                                               f"{state.global_step}")
        with tempfile.TemporaryDirectory() as tmp:
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(tmp, CHECKPOINT_NAME))
            train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


class _ShardDataset:
    """A `get_dataset_shard(...)` iterator seen as a torch IterableDataset of row dicts."""

    def __init__(self, shard: Any) -> None:
        import torch.utils.data

        class Rows(torch.utils.data.IterableDataset[dict[str, Any]]):
            def __iter__(self) -> Any:
                return iter(shard.iter_rows())

        self.dataset = Rows()


def prepare_trainer(trainer: transformers.Trainer) -> transformers.Trainer:
    """Checks the Trainer and lets it take Ember Data shards as its train/eval datasets."""
    if not isinstance(trainer, transformers.Trainer):
        raise TypeError(f"prepare_trainer expects a transformers.Trainer, got {type(trainer).__name__}")
    import torch.utils.data

    streaming = False
    for attr in ("train_dataset", "eval_dataset"):
        ds = getattr(trainer, attr, None)
        if ds is not None and hasattr(ds, "iter_rows") and hasattr(ds, "iter_batches"):
            setattr(trainer, attr, _ShardDataset(ds).dataset)
        streaming = streaming or isinstance(getattr(trainer, attr, None), torch.utils.data.IterableDataset)
    config = getattr(getattr(trainer, "accelerator", None), "dataloader_config", None)
    if streaming and config is not None:
        # Each rank reads its own shard: accelerate must neither have rank 0 read and dispatch
        # every batch nor split batches across ranks.
        config.dispatch_batches = False
        config.split_batches = False
    return trainer
