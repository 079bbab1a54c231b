"""The kit's message limits and bind address (ember_common.rpc), without servers: the control
services' receive limit and their data limit are settings of their own, never above the
general one; every channel
and server option carries a limit; a server listens on the node's IP when this machine has it,
else on every interface (an advertised address it does not own)."""
from __future__ import annotations

import pytest

from ember_common import config, rpc


@pytest.fixture
def limits(monkeypatch):
    def set_env(**env: str) -> None:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(config, "_config", None)
    yield set_env
    monkeypatch.setattr(config, "_config", None)


def test_defaults_bound_every_message(limits):
    limits()
    assert rpc.receive_limit(control=True) == 4 << 20
    assert rpc.data_limit() == 64 << 20
    assert rpc.receive_limit(control=False) == rpc.message_limit() == 512 << 20
    opts = dict(rpc.server_options(control=True))
    assert opts["grpc.max_receive_message_length"] == 4 << 20
    assert dict(rpc.channel_options())["grpc.max_send_message_length"] == 512 << 20


def test_the_control_limit_never_exceeds_the_general_one(limits):
    limits(EMBER_MAX_MESSAGE_BYTES=str(2 << 20))
    assert rpc.receive_limit(control=True) == rpc.data_limit() == 2 << 20


def test_a_limit_of_zero_is_refused_naming_it(limits):
    limits(EMBER_MAX_CONTROL_MESSAGE_BYTES="0")
    with pytest.raises(ValueError, match="EMBER_MAX_CONTROL_MESSAGE_BYTES must be > 0"):
        rpc.data_limit()


def test_bind_host_is_the_node_ip_when_this_machine_has_it(monkeypatch):
    assert rpc.bind_host("127.0.0.1") == "127.0.0.1"
    assert rpc.bind_host("192.0.2.1") == "0.0.0.0"  # advertised (TEST-NET-1), not owned: as before
    monkeypatch.delenv("EMBER_NODE_IP", raising=False)
    assert rpc.default_bind_host() == "127.0.0.1"
    assert rpc.host_port("::1", 5) == "[::1]:5" and rpc.host_port("127.0.0.1", 5) == "127.0.0.1:5"
