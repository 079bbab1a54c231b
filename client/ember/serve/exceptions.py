"""Serve's exceptions (Ray's `ray.serve.exceptions`): RayServeException is the base of those
Serve raises itself; BackPressureError is raised when more requests are queued than a
deployment's max_queued_requests allows (HTTP 503 through the proxy)."""
from __future__ import annotations


class RayServeException(Exception):
    """An error raised by Serve itself (not by the user's code)."""


class BackPressureError(RayServeException):
    """More requests are queued than max_queued_requests allows (HTTP 503)."""
