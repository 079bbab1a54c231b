"""One span exporter per node: the driver and workers hand their span records to the raylet,
which encodes and exports them (OTLP/gRPC) for the whole node, in large batches.

Why: on a machine the cluster saturates, tasks/s follows the CPU every process spends per
task, and a task's two spans cost more to export (OTLP encoding, a gRPC call per batch, an
export thread handing the GIL back and forth with the thread that runs tasks) than to make.
With a node exporter, a driver or worker does not encode or call gRPC: every
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` spans, the thread that queued the last one sends the batch's
records as they are (`marshal`: one C call) in one datagram on a unix socket, without waking
another thread; the raylet's exporter thread writes their OTLP bytes (otlp_encoding) and
exports the spans of every process of the node in one request per `NODE_BATCH` spans.

The socket is an abstract unix datagram socket named after the raylet's address (processes of
one node share the network namespace; a driver elsewhere gets no answer and exports itself).
Messages (marshal'd tuples; a sender's datagrams arrive in order):
    (BATCH, dropped, [(header, items), ...])   spans; dropped: the sender's drops so far
    (HELLO, config) -> (HELLO, accepted)       accepted when the raylet exports where the
                                               sender would (the same OTEL_EXPORTER_OTLP_*)
    (FLUSH, token)  -> (FLUSH, token)          answered once everything before it is exported
header = (resource bytes, resource schema_url, scope bytes, scope schema_url): the sender's
OTLP Resource and InstrumentationScope messages, so that every span keeps its process's
service name, pid and node. items: SUBMIT and EXEC records (tracing_submit, tracing_exec) as
they are, or any other span already encoded by the sender (bytes: a ScopeSpans.spans entry).

Nothing is lost when the raylet is briefly slow: a full socket (EAGAIN) leaves the records in
the sender's bounded queue (tracing_export.SpanBuffer: past it the oldest are dropped and
counted); the raylet's queue is bounded too (`max_queue`, oldest dropped); both counts add up in
`dropped`, the raylet's `ember_trace_spans_dropped` gauge. A worker's SIGTERM flushes as before:
its records are sent and the raylet answers the FLUSH once they are exported; the raylet stops
its workers before its own exporter, which exports what its socket still holds.
"""
from __future__ import annotations

import errno
import itertools
import logging
import marshal
import os
import select
import socket
import threading
import time
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

BATCH, HELLO, FLUSH, STOP = 1, 2, 3, 4
NODE_BATCH = 2048  # spans per export request of the node exporter
MAX_DATAGRAM = 128 * 1024  # a batch is split to stay under this (a unix datagram's limit is the send buffer)
Header = tuple[bytes, str, bytes, str]


def socket_name(raylet_address: str) -> str:
    """The abstract unix socket of the node exporter of the raylet at raylet_address."""
    return "\0ember-spans-" + raylet_address


def exporter_config() -> tuple[tuple[str, str], ...]:
    """What decides where OTLP spans go and how (the OTEL_EXPORTER_OTLP_* variables)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OTEL_EXPORTER_OTLP_")))


def header_of(resource: Any, scope: Any) -> Header:
    """The header of a sender's spans: its resource's and scope's OTLP messages."""
    from .otlp_encoding import _resource_bytes, _scope_bytes

    return (_resource_bytes(resource), (resource.schema_url or "") if resource is not None else "",
            _scope_bytes(scope), (scope.schema_url or "") if scope is not None else "")


def pack(groups: Sequence[tuple[Header, list[Any]]], dropped: int) -> list[bytes]:
    """The BATCH datagrams of groups of items (split in halves until each is under
    MAX_DATAGRAM)."""
    data = marshal.dumps((BATCH, dropped, list(groups)))
    if len(data) <= MAX_DATAGRAM:
        return [data]
    out: list[bytes] = []
    for header, items in groups:
        if len(items) <= 1:
            out.append(marshal.dumps((BATCH, dropped, [(header, items)])))
            continue
        half = len(items) // 2
        out += pack([(header, items[:half])], dropped)
        out += pack([(header, items[half:])], dropped)
    return out


def marshalable(items: list[Any], resource: Any, scope: Any) -> list[tuple[Header, list[Any]]]:
    """A sender's queued spans as groups a BATCH carries: SUBMIT records of root spans and EXEC
    records without a status go as they are; anything else (a parent SpanContext, a status, an
    SDK span) is encoded here into its OTLP bytes, under its own resource and scope."""
    from .otlp_encoding import span_entry

    mine = header_of(resource, scope)
    groups: dict[Header, list[Any]] = {mine: []}
    for s in items:
        if type(s) is tuple:
            n = len(s)
            if n == 6 and s[2] is None or n == 7 and s[6] is None:
                groups[mine].append(s)
            else:
                groups[mine].append(span_entry(s))
        else:
            header = header_of(s.resource, s.instrumentation_scope)
            groups.setdefault(header, []).append(span_entry(s))
    return [(h, xs) for h, xs in groups.items() if xs]


