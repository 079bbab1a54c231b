"""The engine core process: TorchEngine's step loop alone in a child process of the replica.

With a small model the forward pass is Python-bound, so an engine thread inside the replica
holds the GIL most of the time and every bit of serving work (the event loop, request parsing,
SSE formatting, the stream channel's sends) waits for it. As vLLM V1 does, the step loop
(scheduler, KV cache, forward pass, sampling, detokenization) runs here instead, in a process
of its own, and the replica (core_client.EngineCoreClient) keeps only the serving side:

    replica loop ── frames of ops ──────────────► [core main thread]
      ("add", id, prompt ids, params) ("abort", id)   take ops → schedule → prefill → decode
                 ◄── one frame per step ─────────    → sample → detokenize → stop checks
      (deltas of every request, engine stats)

The wire (a socketpair the replica made; this process gets one end as an inherited fd): frames
of a 4-byte little-endian length and a `marshal`led payload of plain values (no classes, so the
two sides need not share an import path: the core loads this package from its directory under a
name of its own, without importing `ember`). The first frame out is `("ready", max_model_len)`,
or `("error", text)` if loading failed. Then each step writes `(items, stats)`: items are
`(request_id, index, text, num_output_tokens, finish_reason, num_prompt_tokens)` per new delta,
or `(request_id, error_type, message)` for a request that failed; stats is
EngineStats's fields in order. A step that admits new sequences without
mixing them into the decode writes their first tokens before it runs the decode of the others
(lower time to the first token), so such a step writes two frames; a mixed step writes one.

Lifetime: the core exits when its end of the socket reaches EOF (the replica closed it, exited,
or was killed — the kernel closes a dead process's sockets), when it reads `("stop",)`, or when a
write fails; while busy it polls the socket between steps, while idle it blocks on it. It never
outlives the replica by more than one step.
"""
from __future__ import annotations

import collections
import json
import logging
import marshal
import select
import socket
import struct
import sys
import time
from typing import Any

from .engine import GenerationDelta, GenerationRequest
from .params import SamplingParams
from .torch_engine import TorchEngine, make_sequences

log = logging.getLogger(__name__)
_LEN = struct.Struct("<I")
MARKER = "--ember-llm-engine-core"  # on the core's command line (tests and benchmarks find it by it)

# `python -c BOOT INTERNAL_DIR MARKER FD MODEL_ID MODEL_SOURCE KWARGS_JSON`: loads this package from
# its directory as `ember_llm_engine` (no `ember` import: lighter, and any interpreter with torch
# and transformers can run it, Ray's included) and runs main().
BOOT = r"""
import sys, types
pkg = types.ModuleType("ember_llm_engine"); pkg.__path__ = [sys.argv[1]]
sys.modules["ember_llm_engine"] = pkg
from ember_llm_engine import engine_core
sys.exit(engine_core.main(sys.argv[2:]))
"""


def frame(obj: Any) -> bytes:
    """One wire frame holding obj (plain values only)."""
    data = marshal.dumps(obj, 4)
    return _LEN.pack(len(data)) + data


