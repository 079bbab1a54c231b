"""The door of Serve's internals for the HTTP proxy service (`ember_serve_proxy`), which runs
as a driver of its own: the route table, the stream pollers, the proxy registry, and the
multiplexed model id of a request's headers. Nothing
else imports it; the proxy imports nothing else of `ember.serve` but its public API."""
from __future__ import annotations

from ._private.multiplex import model_id_from_headers
from ._private.proxies import register, unregister
from ._private.router import RouteTable
from ._private.stream_poller import ChannelPoller, Inbox, StreamPoller
from .exceptions import BackPressureError

__all__ = ["BackPressureError", "ChannelPoller", "Inbox", "RouteTable", "StreamPoller", "model_id_from_headers",
           "register", "unregister"]
