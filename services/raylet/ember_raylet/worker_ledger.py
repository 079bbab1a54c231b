"""The node's worker ledger: the ids of the worker processes this raylet started, kept in the
GCS KV so that the next raylet of the same node can report them dead.

A raylet that is killed (its container, or the process with its workers) takes its workers with
it, and nobody reports their exits: the object managers keep their pins and half-written
objects, owners keep them as borrowers. The raylet that starts next for the same node id reads
the ledger its predecessor left and reports each worker in it dead, as the old raylet would
have on a normal exit (so the GCS publishes the deaths to every subscriber).

The ledger is written ahead: it always holds a few ids that no worker uses yet, and new workers
take their id from those, so a worker is in the stored ledger before its process exists (a raylet
killed just after starting one still leaves its id behind). Ids reported dead that no worker
ever used are harmless: nothing refers to them.

`WorkerLedger` is the state (pure); `LedgerWriter` keeps the KV copy in step with it.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ember_common import ids
from ember_common.worker_ledger_kv import KV_NAMESPACE, ledger_key, parse_ledger

__all__ = ["KV_NAMESPACE", "LedgerWriter", "WorkerLedger", "ledger_key"]

log = logging.getLogger(__name__)

RESERVE = 8  # ids written ahead of use
RETRY_S = 1.0  # after a failed KV write


class WorkerLedger:
    """Live worker ids, ids reserved for the next workers, and a predecessor's ids not yet
    reported dead. `version` counts changes: the writer stores a version at least that new."""

    def __init__(self, new_id: Callable[[], str] = ids.new_worker_id, reserve: int = RESERVE) -> None:
        self._new_id = new_id
        self._reserve = reserve
        self.live: set[str] = set()
        self.reserved: list[str] = [new_id() for _ in range(reserve)]
        self.unreported: set[str] = set()
        self.version = 1

    @staticmethod
    def parse(blob: bytes | None) -> list[str]:
        """The ids a stored ledger holds (a missing or empty one holds none)."""
        return parse_ledger(blob)

    def inherit(self, previous: list[str]) -> list[str]:
        """Takes over a predecessor's ids: they stay in the ledger until reported dead."""
        fresh = [w for w in previous if w not in self.live and w not in self.reserved]
        self.unreported.update(fresh)
        self.version += 1
        return fresh

    def reported(self, worker_id: str) -> None:
        """A predecessor's worker was reported dead to the GCS."""
        if worker_id in self.unreported:
            self.unreported.discard(worker_id)
            self.version += 1

    def take_id(self) -> str:
        """The id for a worker about to start: one already in the stored ledger when possible."""
        wid = self.reserved.pop(0) if self.reserved else self._new_id()
        self.live.add(wid)
        if len(self.reserved) <= self._reserve // 2:
            self.reserved += [self._new_id() for _ in range(self._reserve - len(self.reserved))]
        self.version += 1
        return wid

    def exited(self, worker_id: str) -> None:
        """A worker this raylet started is gone (its exit was reported)."""
        if worker_id in self.live:
            self.live.discard(worker_id)
            self.version += 1

    def encode(self) -> bytes:
        return " ".join(sorted(self.live) + self.reserved + sorted(self.unreported)).encode()


class LedgerWriter:
    """Writes the ledger to the KV whenever it changed (one write in flight; changes made
    meanwhile go in the next), retrying after failures until closed."""

    def __init__(self, ledger: WorkerLedger, put: Callable[[bytes], Awaitable[object]]) -> None:
        self.ledger = ledger
        self._put = put
        self._written = 0
        self._changed = asyncio.Event()

    def kick(self) -> None:
        self._changed.set()

    def rewrite(self) -> None:
        """Writes the ledger again even if unchanged (the GCS deleted it: the node had been
        declared dead, and this raylet, only silent, registered again)."""
        self._written = 0
        self._changed.set()

    async def flush(self) -> None:
        """Writes now if the stored copy is older (raises the KV's error)."""
        version = self.ledger.version
        if version > self._written:
            await self._put(self.ledger.encode())
            self._written = max(self._written, version)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
            self._changed.clear()
            try:
                await self.flush()
            except Exception as e:  # the GCS restarting: keep the change, try again
                log.debug("worker ledger write failed: %s", e)
                self._changed.set()
                await asyncio.sleep(RETRY_S)
