"""Finding the GCS leader among replicas: what a follower answers and how a client follows it.

A replicated GCS (`ember-gcs --ha`) serves from one leader; the other replicas answer every RPC
UNAVAILABLE with the leader's address in the trailing metadata key `LEADER_METADATA_KEY`
(empty while no leader is known). A client is given every replica's address, comma-separated
("gcs-1:6379,gcs-2:6379,gcs-3:6379"); `Replicas` is its pure choice of which one to call: the
hinted leader when a follower names one, the next address in turn when a replica is silent.
`Channels`, `Service` and `Method` give the typed clients (gcs_client, gcs_task_client) stubs
on whichever replica is current, and `go_again` is their one rule for a failed call.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import grpc

from . import rpc
from .config import get_config

LEADER_METADATA_KEY = "ember-gcs-leader"


def parse_addresses(address: str) -> list[str]:
    """The replica addresses of a GCS address ("h:p" or "h1:p1,h2:p2,..."), in order, each once
    (an empty address stays one empty address: a client of it fails on its first call, as a
    client of any unreachable address does)."""
    out: list[str] = []
    for part in address.split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out or [address.strip()]


def not_leader_message(replica: str, leader: str) -> str:
    """The text of a follower's UNAVAILABLE answer."""
    where = f"the leader is at {leader}" if leader else "no leader is elected yet"
    return f"GCS replica {replica} is not the leader ({where})"


def leader_hint(err: Any) -> str | None:
    """The leader a follower named in a failed call's trailing metadata ("" if it knows none),
    or None when the answer did not come from a follower."""
    try:
        md = err.trailing_metadata()
    except Exception:  # noqa: BLE001 - no metadata on this error (e.g. a local failure)
        return None
    for key, value in md or ():
        if key == LEADER_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


SILENT_S = 3.0  # a replica that did not answer is not taken as the leader on a hint for this long


class Replicas:
    """Which replica a client calls (pure; `clock` passed in): starts at the first, moves to a
    hinted leader, and to the next replica in turn when the current one does not answer. A
    follower goes on naming a leader that died until its lease ends: a hint naming a replica
    that was silent in the last SILENT_S seconds is not followed."""

    def __init__(self, addresses: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        if not addresses:
            raise ValueError("no GCS replica address")
        self.addresses = list(addresses)
        self.current = self.addresses[0]
        self._clock = clock
        self._silent_until: dict[str, float] = {}

    def failed(self, address: str, hint: str | None) -> bool:
        """The call to address failed UNAVAILABLE, with a follower's hint or None (silent).
        Returns whether the next try should go at once (a follower named another replica)."""
        if address != self.current:  # another call already moved on
            return True
        now = self._clock()
        if hint and self._silent_until.get(hint, 0.0) <= now:
            if hint not in self.addresses:  # a leader this client was not told of (scaled out)
                self.addresses.append(hint)
            moved = hint != address
            self.current = hint
            return moved
        if hint is None:  # no answer at all ("": a follower that knows no leader yet)
            self._silent_until[address] = now + SILENT_S
        i = self.addresses.index(address) if address in self.addresses else -1
        self.current = self.addresses[(i + 1) % len(self.addresses)]
        return False


# Keepalive of the channels to replicas when there are several: a leader that went silent (its
# host or container gone, paused, cut off) fails the calls and streams on it within about two
# seconds, so they go on to another replica (a single GCS keeps EMBER_GRPC_KEEPALIVE_S; the
# servers accept pings this often: rpc.keepalive_options).
# A connection attempt to a silent replica (the kernel accepts, nobody answers) is given up
# after min_reconnect_backoff_ms instead of gRPC's 20 s.
FAILOVER_KEEPALIVE = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 1000),
                      ("grpc.http2.ping_timeout_ms", 1000), ("grpc.http2.max_pings_without_data", 0),
                      ("grpc.http2.min_time_between_pings_ms", 1000),
                      ("grpc.min_reconnect_backoff_ms", 1000), ("grpc.max_reconnect_backoff_ms", 2000)]


