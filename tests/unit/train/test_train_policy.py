"""Train's pure policies without sockets: the report barrier across ranks, restart-or-fail
accounting, checkpoint retention, and the run directory's recorded state."""
from __future__ import annotations

import pytest

from ember.train import CheckpointConfig
from ember.train._internal.policy import (
    CheckpointManager,
    FailurePolicy,
    RankReport,
    ReportBarrier,
    ReportMismatchError,
)
from ember.train._internal.run_state import RunStorage


def test_barrier_completes_a_report_once_every_rank_sent_it():
    b = ReportBarrier(world_size=3)
    assert b.add(1, RankReport(0, None, "/run/checkpoint_000000")) is None
    assert b.add(2, RankReport(0, None)) is None
    done = b.add(0, RankReport(0, {"loss": 1.5}, "/run/checkpoint_000000"))
    assert done is not None and done.index == 0 and done.metrics == {"loss": 1.5}
    assert done.checkpoint_path == "/run/checkpoint_000000" and done.checkpoint_ranks == (0, 1)
    assert b.next_index == 1
    # a fast rank may send the next report before the slow ones finish the current one
    assert b.add(0, RankReport(1, {"loss": 1.0})) is None
    assert b.add(1, RankReport(1, None)) is None
    assert b.add(2, RankReport(1, None)).checkpoint_path is None
    assert not b.finish(0, 2) and not b.finish(1, 2) and b.finish(2, 2)


def test_barrier_starts_at_the_restored_index_and_rejects_replays():
    b = ReportBarrier(world_size=2, next_index=7)
    with pytest.raises(ValueError, match="again"):
        b.add(0, RankReport(6, {}))
    b.add(0, RankReport(7, {"x": 1}))
    with pytest.raises(ValueError, match="twice"):
        b.add(0, RankReport(7, {"x": 1}))
    assert b.add(1, RankReport(7, None)).metrics == {"x": 1}


def test_barrier_names_ranks_that_report_a_different_number_of_times():
    b = ReportBarrier(world_size=2)
    b.add(0, RankReport(0, {}))
    b.add(1, RankReport(0, None))
    b.add(0, RankReport(1, {}))  # rank 0 reports once more, rank 1 returns
    with pytest.raises(ReportMismatchError, match="rank 1 returned after 1 report.*rank 0 made 2"):
        b.finish(1, 1)
    b2 = ReportBarrier(world_size=2)
    b2.finish(0, 0)
    with pytest.raises(ReportMismatchError, match="rank 0 returned after 0 report.*rank 1 made 1"):
        b2.add(1, RankReport(0, None))
    with pytest.raises(ReportMismatchError, match="rank 0 reported after"):
        b2.add(0, RankReport(0, {}))
    b3 = ReportBarrier(world_size=2)
    b3.finish(0, 0)
    with pytest.raises(ReportMismatchError):
        b3.finish(1, 3)


def test_failure_policy_counts_against_max_failures():
    p = FailurePolicy(max_failures=2)
    assert p.on_failure() and p.on_failure() and not p.on_failure()
    assert p.describe() == "failure 3 (max_failures=2)"
    assert not FailurePolicy(max_failures=0).on_failure()
    forever = FailurePolicy(max_failures=-1)
    assert all(forever.on_failure() for _ in range(100))
    resumed = FailurePolicy(max_failures=1, failures=1)  # a restored run keeps its count
    assert not resumed.on_failure()


def test_checkpoint_manager_keeps_the_most_recent_without_a_score():
    m = CheckpointManager(CheckpointConfig(num_to_keep=2))
    assert m.register(0, "c0", {}) == [] and m.register(1, "c1", {}) == []
    assert [c.path for c in m.register(2, "c2", {})] == ["c0"]
    assert [c.path for c in m.best_first()] == ["c2", "c1"] and m.latest.path == "c2"
    unlimited = CheckpointManager(CheckpointConfig())
    assert all(unlimited.register(i, f"c{i}", {}) == [] for i in range(20))


def test_checkpoint_manager_scores_and_always_keeps_the_latest():
    m = CheckpointManager(CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="acc",
                                           checkpoint_score_order="max"))
    gone = []
    for i, acc in enumerate([0.5, 0.9, 0.7, 0.1]):
        gone += [c.path for c in m.register(i, f"c{i}", {"acc": acc})]
    # best two are c1 (0.9) and c2 (0.7); c3 is the latest and stays for restarts
    assert gone == ["c0"] and sorted(c.path for c in m.checkpoints) == ["c1", "c2", "c3"]
    assert [c.path for c in m.register(4, "c4", {"acc": 0.8})] == ["c2", "c3"]
    assert [c.path for c in m.best_first()] == ["c1", "c4"]
    low = CheckpointManager(CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="loss",
                                             checkpoint_score_order="min"))
    low.register(0, "a", {"loss": 0.2})
    assert [c.path for c in low.register(1, "b", {"loss": 0.1})] == ["a"]
    assert [c.path for c in low.register(2, "c", {})] == []  # unscored latest kept beside the best
    assert [c.path for c in low.register(3, "d", {"loss": 0.05})] == ["b", "c"]


def test_checkpoint_manager_round_trips_through_json():
    m = CheckpointManager(CheckpointConfig(num_to_keep=3))
    for i in range(3):
        m.register(i, f"c{i}", {"step": i})
    from ember.train._internal.policy import TrackedCheckpoint

    again = CheckpointManager(m.config, [TrackedCheckpoint.from_json(d) for d in m.to_json()])
    assert again.latest.path == "c2" and again.latest.metrics == {"step": 2}
    assert again.register(1, "c1", {"step": 10}) == []  # same path: replaced, not added
    assert len(again.checkpoints) == 3


def test_run_storage_records_rows_and_state(tmp_path):
    run = RunStorage.create(str(tmp_path), "exp")
    assert not run.has_trainer() and run.load_state() == {} and run.load_rows() == []
    run.save_trainer(b"blob")
    run.save_state({"next_index": 2, "nan": float("nan")})
    for i in range(3):
        run.append_row({"i": i, "t": i * 0.5})
    again = RunStorage.open(str(tmp_path / "exp"))
    assert again.has_trainer() and again.load_trainer() == b"blob"
    assert again.load_state() == {"next_index": 2, "nan": "nan"}
    assert [r["i"] for r in again.load_rows()] == [0, 1, 2]
    again.truncate_rows(2)
    assert [r["i"] for r in RunStorage.open(str(tmp_path / "exp")).load_rows()] == [0, 1]
    for name in ("checkpoint_000001", "checkpoint_000004", "checkpoint_000005", "other"):
        (tmp_path / "exp" / name).mkdir()
    kept = {run.checkpoint_path(4)}
    assert run.stray_checkpoints(kept, 3) == [run.checkpoint_path(5)]
    assert run.uri() == str(tmp_path / "exp") and run.name == "exp"
