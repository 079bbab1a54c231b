"""Train's pure policies: events in, decisions out, no sockets, no files.

- `ReportBarrier`: every rank's `report()` calls arrive one by one; a report is complete (and the
  ranks may go on) once every rank has sent it. A rank that ends with fewer reports than another
  is an error that names both counts.
- `FailurePolicy`: after a worker-group failure, restart (from the latest checkpoint) or fail,
  counting against `FailureConfig.max_failures` (-1: without limit).
- `CheckpointManager`: which registered checkpoints to keep (`num_to_keep` best by
  `checkpoint_score_attribute` in `checkpoint_score_order`, or the most recent ones without an
  attribute) and which to delete. The latest checkpoint is always kept as well (one more than
  `num_to_keep` while it is not among the best), since a restart resumes from it; a checkpoint whose metrics lack the score attribute ranks below every scored one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ember.air.config import CheckpointConfig


@dataclass(frozen=True)
class RankReport:
    """One rank's `report()` call: its global index in the run, its metrics and the storage path
    of the checkpoint it uploaded, if any."""

    index: int
    metrics: dict[str, Any] | None
    checkpoint_path: str | None = None


@dataclass(frozen=True)
class CompletedReport:
    """A report every rank has made."""

    index: int
    metrics: dict[str, Any]
    checkpoint_path: str | None
    checkpoint_ranks: tuple[int, ...]
    rank_metrics: tuple[dict[str, Any], ...] = ()  # every rank's, by rank


class ReportMismatchError(RuntimeError):
    """Ranks called `report()` a different number of times."""


class ReportBarrier:
    """Collects `RankReport`s by index until all `world_size` ranks have sent one."""

    def __init__(self, world_size: int, next_index: int = 0) -> None:
        self.world_size = world_size
        self.next_index = next_index  # the first index not yet completed
        self._got: dict[int, dict[int, RankReport]] = {}
        self._done: dict[int, int] = {}  # rank -> number of reports it made before finishing

    def add(self, rank: int, report: RankReport) -> CompletedReport | None:
        """Records one rank's report; returns the completed report when it was the last one."""
        if rank in self._done:
            raise ReportMismatchError(f"rank {rank} reported after its training function returned")
        if report.index < self.next_index:
            raise ValueError(f"rank {rank} sent report {report.index} again (next is {self.next_index})")
        by_rank = self._got.setdefault(report.index, {})
        if rank in by_rank:
            raise ValueError(f"rank {rank} sent report {report.index} twice")
        by_rank[rank] = report
        self._check_finished_ranks()
        if report.index != self.next_index or len(by_rank) < self.world_size:
            return None
        del self._got[report.index]
        self.next_index += 1
        r0 = by_rank.get(0)
        ckpt_ranks = tuple(sorted(r for r, rep in by_rank.items() if rep.checkpoint_path))
        path = by_rank[ckpt_ranks[0]].checkpoint_path if ckpt_ranks else None
        by_rank_metrics = tuple(dict(by_rank[r].metrics or {}) for r in sorted(by_rank))
        return CompletedReport(report.index, dict((r0.metrics if r0 else None) or {}), path, ckpt_ranks,
                               by_rank_metrics)

    def finish(self, rank: int, end_index: int) -> bool:
        """Rank's function returned after reporting up to (not including) end_index. True once
        every rank has finished; a rank that made fewer reports than another raises."""
        self._done[rank] = end_index
        self._check_finished_ranks()
        return len(self._done) == self.world_size

    def _check_finished_ranks(self) -> None:
        for rank, end in self._done.items():
            waiting = {r: i for i, reps in self._got.items() for r in reps if i >= end}
            others = {r: e for r, e in self._done.items() if e != end}
            if waiting or others:
                r, i = next(iter(waiting.items())) if waiting else next(iter(others.items()))
                raise ReportMismatchError(
                    f"rank {rank} returned after {end} report() calls while rank {r} made "
                    f"{i + 1 if waiting else i}: every worker must call ember.train.report() the "
                    "same number of times")


@dataclass
class FailurePolicy:
    """Restart-or-fail decisions for worker-group failures."""

    max_failures: int = 0
    failures: int = 0

    def on_failure(self) -> bool:
        """Counts one failure; True when the group should be restarted."""
        self.failures += 1
        return self.max_failures == -1 or self.failures <= self.max_failures

    def describe(self) -> str:
        limit = "unlimited" if self.max_failures == -1 else str(self.max_failures)
        return f"failure {self.failures} (max_failures={limit})"


@dataclass
class TrackedCheckpoint:
    """A registered checkpoint: its report index, storage path and the metrics reported with it."""

    index: int
    path: str
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "path": self.path, "metrics": self.metrics}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrackedCheckpoint:
        return cls(int(d["index"]), str(d["path"]), dict(d.get("metrics") or {}))


class CheckpointManager:
    """Keeps the registered checkpoints and decides which ones to delete."""

    def __init__(self, config: CheckpointConfig | None = None,
                 checkpoints: list[TrackedCheckpoint] | None = None) -> None:
        self.config = config or CheckpointConfig()
        self.checkpoints: list[TrackedCheckpoint] = list(checkpoints or [])

    @property
    def latest(self) -> TrackedCheckpoint | None:
        return max(self.checkpoints, key=lambda c: c.index) if self.checkpoints else None

    def _score(self, c: TrackedCheckpoint) -> tuple[int, float, int]:
        attr = self.config.checkpoint_score_attribute
        if attr is None:
            return (1, 0.0, c.index)  # most recent is best
        v = c.metrics.get(attr)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
            return (0, 0.0, c.index)  # unscored: below every scored checkpoint
        return (1, float(v) if self.config.checkpoint_score_order == "max" else -float(v), c.index)

    def best_first(self) -> list[TrackedCheckpoint]:
        """The kept checkpoints, best first."""
        return sorted(self.checkpoints, key=self._score, reverse=True)

    def register(self, index: int, path: str, metrics: dict[str, Any]) -> list[TrackedCheckpoint]:
        """Adds a checkpoint; returns those to delete now (never the latest one). A checkpoint
        re-registered at an existing path replaces the old entry."""
        self.checkpoints = [c for c in self.checkpoints if c.path != path]
        self.checkpoints.append(TrackedCheckpoint(index, path, dict(metrics)))
        keep = self.config.num_to_keep
        if keep is None or len(self.checkpoints) <= keep:
            return []
        kept = self.best_first()[:keep]
        latest = self.latest
        if latest is not None and latest not in kept:
            kept.append(latest)
        gone = [c for c in self.checkpoints if c not in kept]
        self.checkpoints = [c for c in self.checkpoints if c in kept]
        return gone

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in sorted(self.checkpoints, key=lambda c: c.index)]
