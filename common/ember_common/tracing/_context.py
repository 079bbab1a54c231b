"""A task's trace context as it travels in its TaskSpec: one bytes field, `trace_parent`, in one
of two forms told apart by length.

    25 bytes   trace id (16), the submit span's id (8), trace flags (1), big-endian as in a
               W3C traceparent: what the fast paths write and read, with no string work
    otherwise  the propagator's headers, one `name:value` line each (a tracestate, baggage,
               another propagator's headers): the generic path; padded with an empty line
               when it would be 25 bytes long
    empty      no context

Only the fast paths write the compact form (_submit); `encode` writes a carrier (header ->
value) in the header form, so that a context the generic path made is read by the generic path
again, as it was made; `carrier` reads either form back as headers.
"""
from __future__ import annotations

import re

COMPACT_LEN = 25
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_trace_parent(tp: bytes) -> tuple[int, int, int, None] | None:
    """(trace id, parent span id, flags, no tracestate) of a compact context, or None when it
    is malformed (a wrong length, a zero id)."""
    if len(tp) != COMPACT_LEN:
        return None
    trace_id, span_id = int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big")
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, tp[24], None


def traceparent(tp: bytes) -> str:
    """The W3C traceparent header of a compact context."""
    return f"00-{tp[:16].hex()}-{tp[16:24].hex()}-{tp[24]:02x}"


def parse_ids(carrier: dict[str, str] | object) -> tuple[int, int, int, str | None] | None:
    """(trace id, parent span id, flags, tracestate header) from a carrier holding a W3C
    traceparent (and at most a tracestate), or None (use the generic path)."""
    get = getattr(carrier, "get", None)
    if get is None:
        return None
    tp = get("traceparent")
    if not tp or len(carrier) != ("tracestate" in carrier) + 1:  # type: ignore[arg-type,operator]
        return None  # none, or baggage / other headers too
    m = _TRACEPARENT.fullmatch(tp)
    if m is None:
        return None
    trace_id, span_id = int(m[1], 16), int(m[2], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(m[3], 16), get("tracestate") or None


def encode(carrier: dict[str, str]) -> bytes:
    """A carrier's headers as a TaskSpec.trace_parent in the header form."""
    if not carrier:
        return b""
    data = "".join(f"{k}:{v}\n" for k, v in carrier.items()).encode()
    return data + b"\n" if len(data) == COMPACT_LEN else data


def carrier(tp: bytes) -> dict[str, str]:
    """A TaskSpec.trace_parent's headers ({} when it holds none, or a malformed compact one)."""
    if len(tp) == COMPACT_LEN:
        return {"traceparent": traceparent(tp)} if parse_trace_parent(tp) else {}
    out: dict[str, str] = {}
    for line in tp.decode("utf-8", "replace").split("\n"):
        if line:
            name, _, value = line.partition(":")
            out[name] = value
    return out


def trace_id_hex(tp: bytes) -> str:
    """The trace id of a TaskSpec.trace_parent as 32 hex digits ("" when it holds none)."""
    if len(tp) == COMPACT_LEN:
        return tp[:16].hex()
    if not tp:
        return ""
    value = carrier(tp).get("traceparent", "")
    return value.split("-")[1] if value.count("-") >= 2 else ""
