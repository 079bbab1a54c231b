"""OTLP trace encoding for Ember's exporters: the bytes of the ExportTraceServiceRequest the
SDK's encoder (`opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans`) makes,
written directly, which matters because every task makes two spans and the encoding runs in
the exporting process (holding its GIL).

`encode_request` writes the whole request as protobuf bytes: each Span message field by field
(ids, times, the name and attributes from small caches), the resource and scope messages once
per resource/scope (cached), and the OTLP/gRPC exporter sends the bytes as they are (no message
object is built, parsed or serialized). A task's submit span (a SubmitRecord) and execute
span (an ExecRecord, or a SpanRecord whose first attribute is the task id) are one struct pack
(`submit_entry`, `exec_entry`) or one bytes formatting each, of a template cached per span name
and repeating attributes, tag and length included. Spans with events or links, and attribute
values that are not str, bool, int or float, go through the SDK's own per-span encoder.
`encode_spans` gives the same request as a message (the HTTP exporter). Tests decode the bytes
with the OTLP protobuf classes and compare them with the SDK encoder's message. The field
writers and the per-task templates are in _otlp_templates.
"""
from __future__ import annotations

from binascii import hexlify as _hexlify  # bytes -> lowercase hex bytes (bytes.hex().encode())
from typing import Any, Callable, Sequence

from ._otlp_templates import (
    ATTR_CACHE_MAX,
    FLAGS_LOCAL,
    FLAGS_REMOTE,
    IDS,
    KIND,
    M64,
    NOTHING,
    PARENT,
    TIMES,
    UNSET_STATUS,
    attr_bytes,
    attr_cache,
    exec_entry,
    exec_record_fmts,
    ld,
    name_cache,
    span_record_entry,
    submit_entry,
    submit_fmts,
    varint,
)
from ._records import ExecRecord, SpanRecord, SubmitRecord, expand_exec, to_readable

__all__ = ["encode_spans", "encode_request", "record_bytes", "exec_entry", "submit_entry"]


