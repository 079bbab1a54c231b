"""The driver door: what a driver service (the Serve proxy) and Serve's handles need of this
process's connection to the cluster, as plain values. Each call needs `ember.init()` first."""
from __future__ import annotations

import asyncio


def session_id() -> int:
    """Identifies this process's connection to a cluster (a new `ember.init()` is a new one)."""
    from ..worker import global_worker

    return id(global_worker().core)


def event_loop() -> asyncio.AbstractEventLoop:
    """The core worker's event loop, on which a driver service may run its own server."""
    from ..worker import global_worker

    return global_worker().core.loop


def max_inline_bytes() -> int:
    """Values up to this size travel inline in task replies instead of through the store."""
    from ..worker import global_worker

    return int(global_worker().core.config.max_inline_bytes)


def session_dir() -> str:
    """This node's session directory (its `logs/` holds the node's log files)."""
    from ..worker import global_worker

    return str(global_worker().core.session_dir)
