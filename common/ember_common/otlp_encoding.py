"""OTLP trace encoding for Ember's exporters: the bytes of the ExportTraceServiceRequest the
SDK's encoder (`opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans`) makes,
written directly, which matters because every task makes two spans and the encoding runs in
the exporting process (holding its GIL).

`encode_request` writes the whole request as protobuf bytes: each Span message field by field
(ids, times, the name and attributes from small caches), the resource and scope messages once
per resource/scope (cached), and the OTLP/gRPC exporter sends the bytes as they are (no message
object is built, parsed or serialized). A task's submit span (a SUBMIT record) and execute
span (an EXEC record, or a RECORD whose first attribute is the task id) are one struct pack
(`submit_entry`, `exec_entry`) or one bytes formatting each, of a template cached per span name
and repeating attributes, tag and length included. Spans with events or links, and attribute
values that
are not str, bool, int or float, go through the SDK's own per-span encoder. `encode_spans`
gives the same request as a message (the HTTP exporter). Tests decode the bytes with the OTLP
protobuf classes and compare them with the SDK encoder's message.
"""
from __future__ import annotations

import struct
from binascii import hexlify as _hexlify  # bytes -> lowercase hex bytes (bytes.hex().encode())
from typing import Any, Callable, Sequence


def encode_spans(spans: Sequence[Any], resource: Any = None, scope: Any = None) -> Any:
    """The OTLP ExportTraceServiceRequest of a batch (a message), equal to the SDK encoder's."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ExportTraceServiceRequest.FromString(encode_request(spans, resource, scope))


def encode_request(spans: Sequence[Any], resource: Any = None, scope: Any = None) -> bytes:
    """The serialized ExportTraceServiceRequest of a batch. The batch may hold tracing_export
    RECORD tuples (of the given resource and scope) among SDK
    ReadableSpans; spans are grouped by resource and scope as the SDK groups them."""
    # Grouped by identity first (hashing a Resource serializes its attributes to JSON, which
    # would cost more than encoding the span), then by equality, once per group.
    by_id: dict[tuple[int, int], tuple[Any, Any, list[bytes]]] = {}
    last_res: Any = _NOTHING
    last_sc: Any = _NOTHING
    out: list[bytes] = []
    rec_out: list[bytes] | None = None  # the records' group (resource, scope), made at the first one
    # The per-task records, the most frequent spans, come in runs of the same template (one
    # function's tasks): the last SUBMIT template (root spans: name, key, value length) and the
    # last EXEC one (name, repeating values, task id length) are kept here, so that a record of
    # the same run is one struct pack, with no call and no cache key built.
    s_name = s_key = e_name = e_rest = None
    s_pack: Any = None
    e_pack: Any = None
    s0 = s1 = s2 = s3 = s4 = s5 = e0 = e1 = e2 = e3 = e4 = e5 = b""
    s_len = e_len = -1
    hexlify = _hexlify
    for s in spans:
        if type(s) is tuple:
            n = len(s)
            if n == 6 or n == 7 and s[6] is None:
                if rec_out is None:
                    group = by_id.get((id(resource), id(scope)))
                    if group is None:
                        group = by_id[(id(resource), id(scope))] = (resource, scope, [])
                    rec_out = group[2]
                if n == 6:  # a SUBMIT record (tracing_submit): written with its field tag and length
                    name, tp, parent, t, key, value = s
                    if parent is None and len(value) == s_len and name == s_name and key == s_key:
                        rec_out.append(s_pack(s0, tp, s1, tp[16:24], s2, t, s3, t, s4, hexlify(value), s5))
                        continue
                    rec_out.append(submit_entry(s))
                    if parent is None:  # the template submit_entry used, for the next ones
                        s_name, s_key, s_len = name, key, len(value)
                        s_pack, s0, s1, s2, s3, s4, s5 = _submit_fmts[(name, key, s_len, 0)]
                    continue
                name, tp, sid, start, end, values, _ = s  # an EXEC record (tracing_exec)
                task_id = values[0]
                if len(task_id) == e_len and name == e_name and values[1:] == e_rest:
                    rec_out.append(e_pack(e0, tp, e1, sid, e2, tp[16:24], e3, start, 0x41, end, e4,
                                          hexlify(task_id), e5))
                    continue
                entry = exec_entry(s)
                if entry is not None:
                    rec_out.append(entry)
                    e_name, e_rest, e_len = name, values[1:], len(task_id)
                    e_pack, e0, e1, e2, e3, e4, e5 = _exec7_fmts[(name, e_rest, e_len)]
                    continue
            res, sc = resource, scope
            data: bytes | None
            if n == 7:  # an EXEC record with a status (or an attribute the template cannot take)
                from .tracing_export import expand_exec

                s = expand_exec(s)
                data = record_bytes(s) if not s[11] else None
            elif not s[11]:
                entry = _exec_entry(s)
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
                from .tracing_export import to_readable

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
        out.append((b"\x12" + bytes((n,)) if n < 0x80 else b"\x12" + _varint(n)) + data)
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    for res, sc, blobs in by_id.values():
        groups.setdefault(res, {}).setdefault(sc, []).extend(blobs)
    # One join of every piece: nested messages are written as headers (tag, length) before
    # their pieces, not as joined copies (a batch of 1024 task spans is ~370 KB: each copy of
    # that size is a fresh mmap'd buffer, its pages faulted in).
    request: list[bytes] = []
    for res, scopes in groups.items():
        rs: list[bytes] = [_ld(b"\x0a", _resource_bytes(res))]  # ResourceSpans.resource = 1
        rs_len = len(rs[0])
        for sc, blobs in scopes.items():
            # ScopeSpans{scope = 1, spans = 2 (one record per span), schema_url = 3}
            head = _ld(b"\x0a", _scope_bytes(sc))
            tail = _ld(b"\x1a", sc.schema_url.encode()) if sc is not None and sc.schema_url else b""
            ss_len = len(head) + sum(map(len, blobs)) + len(tail)
            ss_head = b"\x12" + _varint(ss_len)  # ResourceSpans.scope_spans = 2
            rs += (ss_head, head, *blobs, tail)
            rs_len += len(ss_head) + ss_len
        if res is not None and res.schema_url:
            rs.append(_ld(b"\x1a", res.schema_url.encode()))  # ResourceSpans.schema_url = 3
            rs_len += len(rs[-1])
        request += (b"\x0a" + _varint(rs_len), *rs)  # ExportTraceServiceRequest.resource_spans = 1
    return b"".join(request)


_NOTHING = object()
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


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(payload)) + payload


# Encoded attributes, by (key, value type, value): most values repeat (job, node and worker
# ids, attempt numbers, method names); bounded by clearing.
_attr_cache: dict[tuple[str, type, Any], bytes] = {}
_UNIQUE_KEYS = frozenset({"ember.task_id", "ember.object_id"})
_ATTR_CACHE_MAX = 4096
_name_cache: dict[str, tuple[Any, bytes]] = {}  # name -> (kind, name and kind fields)
_KIND = [b"\x30" + bytes((k + 1,)) for k in range(5)]
_UNSET_STATUS = b"\x7a\x00"
_FLAGS_LOCAL, _FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x100), b"\x85\x01" + struct.pack("<I", 0x300)


def _attr_bytes(key: str, value: Any) -> bytes | None:
    cache_key = (key, type(value), value)
    try:
        cached = _attr_cache.get(cache_key)
    except TypeError:  # unhashable (a list): the SDK encodes it
        return None
    if cached is not None:
        return cached
    if type(value) is str:
        kb, vb = key.encode(), value.encode()
        lk, lv = len(kb), len(vb)
        if lk + lv < 120:  # every length fits one byte: one formatting, no _ld
            data = b"\x4a%c\x0a%c%s\x12%c\x0a%c%s" % (lk + lv + 6, lk, kb, lv + 2, lv, vb)
            if key in _UNIQUE_KEYS:  # a new value every task: caching it would only evict others
                return data
            if len(_attr_cache) >= _ATTR_CACHE_MAX:
                _attr_cache.clear()
            _attr_cache[cache_key] = data
            return data
        any_value = _ld(b"\x0a", vb)
    elif isinstance(value, str):
        any_value = _ld(b"\x0a", value.encode())
    elif isinstance(value, bool):
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            return None
        any_value = b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    elif isinstance(value, float):
        any_value = b"\x21" + struct.pack("<d", value)
    else:
        return None
    # Span.attributes (field 9): KeyValue{key = 1, value = 2}
    data = _ld(b"\x4a", _ld(b"\x0a", key.encode()) + _ld(b"\x12", any_value))
    if len(_attr_cache) >= _ATTR_CACHE_MAX:
        _attr_cache.clear()
    _attr_cache[cache_key] = data
    return data


def _span_bytes(s: Any) -> bytes | None:
    """One trace.v1.Span message, field by field (None: let the SDK encode it)."""
    ctx = s.context
    return _fields_bytes(s.name, ctx.trace_id, ctx.span_id, ctx.trace_state, s.parent, s.kind,
                         s.start_time, s.end_time, s.attributes, s.dropped_attributes, s.status)


def record_bytes(rec: tuple[Any, ...]) -> bytes | None:
    """The Span message of a tracing_export RECORD without events (None: the SDK encodes it)."""
    entry = _exec_entry(rec)
    if entry is not None:
        i = 1
        while entry[i] & 0x80:  # past ScopeSpans.spans' tag and length
            i += 1
        return entry[i + 1:]
    name, trace_id, span_id, _, state, parent, kind, start, end, attrs, status = rec[:11]
    return _fields_bytes(name, trace_id, span_id, state, parent, kind, start, end, attrs, 0, status)


def _exec_entry(rec: tuple[Any, ...]) -> bytes | None:
    """ScopeSpans.spans = 2 holding the Span message of a task's execute span record, from a
    template; None: not one (record_bytes encodes it field by field)."""
    name, trace_id, span_id, _, state, parent, kind, start, end, attrs, status = rec[:11]
    if status is None and state is None and type(parent) is int and attrs:
        # A task's execute span (tracing_light.TaskSpan): its first attribute (the task id) is
        # new every time, the others repeat; one template per name and the others.
        items = tuple(attrs.items())
        key0, value0 = items[0]
        if key0 in _UNIQUE_KEYS and type(value0) is str:
            vb = value0.encode()
            ck = (name, kind, items[1:], key0, len(vb))
            fmt: bytes | None
            try:
                fmt = _exec_fmts[ck]
            except KeyError:
                fmt = _exec_fmt(ck)
            except TypeError:  # an unhashable value (a list)
                fmt = None
            if fmt is not None:
                return fmt % (_EXEC_IDS(b"\x0a\x10", trace_id >> 64, trace_id & _M64, b"\x12\x08", span_id,
                                        b"\x22\x08", parent),
                              _TIMES(b"\x39", start or 0, b"\x41", end or 0), vb)
    return None


def _exec_fmt(ck: tuple[Any, ...]) -> bytes | None:
    """The template of an execute span's message (see record_bytes), or None when an attribute
    needs the SDK's encoder."""
    consts = _exec_consts(ck)
    fmt = None if consts is None else b"%s".join(c.replace(b"%", b"%%") for c in consts)
    if len(_exec_fmts) >= _ATTR_CACHE_MAX:
        _exec_fmts.clear()
    _exec_fmts[ck] = fmt
    return fmt


