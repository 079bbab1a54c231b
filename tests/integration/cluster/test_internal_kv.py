"""The internal KV door (`ember.experimental.internal_kv`) against a real embedded cluster: from
the driver, a task, a plain and an async actor, and a process that is not a driver (as the CLI)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ember.experimental import internal_kv as kv
from ember_common import rpc

BINARY = bytes(range(256))  # every byte value, not UTF-8


@pytest.fixture(scope="module")
def cluster():
    import ember

    assert not ember.is_initialized()
    ember.init(num_cpus=2, object_store_memory=64 * 2**20)
    yield ember
    ember.shutdown()


def test_not_initialized_is_a_clear_error():
    import ember

    assert not ember.is_initialized()
    assert not kv._internal_kv_initialized()
    with pytest.raises(RuntimeError, match=r"not initialized: call ember.init\(\)"):
        kv._internal_kv_get(b"k")
    with pytest.raises(RuntimeError, match="not initialized"):
        kv._internal_kv_put(b"k", b"v")
    assert not ember.is_initialized(), "a KV call must never start a cluster"


def test_put_get_exists_del(cluster):
    assert kv._internal_kv_initialized()
    assert kv._internal_kv_get(b"pge") is None
    assert not kv._internal_kv_exists(b"pge")
    assert kv._internal_kv_put(b"pge", b"one") is False  # did not exist
    assert kv._internal_kv_get(b"pge") == b"one"
    assert kv._internal_kv_exists("pge")  # str keys are their UTF-8 bytes
    assert kv._internal_kv_put("pge", "two") is True  # existed, overwritten
    assert kv._internal_kv_get("pge") == b"two"
    assert kv._internal_kv_del(b"pge") == 1
    assert kv._internal_kv_del(b"pge") == 0
    assert kv._internal_kv_get(b"pge") is None


def test_overwrite_false_keeps_the_first_value(cluster):
    assert kv._internal_kv_put(b"once", b"first", overwrite=False) is False
    assert kv._internal_kv_put(b"once", b"second", overwrite=False) is True
    assert kv._internal_kv_get(b"once") == b"first"
    assert kv._internal_kv_put(b"once", b"third", overwrite=True) is True
    assert kv._internal_kv_get(b"once") == b"third"


def test_namespaces_are_separate(cluster):
    kv._internal_kv_put(b"k", b"in-a", namespace="ns_a")
    kv._internal_kv_put(b"k", b"in-b", namespace=b"ns_b")  # bytes namespaces too
    assert kv._internal_kv_get(b"k", namespace=b"ns_a") == b"in-a"
    assert kv._internal_kv_get(b"k", namespace="ns_b") == b"in-b"
    assert kv._internal_kv_get(b"k") is None  # the default namespace is another one
    assert kv._internal_kv_list(b"", namespace="ns_a") == [b"k"]
    assert kv._internal_kv_del(b"k", namespace="ns_a") == 1
    assert kv._internal_kv_get(b"k", namespace="ns_b") == b"in-b"


def test_binary_keys_and_values(cluster):
    key = b"bin/" + BINARY
    assert kv._internal_kv_put(key, BINARY[::-1], namespace="bin") is False
    assert kv._internal_kv_get(key, namespace="bin") == BINARY[::-1]
    assert kv._internal_kv_list(b"bin/\x00", namespace="bin") == [key]
    big = bytes(range(256)) * 4096  # 1 MiB
    kv._internal_kv_put(b"big", big, namespace="bin")
    assert kv._internal_kv_get(b"big", namespace="bin") == big


def test_list_and_delete_by_prefix(cluster):
    for k in (b"p/2", b"p/1", b"p/10", b"q/1", b"p"):
        kv._internal_kv_put(k, k, namespace="lst")
    assert kv._internal_kv_list(b"p/", namespace="lst") == [b"p/1", b"p/10", b"p/2"]
    assert kv._internal_kv_list("p", namespace="lst") == [b"p", b"p/1", b"p/10", b"p/2"]
    assert kv._internal_kv_list(b"zzz", namespace="lst") == []
    assert kv._internal_kv_del(b"p/1", del_by_prefix=True, namespace="lst") == 2  # p/1, p/10
    assert kv._internal_kv_list(b"", namespace="lst") == [b"p", b"p/2", b"q/1"]
    assert kv._internal_kv_del(b"", del_by_prefix=True, namespace="lst") == 3
    assert kv._internal_kv_list(b"", namespace="lst") == []


def test_bad_arguments_name_the_problem(cluster):
    with pytest.raises(TypeError, match="key must be bytes or str, got int"):
        kv._internal_kv_get(3)
    with pytest.raises(TypeError, match="value must be bytes or str, got dict"):
        kv._internal_kv_put(b"k", {"a": 1})
    with pytest.raises(TypeError, match="overwrite must be a bool"):
        kv._internal_kv_put(b"k", b"v", "no")
    with pytest.raises(TypeError, match="namespace must be bytes, str or None"):
        kv._internal_kv_get(b"k", namespace=5)
    with pytest.raises(ValueError, match="namespace must be UTF-8"):
        kv._internal_kv_get(b"k", namespace=b"\xff")
    with pytest.raises(ValueError, match="empty key can only be deleted with del_by_prefix"):
        kv._internal_kv_del(b"")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        kv._internal_kv_get(b"k", timeout=0)
    kv._internal_kv_put(b"after-errors", b"ok")  # the door still works
    assert kv._internal_kv_get(b"after-errors") == b"ok"


def test_tasks_and_actors_use_the_same_kv(cluster):
    ember = cluster

    @ember.remote
    def writer(i):
        from ember.experimental import internal_kv

        return internal_kv._internal_kv_put(f"task/{i}", f"v{i}", namespace="shared")

    assert ember.get([writer.remote(i) for i in range(3)]) == [False] * 3
    assert kv._internal_kv_list(b"task/", namespace="shared") == [b"task/0", b"task/1", b"task/2"]

    @ember.remote
    class Reader:
        def read(self, key):
            from ember.experimental import internal_kv

            return internal_kv._internal_kv_get(key, namespace="shared")

    @ember.remote
    class AsyncReader:
        async def read(self, key):
            from ember.experimental import internal_kv

            return internal_kv._internal_kv_get(key, namespace="shared")

    kv._internal_kv_put(b"from-driver", BINARY, namespace="shared")
    r, a = Reader.remote(), AsyncReader.remote()
    assert ember.get(r.read.remote(b"task/1")) == b"v1"
    assert ember.get(a.read.remote(b"from-driver")) == BINARY
    ember.kill(r)
    ember.kill(a)


def _standalone(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=60)


def test_a_process_that_is_not_a_driver(cluster):
    """As the CLI: a GCS client of its own, no ember.init(), no job."""
    address = cluster.get_runtime_context().gcs_address
    kv._internal_kv_put(b"cli", b"seen", namespace="standalone")
    r = _standalone(f"""
        import ember
        from ember.experimental import internal_kv as kv
        kv._initialize_internal_kv({address!r})
        assert kv._internal_kv_initialized()
        print("GET", kv._internal_kv_get(b"cli", namespace="standalone"))
        print("PUT", kv._internal_kv_put(b"from-cli", b"\\x00\\x01", namespace="standalone"))
        print("DEL", kv._internal_kv_del(b"cli", namespace="standalone"))
        kv._internal_kv_reset()
        print("AFTER", kv._internal_kv_initialized(), ember.is_initialized())
    """)
    assert r.returncode == 0, r.stderr
    assert "GET b'seen'" in r.stdout and "PUT False" in r.stdout and "DEL 1" in r.stdout
    assert "AFTER False False" in r.stdout
    assert kv._internal_kv_get(b"from-cli", namespace="standalone") == b"\x00\x01"
    assert kv._internal_kv_get(b"cli", namespace="standalone") is None


def test_unreachable_gcs_fails_within_the_timeout(cluster):
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kv._initialize_internal_kv(f"127.0.0.1:{port}", timeout_s=2)
    try:
        t0 = time.monotonic()
        with pytest.raises((rpc.Unavailable, rpc.DeadlineExceeded)):
            kv._internal_kv_get(b"k")
        assert time.monotonic() - t0 < 10
    finally:
        kv._internal_kv_reset()
    with pytest.raises(ValueError, match="HOST:PORT"):
        kv._initialize_internal_kv("nohost")
    # the driver's own connection is untouched
    kv._internal_kv_put(b"still", b"here")
    assert kv._internal_kv_get(b"still") == b"here"
