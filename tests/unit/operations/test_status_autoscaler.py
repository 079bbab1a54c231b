"""`ember status`'s autoscaler part (status_autoscaler.format_report), pure: node status by type
(Active, Idle, Pending, Recent failures) and demands in `ray status`'s shape."""
from __future__ import annotations

from ember._tools.cli.status_autoscaler import format_report
from ember_common.proto import autoscaler_pb2


def state() -> autoscaler_pb2.GetClusterResourceStateReply:
    s = autoscaler_pb2.GetClusterResourceStateReply()
    h = s.nodes.add(node_id="h", is_head=True, reported=True, leased=1, total_resources={"CPU": 2.0, "memory": 2**30},
                    available_resources={"CPU": 1.0, "memory": 2**29})
    h.queued.add(resources={"CPU": 1.0}, count=3)
    h.infeasible.add(resources={"GPU": 1.0}, count=1)
    s.nodes.add(node_id="w1", reported=True, idle_duration_s=12)
    s.nodes.add(node_id="w2", reported=True, leased=2)
    s.nodes.add(node_id="w3", reported=True)  # not idle: a placement group's bundle is reserved
    g = s.pending_placement_groups.add(strategy="STRICT_PACK")
    g.bundles.add(resources={"CPU": 4.0}, count=1)
    s.requested.add(resources={"CPU": 1.0}, count=8)
    return s


def test_with_an_autoscaler():
    status = {"time": 100.0, "node_types": {"w1": "small", "w2": "small", "w3": "small"}, "head_node_type": "head",
              "pending_launches": [{"node_type": "small", "since": 95.0, "state": "launching"},
                                   {"node_type": "small", "since": 96.0, "state": "launching"},
                                   {"node_type": "", "provider_id": "demo-small-ab", "since": 90.0,
                                    "state": "waiting to join"}],
              "recent_failures": [{"node_type": "small", "time": 99.0, "message": "no such image"}],
              "infeasible": [{"GPU": 1.0}]}
    text = "\n".join(format_report(state(), status, now=103.0))
    assert text.startswith("======== Autoscaler status: ") and " (3s ago) ========\nNode status\n" in text
    assert "Active:\n 1 head\n 2 small\nIdle:\n 1 small\n" in text
    assert "Pending:\n small, 2 launching\n demo-small-ab: node, waiting to join\n" in text
    assert "Recent failures:\n small: LaunchFailed (latest_attempt: " in text and "- no such image" in text
    assert "Resources\n" + "-" * 60 + "\nTotal Usage:\n 1.0/2.0 CPU\n 512.00MiB/1.00GiB memory\n\nFrom request_resources:" in text
    assert "From request_resources:\n {'CPU': 1.0}: 8 from request_resources()" in text
    assert ("Pending Demands:\n {'CPU': 1.0}: 3+ pending tasks/actors\n {'GPU': 1.0}: 1+ pending tasks/actors\n"
            " {'CPU': 4.0} * 1 (STRICT_PACK): 1+ pending placement groups") in text
    assert text.endswith("No node type can hold (infeasible):\n {'GPU': 1.0}")


def test_without_an_autoscaler_or_demand():
    s = autoscaler_pb2.GetClusterResourceStateReply()
    s.nodes.add(node_id="h", is_head=True, reported=True, idle_duration_s=3)
    text = "\n".join(format_report(s, None, now=0.0))
    assert text.startswith("======== Autoscaler status: no autoscaler is running ========\nNode status")
    assert "Active:\n (no active nodes)\nIdle:\n 1 head\nPending:\n (no pending nodes)\n" in text
    assert "Recent failures:\n (no failures)" in text
    assert "Total Usage:\n (no resources)\n\nFrom request_resources:\n (no resource demands)\nPending Demands:\n (no resource demands)" in text
