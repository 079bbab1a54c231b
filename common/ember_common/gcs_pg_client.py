"""GcsClient's placement group methods (PlacementGroupInfoGcsService), one per RPC.

A mixin of `gcs_client.GcsClient` (kept apart so each file stays readable); same errors and
retry policy as the rest of the client: the idempotent RPCs (all of them: creation is keyed by
the caller-chosen id) are retried while the GCS restarts.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from . import backoff
from .proto import common_pb2, gcs_pb2, gcs_pb2_grpc
from .validate_rules import MAX_GROUPS_PER_REQUEST

_T = TypeVar("_T")

PG = common_pb2.PlacementGroupInfo
STRATEGIES = tuple(PG.Strategy.keys())


def new_placement_group_id() -> bytes:
    """A fresh 18-byte group id (Ray's PlacementGroupID size)."""
    import os

    return os.urandom(18)


def spec(bundles: Sequence[dict[str, float]], strategy: str = "PACK", *, name: str = "",
         namespace: str = "", job_id: bytes = b"", detached: bool = False,
         placement_group_id: bytes | None = None,
         label_selectors: Sequence[dict[str, str]] | None = None) -> common_pb2.PlacementGroupInfo:
    """A group to create: bundles (resource dicts), a strategy name (PACK, SPREAD,
    STRICT_PACK, STRICT_SPREAD), a name in a namespace, its job and lifetime, and per bundle
    a label selector (Ray's bundle_label_selector; None: none)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"invalid placement group strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    return PG(placement_group_id=placement_group_id or new_placement_group_id(), name=name,
              namespace=namespace, strategy=strategy, job_id=job_id, detached=detached,
              bundles=[common_pb2.Bundle(index=i, resources=b,
                                         label_selector=label_selectors[i] if label_selectors else None)
                       for i, b in enumerate(bundles)])


class PlacementGroupMethods:
    """Mixed into GcsClient, which provides `_call` and the channel."""

    _pgs: gcs_pb2_grpc.PlacementGroupInfoGcsServiceAsyncStub

    async def _call(self, method: Any, request: Any, *, idempotent: bool, timeout_s: float | None,
                    retry: backoff.Backoff | None,
                    metadata: Sequence[tuple[str, str]] | None = None) -> Any:
        raise NotImplementedError  # GcsClient's

    async def create_placement_group(self, group: common_pb2.PlacementGroupInfo, *,
                                     timeout_s: float | None = None,
                                     retry: backoff.Backoff | None = None) -> common_pb2.PlacementGroupInfo:
        """Records a group (PENDING) and starts placing it; idempotent by its id. InvalidArgument
        for bad bundles, AlreadyExists for a name taken in the namespace."""
        reply: gcs_pb2.CreatePlacementGroupReply = await self._call(
            self._pgs.CreatePlacementGroup, gcs_pb2.CreatePlacementGroupRequest(spec=group),
            idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.placement_group

    async def create_placement_groups(self, groups: Sequence[common_pb2.PlacementGroupInfo], *,
                                      timeout_s: float | None = None,
                                      retry: backoff.Backoff | None = None) -> list[str]:
        """Records many groups (idempotent by id), in calls of at most MAX_GROUPS_PER_REQUEST;
        per group '' or why it was refused (bad bundles, a name taken)."""
        return [str(e) for e in await self._batched(
            self._pgs.CreatePlacementGroups, lambda part: gcs_pb2.CreatePlacementGroupsRequest(specs=part),
            groups, "errors", timeout_s, retry)]

    async def remove_placement_groups(self, placement_group_ids: Sequence[bytes], *,
                                      timeout_s: float | None = None,
                                      retry: backoff.Backoff | None = None) -> list[bytes]:
        """Removes many groups, in calls of at most MAX_GROUPS_PER_REQUEST; returns the ids the
        GCS does not know."""
        return [bytes(i) for i in await self._batched(
            self._pgs.RemovePlacementGroups,
            lambda part: gcs_pb2.RemovePlacementGroupsRequest(placement_group_ids=part),
            placement_group_ids, "not_found", timeout_s, retry)]

    async def _batched(self, method: Any, request_of: Callable[[list[Any]], Any], items: Sequence[Any],
                       answer: str, timeout_s: float | None, retry: backoff.Backoff | None) -> list[Any]:
        """A batch RPC over items in calls of at most MAX_GROUPS_PER_REQUEST; the replies'
        `answer` fields, concatenated."""
        out: list[Any] = []
        for part in _calls(items):
            reply = await self._call(method, request_of(part), idempotent=True, timeout_s=timeout_s, retry=retry)
            out += getattr(reply, answer)
        return out

    async def remove_placement_group(self, placement_group_id: bytes, *, timeout_s: float | None = None,
                                     retry: backoff.Backoff | None = None) -> None:
        """Removes a group (its bundles are released, their workers killed). NotFound if unknown."""
        await self._call(self._pgs.RemovePlacementGroup,
                         gcs_pb2.RemovePlacementGroupRequest(placement_group_id=placement_group_id),
                         idempotent=True, timeout_s=timeout_s, retry=retry)

    async def get_placement_group(self, placement_group_id: bytes, *, timeout_s: float | None = None,
                                  retry: backoff.Backoff | None = None) -> common_pb2.PlacementGroupInfo:
        """A group's record. NotFound if unknown."""
        reply: gcs_pb2.GetPlacementGroupReply = await self._call(
            self._pgs.GetPlacementGroup, gcs_pb2.GetPlacementGroupRequest(placement_group_id=placement_group_id),
            idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.placement_group

    async def get_named_placement_group(self, name: str, namespace: str, *, timeout_s: float | None = None,
                                        retry: backoff.Backoff | None = None) -> common_pb2.PlacementGroupInfo:
        """The live group with that name in the namespace. NotFound when there is none."""
        reply: gcs_pb2.GetNamedPlacementGroupReply = await self._call(
            self._pgs.GetNamedPlacementGroup, gcs_pb2.GetNamedPlacementGroupRequest(name=name, namespace=namespace),
            idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.placement_group

    async def get_all_placement_groups(self, *, timeout_s: float | None = None,
                                       retry: backoff.Backoff | None = None) -> list[common_pb2.PlacementGroupInfo]:
        """Every group, removed ones included."""
        reply: gcs_pb2.GetAllPlacementGroupReply = await self._call(
            self._pgs.GetAllPlacementGroup, gcs_pb2.GetAllPlacementGroupRequest(),
            idempotent=True, timeout_s=timeout_s, retry=retry)
        return list(reply.placement_groups)

    async def wait_placement_group_until_ready(
            self, placement_group_id: bytes, wait_s: float, *, timeout_s: float | None = None,
            retry: backoff.Backoff | None = None) -> tuple[bool, common_pb2.PlacementGroupInfo]:
        """Waits up to wait_s for the group to be CREATED (True) or REMOVED (False). NotFound if
        unknown."""
        ready, g, _ = await self.wait_placement_group_and_report(placement_group_id, wait_s, (),
                                                                 timeout_s=timeout_s, retry=retry)
        return ready, g

    async def wait_placement_group_and_report(
            self, placement_group_id: bytes, wait_s: float, also_report: Sequence[bytes], *,
            timeout_s: float | None = None, retry: backoff.Backoff | None = None,
    ) -> tuple[bool, common_pb2.PlacementGroupInfo, list[bytes]]:
        """wait_placement_group_until_ready, plus which of also_report are CREATED when the
        answer is made (a caller about to wait for them too need not ask again)."""
        reply: gcs_pb2.WaitPlacementGroupUntilReadyReply = await self._call(
            self._pgs.WaitPlacementGroupUntilReady,
            gcs_pb2.WaitPlacementGroupUntilReadyRequest(placement_group_id=placement_group_id, timeout_s=wait_s,
                                                        also_report=list(also_report)),
            idempotent=True, timeout_s=wait_s + 10 if timeout_s is None else timeout_s, retry=retry)
        return bool(reply.ready), reply.placement_group, list(reply.ready_ids)


def _calls(items: Sequence[_T]) -> list[list[_T]]:
    """items cut into the batch calls the GCS takes (MAX_GROUPS_PER_REQUEST each)."""
    n = MAX_GROUPS_PER_REQUEST
    return [list(items[i:i + n]) for i in range(0, len(items), n)]
