"""`BackendConfig`: how a framework's process group is set up on a started worker group.

A DataParallelTrainer gives each worker `worker_env(scaling)` when it is created (and lets it
import `preload_modules()` in the background), then calls `on_start(group, scaling)` once the workers run and before the
training function starts; it returns each rank's device string. `TorchConfig` is the torch one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ember.air.config import ScalingConfig

    from ._internal.worker_group import WorkerGroup


class BackendConfig:
    """No framework: workers run the function with nothing set up (devices are "cpu")."""

    def worker_env(self, scaling: ScalingConfig) -> dict[str, str]:
        """Environment each worker gets when it starts, before any framework import."""
        return {}

    def preload_modules(self) -> tuple[str, ...]:
        """Modules each worker imports in the background as soon as it starts."""
        return ()

    def on_start(self, group: WorkerGroup, scaling: ScalingConfig) -> list[str]:
        return ["cpu"] * group.world_size

    def on_shutdown(self, group: WorkerGroup) -> None:
        """Called before the workers are killed after a run that ended normally."""
