"""The raylet's memory monitor: Ray's group-by-owner killing policy, the threshold, the memory
reader over cgroup and /proc files, and the timer loop's kill (pure; no sockets)."""
from __future__ import annotations

import pytest

from ember_raylet import memory_monitor as mm

GB = 1024 ** 3


def run(wid: str, owner: str, retriable: bool, at: float, actor: bool = False) -> mm.Running:
    return mm.Running(wid, wid.encode(), owner, retriable, at, name=f"f_{wid}", actor=actor)


def policy(threshold: float = 0.9, min_free: int = -1) -> mm.MemoryPolicy:
    return mm.MemoryPolicy(node_id="n1", node_ip="10.0.0.1", usage_threshold=threshold,
                           min_free_bytes=min_free)


def test_threshold_is_the_larger_of_the_share_and_total_less_min_free():
    assert mm.threshold_bytes(100, 0.9, -1) == 90
    assert mm.threshold_bytes(100, 0.9, 5) == 95  # little free memory asked for: a higher bar
    assert mm.threshold_bytes(100, 0.9, 50) == 90


def test_retriable_groups_go_first_then_the_larger_group_then_the_newest():
    ws = [run("a", "o1", False, 9.0), run("b", "o2", True, 1.0), run("c", "o2", True, 2.0),
          run("d", "o3", True, 5.0)]
    victim, retry = mm.choose(ws)
    assert victim.worker_id == "c" and retry  # o2's group is larger; its newest; others remain
    victim, retry = mm.choose([run("b", "o2", True, 1.0), run("d", "o3", True, 5.0)])
    assert victim.worker_id == "d" and not retry  # equal sizes: the group granted last; alone
    victim, retry = mm.choose([run("a", "o1", False, 1.0), run("x", "o9", False, 3.0)])
    assert victim.worker_id == "x" and not retry  # non-retriable work is never retried
    assert mm.choose([]) is None


