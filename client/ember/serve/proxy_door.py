"""The door of Serve's internals for the HTTP proxy service (`ember_serve_proxy`), which runs
as a driver of its own: the route table, the stream pollers, and the proxy registry. Nothing
else imports it; the proxy imports nothing else of `ember.serve` but its public API."""
from __future__ import annotations

from ._private.proxies import register, unregister
from ._private.router import BackPressureError, RouteTable
from ._private.stream_poller import ChannelPoller, Inbox, StreamPoller

__all__ = ["BackPressureError", "ChannelPoller", "Inbox", "RouteTable", "StreamPoller", "register",
           "unregister"]
