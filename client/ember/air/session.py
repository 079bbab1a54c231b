"""The per-process training session: what `ember.train.report`, `get_checkpoint`,
`get_context` and `get_dataset_shard` talk to.

A Train worker (one rank of a TorchTrainer) and a Tune trial each install a session object in
the process that runs the user's function (`set_session`), and remove it when the function ends.
Train and Tune supply their own implementations of `Session`; the user-facing functions only
dispatch, so `ember.train.report` works inside Tune function trainables as in Ray.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .checkpoint import Checkpoint


@dataclass(frozen=True)
class TrainContext:
    """What a training function may ask about where it runs (Ray's `TrainContext`, plus the
    trial accessors of Tune's `TuneContext`)."""

    world_rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    experiment_name: str = ""
    trial_name: str = ""
    trial_id: str = ""
    trial_dir: str = ""
    trial_resources: dict[str, float] = field(default_factory=dict)
    storage_path: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_trial_dir(self) -> str:
        return self.trial_dir

    def get_trial_resources(self) -> dict[str, float]:
        return dict(self.trial_resources)

    def get_storage_path(self) -> str:
        return self.storage_path

    def get_metadata(self) -> dict[str, Any]:
        return dict(self.metadata)


class Session(Protocol):
    """What Train's workers and Tune's trials implement."""

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None,
               checkpoint_dir_name: str | None) -> None: ...

    def get_checkpoint(self) -> Checkpoint | None: ...

    def get_context(self) -> TrainContext: ...

    def get_dataset_shard(self, name: str) -> Any: ...


_lock = threading.Lock()
_session: Session | None = None


def set_session(session: Session | None) -> None:
    """Installs (or, with None, removes) this process's session."""
    global _session
    with _lock:
        _session = session


def get_session() -> Session | None:
    return _session


def require_session(what: str) -> Session:
    s = _session
    if s is None:
        raise RuntimeError(f"{what} can only be called inside a training function run by a "
                           "Trainer (TorchTrainer) or by Tune (Tuner.fit)")
    return s
