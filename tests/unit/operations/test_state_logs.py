"""The log state API's pure parts: Ray's grouping of file names, picking the node a call names,
and turning a worker file's chunks into readable lines (markers as `:task_name:`, one task's
lines kept, ANSI codes stripped), whatever the chunk boundaries."""
from __future__ import annotations

import pytest

from ember.util.state import logs

NODES = [{"node_id": "aaaa1111", "node_ip": "10.0.0.1", "raylet_address": "10.0.0.1:1", "is_head": True},
         {"node_id": "bbbb2222", "node_ip": "10.0.0.2", "raylet_address": "10.0.0.2:1", "is_head": False},
         {"node_id": "bbbb3333", "node_ip": "10.0.0.2", "raylet_address": "10.0.0.2:2", "is_head": False}]


def test_categories_as_ray_groups_them():
    got = logs.categorize(["worker-a.out", "worker-a.err", "worker-a.out.1", "raylet-1234.err", "gcs.out",
                           "objmgr-1234.out", "dashboard.err", "job-driver-x.log", "fork-server.err"])
    assert got == {"worker_out": ["worker-a.out", "worker-a.out.1"], "worker_err": ["worker-a.err"],
                   "raylet": ["raylet-1234.err"], "gcs_server": ["gcs.out"], "objmgr": ["objmgr-1234.out"],
                   "dashboard": ["dashboard.err"], "driver": ["job-driver-x.log"], "internal": ["fork-server.err"]}


def test_pick_node_by_id_prefix_ip_or_head():
    assert logs.pick_node(NODES, "bbbb2222", None)["raylet_address"] == "10.0.0.2:1"
    assert logs.pick_node(NODES, "bbbb3", None)["node_id"] == "bbbb3333"
    assert logs.pick_node(NODES, None, "10.0.0.1")["node_id"] == "aaaa1111"
    assert logs.pick_node(NODES, None, None)["is_head"]
    with pytest.raises(ValueError, match="names 2 alive nodes"):
        logs.pick_node(NODES, "bbbb", None)
    with pytest.raises(ValueError, match="names no alive nodes"):
        logs.pick_node(NODES, "cccc", None)
    with pytest.raises(ValueError, match="node ip '10.0.0.2' has 2 alive nodes; give node_id"):
        logs.pick_node(NODES, None, "10.0.0.2")
    with pytest.raises(ValueError, match="no alive node"):
        logs.pick_node([], None, None)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


WORKER = (b"boot\n\x1e01000000\x1ff\nf says 1\n\x1e02000000\x1fg\ng says \xc3\xa9\n"
          b"\x1e01000000\x1ff\nf says 2\n\x1b[31mred\x1b[0m\ntail without newline")


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_readable_lines_whatever_the_chunks(size):
    out = b"".join(logs.readable(_chunks(WORKER, size)))
    assert out == (b"boot\n:task_name:f\nf says 1\n:task_name:g\ng says \xc3\xa9\n:task_name:f\nf says 2\n"
                   b"\x1b[31mred\x1b[0m\ntail without newline")
    kept = b"".join(logs.readable(_chunks(WORKER, size), keep=(bytes.fromhex("01000000"), "f"), strip_ansi=True))
    assert kept == b"f says 1\nf says 2\nred\ntail without newline"


def test_the_drivers_print_budget():
    from ember._private.log_printer import PrintBudget

    t = [0.0]
    b = PrintBudget(3, clock=lambda: t[0])
    assert b.admit(["a", "b"]) == ["a", "b"] and b.admit(["c", "d", "e"]) == ["c"]
    assert b.take_held() == 2 and b.take_held() == 0
    t[0] = 1.0  # a second's lines again
    assert b.admit(["f", "g", "h", "i"]) == ["f", "g", "h"] and b.held == 1
    unlimited = PrintBudget(0)
    assert unlimited.admit(["x"] * 10_000) == ["x"] * 10_000 and unlimited.held == 0
