"""`Trial`: one run of the trainable with one config, as plain data the controller, schedulers and
searchers share, and the experiment state pickles whole (no handles, no locks).

States: PENDING → RUNNING → TERMINATED | ERROR, with RUNNING ⇄ PAUSED (a paused trial holds no
resources and resumes from its latest checkpoint). A scheduler that exploits (PBT) sets
`restore_checkpoint` (and a new config) before pausing a trial; the controller restarts it from
that checkpoint.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ember.train import Checkpoint


@dataclass
class Trial:
    """A trial's identity, config, progress and outcome."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    trial_id: str
    config: dict[str, Any]
    trainable_name: str = "trainable"
    experiment_tag: str = ""
    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    status: str = "PENDING"
    last_result: dict[str, Any] = field(default_factory=dict)
    metric_history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    checkpoint_count: int = 0
    restore_checkpoint: Checkpoint | None = None
    num_failures: int = 0
    error: BaseException | None = None
    error_msg: str = ""
    path: str = ""
    local_dir_name: str = ""
    start_time: float | None = None
    end_time: float | None = None
    time_total_s: float = 0.0
    iteration: int = 0
    metric_analysis: dict[str, dict[str, float]] = field(default_factory=dict)
    custom_name: str = ""
    filesystem: Any = None  # the pyarrow filesystem `path` is on (None: the local disk)

    def __hash__(self) -> int:
        return hash(self.trial_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trial) and other.trial_id == self.trial_id

    def __str__(self) -> str:
        return self.custom_name or f"{self.trainable_name}_{self.trial_id}"

    def __repr__(self) -> str:
        return f"Trial({self}, {self.status})"

    @property
    def is_finished(self) -> bool:
        """TERMINATED or ERROR."""
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def set_status(self, status: str) -> None:
        """Moves the trial to `status`, stamping start and end times."""
        if status == Trial.RUNNING and self.start_time is None:
            self.start_time = time.time()
        if status in (Trial.TERMINATED, Trial.ERROR):
            self.end_time = time.time()
        self.status = status

    def set_config(self, config: dict[str, Any]) -> None:
        """Replaces the config (PBT's explore)."""
        self.config = config

    def set_experiment_tag(self, tag: str) -> None:
        """Replaces the tag shown in names and tables."""
        self.experiment_tag = tag

    def update_last_result(self, result: dict[str, Any]) -> None:
        """Records a reported result (its metric history and min/max/last of numeric metrics)."""
        self.last_result = result
        self.metric_history.append(result)
        self.iteration = int(result.get("training_iteration", self.iteration))
        self.time_total_s = float(result.get("time_total_s", self.time_total_s))
        for k, v in result.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                a = self.metric_analysis.setdefault(k, {"max": v, "min": v, "avg": v, "last": v, "n": 0})
                a["n"] += 1
                a["max"], a["min"], a["last"] = max(a["max"], v), min(a["min"], v), v
                a["avg"] += (v - a["avg"]) / a["n"]

    def best_value(self, metric: str, mode: str, scope: str = "last") -> float | None:
        """The trial's `metric` by scope: "last", "avg", "all" (best over every report), or
        "last-5-avg"/"last-10-avg"."""
        if scope == "last":
            v = self.last_result.get(metric)
            return None if v is None else float(v)
        vals = [float(r[metric]) for r in self.metric_history if isinstance(r.get(metric), (int, float))]
        if not vals:
            return None
        if scope == "all":
            return max(vals) if mode == "max" else min(vals)
        if scope == "avg":
            return sum(vals) / len(vals)
        if scope in ("last-5-avg", "last-10-avg"):
            n = 5 if scope == "last-5-avg" else 10
            return sum(vals[-n:]) / len(vals[-n:])
        raise ValueError(f"scope must be one of 'all', 'last', 'avg', 'last-5-avg', 'last-10-avg', got {scope!r}")
