"""An asyncio event loop whose timers wake when they are due, not up to 1 ms later.

asyncio's default loop on Linux waits in `epoll_wait`, whose timeout is whole milliseconds:
`selectors.EpollSelector` (and `select.epoll.poll` again) round the time to the next timer *up*
to the millisecond. A loop whose timers fall at arbitrary phases — an async actor serving many
streams, each sleeping between items as a token generator does — therefore wakes each timer
between 0 and 1 ms late, and a stream that sleeps between its items falls behind by that much
per item.

`PreciseEpollSelector` waits for the epoll descriptor itself with `select()`, whose timeout
has microsecond resolution, and then, when it became readable, collects the ready events
without blocking: a wait that ends at its timer is one system call as before, one that ends on
I/O two. Nothing else changes: readiness, registration and the loop are the stock ones. A wait with no timer pending (timeout None), a
poll (timeout 0), or an epoll descriptor numbered past select()'s FD_SETSIZE take the stock path.
"""
from __future__ import annotations

import asyncio
import select
import selectors
from typing import Any

_FD_SETSIZE = 1024


class PreciseEpollSelector(selectors.EpollSelector):
    """EpollSelector whose finite timeouts are honoured to the microsecond (see the module
    docstring)."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            fd = self._selector.fileno()  # type: ignore[attr-defined]
            if fd < _FD_SETSIZE:
                if not select.select([fd], [], [], timeout)[0]:
                    return []  # the timeout: nothing to collect (one system call for a timer)
                timeout = 0
        return super().select(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop on PreciseEpollSelector (where epoll exists; else the default)."""
    if not hasattr(select, "epoll"):
        return asyncio.new_event_loop()
    sel: Any = PreciseEpollSelector()
    return asyncio.SelectorEventLoop(sel)
