"""compare_llm.py's load side: streaming HTTP clients (raw asyncio HTTP/1.1 keep-alive, bounded by
a request budget and a deadline), the summary of a phase (tokens/s, TTFT and latency
percentiles), the CPU time of every process under the benchmark, and the engine's step counters
turned into batch-fill figures."""
from __future__ import annotations

import asyncio
import json
import time

from compare_serve_stream import _cpu_per_chunk, _short_name


async def _request(reader, writer, path: str, body: bytes, host: str) -> tuple[int, float]:
    """(tokens, seconds to the first token) of one streamed response."""
    t0 = time.perf_counter()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = await reader.readuntil(b"\r\n\r\n")
    if int(head.split(b" ", 2)[1]) != 200:
        raise RuntimeError(head.decode(errors="replace"))
    tokens, first, buf = 0, 0.0, b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            break
        buf += data[:-2]
        *events, buf = buf.split(b"\n\n")
        for e in events:
            if e.startswith(b"data: {") and b'"text":""' not in e and b'"content":""' not in e and b'"choices":[]' not in e:
                tokens += 1
                if not first:
                    first = time.perf_counter() - t0
    return tokens, first


async def _client(port, args, path, stop_at, budget, out) -> None:
    host = f"127.0.0.1:{port}"
    body = json.dumps({"model": "tiny", "prompt": "Tell me a story", "max_tokens": args.max_tokens,
                       "temperature": 0.0, "stream": True, "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while budget[0] > 0 and time.monotonic() < stop_at:
            budget[0] -= 1
            t0 = time.perf_counter()
            n, first = await _request(reader, writer, path, body, host)
            out["tokens"] += n
            out["ttft"].append(first)
            out["lat"].append(time.perf_counter() - t0)
    except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as e:
        out["errors"] += 1
        out["last_error"] = repr(e)[:200]
    finally:
        writer.close()


CORE_MARKER = "--ember-llm-engine-core"  # engine_core.MARKER, on the engine-core process's command line


def _cpu_times() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every process under this one, by pid, with a short name
    (the engine-core child of a replica is "core")."""
    import psutil

    out, parents = {}, set()
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
            if CORE_MARKER in cmd:
                parents.add(p.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[p.pid] = ("core" if CORE_MARKER in cmd else _short_name(cmd), t.user + t.system)
    for pid in parents & set(out):
        out[pid] = ("llm_replica", out[pid][1])
    return out


def _pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1) if xs else float("nan")


def _summary(out, elapsed):
    return {"requests": len(out["lat"]), "tokens_per_s": round(out["tokens"] / elapsed, 1),
            "ttft_p50_ms": _pct(out["ttft"], 0.5), "ttft_p99_ms": _pct(out["ttft"], 0.99),
            "p50_ms": _pct(out["lat"], 0.5), "errors": out["errors"],
            **({"last_error": out["last_error"]} if "last_error" in out else {})}


def _read_stats(path: str) -> dict | None:
    """The server's latest engine counters (written every 0.5 s): read after 0.6 s of quiet."""
    time.sleep(0.6)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _batch_fill(before: dict | None, after: dict | None, requests: int) -> dict:
    """The engine's step counters over a load phase: rows per decode step, prefill passes per
    request, and (engines that count them) mixed steps, newcomers per prefill pass, ms per step
    of each kind and the share of the phase the step loop sat idle."""
    if not before or not after or "num_steps" not in after:
        return {}
    d = {k: after[k] - before[k] for k in after if isinstance(after[k], (int, float)) and k in before}
    steps = max(d["num_steps"], 1)
    out = {"rows_per_step": round((d["generated_tokens"] - requests) / steps, 2),
           "prefills_per_request": round(d["num_prefills"] / max(requests, 1), 2)}
    if "num_mixed" in d:
        prefills = max(d["num_prefills"], 1)
        separate = max(d["num_prefills"] - d["num_mixed"], 1)
        plain = max(d["num_steps"] - d["num_mixed"], 1)
        out.update({"mixed_share": round(d["num_mixed"] / prefills, 2),
                    "rows_per_prefill": round(d["prefill_rows"] / prefills, 2),
                    "ms_per_step": {"decode": round(1e3 * d["decode_s"] / plain, 2),
                                    "prefill": round(1e3 * d["prefill_s"] / separate, 2),
                                    "mixed": round(1e3 * d["mixed_s"] / max(d["num_mixed"], 1), 2),
                                    "whole_step": round(1e3 * d["step_s"] / steps, 2)},
                    "idle_s": round(d["idle_s"], 2),
                    "slot_wait_ms": round(1e3 * d["slot_wait_s"] / max(d["slot_refills"], 1), 2)})
    return out


async def http_load(port, args, path, concurrency, requests, stats_path="") -> dict:
    warm = {"tokens": 0, "ttft": [], "lat": [], "errors": 0}
    await asyncio.gather(*[_client(port, args, path, time.monotonic() + 30, [2], warm) for _ in range(concurrency)])
    out = {"tokens": 0, "ttft": [], "lat": [], "errors": 0}
    budget = [requests]
    st0 = _read_stats(stats_path) if stats_path else None
    cpu0 = _cpu_times()
    t0 = time.perf_counter()
    await asyncio.gather(*[_client(port, args, path, time.monotonic() + args.duration, budget, out)
                           for _ in range(concurrency)])
    res = _summary(out, time.perf_counter() - t0)
    res["cpu_us_per_token"] = _cpu_per_chunk(cpu0, _cpu_times(), out["tokens"])
    if stats_path:
        res.update(_batch_fill(st0, _read_stats(stats_path), len(out["lat"])))
    return res


