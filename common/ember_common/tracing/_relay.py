"""The driver's span export in a child process (`RelayExporter`): the OTLP encoding and the gRPC
call leave the driver, the usual throughput bottleneck, whose one GIL carries the submitting
thread, the core loop and the export thread alike.

The driver's export thread hands each batch to a relay process over a pipe: a task's own
records (a root SubmitRecord, an ExecRecord without status: fields of bytes, str, int and
None) as one `marshal.dumps` of their fields, far cheaper than encoding them and making the
gRPC call; anything else (users' spans, ReadableSpans, records whose parent is a SpanContext)
encoded here as request bytes the relay sends with them, in the same request. The relay,
`python -m ember_common.tracing._relay SERVICE`, makes the same OTLP exporter from the same
environment, with the driver's resource and scope (sent first, as JSON), and exports each
batch as it comes.

    frame = kind (1 byte) + length (4 bytes, big-endian) + payload
    I  the resource and scope (JSON)
    R  a batch: the length of its marshal'd records (4 bytes), those records (two lists of
       field tuples: SubmitRecords, ExecRecords), then the request bytes of its other spans;
       the relay sends both in one request
    F  a flush: the relay exports what came before it, then writes the payload (a sequence
       number) back on its stdout

`force_flush` returns once the relay has exported everything sent before it; `shutdown` closes
the pipe and waits for the relay to finish. The relay starts at the first export (a driver that
never exports starts none), in a session of its own (a Ctrl-C in the driver's terminal does not
stop it before it has exported what it holds), and ends when the pipe closes, including when
the driver is killed. If the relay cannot start or dies, the driver logs it once and exports
in its own process from then on: nothing is lost but the batch the dead relay held.
`EMBER_TRACE_RELAY=0` turns the relay off. Workers export in process: there are many of them,
and their export costs their own CPU, not the driver's.
"""
from __future__ import annotations

import json
import logging
import marshal
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from .. import envvars
from ._otlp import encode_request
from ._records import ExecRecord, SubmitRecord

log = logging.getLogger(__name__)
_HEADER = 5
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux): a full batch marshal'd outgrows the default pipe
_START_TIMEOUT_S = 30  # for the relay's first answer (an interpreter and the OTLP exporter's imports)


def enabled() -> bool:
    return envvars.get("EMBER_TRACE_RELAY", "1") != "0"


def _head(kind: bytes, length: int) -> bytes:
    return kind + length.to_bytes(4, "big")


def _frame(kind: bytes, payload: bytes) -> bytes:
    return _head(kind, len(payload)) + payload


