"""OTLP field writers and the per-task span templates (_otlp writes the request).

The protobuf primitives (varints, length-delimited fields, a Span's attributes from a bounded
cache) and the templates of a task's two spans: a SubmitRecord (`submit_entry`) and an
ExecRecord (`exec_entry`), or a SpanRecord whose first attribute is the task id
(`span_record_entry`), each written as one struct pack or one bytes formatting of a template
cached per span name and repeating attributes, tag and length included; per span only the ids,
the times and the task id's hex are filled in. Split from _otlp (which groups the spans and
writes the request around these entries) to keep both modules readable; tests decode the bytes
with the OTLP protobuf classes.
"""
from __future__ import annotations

import struct
from binascii import hexlify as _hexlify  # bytes -> lowercase hex bytes (bytes.hex().encode())
from typing import Any

from ._records import ExecRecord, SubmitRecord, task_attributes

NOTHING = object()


def varint(n: int) -> bytes:
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


def ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(payload)) + payload


# Encoded attributes, by (key, value type, value): most values repeat (job, node and worker
# ids, attempt numbers, method names); bounded by clearing.
attr_cache: dict[tuple[str, type, Any], bytes] = {}
_UNIQUE_KEYS = frozenset({"ember.task_id", "ember.object_id"})
ATTR_CACHE_MAX = 4096
name_cache: dict[str, tuple[Any, bytes]] = {}  # name -> (kind, name and kind fields)
KIND = [b"\x30" + bytes((k + 1,)) for k in range(5)]
UNSET_STATUS = b"\x7a\x00"
FLAGS_LOCAL, FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x100), b"\x85\x01" + struct.pack("<I", 0x300)


def attr_bytes(key: str, value: Any) -> bytes | None:
    cache_key = (key, type(value), value)
    try:
        cached = attr_cache.get(cache_key)
    except TypeError:  # unhashable (a list): the SDK encodes it
        return None
    if cached is not None:
        return cached
    if type(value) is str:
        kb, vb = key.encode(), value.encode()
        lk, lv = len(kb), len(vb)
        if lk + lv < 120:  # every length fits one byte: one formatting, no ld
            data = b"\x4a%c\x0a%c%s\x12%c\x0a%c%s" % (lk + lv + 6, lk, kb, lv + 2, lv, vb)
            if key in _UNIQUE_KEYS:  # a new value every task: caching it would only evict others
                return data
            if len(attr_cache) >= ATTR_CACHE_MAX:
                attr_cache.clear()
            attr_cache[cache_key] = data
            return data
        any_value = ld(b"\x0a", vb)
    elif isinstance(value, str):
        any_value = ld(b"\x0a", value.encode())
    elif isinstance(value, bool):
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            return None
        any_value = b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)
    elif isinstance(value, float):
        any_value = b"\x21" + struct.pack("<d", value)
    else:
        return None
    # Span.attributes (field 9): KeyValue{key = 1, value = 2}
    data = ld(b"\x4a", ld(b"\x0a", key.encode()) + ld(b"\x12", any_value))
    if len(attr_cache) >= ATTR_CACHE_MAX:
        attr_cache.clear()
    attr_cache[cache_key] = data
    return data

def span_record_entry(rec: Any) -> bytes | None:
    """ScopeSpans.spans = 2 holding the Span message of a SpanRecord that is a task's execute
    span, from a template; None: not one (record_bytes encodes it field by field)."""
    name, trace_id, span_id, _, state, parent, kind, start, end, attrs, status = rec[:11]
    if status is None and state is None and type(parent) is int and attrs:
        # A task's execute span (_light.TaskSpan): its first attribute (the task id) is
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
                return fmt % (_EXEC_IDS(b"\x0a\x10", trace_id >> 64, trace_id & M64, b"\x12\x08", span_id,
                                        b"\x22\x08", parent),
                              TIMES(b"\x39", start or 0, b"\x41", end or 0), vb)
    return None


def _exec_fmt(ck: tuple[Any, ...]) -> bytes | None:
    """The template of an execute span's message (see record_bytes), or None when an attribute
    needs the SDK's encoder."""
    consts = _exec_consts(ck)
    fmt = None if consts is None else b"%s".join(c.replace(b"%", b"%%") for c in consts)
    if len(_exec_fmts) >= ATTR_CACHE_MAX:
        _exec_fmts.clear()
    _exec_fmts[ck] = fmt
    return fmt


def _exec_consts(ck: tuple[Any, ...]) -> list[bytes] | None:
    """The constant parts of an execute span's message, around its ids (38 bytes: trace id,
    span id, parent span id with their tags), its times (18) and its first attribute's value."""
    name, kind, rest, key0, vlen = ck
    kb = key0.encode()
    anylen = 1 + len(varint(vlen)) + vlen  # AnyValue{string_value = 1}
    kvlen = 1 + len(varint(len(kb))) + len(kb) + 1 + len(varint(anylen)) + anylen
    head = b"\x4a" + varint(kvlen) + b"\x0a" + varint(len(kb)) + kb + b"\x12" + varint(anylen) + b"\x0a" + varint(vlen)
    tail = []
    for k, v in rest:
        a = attr_bytes(k, v)
        if a is None:
            return None
        tail.append(a)
    # ids and parent (one pack), name and kind, the times (one pack), the first attribute's
    # value, the other attributes, status UNSET, flags (a remote parent)
    consts = [b"", ld(b"\x2a", name.encode()) + KIND[kind.value], head,
              b"".join(tail) + UNSET_STATUS + FLAGS_REMOTE]
    size = sum(map(len, consts)) + 38 + 18 + vlen  # + the ids' pack, the times', the value
    consts[0] = b"\x12" + varint(size)  # ScopeSpans.spans = 2
    return consts


