"""Timestamps inside the Serve proxy, for scripts/bench_proxy_hops.py (not part of Ember).

Loaded by the proxy process that bench_proxy_hops.py starts (`python -c "import _proxy_hops_probe
as p; p.install(OUT); p.run_proxy(ARGS)"`): it wraps a few functions of the proxy's path (the
ASGI entry, `.remote()` of `handle_http`, the core loop's actor submit and reply, the concurrent
future's completion, the end of the wait on the HTTP loop, uvicorn's `send`, the stream channel's
delivery) to note `time.perf_counter_ns()` (CLOCK_MONOTONIC: comparable across processes on one
machine) and the thread, and writes the events as JSON lines to OUT at exit. One request at a
time: every event after an ASGI entry belongs to that request.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time
from typing import Any

EVENTS: list[tuple[str, int, str]] = []


PROFILE = os.environ.get("PROXY_HOPS_PROFILE", "")  # a path prefix: cProfile each busy thread
_profiles: dict[str, Any] = {}


def note(name: str) -> None:
    th = threading.current_thread().name
    EVENTS.append((name, time.perf_counter_ns(), th))
    if PROFILE and th not in _profiles and len(EVENTS) > 2000:  # (past the warm-up)
        import cProfile

        _profiles[th] = p = cProfile.Profile()
        p.enable()


def install(out: str) -> None:
    """Wraps the proxy's path (call before the proxy starts)."""
    import ember.actor as actor_mod
    from ember._private.objects import object_ref
    from ember._private.owner import actor_submitter
    from ember.serve._private import stream_poller
    from ember_serve_proxy import app as app_mod

    orig_call = app_mod.ProxyApp.__call__

    async def call(self: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await orig_call(self, scope, receive, send)
        note("asgi")
        body_sends = [0]

        async def timed_send(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.body":
                body_sends[0] += 1
                note(f"send{body_sends[0]}")
                await send(msg)
                note(f"sent{body_sends[0]}")
            else:
                note("send_head")
                await send(msg)
        await orig_call(self, scope, receive, timed_send)

    app_mod.ProxyApp.__call__ = call  # type: ignore[method-assign]

    orig_remote = actor_mod.ActorMethod.remote

    def remote(self: Any, *args: Any, **kwargs: Any) -> Any:
        hot = self._meta.name == "handle_http"
        if hot:
            note("remote")
        r = orig_remote(self, *args, **kwargs)
        if hot:
            note("remote_ret")
        return r

    actor_mod.ActorMethod.remote = remote  # type: ignore[method-assign]

    orig_submit = actor_submitter.ActorSubmitter.submit

    def submit(self: Any, entry: Any, retries: int) -> None:
        if entry.spec.method_name == "handle_http":
            note("core_submit")
        orig_submit(self, entry, retries)

    actor_submitter.ActorSubmitter.submit = submit  # type: ignore[method-assign]

    orig_pushed = actor_submitter.ActorSubmitter._pushed

    def pushed(self: Any, q: Any, entry: Any, inc: int, reply: Any, err: Any) -> None:
        if entry.spec.method_name == "handle_http":
            note("core_reply")
        orig_pushed(self, q, entry, inc, reply, err)

    actor_submitter.ActorSubmitter._pushed = pushed  # type: ignore[method-assign]

    orig_future = object_ref.ObjectRef.future

    def future(self: Any) -> Any:
        f = orig_future(self)
        f.add_done_callback(lambda _: note("cf_done"))
        return f

    object_ref.ObjectRef.future = future  # type: ignore[method-assign]

    wait_name = "_unless_left" if hasattr(app_mod, "_unless_left") else "_first"  # (the current proxy / an older tree)
    orig_wait = getattr(app_mod, wait_name)

    async def waited(work: Any, disconnect: Any) -> Any:
        r = await orig_wait(work, disconnect)
        note("http_woken")
        return r

    setattr(app_mod, wait_name, waited)

    orig_deliver = stream_poller.ChannelPoller._deliver

    def deliver(self: Any, entries: Any) -> None:
        note("channel_in")
        orig_deliver(self, entries)

    stream_poller.ChannelPoller._deliver = deliver  # type: ignore[method-assign]

    def dump() -> None:
        with open(out, "w") as f:
            json.dump(EVENTS, f)
        for th, p in _profiles.items():
            p.disable()
            p.dump_stats(f"{PROFILE}.{th}")

    atexit.register(dump)


def run_proxy(argv: list[str]) -> int:
    from ember_serve_proxy.__main__ import main

    return main(argv)


__all__ = ["install", "note", "run_proxy"]