def _exec_consts(ck: tuple[Any, ...]) -> list[bytes] | None:
    """The constant parts of an execute span's message, around its ids (38 bytes: trace id,
    span id, parent span id with their tags), its times (18) and its first attribute's value."""
    name, kind, rest, key0, vlen = ck
    kb = key0.encode()
    anylen = 1 + len(_varint(vlen)) + vlen  # AnyValue{string_value = 1}
    kvlen = 1 + len(_varint(len(kb))) + len(kb) + 1 + len(_varint(anylen)) + anylen
    head = b"\x4a" + _varint(kvlen) + b"\x0a" + _varint(len(kb)) + kb + b"\x12" + _varint(anylen) + b"\x0a" + _varint(vlen)
    tail = []
    for k, v in rest:
        a = _attr_bytes(k, v)
        if a is None:
            return None
        tail.append(a)
    # ids and parent (one pack), name and kind, the times (one pack), the first attribute's
    # value, the other attributes, status UNSET, flags (a remote parent)
    consts = [b"", _ld(b"\x2a", name.encode()) + _KIND[kind.value], head,
              b"".join(tail) + _UNSET_STATUS + _FLAGS_REMOTE]
    size = sum(map(len, consts)) + 38 + 18 + vlen  # + the ids' pack, the times', the value
    consts[0] = b"\x12" + _varint(size)  # ScopeSpans.spans = 2
    return consts


