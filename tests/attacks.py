"""What the security tests and `scripts/redteam.py` attack with: a raw gRPC channel with no token
and no kit limits, hand-built request bytes (one copy of a big payload), and a sampler of a
process's peak RSS while an attack runs."""
from __future__ import annotations

import socket
import struct
import threading
import time

import grpc
import psutil

from ember_common.proto import gcs_pb2

MIB = 1 << 20
KV_PUT = "/ember.InternalKVGcsService/InternalKVPut"


class PeakRss:
    """Samples a process's RSS every 5 ms on a thread until stopped; `growth` is peak - start."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.start


def raw_channel(address: str) -> grpc.Channel:
    """A channel with no token and no kit limits: it can send anything up to 1 GiB."""
    return grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 1 << 30),
                                                    ("grpc.max_receive_message_length", 1 << 30)])


def varint(n: int) -> bytes:
    """n as a protobuf varint."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def bytes_field(number: int, size: int) -> bytes:
    """A length-delimited field `number` of size zero bytes, built with one copy."""
    return b"".join((varint(number << 3 | 2), varint(size), bytes(size)))


def kv_put_request(size: int, key: bytes = b"big", namespace: str = "preauth") -> bytes:
    """A serialized InternalKVPutRequest with a value of size bytes (a protobuf message would copy
    it twice more)."""
    return gcs_pb2.InternalKVPutRequest(namespace=namespace, key=key).SerializeToString() + bytes_field(3, size)


def call_raw(channel: grpc.Channel, method: str, request: bytes, metadata=None, timeout: float = 60) -> bytes:
    """Calls a unary method with request bytes; the reply's bytes."""
    return channel.unary_unary(method)(request, timeout=timeout, metadata=metadata)


def oversized_first_frame(port: int, pid: int) -> tuple[bool, float, int]:
    """Sends a worker's direct port (wire.py) the header of a 512 MiB HELLO frame, then up to
    64 MiB of its payload unless the worker hangs up first. Returns (whether the worker closed
    the connection, seconds it took, the worker's peak RSS growth)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, PeakRss(pid) as rss:
        s.sendall(struct.pack(">IB", 512 * MIB + 1, 1))
        t0 = time.monotonic()
        try:
            for _ in range(64):
                s.sendall(b"\0" * MIB)
            s.settimeout(5)
            while s.recv(65536):  # the REFUSED frame, then the end of the connection
                pass
            closed = True
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        except TimeoutError:
            closed = False
        return closed, time.monotonic() - t0, rss.growth