def encode_spans(spans: Sequence[Any], resource: Any = None, scope: Any = None) -> Any:
    """The OTLP ExportTraceServiceRequest of a batch (a message), equal to the SDK encoder's."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ExportTraceServiceRequest.FromString(encode_request(spans, resource, scope))


def encode_request(spans: Sequence[Any], resource: Any = None, scope: Any = None) -> bytes:
    """The serialized ExportTraceServiceRequest of a batch. The batch may hold records
    (_records: of the given resource and scope) among SDK ReadableSpans; spans are grouped by
    resource and scope as the SDK groups them."""
    # Grouped by identity first (hashing a Resource serializes its attributes to JSON, which
    # would cost more than encoding the span), then by equality, once per group.
    by_id: dict[tuple[int, int], tuple[Any, Any, list[bytes]]] = {}
    last_res: Any = NOTHING
    last_sc: Any = NOTHING
    out: list[bytes] = []
    rec_out: list[bytes] | None = None  # the records' group (resource, scope), made at the first one
    # The per-task records, the most frequent spans, come in runs of the same template (one
    # function's tasks): the last SubmitRecord template (root spans: name, key, value length)
    # and the last ExecRecord one (name, repeating ids, task id length) are kept here, so that a record of
    # the same run is one struct pack, with no call and no cache key built.
    s_name = s_key = e_name = e_rest = None
    s_pack: Any = None
    e_pack: Any = None
    s0 = s1 = s2 = s3 = s4 = s5 = e0 = e1 = e2 = e3 = e4 = e5 = b""
    s_len = e_len = -1
    hexlify = _hexlify
    for s in spans:
        t = type(s)
        if t is ExecRecord or t is SubmitRecord or t is SpanRecord:
            if t is SubmitRecord or t is ExecRecord and s.status is None:
                if rec_out is None:
                    group = by_id.get((id(resource), id(scope)))
                    if group is None:
                        group = by_id[(id(resource), id(scope))] = (resource, scope, [])
                    rec_out = group[2]
                if t is SubmitRecord:  # written with its field tag and length
                    name, tp, parent, ts, key, value = s
                    if parent is None and len(value) == s_len and name == s_name and key == s_key:
                        rec_out.append(s_pack(s0, tp, s1, tp[16:24], s2, ts, s3, ts, s4, hexlify(value), s5))
                        continue
                    rec_out.append(submit_entry(s))
                    if parent is None:  # the template submit_entry used, for the next ones
                        s_name, s_key, s_len = name, key, len(value)
                        s_pack, s0, s1, s2, s3, s4, s5 = submit_fmts[(name, key, s_len, 0)]
                    continue
                name, tp, sid, start, end, task_id, job, attempt, actor, node, worker, _ = s
                rest = (job, attempt, actor, node, worker)  # what repeats
                if len(task_id) == e_len and name == e_name and rest == e_rest:
                    rec_out.append(e_pack(e0, tp, e1, sid, e2, tp[16:24], e3, start, 0x41, end, e4,
                                          hexlify(task_id), e5))
                    continue
                entry = exec_entry(s)
                if entry is not None:
                    rec_out.append(entry)
                    e_name, e_rest, e_len = name, rest, len(task_id)
                    e_pack, e0, e1, e2, e3, e4, e5 = exec_record_fmts[(name, e_rest, e_len)]
                    continue
            res, sc = resource, scope
            data: bytes | None
            if t is ExecRecord:  # with a status (or an attribute the template cannot take)
                s = expand_exec(s)
                data = record_bytes(s) if not s.events else None
            elif not s.events:
                entry = span_record_entry(s)
                if entry is not None:
                    if res is not last_res or sc is not last_sc:
                        group = by_id.get((id(res), id(sc)))
                        if group is None:
                            group = by_id[(id(res), id(sc))] = (res, sc, [])
                        last_res, last_sc, out = res, sc, group[2]
                    out.append(entry)
                    continue
                data = record_bytes(s)
            else:
                data = None
            if data is None:
                data = _sdk_span_bytes(to_readable(s, res, scope))
        else:
            res, sc = s.resource, s.instrumentation_scope
            data = None if s.events or s.links else _span_bytes(s)
            if data is None:
                data = _sdk_span_bytes(s)
        if res is not last_res or sc is not last_sc:
            group = by_id.get((id(res), id(sc)))
            if group is None:
                group = by_id[(id(res), id(sc))] = (res, sc, [])
            last_res, last_sc, out = res, sc, group[2]
        n = len(data)
        out.append((b"\x12" + bytes((n,)) if n < 0x80 else b"\x12" + varint(n)) + data)
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    for res, sc, blobs in by_id.values():
        groups.setdefault(res, {}).setdefault(sc, []).extend(blobs)
    # One join of every piece: nested messages are written as headers (tag, length) before
    # their pieces, not as joined copies (a batch of task spans is a few hundred KB: each copy
    # of that size is a fresh mmap'd buffer, its pages faulted in).
    request: list[bytes] = []
    for res, scopes in groups.items():
        rs: list[bytes] = [ld(b"\x0a", _resource_bytes(res))]  # ResourceSpans.resource = 1
        rs_len = len(rs[0])
        for sc, blobs in scopes.items():
            # ScopeSpans{scope = 1, spans = 2 (one record per span), schema_url = 3}
            head = ld(b"\x0a", _scope_bytes(sc))
            tail = ld(b"\x1a", sc.schema_url.encode()) if sc is not None and sc.schema_url else b""
            ss_len = len(head) + sum(map(len, blobs)) + len(tail)
            ss_head = b"\x12" + varint(ss_len)  # ResourceSpans.scope_spans = 2
            rs += (ss_head, head, *blobs, tail)
            rs_len += len(ss_head) + ss_len
        if res is not None and res.schema_url:
            rs.append(ld(b"\x1a", res.schema_url.encode()))  # ResourceSpans.schema_url = 3
            rs_len += len(rs[-1])
        request += (b"\x0a" + varint(rs_len), *rs)  # ExportTraceServiceRequest.resource_spans = 1
    return b"".join(request)

_res_cache: dict[int, tuple[Any, bytes]] = {}  # id(resource) -> (resource, its message's bytes)
_scope_cache: dict[int, tuple[Any, bytes]] = {}


def _cached_bytes(cache: dict[int, tuple[Any, bytes]], obj: Any, encode: Callable[[Any], Any]) -> bytes:
    """encode(obj)'s serialized message, cached by identity (the entry holds obj, so its id is
    not reused while cached)."""
    hit = cache.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    data: bytes = encode(obj).SerializeToString()
    if len(cache) >= 256:
        cache.clear()
    cache[id(obj)] = (obj, data)
    return data


def _resource_bytes(res: Any) -> bytes:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_resource

    return _cached_bytes(_res_cache, res, _encode_resource)


def _scope_bytes(sc: Any) -> bytes:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_instrumentation_scope

    return _cached_bytes(_scope_cache, sc, _encode_instrumentation_scope)


def _sdk_span_bytes(span: Any) -> bytes:
    from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _encode_span

    data: bytes = _encode_span(span).SerializeToString()
    return data


def _span_bytes(s: Any) -> bytes | None:
    """One trace.v1.Span message, field by field (None: let the SDK encode it)."""
    ctx = s.context
    return _fields_bytes(s.name, ctx.trace_id, ctx.span_id, ctx.trace_state, s.parent, s.kind,
                         s.start_time, s.end_time, s.attributes, s.dropped_attributes, s.status)

def record_bytes(rec: SpanRecord) -> bytes | None:
    """The Span message of a SpanRecord without events (None: the SDK encodes it)."""
    entry = span_record_entry(rec)
    if entry is not None:
        i = 1
        while entry[i] & 0x80:  # past ScopeSpans.spans' tag and length
            i += 1
        return entry[i + 1:]
    name, trace_id, span_id, _, state, parent, kind, start, end, attrs, status = rec[:11]
    return _fields_bytes(name, trace_id, span_id, state, parent, kind, start, end, attrs, 0, status)

def _fields_bytes(name_str: str, trace_id: int, span_id: int, trace_state: Any, parent: Any, kind: Any,
                  start_time: int | None, end_time: int | None, attributes: Any, dropped: int,
                  status: Any) -> bytes | None:
    """parent: None, a SpanContext, or an int (the span id of a remote parent)."""
    parts = [IDS(b"\x0a\x10", trace_id >> 64, trace_id & M64, b"\x12\x08", span_id)]
    if trace_state:
        parts.append(ld(b"\x1a", trace_state.to_header().encode()))
    if parent is None:
        flags = FLAGS_LOCAL
    elif type(parent) is int:
        parts.append(PARENT(b"\x22\x08", parent))
        flags = FLAGS_REMOTE
    else:
        parts.append(PARENT(b"\x22\x08", parent.span_id))
        flags = FLAGS_REMOTE if parent.is_remote else FLAGS_LOCAL
    nk = name_cache.get(name_str)
    if nk is None or nk[0] is not kind:  # Span.name = 5, kind = 6
        nk = (kind, ld(b"\x2a", name_str.encode()) + KIND[kind.value])
        if len(name_cache) >= ATTR_CACHE_MAX:
            name_cache.clear()
        name_cache[name_str] = nk
    parts += (nk[1], TIMES(b"\x39", start_time or 0, b"\x41", end_time or 0))
    if attributes:
        get = attr_cache.get
        for key, value in attributes.items():
            try:
                a = get((key, type(value), value))
            except TypeError:  # unhashable (a list): the SDK encodes it
                return None
            if a is None:
                a = attr_bytes(key, value)
                if a is None:
                    return None
            parts.append(a)
    if dropped:
        parts += (b"\x50", varint(dropped))
    if status is None:
        parts.append(UNSET_STATUS)
    else:
        code, message = status.status_code.value, status.description
        if code or message:
            st = (ld(b"\x12", message.encode()) if message else b"") + (b"\x18" + varint(code) if code else b"")
            parts.append(ld(b"\x7a", st))
        else:
            parts.append(UNSET_STATUS)
    parts.append(flags)
    return b"".join(parts)