def exec_entry(rec: tuple[Any, ...]) -> bytes | None:
    """ScopeSpans.spans = 2 holding an EXEC record's Span message (tracing_exec; no status):
    one struct pack of a template cached per name and repeating values (job, attempt, actor,
    node, worker), the ids (trace_parent's and the span id's bytes as they are), the times and
    the task id's hex filled in; None when an attribute needs the SDK's encoder."""
    name, tp, sid, start, end, values, _ = rec
    task_id = values[0]
    key = (name, values[1:], len(task_id))
    t = _exec7_fmts.get(key, _NOTHING)
    if t is _NOTHING:
        t = _exec7_fmt(key)
    if t is None:
        return None
    pack, c0, c1, c2, c3, c4, c5 = t
    data: bytes = pack(c0, tp, c1, sid, c2, tp[16:24], c3, start, 0x41, end, c4, _hexlify(task_id), c5)
    return data


def _packer(consts: list[bytes], slots: list[str]) -> tuple[Any, ...]:
    """(pack, *consts): a Struct's pack for consts[0] slots[0] consts[1] ... consts[-1], each
    const as an `Ns` field (given again at each call), each slot as written ("16s": the first
    16 bytes of what is given, "Q": a little-endian fixed64, "B": one byte)."""
    fmt = "<" + "".join(f"{len(c)}s{slot}" for c, slot in zip(consts[:-1], slots, strict=True)) + f"{len(consts[-1])}s"
    return (struct.Struct(fmt).pack, *consts)


