"""The cluster's demand for the autoscaler (proto/autoscaler.proto; Ray's GcsAutoscalerStateManager):
the raylets' load reports, the placement groups waiting to be placed and the latest
`request_resources()` bundles (internal KV), served as one GetClusterResourceState reply.

`LoadTable` is pure (reports in, the cluster view out, an injected clock): a report older than
`stale_s` (its raylet stopped reporting) or from a node that is no longer alive is left out, and
such a node shows as not `reported` (busy, for the autoscaler). Load lives in memory only: a GCS
that restarts has it again after one report period.
"""
from __future__ import annotations

import json
import time
from typing import Callable, Iterable

import grpc

from ember_common import rpc
from ember_common.autoscaler_client import KV_NAMESPACE, RESOURCE_REQUEST_KEY
from ember_common.proto import autoscaler_pb2, autoscaler_pb2_grpc, common_pb2
from ember_common.rpc import InvalidArgument, NotFound, rpc_errors

from .core import GcsCore

PG = common_pb2.PlacementGroupInfo
SERVICE_NAME = autoscaler_pb2.DESCRIPTOR.services_by_name["AutoscalerStateService"].full_name


class LoadTable:
    """The latest load report of each node."""

    def __init__(self, stale_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_s = stale_s
        self.clock = clock
        self.reports: dict[str, tuple[float, autoscaler_pb2.ReportResourceLoadRequest]] = {}

    def report(self, r: autoscaler_pb2.ReportResourceLoadRequest) -> None:
        """Replaces the node's report. InvalidArgument without a node id or with a bad count."""
        if not r.node_id:
            raise InvalidArgument("node_id is required")
        for d in (*r.queued, *r.infeasible):
            if d.count < 0:
                raise InvalidArgument(f"a demand count must be >= 0, got {d.count}")
        self.reports[r.node_id] = (self.clock(), r)

    def nodes(self, infos: Iterable[common_pb2.NodeInfo]) -> list[autoscaler_pb2.NodeLoad]:
        """The alive nodes with their load; reports of nodes not alive are forgotten."""
        now = self.clock()
        alive = [n for n in infos if n.state == common_pb2.NodeInfo.ALIVE]
        ids = {n.node_id for n in alive}
        for node_id in [k for k in self.reports if k not in ids]:
            del self.reports[node_id]
        out = []
        for n in sorted(alive, key=lambda n: (not n.is_head, n.start_time, n.node_id)):
            load = autoscaler_pb2.NodeLoad(
                node_id=n.node_id, raylet_address=n.raylet_address, objmgr_address=n.objmgr_address,
                is_head=n.is_head, total_resources=n.total_resources,
                available_resources=n.available_resources)
            got = self.reports.get(n.node_id)
            if got is not None and now - got[0] <= self.stale_s:
                r = got[1]
                load.queued.extend(r.queued)
                load.infeasible.extend(r.infeasible)
                # an idle node reports again only when that changes: its idle time goes on
                idle_s = r.idle_duration_s + (now - got[0]) if r.idle else 0.0
                load.idle_duration_s, load.leased, load.reported = idle_s, r.leased, True
            out.append(load)
        return out


def pending_groups(waiting: Iterable[PG]) -> list[autoscaler_pb2.PendingPlacementGroup]:
    """The waiting groups with the bundles they still need (unplaced ones), oldest first."""
    out = []
    for g in waiting:
        bundles = [autoscaler_pb2.ResourceDemand(resources=b.resources, count=1)
                   for b in g.bundles if not b.node_id]
        if bundles:
            out.append(autoscaler_pb2.PendingPlacementGroup(
                placement_group_id=g.placement_group_id, strategy=PG.Strategy.Name(g.strategy),
                bundles=bundles, state_message=g.state_message))
    return out


def requested(raw: bytes | None) -> list[autoscaler_pb2.ResourceDemand]:
    """The stored request_resources() bundles, equal ones counted together ([] when none or
    unreadable: the SDK validates what it stores)."""
    if not raw:
        return []
    try:
        bundles = json.loads(raw)
    except ValueError:
        return []
    counts: dict[tuple[tuple[str, float], ...], int] = {}
    for b in bundles if isinstance(bundles, list) else []:
        if isinstance(b, dict):
            shape = tuple(sorted((str(k), float(v)) for k, v in b.items() if float(v) > 0))
            counts[shape] = counts.get(shape, 0) + 1
    return [autoscaler_pb2.ResourceDemand(resources=dict(s), count=n) for s, n in counts.items()]


class AutoscalerStateServicer(autoscaler_pb2_grpc.AutoscalerStateServiceServicer):
    """Thin shell over LoadTable and the core's node, placement group and KV tables."""

    def __init__(self, core: GcsCore, loads: LoadTable) -> None:
        self.core = core
        self.loads = loads

    @rpc_errors
    async def ReportResourceLoad(self, request: autoscaler_pb2.ReportResourceLoadRequest,
                                 context: rpc.Context) -> autoscaler_pb2.ReportResourceLoadReply:
        self.loads.report(request)
        return autoscaler_pb2.ReportResourceLoadReply()

    @rpc_errors
    async def GetClusterResourceState(self, request: autoscaler_pb2.GetClusterResourceStateRequest,
                                      context: rpc.Context) -> autoscaler_pb2.GetClusterResourceStateReply:
        try:
            raw: bytes | None = await self.core.kv.get(KV_NAMESPACE, RESOURCE_REQUEST_KEY)
        except NotFound:
            raw = None
        return autoscaler_pb2.GetClusterResourceStateReply(
            nodes=self.loads.nodes(self.core.nodes.values()),
            pending_placement_groups=pending_groups(self.core.pgs.manager.waiting()),
            requested=requested(raw))


def add(core: GcsCore, server: grpc.aio.Server, stale_s: float) -> None:
    """Registers the service over core on server (a report older than stale_s is ignored)."""
    autoscaler_pb2_grpc.add_AutoscalerStateServiceServicer_to_server(
        AutoscalerStateServicer(core, LoadTable(stale_s)), server)