class Pending:
    """The node exporter's queue (pure: the clock is passed in). Spans by header; `due` says
    when to export: a full NODE_BATCH, or the oldest span waited delay_s. Past max_queue the
    oldest group's oldest spans are dropped and counted."""

    def __init__(self, batch: int = NODE_BATCH, delay_s: float = 5.0, max_queue: int = 65536) -> None:
        self.batch, self.delay_s, self.max_queue = batch, delay_s, max_queue
        self.groups: dict[Header, list[Any]] = {}
        self.count = 0
        self.since: float | None = None  # when the oldest pending span arrived
        self.dropped = 0  # here
        self.senders_dropped: dict[Any, int] = {}  # what each sender said it dropped

    def add(self, header: Header, items: list[Any], now: float) -> None:
        if not items:
            return
        self.groups.setdefault(header, []).extend(items)
        self.count += len(items)
        if self.since is None:
            self.since = now
        over = self.count - self.max_queue
        for h in list(self.groups):
            if over <= 0:
                break
            xs = self.groups[h]
            k = min(over, len(xs))
            del xs[:k]
            self.count -= k
            self.dropped += k
            over -= k
            if not xs:
                del self.groups[h]

    def due(self, now: float) -> bool:
        return self.count >= self.batch or self.since is not None and now - self.since >= self.delay_s

    def timeout(self, now: float) -> float:
        """Seconds until due (the wait for the next datagram)."""
        if self.since is None:
            return self.delay_s
        return max(0.0, self.since + self.delay_s - now)

    def take(self, everything: bool = False) -> list[tuple[Header, list[Any]]]:
        """Up to one batch of spans (all of them when everything), oldest groups first."""
        out: list[tuple[Header, list[Any]]] = []
        room = self.count if everything else self.batch
        for h in list(self.groups):
            if room <= 0:
                break
            xs = self.groups[h]
            part, rest = xs[:room], xs[room:]
            out.append((h, part))
            room -= len(part)
            self.count -= len(part)
            if rest:
                self.groups[h] = rest
            else:
                del self.groups[h]
        self.since = None if not self.count else self.since
        return out

    def total_dropped(self) -> int:
        return self.dropped + sum(self.senders_dropped.values())


def encode(groups: Sequence[tuple[Header, list[Any]]]) -> tuple[bytes, int]:
    """The ExportTraceServiceRequest bytes of node groups (records encoded here), and how many
    items could not be encoded (left out)."""
    from .otlp_encoding import exec_entry, request_bytes, span_entry, submit_entry

    out = []
    bad = 0
    for header, items in groups:
        entries = []
        for s in items:
            try:
                if type(s) is bytes:
                    entries.append(s)
                elif len(s) == 6:
                    entries.append(submit_entry(s))
                else:
                    entries.append(exec_entry(s) or span_entry(s))
            except Exception:  # a malformed item (any local process can write to the socket)
                bad += 1
        out.append((header, entries))
    return request_bytes(out), bad


def valid_header(h: Any) -> bool:
    return (type(h) is tuple and len(h) == 4 and type(h[0]) is bytes and type(h[1]) is str
            and type(h[2]) is bytes and type(h[3]) is str)


