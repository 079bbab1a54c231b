"""The core's doors for libraries and tools (the only `ember._private` modules they may import):

- internal_kv: the GCS's internal KV (Ray's `ray.experimental.internal_kv`);
- placement_groups: placement groups in plain Python (ids as bytes, Ray's table dicts);
- state: the cluster's tables in the shapes of Ray's state API;
- logs: each node's log files through its raylet's LogService;
- driver: this process's session id and session directory, the core's event loop and the inline-value bound.

Each is used as a module (`from ember._private.doors import state`).
"""
