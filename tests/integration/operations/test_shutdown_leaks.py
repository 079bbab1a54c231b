"""ember.shutdown() leaves nothing for the garbage collector to complain about. The core
worker's event loop used to be stopped but never closed; gRPC held on to it until the next
ember.init(), and a later gc.collect() then warned about the loop and its two self-pipe sockets
(ResourceWarning, an error under pytest's settings) in whatever test happened to run then
(test_compat_actor_lifetime's collect, after the modules before it had started and stopped
Ember). Found with `-W error::ResourceWarning` and PYTHONTRACEMALLOC=20."""
from __future__ import annotations

import asyncio
import gc

import ember
from ember._private.worker import global_worker


def test_init_and_shutdown_twice_leave_no_open_event_loop():
    for i in range(2):
        ember.init(num_cpus=1)
        try:
            assert ember.get(ember.put(i), timeout=60) == i
            core = global_worker().core
        finally:
            ember.shutdown()
        assert core.loop.is_closed(), "the core worker's loop is still open after shutdown"
        del core
        gc.collect()  # an unclosed loop (or socket) collected here fails this test (filterwarnings)



def test_shutdown_finishes_tasks_left_on_the_loop(caplog):
    """Closing the loop cancels and runs to their end the tasks still pending on it (e.g. a
    batch of plasma releases whose RPC was in flight at shutdown), instead of leaving them to be
    destroyed pending ("Task was destroyed but it is pending!", an unraisable error that failed
    whichever test ran next)."""
    ember.init(num_cpus=1)
    ended: list[str] = []
    tasks: list[asyncio.Task] = []
    try:
        core = global_worker().core

        async def stuck() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise

        async def start() -> None:
            tasks.append(asyncio.get_running_loop().create_task(stuck()))

        core.run(start(), timeout=10)
    finally:
        ember.shutdown()
    assert core.loop.is_closed()
    assert ended == ["cancelled"], "a task left on the loop was not finished before it closed"
    assert tasks[0].done()
    tasks.clear()
    del core
    gc.collect()
    destroyed = [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
    assert not destroyed, destroyed[0].getMessage()
