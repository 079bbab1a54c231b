"""get_node_ip_address: the address of the node this process runs on (as Ray's)."""
from __future__ import annotations


def get_node_ip_address(address: str | None = None) -> str:
    """The IP address the current node advertises to the cluster. Connected: the node's
    address in the GCS's node table; before `ember.init`: 127.0.0.1, the address Ember's nodes
    advertise unless started with another one. `address` (Ray's optional argument, a host to
    route to) is not supported: Ember does not probe routes."""
    if address is not None:
        raise ValueError("get_node_ip_address(address=...) is not supported by Ember: it reports "
                         "the node's advertised address and probes no route")
    import ember

    if not ember.is_initialized():
        return "127.0.0.1"
    node_id = ember.get_runtime_context().get_node_id()
    for node in ember.nodes():
        if node["NodeID"] == node_id:
            return str(node["NodeManagerAddress"])
    raise RuntimeError(f"this process's node {node_id} is not in the cluster's node table")