class FrameReader:
    """Splits a byte stream into the objects of its frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buf
        buf += data
        out, pos, n = [], 0, len(buf)
        while n - pos >= 4:
            (size,) = _LEN.unpack_from(buf, pos)
            if n - pos - 4 < size:
                break
            out.append(marshal.loads(bytes(buf[pos + 4:pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


def params_to_wire(p: SamplingParams) -> dict[str, Any]:
    """SamplingParams as plain values (the core rebuilds and re-checks them; `extra`, which the
    engine does not read, stays in the replica)."""
    return {"max_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
            "stop": tuple(p.stop), "stop_token_ids": tuple(p.stop_token_ids), "seed": p.seed, "n": p.n,
            "ignore_eos": p.ignore_eos}


class EngineCore(TorchEngine):
    """TorchEngine's step loop driven from a socket instead of a thread's inbox."""

    def __init__(self, sock: socket.socket, model_id: str, model_source: str, engine_kwargs: dict[str, Any]) -> None:
        super().__init__(model_id, model_source, engine_kwargs)
        self._sock = sock
        self._wrote = False
        self._closed = False
        self._last_stats: tuple[Any, ...] = ()

    def _write(self, obj: Any) -> None:
        try:
            self._sock.sendall(frame(obj))
        except OSError:  # the replica is gone: serve() returns after this step
            self._closed = True

    def _stats_tuple(self) -> tuple[Any, ...]:
        # EngineStats's fields in order (a dataclass instance's __dict__ keeps them in field
        # order); dataclasses.astuple would deep-copy every value, twice per step, for nothing
        return tuple(vars(self._stats).values())

    def _send(self, batch: list[tuple[str, Any]]) -> None:
        """A step's outputs go to the replica at once, in one frame with the stats."""
        items: list[tuple[Any, ...]] = []
        for rid, item in batch:
            if isinstance(item, BaseException):
                items.append((rid, type(item).__name__, str(item)))
            else:
                d: GenerationDelta = item
                items.append((rid, d.index, d.text, d.num_output_tokens, d.finish_reason, d.num_prompt_tokens))
        self._last_stats = self._stats_tuple()
        self._write((items, self._last_stats))
        self._wrote = True

    def _ops(self, ops: list[tuple[Any, ...]], inbox: collections.deque[tuple[str, Any]]) -> bool:
        """The replica's ops into the step loop's inbox; False on ("stop",)."""
        failed = []
        for op in ops:
            if op[0] == "add":
                _, rid, ids, params = op
                try:
                    seqs = make_sequences(GenerationRequest(rid, ids, SamplingParams(**params)))
                except (TypeError, ValueError) as e:
                    failed.append((rid, ValueError(str(e))))
                    continue
                inbox.append(("add", seqs))
            elif op[0] == "abort":
                inbox.append(("abort", op[1]))
            elif op[0] == "stop":
                return False
        if failed:
            self._send(failed)
        return True

    def serve(self) -> None:
        """The step loop: until EOF, ("stop",) or a failed write."""
        import torch

        reader = FrameReader()
        sock = self._sock
        poller = select.poll()  # not select(): the inherited fd may be above FD_SETSIZE in a busy replica
        poller.register(sock.fileno(), select.POLLIN)
        with torch.inference_mode():
            while True:
                busy = self.scheduler.has_work()
                if busy:
                    ready = poller.poll(0)
                else:
                    t = time.perf_counter()
                    ready = poller.poll(None)
                    self._stats.idle_s += time.perf_counter() - t
                inbox: collections.deque[tuple[str, Any]] = collections.deque()
                if ready:
                    data = sock.recv(1 << 20)
                    if not data:
                        return  # the replica closed its end, exited or was killed
                    for ops in reader.feed(data):
                        if not self._ops(ops, inbox):
                            return
                if not inbox and not busy:
                    continue
                self._wrote = False
                self._iteration(inbox)
                if not self._wrote and self._stats_tuple() != self._last_stats:
                    self._last_stats = self._stats_tuple()
                    self._write(([], self._last_stats))  # e.g. an abort freed a slot: no tokens
                if self._closed:
                    return


def main(argv: list[str]) -> int:
    """The core process: argv = MARKER FD MODEL_ID MODEL_SOURCE KWARGS_JSON."""
    _, fd, model_id, model_source, kwargs = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine-core %(levelname)s %(message)s")
    sock = socket.socket(fileno=int(fd))
    sock.setblocking(True)
    try:
        core = EngineCore(sock, model_id, model_source, json.loads(kwargs))
        core._load()
    except Exception as e:  # noqa: BLE001 - reported to the replica, which raises it
        log.exception("loading %s failed", model_source)
        try:
            sock.sendall(frame(("error", f"{type(e).__name__}: {e}")))
        except OSError:
            pass
        return 1
    try:
        sock.sendall(frame(("ready", core.max_model_len)))
        core.serve()
    except OSError:
        pass  # the replica is gone
    finally:
        sock.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - started through BOOT
    sys.exit(main(sys.argv[1:]))
