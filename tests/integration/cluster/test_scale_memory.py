"""Driver memory per pending task (issue 20's 1,000,000-task scale envelope, docs/perf.md).

A driver that submits many tasks faster than they run holds every pending one: its spec, its
TaskEntry, its ObjectRef and the reference-table rows. With both CPUs held by two blocked tasks,
20,000 no-op tasks stay pending while the driver's resident memory is read; each must cost less
than MAX_BYTES_PER_PENDING_TASK (2.7 KB measured; 3.9 KB before a no-op task's spec stopped
touching its empty repeated fields, which grew the spec's arena; 4.1 KB with two more top-level
TaskSpec fields, whose 16 bytes pushed each spec's arena into a second block, until they became
one optional submessage; Ray 2.60: 5.7 KB), and all of them then run."""
from __future__ import annotations

import gc
import os
import time

import pytest

import ember

N = 20_000
MAX_BYTES_PER_PENDING_TASK = 3_300


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def two_cpus():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def test_memory_per_pending_task_is_bounded(two_cpus, tmp_path):
    @ember.remote(num_cpus=1)
    def block(d: str, i: int) -> None:
        open(os.path.join(d, f"started{i}"), "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(d, "go")) and time.monotonic() < deadline:
            time.sleep(0.02)

    @ember.remote
    def noop() -> None:
        return None

    ember.get([noop.remote() for _ in range(200)], timeout=120)  # lease and stream set up
    d = str(tmp_path)
    blockers = [block.remote(d, i) for i in range(2)]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(d, f"started{i}")) for i in range(2)):
        assert time.monotonic() < deadline, "the blocking tasks did not start"
        time.sleep(0.02)
    gc.collect()
    before = _rss_bytes()
    refs = [noop.remote() for _ in range(N)]
    time.sleep(1)  # the core loop takes them in
    gc.collect()
    per_task = (_rss_bytes() - before) / N
    print(f"{per_task:.0f} bytes per pending task")
    open(os.path.join(d, "go"), "w").close()
    assert ember.get(refs, timeout=600) == [None] * N
    ember.get(blockers, timeout=60)
    assert per_task < MAX_BYTES_PER_PENDING_TASK, f"{per_task:.0f} bytes per pending task"
