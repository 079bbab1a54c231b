"""`TorchConfig`: torch.distributed on a started worker group.

Per rank, in one call before the training function runs (torchrun's environment, plus what makes the
rendezvous quick and the devices right):
- `MASTER_ADDR` = rank 0's node address, `MASTER_PORT` = a port free on it, `RANK`,
  `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`;
- `OMP_NUM_THREADS` = the worker's whole CPUs (at least 1; 1 for the default 1-CPU worker, as
  torchrun sets it), unless the driver's environment sets it;
- `GLOO_SOCKET_IFNAME` (and `NCCL_SOCKET_IFNAME` for NCCL) = the interface that holds the
  rank's node address (`lo` on a one-machine cluster), unless already set: without it gloo
  probes the host name's interfaces, which took 66 s for 2 ranks on the dev machine;
- with GPUs, `CUDA_VISIBLE_DEVICES` = every GPU given to a rank of the same node (so NCCL can
  use peer-to-peer copies), and the rank's device is its own GPU's index in that list.
Then every rank calls `init_process_group` at once (gloo on CPU, NCCL on GPU by default).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from .._internal.worker_group import interface_of
from ..backend import BackendConfig

if TYPE_CHECKING:
    from ember.air.config import ScalingConfig

    from .._internal.worker_group import WorkerGroup


@dataclass
class TorchConfig(BackendConfig):
    """torch.distributed settings: `backend` ("gloo", "nccl"; default nccl with GPUs, else
    gloo), `init_method` ("env" or "tcp"), `timeout_s` for collectives and the rendezvous."""

    backend: str | None = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in ("gloo", "nccl", "mpi", "xccl", "ucc"):
            raise ValueError(f"TorchConfig.backend must be 'gloo' or 'nccl' (or None), got {self.backend!r}")
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig.init_method must be 'env' or 'tcp', got {self.init_method!r}")
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"TorchConfig.timeout_s must be a positive number, got {self.timeout_s!r}")

    def worker_env(self, scaling: ScalingConfig) -> dict[str, str]:
        if "OMP_NUM_THREADS" in os.environ:
            return {}
        return {"OMP_NUM_THREADS": str(int(scaling.worker_resources.get("CPU", 1.0)) or 1)}

    def preload_modules(self) -> tuple[str, ...]:
        return ("torch.distributed",)

    def on_start(self, group: WorkerGroup, scaling: ScalingConfig) -> list[str]:
        metas = group.metas
        backend = self.backend or ("nccl" if scaling.use_gpu else "gloo")
        master = metas[0]
        port = master.free_port
        envs, devices = [], []
        for m in metas:
            ifname = interface_of(m)
            env = {"MASTER_ADDR": master.node_ip, "MASTER_PORT": str(port), "RANK": str(m.rank),
                   "WORLD_SIZE": str(group.world_size), "LOCAL_RANK": str(m.local_rank),
                   "LOCAL_WORLD_SIZE": str(m.local_world_size), "NODE_RANK": str(m.node_rank),
                   "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
            env.update(self.worker_env(scaling))
            if ifname:
                for var in ("GLOO_SOCKET_IFNAME",) + (("NCCL_SOCKET_IFNAME",) if backend == "nccl" else ()):
                    if var not in os.environ:
                        env[var] = ifname
            device = "cpu"
            if scaling.use_gpu:
                node_gpus = sorted({g for x in metas if x.node_id == m.node_id for g in x.gpu_ids})
                if node_gpus and m.gpu_ids:
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in node_gpus)
                    device = f"cuda:{node_gpus.index(m.gpu_ids[0])}"
            envs.append((env,))
            devices.append(device)
        init = "env://" if self.init_method == "env" else f"tcp://{master.node_ip}:{port}"
        group.call_each("execute", [(_init_process_group, env, backend, init, m.rank, group.world_size,
                                     self.timeout_s, d) for m, (env,), d in zip(metas, envs, devices, strict=False)])
        return devices


def _init_process_group(env: dict[str, str], backend: str, init_method: str, rank: int, world_size: int,
                        timeout_s: float, device: str) -> None:
    """Runs in each rank: sets its environment, joins the process group (and picks the rank's GPU)."""
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    if "OMP_NUM_THREADS" in env:
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend=backend, init_method=init_method, rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=timeout_s))