def test_decide_kills_only_past_the_threshold_and_one_at_a_time():
    p = policy(0.9)
    ws = [run("a", "o1", True, 1.0), run("b", "o1", True, 2.0)]
    assert p.decide(mm.MemorySnapshot(89 * GB // 10, 10 * GB), ws, lambda w: True) is None
    k = p.decide(mm.MemorySnapshot(95 * GB // 10, 10 * GB), ws, lambda w: True)
    assert k is not None and k.target.worker_id == "b" and k.should_retry
    # while b is still alive nothing else is chosen
    assert p.decide(mm.MemorySnapshot(95 * GB // 10, 10 * GB), ws, lambda w: True) is None
    k2 = p.decide(mm.MemorySnapshot(95 * GB // 10, 10 * GB), ws[:1], lambda w: w != "b")
    assert k2 is not None and k2.target.worker_id == "a" and not k2.should_retry


def test_the_cause_names_node_usage_and_threshold_and_is_kept_by_lease_and_worker():
    p = policy(0.9)
    k = p.decide(mm.MemorySnapshot(95 * GB // 10, 10 * GB), [run("a", "o1", True, 1.0)], lambda w: True)
    assert k is not None
    cause = p.failure_cause(b"a")
    assert cause is not None and cause.error_type == mm.OUT_OF_MEMORY
    assert cause.fail_task_immediately  # the owner's only task: no retry
    for text in ("10.0.0.1", "n1", "0.950000", "0.900000", "9.50GB / 10.00GB", "f_a"):
        assert text in cause.error_message, text
    assert p.failure_cause(b"other") is None
    reason = p.death_reason("a")
    assert reason is not None and "low on memory" in reason
    # the caller's actor queue recognises it (its calls fail with OutOfMemoryError)
    from ember._private.owner.actor_queue import OOM_MARKER
    assert OOM_MARKER in reason


def test_a_bad_threshold_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="EMBER_MEMORY_USAGE_THRESHOLD"):
        policy(1.5)


def test_read_memory_prefers_a_cgroup_v2_limit_below_the_machine(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:  16000000 kB\nMemFree: 1000 kB\nMemAvailable: 8000000 kB\n")
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.max").write_text(f"{4 * GB}\n")
    (cg / "memory.current").write_text(f"{3 * GB}\n")
    (cg / "memory.stat").write_text(f"anon 1\ninactive_file {GB}\n")
    snap = mm.read_memory(str(cg), str(tmp_path / "meminfo"), str(tmp_path / "none"))
    assert (snap.used_bytes, snap.total_bytes) == (2 * GB, 4 * GB)
    (cg / "memory.max").write_text("max\n")  # no limit: the machine's memory
    snap = mm.read_memory(str(cg), str(tmp_path / "meminfo"), str(tmp_path / "none"))
    assert (snap.used_bytes, snap.total_bytes) == (8000000 * 1024, 16000000 * 1024)


def test_read_memory_reads_cgroup_v1_and_falls_back_to_meminfo(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:  16000000 kB\nMemAvailable: 4000000 kB\n")
    v1 = tmp_path / "cg" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * GB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{GB}\n")
    (v1 / "memory.stat").write_text("total_inactive_file 0\n")
    snap = mm.read_memory(str(tmp_path / "cg"), str(tmp_path / "meminfo"), str(tmp_path / "none"))
    assert (snap.used_bytes, snap.total_bytes) == (GB, 2 * GB)
    snap = mm.read_memory(str(tmp_path / "none"), str(tmp_path / "meminfo"), str(tmp_path / "none"))
    assert snap.total_bytes == 16000000 * 1024 and snap.used_bytes == 12000000 * 1024


def test_read_memory_reads_the_processs_own_cgroup(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:  16000000 kB\nMemAvailable: 4000000 kB\n")
    (tmp_path / "self").write_text("9:name=systemd:/\n4:memory:/jobs/j1\n0::/\n")
    assert mm.own_cgroups(str(tmp_path / "self")) == ("/", "/jobs/j1")
    own = tmp_path / "cg" / "memory" / "jobs" / "j1"
    own.mkdir(parents=True)
    (own / "memory.limit_in_bytes").write_text(f"{3 * GB}\n")
    (own / "memory.usage_in_bytes").write_text(f"{GB}\n")
    # a parent's lower limit applies (v1's hierarchical_memory_limit)
    (own / "memory.stat").write_text(f"hierarchical_memory_limit {2 * GB}\ntotal_inactive_file 0\n")
    snap = mm.read_memory(str(tmp_path / "cg"), str(tmp_path / "meminfo"), str(tmp_path / "self"))
    assert (snap.used_bytes, snap.total_bytes) == (GB, 2 * GB)
    (tmp_path / "v2self").write_text("0::/svc/raylet\n")
    own2 = tmp_path / "cg2" / "svc" / "raylet"
    own2.mkdir(parents=True)
    (own2 / "memory.max").write_text(f"{GB}\n")
    (own2 / "memory.current").write_text(f"{GB // 2}\n")
    snap = mm.read_memory(str(tmp_path / "cg2"), str(tmp_path / "meminfo"), str(tmp_path / "v2self"))
    assert (snap.used_bytes, snap.total_bytes) == (GB // 2, GB)


class _Proc:
    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True


class _Worker:
    def __init__(self, wid: str) -> None:
        self.worker_id = wid
        self.dead = False
        self.popen = _Proc()


class _Lease:
    def __init__(self, lid: bytes, w: _Worker, owner: str, at: float) -> None:
        self.lease_id, self.worker, self.owner, self.granted_at = lid, w, owner, at
        self.name, self.actor = "f", False


class _Node:
    def __init__(self) -> None:
        self.leases: dict[bytes, _Lease] = {}
        self.futures: dict[bytes, object] = {}


def test_the_loop_kills_the_chosen_worker_and_takes_retriable_from_the_request():
    node = _Node()
    wa, wb = _Worker("wa"), _Worker("wb")
    node.leases = {b"la": _Lease(b"la", wa, "o1", 1.0), b"lb": _Lease(b"lb", wb, "o2", 2.0)}
    snap = mm.MemorySnapshot(99, 100)
    mon = mm.Monitor(policy(0.9), 250, read=lambda: snap)
    mon.requested(b"la", True)
    mon.requested(b"gone", True)  # neither leased nor pending: forgotten at the next tick
    kill = mon.tick(node)
    assert kill is not None and kill.target.worker_id == "wa"  # retriable beats newer non-retriable
    assert wa.popen.killed and not wb.popen.killed
    assert b"gone" not in mon.retriable
    assert mon.tick(node) is None  # wa is still leased (not reaped yet): wait for it


def test_a_disabled_monitor_records_nothing():
    mon = mm.Monitor(policy(), 0)
    mon.requested(b"x", True)
    assert mon.retriable == {}
