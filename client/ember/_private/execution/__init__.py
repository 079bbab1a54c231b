"""The worker side: running the tasks and actor calls pushed to this process.

- executor (+ executor_effects, result_pipeline): arguments in, user code run, results out;
  ports: ExecutorCore, what they need of the core worker (a typing Protocol);
- actor_pools: an actor's concurrency groups and cancellation; precise_loop: the async actors'
  event loop; blocking: the CPUs a worker lends while it waits in get/wait;
- function_manager: remote functions loaded from the GCS KV;
- worker_main: a worker process's entry; fork_server: the per-node worker template.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lazy_face

if TYPE_CHECKING:
    from .blocking import BlockedWaits as BlockedWaits
    from .executor import ActorExit as ActorExit
    from .executor import TaskExecutor as TaskExecutor
    from .function_manager import FunctionManager as FunctionManager

# The names other packages use, by the module that defines them. They load on first use: the
# package itself imports nothing, so importing one of its modules costs only that module.
_NAMES = {
    "ActorExit": "executor",
    "BlockedWaits": "blocking",
    "FunctionManager": "function_manager",
    "TaskExecutor": "executor",
}
__all__ = sorted(_NAMES)

__getattr__ = lazy_face(__name__, _NAMES)
