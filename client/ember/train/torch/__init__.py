"""ember.train.torch: PyTorch data-parallel training (Ray Train's `ray.train.torch`).

    from ember.train.torch import TorchTrainer, prepare_model, prepare_data_loader

Importing this package does not import torch; the workers import it when they set up the
process group.
"""
from __future__ import annotations

from .config import TorchConfig
from .torch_checkpoint import TorchCheckpoint, accelerate, backward, prepare_optimizer
from .torch_trainer import TorchTrainer
from .train_loop_utils import (
                               enable_reproducibility,
                               get_device,
                               get_devices,
                               prepare_data_loader,
                               prepare_model,
)

__all__ = ["TorchCheckpoint", "TorchConfig", "TorchTrainer", "accelerate", "backward", "enable_reproducibility",
           "get_device", "get_devices", "prepare_data_loader", "prepare_model", "prepare_optimizer"]
