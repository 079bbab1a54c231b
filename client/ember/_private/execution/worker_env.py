"""The environment variables a worker sets for the task or actor it runs (Ray's rules).

- `OMP_NUM_THREADS`: the task's or actor's CPUs, rounded down, at least 1 (an actor that asks
  for no CPU: 1), set only when the user did not set it (in the worker's environment or the
  runtime env). A task's setting is removed when it ends; an actor's stays for its life.
- `CUDA_VISIBLE_DEVICES`: the granted GPU ids (none: ""), unless
  `RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES` (Ray's name; Ember has no second one) is set to a
  non-empty value other than "0": then the variable is left as the worker has it.
"""
from __future__ import annotations

import math
import os

from ember_common.proto import common_pb2

NOSET_CUDA = ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",)

_omp_ours = False  # OMP_NUM_THREADS is this module's setting (not the user's)


def omp_threads(resources: dict[str, float]) -> int:
    """Ray's OMP_NUM_THREADS for these resources: floor(CPU), at least 1."""
    cpus = resources.get("CPU")
    if cpus is None:
        return 1
    return max(math.floor(cpus), 1)


def noset_cuda() -> bool:
    """Whether the user asked that CUDA_VISIBLE_DEVICES be left alone."""
    return any(os.environ.get(k, "") not in ("", "0") for k in NOSET_CUDA)


def enter(spec: common_pb2.TaskSpec) -> None:
    """Before a task or an actor's creation task runs (not before each method call)."""
    global _omp_ours
    if "OMP_NUM_THREADS" not in os.environ or _omp_ours:
        os.environ["OMP_NUM_THREADS"] = str(omp_threads(dict(spec.resources)))
        _omp_ours = True
    if noset_cuda():
        return
    if spec.gpu_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
    elif os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        # No GPU asked for: none visible, whatever ran on this worker before (a fresh worker
        # and one that ran a GPU task alike).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def leave(spec: common_pb2.TaskSpec) -> None:
    """After a task ran: its OMP_NUM_THREADS goes (an actor keeps its own)."""
    global _omp_ours
    if _omp_ours and not spec.HasField("actor_creation"):
        os.environ.pop("OMP_NUM_THREADS", None)
        _omp_ours = False
