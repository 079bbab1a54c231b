"""Client mode (Ray Client): a driver that reaches the cluster through one port on the head.

`ember.init("ember://HOST:10001")` (or `ray://`) connects to the client proxy
(`proxy.py`, started by `ember start --head --ray-client-server-port`), which runs a real driver
for the client in a process of its own (`session.py`, `ops.py`). The client's refs and actor
handles are stubs naming the session's (`stubs.py`); the wire is two gRPC methods carrying
pickles in chunks (`protocol.py`); the connection and its reference counts live in `client.py`.
"""
from __future__ import annotations

from .client import ClientConnection, active

__all__ = ["ClientConnection", "active"]