class NodeLink:
    """A driver's or worker's end: sends BATCH datagrams to the node exporter without waiting."""

    def __init__(self, raylet_address: str, timeout_s: float = 2.0) -> None:
        """Connects and says HELLO; raises OSError when no node exporter answers or it exports
        elsewhere."""
        self._header: tuple[Any, Any, Header] | None = None  # (resource, scope, their header)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind("")  # an autobound abstract address: the exporter's answers come here
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            except OSError:
                pass
            self.sock.connect(socket_name(raylet_address))
            self.sock.setblocking(False)
            self._tokens = itertools.count(1)
            reply = self._ask((HELLO, exporter_config()), timeout_s)
            if reply is None or not reply[1]:
                raise OSError(f"the node exporter of {raylet_address} "
                              + ("did not answer" if reply is None else "exports elsewhere"))
        except BaseException:
            self.sock.close()
            raise

    def datagrams(self, items: list[Any], resource: Any, scope: Any, dropped: int) -> list[bytes]:
        """The BATCH datagrams of a sender's queued spans (tracing_export.SpanBuffer's items,
        of its resource and scope): as they are when marshal can write them all, else
        marshalable()'s groups."""
        if self._header is None or self._header[0] is not resource or self._header[1] is not scope:
            self._header = (resource, scope, header_of(resource, scope))
        try:
            return pack([(self._header[2], items)], dropped)
        except ValueError:  # something marshal cannot write: encoded here
            return pack(marshalable(items, resource, scope), dropped)

    def send(self, data: bytes) -> bool:
        """One datagram; False when the socket is full (the exporter is behind: try later).
        OSError when the exporter is gone."""
        try:
            self.sock.send(data)
            return True
        except BlockingIOError:
            return False
        except OSError as e:
            if e.errno != errno.EMSGSIZE:
                raise
            log.warning("a span of %d bytes is too large for the node exporter: dropped", len(data))
            return True

    def _ask(self, msg: tuple[Any, ...], timeout_s: float) -> Any:
        """Sends msg and waits for the answer with the same kind and value (None: none came)."""
        deadline = time.monotonic() + timeout_s
        data = marshal.dumps(msg)
        while not self.send(data):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            try:
                reply = marshal.loads(self.sock.recv(65536))
            except (BlockingIOError, EOFError, ValueError, TypeError):
                continue
            if reply[0] == msg[0] and (msg[0] != FLUSH or reply[1] == msg[1]):
                return reply

    def flush(self, timeout_s: float) -> bool:
        """True once the exporter has exported everything this process sent before."""
        return self._ask((FLUSH, next(self._tokens)), timeout_s) is not None

    def close(self) -> None:
        self.sock.close()


class NodeSpanExporter:
    """The raylet's end: a thread that receives the node's span records and exports them with
    `export(request_bytes, span_count)`."""

    def __init__(self, raylet_address: str, export: Callable[[bytes, int], Any],
                 delay_s: float = 5.0, batch: int = NODE_BATCH, max_queue: int = 65536) -> None:
        self.export = export
        self.pending = Pending(batch, delay_s, max_queue)
        self.config = exporter_config()
        self.name = socket_name(raylet_address)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.name)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        except OSError:
            pass
        self.exported = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ember-node-span-export", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        return self.pending.total_dropped()

    def _run(self) -> None:
        sock, pending = self.sock, self.pending
        buf = bytearray(1 << 20)  # one buffer for every datagram (no allocation per read)
        view = memoryview(buf)
        while True:
            sock.settimeout(max(0.001, pending.timeout(time.monotonic())))
            try:
                n, addr = sock.recvfrom_into(buf)
            except TimeoutError:
                n, addr = 0, None
            except OSError:
                break
            if n and self._handle(view[:n], addr):
                break
            while pending.due(time.monotonic()):
                self._export(pending.take())
        # stopping: what the socket still holds (the workers have exited), then everything
        sock.setblocking(False)
        while True:
            try:
                n, addr = sock.recvfrom_into(buf)
            except OSError:
                break
            self._handle(view[:n], addr)
        while pending.count:
            self._export(pending.take())
        sock.close()

    def _handle(self, data: Any, addr: Any) -> bool:
        """One message; True: stop."""
        try:
            msg = marshal.loads(data)
            kind = msg[0]
        except (EOFError, ValueError, TypeError, IndexError):
            log.warning("node span exporter: a malformed message (%d bytes) ignored", len(data))
            return False
        if kind == BATCH:
            now = time.monotonic()
            if addr:
                self.pending.senders_dropped[addr] = msg[1]
            for header, items in msg[2]:
                if not valid_header(header) or type(items) is not list:
                    log.warning("node span exporter: a malformed batch ignored")
                    continue
                self.pending.add(header, items, now)
        elif kind == HELLO:
            self._reply((HELLO, tuple(map(tuple, msg[1])) == self.config), addr)
        elif kind == FLUSH:
            while self.pending.count:
                self._export(self.pending.take())
            self._reply((FLUSH, msg[1]), addr)
        elif kind == STOP and self._stopping:
            return True
        return False

    def _reply(self, msg: tuple[Any, ...], addr: Any) -> None:
        if not addr:
            return
        try:
            self.sock.sendto(marshal.dumps(msg), addr)
        except OSError as e:  # the sender is gone
            log.debug("node span exporter: cannot answer %r: %s", addr, e)

    def _export(self, groups: list[tuple[Header, list[Any]]]) -> None:
        n = sum(len(xs) for _, xs in groups)
        try:
            request, bad = encode(groups)
            self.pending.dropped += bad
            self.export(request, n - bad)
            self.exported += n - bad
        except Exception:
            log.exception("exporting %d spans of the node failed", n)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Exports what is queued or still in the socket, then stops."""
        if self._stopping:
            return
        self._stopping = True
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(marshal.dumps((STOP,)), self.name)
        except OSError:
            pass
        self._thread.join(timeout_s)
