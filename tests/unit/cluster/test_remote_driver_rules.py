"""Client mode's rules without a cluster: which addresses mean client mode, what `ember.init`
refuses there (naming it, before connecting), the wire's framing of large values, a proxy that
does not answer, and `ember start`'s flag for the proxy."""
from __future__ import annotations

import pickle
import socket

import numpy as np
import pytest

import ember
from ember._private import client_mode
from ember._tools import cli
from ember.util.client import protocol


@pytest.mark.parametrize("address, client", [
    ("ray://head:10001", True), ("ember://10.0.0.1:10001", True), ("ember://head", True),
    ("127.0.0.1:6379", False), ("auto", False), (None, False), ("local", False),
])
def test_which_addresses_mean_client_mode(address, client):
    assert client_mode.is_client_address(address) is client


@pytest.mark.parametrize("kwargs, named", [
    ({"num_cpus": 2}, "num_cpus"), ({"resources": {"x": 1}}, "resources"),
    ({"object_store_memory": 10**8}, "object_store_memory"), ({"include_dashboard": True}, "include_dashboard"),
    ({"runtime_env": {"working_dir": "."}}, "working_dir"),
])
def test_init_refuses_what_client_mode_cannot_honour_by_name(kwargs, named):
    with pytest.raises(NotImplementedError, match=named):
        ember.init("ray://127.0.0.1:1", **kwargs)
    assert not ember.is_initialized()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_proxy_listening_is_a_connection_error_naming_the_address():
    port = _closed_port()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        ember.init(f"ember://127.0.0.1:{port}")
    assert not ember.is_initialized()


@pytest.fixture()
def small_chunks(monkeypatch):
    monkeypatch.setenv("EMBER_CLIENT_PROXY_CHUNK_BYTES", "1000")
    monkeypatch.setattr(protocol, "_chunk_bytes", 0)
    yield
    monkeypatch.setattr(protocol, "_chunk_bytes", 0)


def test_framing_keeps_buffers_out_of_band_and_messages_small(small_chunks):
    arr = np.arange(2500, dtype=np.int64)  # 20,000 bytes: out of band, in 20 messages
    value = {"arr": arr, "text": "x" * 2500, "empty": np.zeros(0)}
    stream, buffers = protocol.encode(value, lambda obj: None)
    assert len(buffers) >= 1 and len(stream) < 4000
    messages = list(protocol.frames((stream, buffers)))
    assert max(len(m) for m in messages) <= 1000
    assert pickle.loads(messages[0])[1] == arr.nbytes  # the header: each segment's length
    back = _decode(messages)
    assert np.array_equal(back["arr"], arr) and back["text"] == value["text"] and back["empty"].size == 0


def _decode(messages: list[bytes]) -> object:
    stream, buffers = protocol.unframe(iter(messages))
    return protocol.loads(stream, lambda pid: None, buffers)


def test_chunk_size_must_be_positive(monkeypatch):
    monkeypatch.setenv("EMBER_CLIENT_PROXY_CHUNK_BYTES", "0")
    monkeypatch.setattr(protocol, "_chunk_bytes", 0)
    with pytest.raises(ValueError, match="EMBER_CLIENT_PROXY_CHUNK_BYTES"):
        protocol.chunk_bytes()
    monkeypatch.setattr(protocol, "_chunk_bytes", 0)


def test_start_refuses_the_client_port_without_head(capsys):
    assert cli.main(["start", "--address", "127.0.0.1:6379", "--ray-client-server-port", "10001"]) == 2
    assert "--ray-client-server-port" in capsys.readouterr().err
