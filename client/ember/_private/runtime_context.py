"""ember.get_runtime_context(): ids of the current job, node, worker and task."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .worker import Worker


class RuntimeContext:
    """Ids of what this process is running now (Ray's RuntimeContext)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def get_job_id(self) -> str:
        return self._worker.core.job_id.hex()

    def get_node_id(self) -> str:
        return self._worker.core.node_id

    def get_worker_id(self) -> str:
        return self._worker.core.worker_id

    def get_task_id(self) -> str | None:
        ex = self._worker.core.executor
        if ex is not None and ex.running is not None:
            return ex.running.task_id.hex()
        return None

    def get_task_name(self) -> str | None:
        ex = self._worker.core.executor
        if ex is not None and ex.running is not None:
            return ex.running.name
        return None

    def get_actor_id(self) -> str | None:
        ex = self._worker.core.executor
        if ex is not None and ex.actor_spec is not None:
            return ex.actor_spec.actor_id.hex()
        return None

    def get_assigned_resources(self) -> dict[str, float]:
        ex = self._worker.core.executor
        if ex is not None and ex.running is not None:
            return dict(ex.running.resources)
        return {}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        from .worker import get_gpu_ids

        return {"GPU": [str(g) for g in get_gpu_ids()]}

    @property
    def gcs_address(self) -> str:
        return self._worker.core.gcs_address

    @property
    def runtime_env(self) -> Any:
        """The runtime env this worker runs in (a driver: the job's), as a RuntimeEnv with
        package URIs in place of local paths (Ray's `get_runtime_context().runtime_env`)."""
        from ember.runtime_env import RuntimeEnv

        from .runtime_env import context

        return RuntimeEnv(_validate=False, **context.current())

    def get_runtime_env_string(self) -> str:
        """The runtime env as JSON ("{}" when none), as Ray's."""
        from .runtime_env import context

        return context.parent_env() or "{}"

    @property
    def namespace(self) -> str:
        return self._worker.current_namespace()

    def get_namespace(self) -> str:
        return self._worker.current_namespace()

    def get(self) -> dict[str, Any]:
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(),
                "task_id": self.get_task_id()}

    @property
    def worker(self) -> Any:
        return self._worker

    def was_current_actor_reconstructed(self) -> bool:
        ex = self._worker.core.executor
        return bool(ex is not None and ex.actor_spec is not None and ex.actor_restarted)


def get_runtime_context() -> RuntimeContext:
    from .worker import global_worker

    return RuntimeContext(global_worker())
