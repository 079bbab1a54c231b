"""Ember Serve: Ray Serve's API on Ember (`from ember import serve`, like `from ray import serve`).

    @serve.deployment(num_replicas=2, max_ongoing_requests=32)
    class Model:
        async def __call__(self, request):
            return {"text": (await request.json())["prompt"].upper()}

    serve.run(Model.bind(), host="0.0.0.0", port=8000)

Pieces: a controller actor (desired state, reconciliation, autoscaling, rolling updates; state in
the GCS KV), replica actors, routers with power-of-two-choices (in the proxy and in every
DeploymentHandle), and the HTTP proxy service `ember_serve_proxy` (services/serve-proxy).
"""
from __future__ import annotations

from ._private.replica import get_replica_context
from .api import (
    ApplicationStatus,
    DeploymentStatus,
    ServeStatus,
    delete,
    get_app_handle,
    get_deployment_handle,
    run,
    shutdown,
    start,
    status,
)
from .batching import batch
from .config import AutoscalingConfig, DeploymentConfig, HTTPOptions
from .deployment import Application, Deployment, deployment, ingress
from .handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from .multiplex import get_multiplexed_model_id, multiplexed

__all__ = [
    "Application", "ApplicationStatus", "AutoscalingConfig", "Deployment", "DeploymentConfig",
    "DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator", "DeploymentStatus", "HTTPOptions",
    "ServeStatus", "batch", "delete", "deployment", "get_app_handle", "get_deployment_handle",
    "get_multiplexed_model_id", "get_replica_context", "ingress", "multiplexed", "run", "shutdown", "start",
    "status",
]
