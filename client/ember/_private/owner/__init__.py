"""The owner side: what a process does for the tasks it submits and the objects it owns.

Pure policies (events in, instructions out; no sockets) and their I/O drivers:

- task_queue (+ task_queue_types, task_durations): leases, pushes and retries of normal tasks,
  driven by task_submitter; task_errors: which errors retry;
- actor_queue: one caller's calls to one actor, driven by actor_submitter;
- reference_table: every reference count and free decision, driven by references (borrowers);
- memory_store: object entries and who waits on them; missed_frees: Frees nodes missed;
- lineage: how a lost return is rebuilt, driven by reconstruction;
- generator: streamed returns collected by index (ObjectRefGenerator).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lazy_face

if TYPE_CHECKING:
    from .actor_queue import ActorCallQueue as ActorCallQueue
    from .actor_submitter import ActorSubmitter as ActorSubmitter
    from .generator import GeneratorState as GeneratorState
    from .generator import ObjectRefGenerator as ObjectRefGenerator
    from .lineage import Lineage as Lineage
    from .memory_store import MemoryStore as MemoryStore
    from .missed_frees import MissedFrees as MissedFrees
    from .reconstruction import Reconstructor as Reconstructor
    from .reference_table import ReferenceTable as ReferenceTable
    from .references import References as References
    from .task_durations import TaskDurations as TaskDurations
    from .task_queue import TaskQueue as TaskQueue
    from .task_queue_types import TaskEntry as TaskEntry
    from .task_submitter import TaskSubmitter as TaskSubmitter

# The names other packages use, by the module that defines them. They load on first use: the
# package itself imports nothing, so importing one of its modules costs only that module.
_NAMES = {
    "ActorCallQueue": "actor_queue",
    "ActorSubmitter": "actor_submitter",
    "GeneratorState": "generator",
    "Lineage": "lineage",
    "MemoryStore": "memory_store",
    "MissedFrees": "missed_frees",
    "ObjectRefGenerator": "generator",
    "Reconstructor": "reconstruction",
    "ReferenceTable": "reference_table",
    "References": "references",
    "TaskDurations": "task_durations",
    "TaskEntry": "task_queue_types",
    "TaskQueue": "task_queue",
    "TaskSubmitter": "task_submitter",
}
__all__ = sorted(_NAMES)

__getattr__ = lazy_face(__name__, _NAMES)