class RelayExporter:
    """A span exporter (SpanBuffer's records, like the OTLP exporter it stands in for) that
    exports through the relay process; `fallback()` makes the in-process exporter used when
    the relay is gone."""

    accepts_records = True
    resource: Any = None
    scope: Any = None

    def __init__(self, service: str, fallback: Callable[[], Any]) -> None:
        self.service = service
        self._make_fallback = fallback
        self._fallback: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # one writer at a time (export thread, flush, shutdown)
        self._seq = 0
        self._broken = False
        self._closed = False
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        # A forked child must neither write into its parent's relay (frames would interleave)
        # nor hold its pipe open (the relay would never see its end): it starts its own.
        p, self._proc = self._proc, None
        if p is not None:
            for f in (p.stdin, p.stdout):
                try:
                    if f is not None:
                        f.close()  # (the file object's own close: its fd is not closed twice)
                except OSError:
                    pass
        self._lock = threading.Lock()
        self._seq, self._broken = 0, False

    # ----------------------------------------------------------------- the relay process
    def _start(self) -> subprocess.Popen[bytes] | None:
        """Starts the relay and waits for it to answer a first flush (its interpreter and the
        exporter up), so that no batch goes to a relay that cannot run; None if it does not."""
        env = dict(os.environ, EMBER_TRACE_RELAY="0")
        p = subprocess.Popen([sys.executable, "-m", "ember_common.tracing._relay", self.service],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
                             start_new_session=True, bufsize=0)
        assert p.stdin is not None
        try:
            import fcntl

            fcntl.fcntl(p.stdin.fileno(), _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass  # the default pipe (64 KB): the export thread waits for the relay a little more
        res, sc = self.resource, self.scope
        init = {"resource": dict(res.attributes) if res is not None else {},
                "resource_schema": getattr(res, "schema_url", "") or "",
                "scope": [sc.name, sc.version, sc.schema_url] if sc is not None else None}
        self._proc = p
        ok = (self._write([_frame(b"I", json.dumps(init, default=list).encode())])
              and self._flush_locked(_START_TIMEOUT_S * 1000) is True)
        if not ok:
            if not self._broken:
                self._break(f"no answer within {_START_TIMEOUT_S} s of its start")
            p.kill()
            p.wait(5)
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
            self._proc = None
            return None
        return p

    def _write(self, parts: list[bytes]) -> bool:
        """Writes the pieces of a frame to the running relay, without joining them."""
        assert self._proc is not None and self._proc.stdin is not None
        try:
            fd = self._proc.stdin.fileno()
            while parts:
                n = os.writev(fd, parts)
                while parts and n >= len(parts[0]):  # a partial write: the rest again
                    n -= len(parts.pop(0))
                if parts and n:
                    parts[0] = parts[0][n:]
            return True
        except (OSError, ValueError) as e:
            self._break(e)
            return False

    def _send(self, parts: list[bytes]) -> bool:
        """Writes a frame to the relay (started if needed); False when it is gone."""
        if self._broken:
            return False
        if self._proc is None and self._start() is None:
            return False
        return self._write(parts)

    def _break(self, why: BaseException | str) -> None:
        self._broken = True
        code = self._proc.poll() if self._proc is not None else None
        log.warning("the span relay is gone (%s, exit code %s): spans are exported from this process "
                    "from now on", why, code)

    def _local(self) -> Any:
        if self._fallback is None:
            exp = self._fallback = self._make_fallback()
            exp.resource, exp.scope = self.resource, self.scope
        return self._fallback

    # ----------------------------------------------------------------- SpanExporter
    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self._closed:
            return SpanExportResult.FAILURE
        # One pass: a task's own records (a root SubmitRecord, an ExecRecord without status) go
        # marshal'd as plain tuples (marshal takes no tuple subclass); anything else (users'
        # spans, a nested task's SubmitRecord) is encoded here.
        submits: list[Any] = []
        execs: list[Any] = []
        others: list[Any] = []
        keep_submit, keep_exec, other = submits.append, execs.append, others.append
        for s in spans:
            t = type(s)
            if t is ExecRecord:
                if s.status is None:
                    keep_exec(s)
                    continue
            elif t is SubmitRecord and s.parent is None:
                keep_submit(s)
                continue
            other(s)
        m = marshal.dumps(([*map(tuple, submits)], [*map(tuple, execs)]))
        rest = encode_request(others, self.resource, self.scope) if others else b""
        parts = [_head(b"R", 4 + len(m) + len(rest)) + len(m).to_bytes(4, "big"), m, rest]
        with self._lock:
            if self._send(parts):
                return SpanExportResult.SUCCESS
        result: Any = self._local().export(spans)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """True once the relay has exported everything sent before this call."""
        with self._lock:
            if self._proc is None or self._broken:
                return True
            return self._flush_locked(timeout_millis) is not False

    def _flush_locked(self, timeout_millis: float) -> bool | None:
        """Sends a flush and waits for its answer: True answered, False timed out, None the
        relay is gone."""
        self._seq += 1
        seq = self._seq.to_bytes(4, "big")
        if not self._write([_frame(b"F", seq)]):
            return None  # gone: what it held is lost, later batches export here
        assert self._proc is not None
        out = self._proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout_millis / 1000
        got = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return False
            chunk = os.read(out.fileno(), 64)
            if not chunk:
                self._break("its pipe closed")
                return None
            got += chunk
            if got.endswith(seq):
                return True

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            p = self._proc
            if p is not None and p.stdin is not None:
                try:
                    p.stdin.close()  # the relay exports what it holds, then exits
                except OSError:
                    pass
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
                if p.stdout is not None:
                    p.stdout.close()
            if self._fallback is not None:
                self._fallback.shutdown()


# --------------------------------------------------------------------- the relay's side
def _read(inp: Any, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main(argv: list[str]) -> int:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from ._exporters import make_exporter

    logging.basicConfig(level=logging.WARNING, format="ember span relay: %(message)s")
    service = argv[0] if argv else "ember-driver"
    exporter = make_exporter("otlp", service)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            head = _read(inp, _HEADER)
            if head is None:
                return 0
            kind, n = head[:1], int.from_bytes(head[1:], "big")
            payload = _read(inp, n)
            if payload is None:
                return 0
            try:
                if kind == b"R":
                    # The records encoded here and the request bytes the driver encoded, as one
                    # request (serialized requests concatenate: their resource_spans add up).
                    m = int.from_bytes(payload[:4], "big")
                    submits, execs = marshal.loads(payload[4:4 + m])
                    records = [*map(SubmitRecord._make, submits), *map(ExecRecord._make, execs)]
                    rest = payload[4 + m:]
                    if records or rest:
                        exporter.export(records, rest)
                elif kind == b"F":
                    out.write(payload)
                    out.flush()
                elif kind == b"I":
                    init = json.loads(payload)
                    exporter.resource = Resource(init["resource"], init["resource_schema"] or None)
                    sc = init["scope"]
                    exporter.scope = InstrumentationScope(sc[0], sc[1], sc[2]) if sc else None
            except Exception:
                log.exception("exporting a batch failed")
    finally:
        exporter.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
