"""A driver started with http_proxy/https_proxy set (a proxy that does not answer) runs as on
Ray: cluster RPCs on loopback go straight to their peers, not through the proxy. A real
subprocess with the variables in its environment: init, tasks, actors, a large object, and a
Serve application reached through its handle."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

DRIVER = textwrap.dedent("""
    import numpy as np
    import ember
    from ember import serve

    ember.init(num_cpus=2)

    @ember.remote
    def add(a, b):
        return a + b

    @ember.remote
    class Counter:
        def __init__(self):
            self.n = 0
        def inc(self):
            self.n += 1
            return self.n

    @serve.deployment
    class Echo:
        def __call__(self, x):
            return f"echo {x}"

    assert ember.get(add.remote(1, 2), timeout=60) == 3
    c = Counter.remote()
    assert ember.get([c.inc.remote() for _ in range(3)], timeout=60) == [1, 2, 3]
    big = np.arange(5_000_000)
    assert int(ember.get(ember.put(big), timeout=60).sum()) == int(big.sum())
    handle = serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    assert handle.remote("hi").result(timeout_s=60) == "echo hi"
    serve.shutdown()
    ember.shutdown()
    print("ok", flush=True)
""")


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing answers there


def test_a_driver_under_an_http_proxy_setting_runs(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proxy = f"http://127.0.0.1:{_dead_port()}"
    env = {**os.environ, "http_proxy": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy,
           "all_proxy": proxy, "no_proxy": "", "NO_PROXY": ""}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=170)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
