"""What the side-by-side Serve/LLM scripts share: a benchmark server run as a child process of
a given Python (Ember's venv or Ray's), told its port on the command line, that prints READY when
it serves and stops when its stdin closes."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from typing import Iterator


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server_process(python: str, code: str, args: list[str], start_timeout_s: float = 180,
                   env: dict[str, str] | None = None) -> Iterator[int]:
    """Runs `python -c code PORT *args`, waits for its READY line, yields the port; closes its
    stdin at the end and waits (killing it after 60 s)."""
    port = free_port()
    p = subprocess.Popen([python, "-c", code, str(port), *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + start_timeout_s
        assert p.stdout is not None
        while True:
            line = p.stdout.readline()
            if line.strip() == "READY":
                break
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"{python} server did not start")
        yield port
    finally:
        assert p.stdin is not None
        p.stdin.close()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
