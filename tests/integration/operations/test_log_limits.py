"""A worker printing in a tight (bounded) loop on a real embedded cluster: its driver gets at
most the rate limit's lines and a notice of how many were dropped, and the worker's log file
rotates at the size cap with a bounded number of backups."""
from __future__ import annotations

import json
import os
import subprocess
import sys

N_LINES = 150_000
LINE_BYTES = len("spam line 000000 " + "x" * 40 + "\n")
DRIVER = r"""
import json, os, time
import ember

ember.init(num_cpus=1)

@ember.remote
def spam(n):
    for i in range(n):
        print(f"spam line {i:06d} " + "x" * 40)
    return ember.get_runtime_context().get_worker_id(), os.environ["EMBER_SESSION_DIR"]

worker_id, session_dir = ember.get(spam.remote(%d))
time.sleep(2.5)  # the monitor's next rounds: the notices, the last rotation
print("RESULT " + json.dumps([worker_id, session_dir]), flush=True)
ember.shutdown()
""" % N_LINES


def test_a_print_loop_neither_floods_the_driver_nor_fills_the_disk(tmp_path):
    env = dict(os.environ, EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S="500", EMBER_LOG_MAX_BYTES="300000",
               EMBER_LOG_BACKUP_COUNT="2")
    r = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    worker_id, session_dir = json.loads(next(ln for ln in out if ln.startswith("RESULT "))[7:])
    spam = [ln for ln in out if "spam line" in ln]
    notices = [ln for ln in out if "[ember]" in ln and "lines of output dropped" in ln]
    # The driver saw the first second's budget and a few more seconds' worth at most, and
    # notices for the rest.
    assert 500 <= len(spam) < N_LINES // 10, len(spam)
    assert notices, out[-5:]
    dropped = sum(int(n.split("[ember] ")[1].split()[0]) for n in notices)
    assert len(spam) + dropped <= N_LINES and dropped >= N_LINES // 2, (len(spam), dropped)
    # On disk: the worker's file and at most 2 backups, never everything it printed.
    logs = os.path.join(session_dir, "logs")
    base = f"worker-{worker_id}.out"
    mine = sorted(n for n in os.listdir(logs) if n.startswith(base))
    assert mine == [base, f"{base}.1", f"{base}.2"], mine
    sizes = [os.path.getsize(os.path.join(logs, n)) for n in mine]
    assert sum(sizes) < 0.6 * N_LINES * LINE_BYTES, sizes
    with open(os.path.join(logs, f"{base}.1")) as f:
        assert "spam line" in f.read(4096)  # a rotated copy holds the loop's output


def test_the_driver_prints_a_bounded_number_of_lines_a_second():
    """With no limit at the source, the driver's own budget holds a flood back and says so."""
    n = 8000  # under the raylet's bound on lines pending publication (log_monitor.MAX_PENDING)
    env = dict(os.environ, EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S="0", EMBER_DRIVER_LOG_MAX_LINES_PER_S="300")
    r = subprocess.run([sys.executable, "-c", DRIVER.replace(str(N_LINES), str(n))], env=env,
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = sum("spam line" in ln for ln in r.stdout.splitlines())
    notices = [ln for ln in r.stderr.splitlines() if "lines of worker output not printed" in ln]
    assert notices and "EMBER_DRIVER_LOG_MAX_LINES_PER_S" in notices[0], r.stderr[-2000:]
    held = sum(int(ln.split("[ember] ")[1].split()[0]) for ln in notices)
    assert 300 <= printed < n // 3, printed
    # Every line that reached the driver is printed or counted (the GCS's pub/sub may drop some
    # of a burst on the way).
    assert 0.9 * n <= printed + held <= n, (printed, held)


SHARED = r"""
import ember, time
from ember.testing.cluster import LocalCluster
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
with LocalCluster() as c:
    c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)
    other = c.add_node({"CPU": 1}, num_prestart_workers=0)  # the same log directory
    ember.init(address=c.gcs_address)

    @ember.remote
    def f():
        print("printed once", flush=True)

    ember.get([f.remote(), f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        other.node_id, soft=False)).remote()])
    time.sleep(1.5)
    ember.shutdown()
"""


def test_nodes_sharing_a_log_directory_forward_each_line_once():
    r = subprocess.run([sys.executable, "-c", SHARED], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("printed once") == 2, r.stdout  # two tasks, each line once
