"""The raylet's load report for the autoscaler (proto/autoscaler.proto, as Ray's resource load):
the lease requests waiting here counted by resource shape, how long the node has been idle and
how many leases it holds, looked at every report period and sent to the GCS when it changed
(or as a keepalive; `Sender`), so a steady cluster costs the GCS next to nothing.

Requests inside a placement group's bundle wait for that bundle, not for a node, so they are
left out (their resource names carry `_group_`); the group itself is demand while it waits to be
placed, and the GCS counts it. Idle: no lease held, nothing waiting and every resource free
(reserved bundles count as used), measured from the first report that saw it so.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping, Protocol

from ember_common import autoscaler_client, rpc
from ember_common.proto import autoscaler_pb2

from .lease_queue import Shape

log = logging.getLogger(__name__)


class _Node(Protocol):
    """What the report reads of the raylet."""

    node_id: str

    @property
    def leases(self) -> Mapping[bytes, object]: ...

    @property
    def queue(self) -> _Queue: ...

    @property
    def resources(self) -> _Resources: ...


class _Queue(Protocol):
    def demand(self) -> tuple[dict[Shape, int], dict[Shape, int]]: ...

    def __len__(self) -> int: ...


class _Resources(Protocol):
    total: dict[str, float]

    def snapshot_available(self) -> dict[str, float]: ...


class IdleClock:
    """Since when the node has been idle (None: busy), from observations in time order."""

    def __init__(self) -> None:
        self.since: float | None = None

    def observe(self, busy: bool, now: float) -> float:
        """Records the node's state at `now`; returns how long it has been idle (0 when busy)."""
        if busy:
            self.since = None
            return 0.0
        if self.since is None:
            self.since = now
        return now - self.since


def _demands(counts: dict[Shape, int]) -> list[autoscaler_pb2.ResourceDemand]:
    return [autoscaler_pb2.ResourceDemand(resources=dict(shape), count=n)
            for shape, n in sorted(counts.items()) if not any("_group_" in k for k, _ in shape)]


def build_report(node: _Node, idle: IdleClock, now: float) -> autoscaler_pb2.ReportResourceLoadRequest:
    """The node's load now (and the idle clock advanced)."""
    queued, infeasible = node.queue.demand()
    available = node.resources.snapshot_available()
    all_free = all(abs(available.get(k, 0.0) - v) < 1e-9 for k, v in node.resources.total.items())
    busy = bool(node.leases) or len(node.queue) > 0 or not all_free
    return autoscaler_pb2.ReportResourceLoadRequest(
        node_id=node.node_id, queued=_demands(queued), infeasible=_demands(infeasible),
        idle_duration_s=idle.observe(busy, now), leased=len(node.leases), idle=not busy)


class Sender:
    """Which reports go out: one that differs from the last sent (the idle duration aside: the
    GCS extrapolates it), or any once `keepalive_s` passed since the last one sent."""

    def __init__(self, keepalive_s: float) -> None:
        self.keepalive_s = keepalive_s
        self.last: autoscaler_pb2.ReportResourceLoadRequest | None = None
        self.sent_at = float("-inf")

    def wants(self, r: autoscaler_pb2.ReportResourceLoadRequest, now: float) -> bool:
        """Whether to send `r` now."""
        same = self.last is not None and _without_duration(r) == _without_duration(self.last)
        return not same or now - self.sent_at >= self.keepalive_s

    def sent(self, r: autoscaler_pb2.ReportResourceLoadRequest, now: float) -> None:
        """`r` reached the GCS."""
        self.last, self.sent_at = r, now


def _without_duration(r: autoscaler_pb2.ReportResourceLoadRequest) -> autoscaler_pb2.ReportResourceLoadRequest:
    out = autoscaler_pb2.ReportResourceLoadRequest()
    out.CopyFrom(r)
    out.idle_duration_s = 0.0
    return out


async def report_loop(node: _Node, gcs_address: str, period_s: float, keepalive_s: float,
                      clock: Callable[[], float], stop: asyncio.Event) -> None:
    """Looks at the load every period and sends it when it changed or keepalive_s passed, until
    stop (a failed report goes again the next period)."""
    client = autoscaler_client.AutoscalerStateClient(gcs_address, timeout_s=max(2.0, 4 * period_s))
    idle = IdleClock()
    sender = Sender(keepalive_s)
    try:
        while not stop.is_set():
            now = clock()
            r = build_report(node, idle, now)
            if sender.wants(r, now):
                try:
                    await client.report_resource_load(r)
                    sender.sent(r, now)
                except rpc.ServiceError as e:  # an older GCS, or one restarting: the next period
                    log.debug("load report failed: %s", e)
            try:
                await asyncio.wait_for(stop.wait(), period_s)
            except asyncio.TimeoutError:
                pass
    finally:
        await client.close()
