"""Helpers a torch training function calls on each rank: `get_device`, `prepare_model` (device
move + DDP, or FSDP), `prepare_data_loader` (DistributedSampler + device moves) and
`enable_reproducibility`. Outside a Train worker (a Tune trial, plain Python) they act as on a
single worker: no wrapping, the first GPU if torch sees one, else the CPU.
"""
from __future__ import annotations

import os
import random
from typing import Any, Iterator

from ember.air import session as session_mod


def _worker_session() -> Any:
    from .._internal.worker import WorkerSession

    s = session_mod.get_session()
    return s if isinstance(s, WorkerSession) else None


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_device() -> Any:
    """The torch.device this rank trains on: its GPU (`cuda:i`) when the run uses GPUs, else cpu."""
    import torch

    s = _worker_session()
    if s is not None:
        return torch.device(s.run.device)
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def get_devices() -> list[Any]:
    """The devices of this rank (one per rank in Ember)."""
    return [get_device()]


def prepare_model(model: Any, move_to_device: bool | Any = True, parallel_strategy: str | None = "ddp",
                  parallel_strategy_kwargs: dict[str, Any] | None = None) -> Any:
    """Moves `model` to this rank's device and, with more than one rank, wraps it in
    DistributedDataParallel ("ddp") or shards it with FSDP ("fsdp") so gradients are
    synchronised. parallel_strategy=None only moves it.

    "fsdp" applies torch's `fully_shard` (FSDP2) to the whole model, on GPUs and on CPUs (gloo)
    alike; Ray wraps in the older FullyShardedDataParallel, which needs an accelerator. The
    model's state_dict() then holds DTensor shards; `parallel_strategy_kwargs` go to
    `fully_shard` (mesh, reshard_after_forward, ...). Shard submodules yourself first (each
    `fully_shard(layer)`) for finer units."""
    import torch

    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(f"parallel_strategy must be 'ddp', 'fsdp' or None, got {parallel_strategy!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"prepare_model expects a torch.nn.Module, got {type(model).__name__}")
    device = get_device() if move_to_device is True else (torch.device(move_to_device) if move_to_device else None)
    if device is not None:
        model = model.to(device)
    if parallel_strategy is None or _world_size() < 2:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    on_gpu = device is not None and device.type == "cuda"
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if on_gpu:
            kwargs.setdefault("device_ids", [device])
            kwargs.setdefault("output_device", device)
        return DistributedDataParallel(model, **kwargs)
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, **kwargs)


class _PreparedDataLoader:
    """A DataLoader whose batches arrive on the rank's device, and whose DistributedSampler
    gets `set_epoch(n)` at the start of the n-th pass (a new shuffle per epoch)."""

    def __init__(self, loader: Any, device: Any | None) -> None:
        self._loader = loader
        self._device = device
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __iter__(self) -> Iterator[Any]:
        sampler: Any = getattr(self._loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self._epoch)
        self._epoch += 1
        for batch in self._loader:
            yield _move(batch, self._device) if self._device is not None else batch


def _move(obj: Any, device: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_move(x, device) for x in obj)
    if isinstance(obj, tuple):  # namedtuple
        return type(obj)(*(_move(x, device) for x in obj))
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    return obj


def prepare_data_loader(data_loader: Any, add_dist_sampler: bool = True, move_to_device: bool = True,
                        auto_transfer: bool = True) -> Any:
    """With more than one rank, rebuilds `data_loader` with a DistributedSampler (each rank
    reads its own 1/world_size of the data; shuffled when the loader shuffled); batches are moved
    to the rank's device when it is not the CPU."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"prepare_data_loader expects a torch DataLoader, got {type(data_loader).__name__}")
    loader = data_loader
    world = _world_size()
    if add_dist_sampler and world > 1 and not isinstance(loader.dataset, IterableDataset) \
            and not isinstance(loader.sampler, DistributedSampler):
        import torch.distributed as dist

        shuffle = isinstance(loader.sampler, RandomSampler)
        sampler: DistributedSampler[Any] = DistributedSampler(loader.dataset, num_replicas=world,
                                                              rank=dist.get_rank(), shuffle=shuffle)
        loader = DataLoader(
            loader.dataset, batch_size=loader.batch_size, sampler=sampler,
            num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
            drop_last=loader.drop_last, timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
            generator=loader.generator, prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
            persistent_workers=loader.persistent_workers)
    device = get_device() if move_to_device else None
    if device is not None and device == torch.device("cpu"):
        device = None
    return _PreparedDataLoader(loader, device)


def enable_reproducibility(seed: int = 0) -> None:
    """Seeds Python, NumPy and torch and makes torch pick deterministic algorithms."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
