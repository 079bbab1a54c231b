"""ember_serve_proxy: Serve's HTTP ingress (ASGI on uvicorn with uvloop + httptools).

Routes requests by prefix to the ingress deployment of each application, picking a replica by
power of two choices on in-flight requests; see services/serve-proxy/README.md for the flow.
"""
from __future__ import annotations

from .app import ProxyApp

__all__ = ["ProxyApp"]
