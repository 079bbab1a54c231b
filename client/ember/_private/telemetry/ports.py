"""What task events (task_events.py) need of the core worker: `EventsCore`, a typing Protocol
that CoreWorker (core_worker.py) satisfies, so that the reporter holds the core without
importing its module."""
from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable, Protocol, TypeVar

if TYPE_CHECKING:
    from ember_common.config import Config
    from ember_common.gcs_client import GcsClient

    from ..owner.task_queue_types import TaskEntry

T = TypeVar("T")


class TrackedTasks(Protocol):
    """The submitter (owner/task_submitter.py): its table of tasks in flight, by task id."""

    tasks: dict[bytes, TaskEntry]


class EventsCore(Protocol):
    """What the reporter needs of the core worker."""

    config: Config
    gcs: GcsClient
    node_id: str
    worker_id: str

    @property
    def submitter(self) -> TrackedTasks: ...

    def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]], timeout: float | None = None) -> T: ...