def _exec7_fmt(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The packer of an EXEC record's entry (exec_entry), or None (an attribute needs the SDK)."""
    from opentelemetry.trace import SpanKind

    from .tracing_export import exec_attributes

    name, rest_values, idlen = key
    items = tuple(exec_attributes((b"", *rest_values)).items())
    consts = _exec_consts((name, SpanKind.CONSUMER, items[1:], items[0][0], 2 * idlen))
    t = None
    if consts is not None:  # the ids' slot split in three: trace id, span id, parent span id
        # ids, name and kind (start's tag last), start, end's tag, end, the task id's hex
        parts = [consts[0] + b"\x0a\x10", b"\x12\x08", b"\x22\x08", consts[1] + b"\x39", consts[2], consts[3]]
        t = _packer(parts, ["16s", "8s", "8s", "QBQ", f"{2 * idlen}s"])
    if len(_exec7_fmts) >= _ATTR_CACHE_MAX:
        _exec7_fmts.clear()
    _exec7_fmts[key] = t
    return t


_exec7_fmts: dict[tuple[Any, ...], Any] = {}


_exec_fmts: dict[tuple[Any, ...], bytes | None] = {}


def submit_entry(rec: tuple[Any, ...]) -> bytes:
    """ScopeSpans.spans = 2 holding a SUBMIT record's Span message: one struct pack of a
    template cached per (name, attribute key, value length, parent kind) with every constant
    field in it; per span only the ids (trace_parent's bytes as they are), the time and the
    value's hex are filled in."""
    name, tp, parent, t, key, value = rec
    ptype = 0 if parent is None else 2 if parent.is_remote else 1
    p = _submit_fmts.get((name, key, len(value), ptype))
    if p is None:
        p = _submit_fmt(name, key, len(value), ptype)
    if ptype:
        pack, c0, c1, c2, c3, c4, c5, c6 = p
        data: bytes = pack(c0, tp, c1, tp[16:24], c2, _pack_q_be(parent.span_id), c3, t, c4, t, c5,
                           _hexlify(value), c6)
        return data
    pack, c0, c1, c2, c3, c4, c5 = p
    data = pack(c0, tp, c1, tp[16:24], c2, t, c3, t, c4, _hexlify(value), c5)
    return data


def _submit_fmt(name: str, key: str, vlen: int, ptype: int) -> tuple[Any, ...]:
    """The packer of a SUBMIT record's entry (submit_entry)."""
    from opentelemetry.trace import SpanKind

    kb, hexlen = key.encode(), 2 * vlen
    anylen = 1 + len(_varint(hexlen)) + hexlen  # AnyValue{string_value = 1}
    kvlen = 1 + len(_varint(len(kb))) + len(kb) + 1 + len(_varint(anylen)) + anylen  # KeyValue{key, value}
    consts = [b"\x0a\x10", b"\x12\x08"]  # trace_id = 1, span_id = 2
    slots = ["16s", "8s"]
    if ptype:
        consts.append(b"\x22\x08")  # parent_span_id = 4
        slots.append("8s")
    consts += [_ld(b"\x2a", name.encode()) + _KIND[SpanKind.PRODUCER.value] + b"\x39",  # name, kind, start
               b"\x41",  # end_time_unix_nano = 8
               b"\x4a" + _varint(kvlen) + b"\x0a" + _varint(len(kb)) + kb + b"\x12" + _varint(anylen)
               + b"\x0a" + _varint(hexlen),  # attributes = 9, the value's hex last
               _UNSET_STATUS + (_FLAGS_REMOTE if ptype == 2 else _FLAGS_LOCAL)]
    slots += ["Q", "Q", f"{hexlen}s"]
    size = sum(map(len, consts)) + 16 + 8 + (8 if ptype else 0) + 8 + 8 + hexlen
    consts[0] = b"\x12" + _varint(size) + consts[0]  # ScopeSpans.spans = 2
    p = _packer(consts, slots)
    if len(_submit_fmts) >= _ATTR_CACHE_MAX:
        _submit_fmts.clear()
    _submit_fmts[(name, key, vlen, ptype)] = p
    return p


_submit_fmts: dict[tuple[str, str, int, int], tuple[Any, ...]] = {}
_pack_q_be = struct.Struct(">Q").pack
_IDS = struct.Struct(">2sQQ2sQ").pack  # Span.trace_id = 1, span_id = 2
_EXEC_IDS = struct.Struct(">2sQQ2sQ2sQ").pack  # trace_id = 1, span_id = 2, parent_span_id = 4
_PARENT = struct.Struct(">2sQ").pack  # Span.parent_span_id = 4
_TIMES = struct.Struct("<cQcQ").pack  # Span.start_time_unix_nano = 7, end = 8 (fixed64)
_M64 = (1 << 64) - 1


def _fields_bytes(name_str: str, trace_id: int, span_id: int, trace_state: Any, parent: Any, kind: Any,
                  start_time: int | None, end_time: int | None, attributes: Any, dropped: int,
                  status: Any) -> bytes | None:
    """parent: None, a SpanContext, or an int (the span id of a remote parent)."""
    parts = [_IDS(b"\x0a\x10", trace_id >> 64, trace_id & _M64, b"\x12\x08", span_id)]
    if trace_state:
        parts.append(_ld(b"\x1a", trace_state.to_header().encode()))
    if parent is None:
        flags = _FLAGS_LOCAL
    elif type(parent) is int:
        parts.append(_PARENT(b"\x22\x08", parent))
        flags = _FLAGS_REMOTE
    else:
        parts.append(_PARENT(b"\x22\x08", parent.span_id))
        flags = _FLAGS_REMOTE if parent.is_remote else _FLAGS_LOCAL
    nk = _name_cache.get(name_str)
    if nk is None or nk[0] is not kind:  # Span.name = 5, kind = 6
        nk = (kind, _ld(b"\x2a", name_str.encode()) + _KIND[kind.value])
        if len(_name_cache) >= _ATTR_CACHE_MAX:
            _name_cache.clear()
        _name_cache[name_str] = nk
    parts += (nk[1], _TIMES(b"\x39", start_time or 0, b"\x41", end_time or 0))
    if attributes:
        get = _attr_cache.get
        for key, value in attributes.items():
            try:
                a = get((key, type(value), value))
            except TypeError:  # unhashable (a list): the SDK encodes it
                return None
            if a is None:
                a = _attr_bytes(key, value)
                if a is None:
                    return None
            parts.append(a)
    if dropped:
        parts += (b"\x50", _varint(dropped))
    if status is None:
        parts.append(_UNSET_STATUS)
    else:
        code, message = status.status_code.value, status.description
        if code or message:
            st = (_ld(b"\x12", message.encode()) if message else b"") + (b"\x18" + _varint(code) if code else b"")
            parts.append(_ld(b"\x7a", st))
        else:
            parts.append(_UNSET_STATUS)
    parts.append(flags)
    return b"".join(parts)
