"""A streaming generator whose items cannot be reported to a live caller fails the caller's
iteration with an error naming the cause; it never ends silently empty (reliability issue,
bug 2). The driver advertises an address nobody can call back (255.255.255.255: connecting
fails at once with "network unreachable"), the way a driver in a container advertised
127.0.0.1 to the other node; the task's own reply still reaches it on the call it made. This
is the unary ReportGeneratorItem path (the direct task transport off); with it on, the items
ride back on the connection the driver opened, and reach it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ember.testing import LocalCluster

DRIVER = textwrap.dedent('''
    import sys
    import ember
    from ember import exceptions as ex

    ember.init(address=sys.argv[1])

    @ember.remote
    def numbers(n):
        for i in range(n):
            yield i

    got, error = [], None
    try:
        for ref in numbers.options(num_returns="streaming").remote(3):
            got.append(ember.get(ref, timeout=60))
    except ex.RayError as e:
        error = e
    print("ITEMS", got)
    print("ERROR", type(error).__name__, str(error).replace("\\n", " ")[:300])
    ember.shutdown()
''')


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 2}, is_head=True)
        yield c
    finally:
        c.shutdown()


def test_items_that_cannot_reach_a_live_caller_fail_its_iteration(cluster, tmp_path):
    env = {**os.environ, "EMBER_NODE_IP": "255.255.255.255", "EMBER_DIRECT_TASK_TRANSPORT": "0"}
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), cluster.gcs_address], env=env,
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("ITEMS", "ERROR")))
    assert lines["ITEMS"] == "[]"  # no item reached the caller...
    kind, _, message = lines["ERROR"].partition(" ")
    assert kind == "RaySystemError", proc.stdout  # ...and it says so instead of ending empty
    assert "item 0 of the stream could not be delivered" in message
    assert "255.255.255.255" in message


def test_items_ride_back_on_the_direct_connection_the_caller_opened(cluster, tmp_path):
    env = {**os.environ, "EMBER_NODE_IP": "255.255.255.255"}
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), cluster.gcs_address], env=env,
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("ITEMS", "ERROR")))
    assert lines["ITEMS"] == "[0, 1, 2]" and lines["ERROR"].startswith("NoneType"), proc.stdout
