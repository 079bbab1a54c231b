"""The replica's side of the torch engine when its step loop runs in a process of its own.

`EngineCoreClient` is what LLMServer holds when `engine_kwargs["engine_process"]` is true (the
default for the torch engine): the same Engine interface and event-loop side as TorchEngine
(frontend.py: generate, submit, cancel, abort, stats, the tokenizer), with the step loop in an
engine-core child process (engine_core.py) reached over a socketpair:

    start()      loads the tokenizer, starts the core (`python -c BOOT ...`, its end of the
                 socketpair inherited as a file descriptor), waits for ("ready", max_model_len)
    submit/generate/cancel   ops queued on the loop, written as ONE frame per loop iteration
                 (call_soon), so requests and cancels that arrive together cross together
    the reader   `loop.add_reader` on the socket: every frame that arrived (one per engine step)
                 becomes (request_id, GenerationDelta | exception) pairs handed to `_deliver`
                 at once, so the replica pays one wake-up per step for all streams
    shutdown()   ("stop",), then waits for the core (killed after 10 s)

Requests are checked here before any round trip (prompt length, duplicate id; LLMServer checks
the OpenAI parameters), so a bad request costs the core nothing. If the core dies (a crash, an
out-of-memory kill), the reader sees EOF: every request in flight fails with an error naming the
exit code, new requests fail at once, and `check_health` raises, so Serve replaces the replica.
The core exits on its own when the replica goes away (engine_core.py: EOF on its socket), so a
killed replica leaves no orphan.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any

from .engine import EngineStats, GenerationDelta, GenerationRequest, LLMEngine
from .engine_core import BOOT, MARKER, FrameReader, frame, params_to_wire
from .frontend import EngineFrontend
from .torch_engine import check_engine_kwargs, load_tokenizer

log = logging.getLogger(__name__)
_HERE = os.path.dirname(os.path.abspath(__file__))
_ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError}


class EngineCoreClient(EngineFrontend, LLMEngine):
    """Ember's torch engine with its step loop in an engine-core child process."""

    def __init__(self, model_id: str, model_source: str, engine_kwargs: dict[str, Any] | None = None) -> None:
        kw = check_engine_kwargs(engine_kwargs)
        kw.pop("engine_process", None)
        self._init_frontend()
        self.model_id = model_id
        self.model_source = model_source
        self.kw = kw
        self._stats = EngineStats()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader = FrameReader()
        self._reading_on: asyncio.AbstractEventLoop | None = None
        self._ops: list[tuple[Any, ...]] = []
        self._flush_on: asyncio.AbstractEventLoop | None = None  # the loop a _flush is scheduled on
        self._wbuf = b""

    @property
    def core_pid(self) -> int | None:
        """The engine core process's pid (None before start)."""
        return self._proc.pid if self._proc is not None else None

    # -------------------------------------------------------------- start and stop
    def start(self) -> None:
        if self._proc is not None:
            return
        self.tokenizer = load_tokenizer(self.model_source, bool(self.kw.get("trust_remote_code", False)))
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, _HERE, MARKER, str(theirs.fileno()), self.model_id,
                 self.model_source, json.dumps(self.kw)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = ours
        try:
            hello = self._wait_ready()
        except BaseException:
            self.shutdown()
            raise
        self._max_len = int(hello[1])
        ours.setblocking(False)

    def _wait_ready(self) -> Any:
        """The core's first frame: ("ready", max_model_len); its load error raises here."""
        assert self._sock is not None and self._proc is not None
        self._sock.settimeout(1.0)
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except socket.timeout:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"the engine core process exited with code {self._proc.returncode} "
                                       f"while loading {self.model_source}") from None
                continue
            if not data:
                rc = self._proc.wait(10)
                raise RuntimeError(f"the engine core process exited with code {rc} while loading "
                                   f"{self.model_source} (see the replica's log)")
            msgs = self._reader.feed(data)
            if msgs:
                if msgs[0][0] == "error":
                    raise RuntimeError(f"the engine core could not load {self.model_source}: {msgs[0][1]}")
                return msgs[0]

    def shutdown(self) -> None:
        """Stops the core: ("stop",), then waits for it (killed after 10 s)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            self._unbind(sock)
            try:
                sock.setblocking(True)
                sock.settimeout(1.0)
                sock.sendall(frame([("stop",)]))
            except OSError:
                pass
            sock.close()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._error is None:
            self._error = RuntimeError("the engine was shut down")

    def stats(self) -> EngineStats:
        return self._stats

    async def check_health(self) -> None:
        await super().check_health()
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"the engine core process exited with code {self._proc.returncode}")

    # -------------------------------------------------------------- requests out
    def _admit(self, request: GenerationRequest) -> None:
        super()._admit(request)
        self._bind()

    def _post_add(self, request: GenerationRequest) -> None:
        self._ops.append(("add", request.request_id, list(request.prompt_token_ids), params_to_wire(request.params)))
        self._schedule_flush()

    def _post_abort(self, request_id: str) -> None:
        if self._sock is None:
            return
        self._ops.append(("abort", request_id))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            self._flush()
        elif self._flush_on is not loop:  # (one scheduled on a loop that closed before running it: again)
            self._flush_on = loop
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Writes the ops queued in this loop iteration as one frame (what does not fit in the
        socket's buffer waits for the socket to become writable)."""
        self._flush_on = None
        if not self._ops or self._sock is None:
            self._ops = []
            return
        data = self._wbuf + frame(self._ops)
        self._ops = []
        self._wbuf = b""
        self._write(data)

    def _write(self, data: bytes) -> None:
        assert self._sock is not None
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the core is gone: the reader sees EOF and fails the requests
        if sent < len(data):
            self._wbuf = data[sent:]
            if self._reading_on is not None and not self._reading_on.is_closed():
                self._reading_on.add_writer(self._sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        if self._sock is None:
            return
        assert self._reading_on is not None
        self._reading_on.remove_writer(self._sock.fileno())
        data, self._wbuf = self._wbuf, b""
        if data:
            self._write(data)

    # -------------------------------------------------------------- outputs in
    def _bind(self) -> None:
        """Reads the core's frames on the running loop (moved when a new loop runs requests)."""
        loop = self._loop
        sock = self._sock
        if loop is self._reading_on or sock is None or loop is None:
            return
        self._unbind(sock)
        loop.add_reader(sock.fileno(), self._on_readable)
        self._reading_on = loop

    def _unbind(self, sock: socket.socket) -> None:
        old, self._reading_on = self._reading_on, None
        if old is not None and not old.is_closed():
            old.remove_reader(sock.fileno())
            old.remove_writer(sock.fileno())

    def _on_readable(self) -> None:
        """Every frame that arrived, delivered in one batch."""
        sock = self._sock
        if sock is None:
            return
        msgs: list[Any] = []
        while True:
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self._deliver(self._frames(msgs))
                self._core_died()
                return
            msgs.extend(self._reader.feed(data))
            if len(data) < 1 << 20:
                break
        if msgs:
            self._deliver(self._frames(msgs))

    def _frames(self, msgs: list[Any]) -> list[tuple[str, Any]]:
        batch: list[tuple[str, Any]] = []
        for items, _ in msgs:
            for it in items:
                if len(it) == 6:
                    batch.append((it[0], GenerationDelta(it[1], it[2], it[3], it[4], it[5])))
                else:
                    batch.append((it[0], _ERRORS.get(it[1], RuntimeError)(it[2])))
        if msgs:
            self._stats = EngineStats(*msgs[-1][1])
        return batch

    def _core_died(self) -> None:
        """EOF from the core: fail every request in flight, refuse new ones, report unhealthy."""
        sock, self._sock = self._sock, None
        if sock is not None:
            self._unbind(sock)
            sock.close()
        rc = None
        if self._proc is not None:
            deadline = time.monotonic() + 1.0
            while (rc := self._proc.poll()) is None and time.monotonic() < deadline:
                time.sleep(0.01)
        err = RuntimeError(f"the engine core process (pid {self.core_pid}) exited with code {rc}")
        log.error("%s; failing %d request(s)", err, len(self._outputs))
        if self._error is None:
            self._error = err
        s = self._stats
        s.running = s.waiting = 0
        self._deliver([(rid, RuntimeError(str(err))) for rid in list(self._outputs)])