class Channels:
    """One channel per GCS replica, opened on first use (with FAILOVER_KEEPALIVE when the client
    knows several replicas)."""

    def __init__(self, open_channel: Callable[..., Any], replicas: Replicas | None = None) -> None:
        self._open = open_channel
        self._replicas = replicas
        self.by_address: dict[str, Any] = {}
        self._stubs: dict[tuple[str, Any], Any] = {}

    def stub(self, address: str, stub_cls: Any) -> Any:
        """The stub_cls stub over the channel to address."""
        found = self._stubs.get((address, stub_cls))
        if found is None:
            channel = self.by_address.get(address)
            if channel is None:
                several = (self._replicas is not None and len(self._replicas.addresses) > 1
                           and get_config().grpc_keepalive_s > 0)  # 0: keepalive off everywhere
                channel = self.by_address[address] = (
                    self._open(address, extra_options=FAILOVER_KEEPALIVE) if several else self._open(address))
            found = self._stubs[(address, stub_cls)] = stub_cls(channel)
        return found


class Method:
    """One RPC of a GCS service, on whichever replica the client calls now (`at(address)`)."""

    def __init__(self, channels: Channels, replicas: Replicas, stub_cls: Any, name: str) -> None:
        self._channels, self._replicas, self._cls, self.name = channels, replicas, stub_cls, name

    def at(self, address: str) -> Any:
        """The multicallable on the replica at address."""
        return getattr(self._channels.stub(address, self._cls), self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.at(self._replicas.current)(*args, **kwargs)


class Service:
    """A GCS service's methods as `Method`s (service.Method(request) calls the current replica)."""

    def __init__(self, channels: Channels, replicas: Replicas, stub_cls: Any) -> None:
        self._channels, self._replicas, self._cls = channels, replicas, stub_cls

    def __getattr__(self, name: str) -> Method:
        return Method(self._channels, self._replicas, self._cls, name)


def go_again(replicas: Replicas, address: str, err: grpc.RpcError, idempotent: bool,
             tried: set[str]) -> bool:
    """Records a failed call to address; True when it should go again at once: to the leader a
    follower named (the follower did nothing, so even a non-idempotent call may), or, for an
    idempotent call, to the next replica when this one did not answer and that one was not tried
    yet in this attempt (a replica that is down costs no backoff while another answers). A call
    that ran out of time moves the next try (the caller's backoff) on to the next replica: an
    unreachable host may time out rather than refuse, and a follower sends a wrong guess back.
    A call the replica cancelled (it stopped with the call in hand: a deposed leader, a GCS
    shutting down) is, for an idempotent call, a replica that did not answer."""
    if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        replicas.failed(address, None)
        return False
    if err.code() == grpc.StatusCode.CANCELLED and idempotent:
        replicas.failed(address, None)
        return replicas.current not in tried
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    hint = leader_hint(err)
    if replicas.failed(address, hint) and hint:
        return True
    return idempotent and replicas.current not in tried


def call_sync(replicas: Replicas, method: Method, request: Any, *, idempotent: bool = True,
              **kwargs: Any) -> Any:
    """One attempt of a blocking call: the current replica, then where `go_again` says; a
    failure raises the kit's exception (rpc.status_to_exception)."""
    tried: set[str] = set()
    last: grpc.RpcError | None = None
    for _ in range(2 * len(replicas.addresses) + 1):
        address = replicas.current
        tried.add(address)
        try:
            return method.at(address)(request, **kwargs)
        except grpc.RpcError as e:
            if not go_again(replicas, address, e, idempotent, tried):
                raise rpc.status_to_exception(e) from None
            last = e
    assert last is not None
    raise rpc.status_to_exception(last) from None


async def call_async(replicas: Replicas, method: Method, request: Any, *, idempotent: bool = True,
                     **kwargs: Any) -> Any:
    """call_sync for asyncio channels."""
    tried: set[str] = set()
    last: grpc.RpcError | None = None
    for _ in range(2 * len(replicas.addresses) + 1):
        address = replicas.current
        tried.add(address)
        try:
            return await method.at(address)(request, **kwargs)
        except grpc.aio.AioRpcError as e:
            if not go_again(replicas, address, e, idempotent, tried):
                raise rpc.status_to_exception(e) from None
            last = e
    assert last is not None
    raise rpc.status_to_exception(last) from None
