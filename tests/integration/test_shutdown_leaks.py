"""ember.shutdown() leaves nothing for the garbage collector to complain about. The core
worker's event loop used to be stopped but never closed; gRPC held on to it until the next
ember.init(), and a later gc.collect() then warned about the loop and its two self-pipe sockets
(ResourceWarning, an error under pytest's settings) in whatever test happened to run then
(test_compat_actor_lifetime's collect, after the modules before it had started and stopped
Ember). Found with `-W error::ResourceWarning` and PYTHONTRACEMALLOC=20."""
from __future__ import annotations

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