def exec_entry(rec: ExecRecord) -> bytes | None:
    """ScopeSpans.spans = 2 holding an ExecRecord's Span message (no status): one struct pack
    of a template cached per name and repeating ids (job, attempt, actor, node, worker), the
    ids (trace_parent's and the span id's bytes as they are), the times and the task id's hex
    filled in; None when an attribute needs the SDK's encoder."""
    name, tp, sid, start, end, task_id = rec[:6]
    key = (name, rec[6:11], len(task_id))
    t = exec_record_fmts.get(key, NOTHING)
    if t is NOTHING:
        t = _exec_record_fmt(key)
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


def _exec_record_fmt(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The packer of an ExecRecord's entry (exec_entry), or None (an attribute needs the SDK)."""
    from opentelemetry.trace import SpanKind

    name, rest_values, idlen = key
    items = tuple(task_attributes(b"", *rest_values).items())
    consts = _exec_consts((name, SpanKind.CONSUMER, items[1:], items[0][0], 2 * idlen))
    t = None
    if consts is not None:  # the ids' slot split in three: trace id, span id, parent span id
        # ids, name and kind (start's tag last), start, end's tag, end, the task id's hex
        parts = [consts[0] + b"\x0a\x10", b"\x12\x08", b"\x22\x08", consts[1] + b"\x39", consts[2], consts[3]]
        t = _packer(parts, ["16s", "8s", "8s", "QBQ", f"{2 * idlen}s"])
    if len(exec_record_fmts) >= ATTR_CACHE_MAX:
        exec_record_fmts.clear()
    exec_record_fmts[key] = t
    return t


exec_record_fmts: dict[tuple[Any, ...], Any] = {}


_exec_fmts: dict[tuple[Any, ...], bytes | None] = {}


def submit_entry(rec: SubmitRecord) -> bytes:
    """ScopeSpans.spans = 2 holding a SubmitRecord's Span message: one struct pack of a
    template cached per (name, attribute key, value length, parent kind) with every constant
    field in it; per span only the ids (trace_parent's bytes as they are), the time and the
    value's hex are filled in."""
    name, tp, parent, t, key, value = rec
    ptype = 0 if parent is None else 2 if parent.is_remote else 1
    p = submit_fmts.get((name, key, len(value), ptype))
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
    """The packer of a SubmitRecord's entry (submit_entry)."""
    from opentelemetry.trace import SpanKind

    kb, hexlen = key.encode(), 2 * vlen
    anylen = 1 + len(varint(hexlen)) + hexlen  # AnyValue{string_value = 1}
    kvlen = 1 + len(varint(len(kb))) + len(kb) + 1 + len(varint(anylen)) + anylen  # KeyValue{key, value}
    consts = [b"\x0a\x10", b"\x12\x08"]  # trace_id = 1, span_id = 2
    slots = ["16s", "8s"]
    if ptype:
        consts.append(b"\x22\x08")  # parent_span_id = 4
        slots.append("8s")
    consts += [ld(b"\x2a", name.encode()) + KIND[SpanKind.PRODUCER.value] + b"\x39",  # name, kind, start
               b"\x41",  # end_time_unix_nano = 8
               b"\x4a" + varint(kvlen) + b"\x0a" + varint(len(kb)) + kb + b"\x12" + varint(anylen)
               + b"\x0a" + varint(hexlen),  # attributes = 9, the value's hex last
               UNSET_STATUS + (FLAGS_REMOTE if ptype == 2 else FLAGS_LOCAL)]
    slots += ["Q", "Q", f"{hexlen}s"]
    size = sum(map(len, consts)) + 16 + 8 + (8 if ptype else 0) + 8 + 8 + hexlen
    consts[0] = b"\x12" + varint(size) + consts[0]  # ScopeSpans.spans = 2
    p = _packer(consts, slots)
    if len(submit_fmts) >= ATTR_CACHE_MAX:
        submit_fmts.clear()
    submit_fmts[(name, key, vlen, ptype)] = p
    return p


submit_fmts: dict[tuple[str, str, int, int], tuple[Any, ...]] = {}
_pack_q_be = struct.Struct(">Q").pack
IDS = struct.Struct(">2sQQ2sQ").pack  # Span.trace_id = 1, span_id = 2
_EXEC_IDS = struct.Struct(">2sQQ2sQ2sQ").pack  # trace_id = 1, span_id = 2, parent_span_id = 4
PARENT = struct.Struct(">2sQ").pack  # Span.parent_span_id = 4
TIMES = struct.Struct("<cQcQ").pack  # Span.start_time_unix_nano = 7, end = 8 (fixed64)
M64 = (1 << 64) - 1
