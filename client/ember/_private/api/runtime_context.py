"""ember.get_runtime_context(): ids of the current job, node, worker and task."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember_common.proto import common_pb2

    from ..worker import Worker


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

    def _in_worker(self, what: str) -> None:
        """AssertionError outside a worker (Ray asserts the same for these calls)."""
        ex = self._worker.core.executor
        assert ex is not None, (f"{what} is only available when the process is a worker "
                                "(not in a driver).")

    def _task(self) -> common_pb2.TaskSpec | None:
        """The spec of the task or actor call running in this thread or coroutine (None: none)."""
        ex = self._worker.core.executor
        if ex is None:
            return None
        return ex.current_task() or ex.running

    def get_task_id(self) -> str | None:
        """The running task's (or actor call's, or constructor's) id; None in a driver."""
        spec = self._task()
        return spec.task_id.hex() if spec is not None else None

    def get_task_name(self) -> str | None:
        """Ray's task name: `f` for a task, `A.m` for a call, `A.__init__` (`name:A.__init__` for
        a named actor) for a constructor; None in a driver."""
        spec = self._task()
        if spec is None:
            return None
        if spec.HasField("actor_creation"):
            c = spec.actor_creation
            init = f"{c.class_name}.__init__"
            return f"{c.name}:{init}" if c.name else init
        if spec.actor_id:
            ex = self._worker.core.executor
            actor = ex.actor_spec if ex is not None else None
            cls = actor.actor_creation.class_name if actor is not None else ""
            return f"{cls}.{spec.method_name}" if cls else spec.method_name
        return spec.name

    def get_task_function_name(self) -> str | None:
        """The running function's full name, `module.qualname` (a call: `module.Class.method`,
        a constructor: `module.Class.__init__`); None in a driver."""
        spec = self._task()
        if spec is None:
            return None
        ex = self._worker.core.executor
        if spec.actor_id:
            actor = spec if spec.HasField("actor_creation") else (ex.actor_spec if ex else None)
            if actor is None:
                return None
            fd = actor.function
            method = "__init__" if spec.HasField("actor_creation") else spec.method_name
            return f"{fd.module}.{fd.qualname}.{method}"
        return f"{spec.function.module}.{spec.function.qualname}"

    def get_actor_id(self) -> str | None:
        """The actor's id in its methods and constructor; None in a task or driver."""
        ex = self._worker.core.executor
        if ex is not None and ex.actor_spec is not None:
            return ex.actor_spec.actor_id.hex()
        return None

    def get_actor_name(self) -> str | None:
        """The actor's name ("" when unnamed) in an actor; None in a task or driver."""
        ex = self._worker.core.executor
        if ex is not None and ex.actor_spec is not None:
            return ex.actor_spec.actor_creation.name
        return None

    def get_assigned_resources(self) -> dict[str, float]:
        """What the running task holds ({"CPU": 1.0} by default); in an actor, what the actor
        holds for its life ({} by default). AssertionError in a driver, as Ray."""
        self._in_worker("get_assigned_resources()")
        ex = self._worker.core.executor
        spec = ex.actor_spec if ex is not None and ex.actor_spec is not None else self._task()
        if spec is None:
            return {}
        return {k: float(v) for k, v in spec.resources.items() if v}

    def get_node_labels(self) -> dict[str, str]:
        """This node's labels as the GCS's node table has them (Ray's defaults such as
        `ray.io/node-id`, and those the node was started with)."""
        core = self._worker.core
        info = core.run(lambda: core.node_info(core.node_id), timeout=30)
        return dict(info.labels) or {"ray.io/node-id": core.node_id}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        from ..worker import get_gpu_ids

        return {"GPU": [str(g) for g in get_gpu_ids()]}

    @property
    def gcs_address(self) -> str:
        return self._worker.core.gcs_address

    @property
    def runtime_env(self) -> Any:
        """The runtime env this worker runs in (a driver: the job's), as a RuntimeEnv with
        package URIs in place of local paths (Ray's `get_runtime_context().runtime_env`)."""
        from ember.runtime_env import RuntimeEnv

        from ..runtime_env import context

        return RuntimeEnv(_validate=False, **context.current())

    def get_runtime_env_string(self) -> str:
        """The runtime env as JSON ("{}" when none), as Ray's."""
        from ..runtime_env import context

        return context.parent_env() or "{}"

    @property
    def namespace(self) -> str:
        return self._worker.current_namespace()

    def get_namespace(self) -> str:
        return self._worker.current_namespace()

    def get(self) -> dict[str, Any]:
        """Job id, node id and namespace; in a worker also the task id and (in an actor) the
        actor id, each only when there is one (Ray's keys)."""
        out: dict[str, Any] = {"job_id": self.get_job_id(), "node_id": self.get_node_id(),
                               "namespace": self.get_namespace()}
        if self._worker.core.executor is not None:
            if (task_id := self.get_task_id()) is not None:
                out["task_id"] = task_id
            if (actor_id := self.get_actor_id()) is not None:
                out["actor_id"] = actor_id
        return out

    @property
    def worker(self) -> Any:
        return self._worker

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether this actor was restarted (a property, as Ray's); AssertionError outside an
        actor."""
        ex = self._worker.core.executor
        assert ex is not None and ex.actor_spec is not None, (
            "was_current_actor_reconstructed is only available inside an actor.")
        return bool(ex.actor_restarted)


def get_runtime_context() -> RuntimeContext:
    from ..worker import client_connection, global_worker

    client = client_connection()
    if client is not None:  # client mode: the session driver's job, node and namespace
        ctx: RuntimeContext = client.runtime_context()
        return ctx
    return RuntimeContext(global_worker())
