"""Config.from_env with an explicit environ dict (never the real os.environ)."""
from __future__ import annotations

import dataclasses
import warnings

import pytest

from ember_common.config import Config


def no_warnings_from_env(env: dict[str, str]) -> Config:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return Config.from_env(env)


def test_empty_environ_gives_defaults():
    assert no_warnings_from_env({}) == Config()
    assert Config().max_inline_bytes == 100 * 1024
    assert Config().task_max_retries == 3


def test_reads_int_and_float_fields_with_their_types():
    cfg = no_warnings_from_env({
        "EMBER_MAX_INLINE_BYTES": "4096",
        "EMBER_HEARTBEAT_PERIOD_S": "0.25",
        "EMBER_NODE_DEATH_TIMEOUT_S": "7",
        "EMBER_TASK_MAX_RETRIES": "0",
        "EMBER_OBJECT_STORE_MEMORY_FRACTION": "0.5",
    })
    assert cfg.max_inline_bytes == 4096 and type(cfg.max_inline_bytes) is int
    assert cfg.heartbeat_period_s == 0.25 and type(cfg.heartbeat_period_s) is float
    assert cfg.node_death_timeout_s == 7.0 and type(cfg.node_death_timeout_s) is float
    assert cfg.task_max_retries == 0
    assert cfg.object_store_memory_fraction == 0.5
    # Untouched fields keep their defaults.
    assert cfg.lease_linger_s == Config().lease_linger_s


def test_every_field_is_read_from_its_variable():
    defaults = Config()
    env = {}
    for f in dataclasses.fields(Config):
        default = getattr(defaults, f.name)
        env["EMBER_" + f.name.upper()] = ("0" if default else "1") if isinstance(default, bool) else str(default + 1)
    cfg = no_warnings_from_env(env)
    for f in dataclasses.fields(Config):
        default = getattr(defaults, f.name)
        assert getattr(cfg, f.name) == ((not default) if isinstance(default, bool) else default + 1), f.name


@pytest.mark.parametrize("raw,value", [("0", False), ("false", False), ("Off", False), ("no", False),
                                       ("1", True), ("true", True), ("YES", True), ("on", True)])
def test_flags_read_as_words_or_digits(raw, value):
    assert no_warnings_from_env({"EMBER_TASK_EVENTS_ENABLED": raw}).task_events_enabled is value


def test_a_malformed_flag_names_the_variable():
    with pytest.raises(ValueError, match="EMBER_TASK_EVENTS_ENABLED='maybe'"):
        Config.from_env({"EMBER_TASK_EVENTS_ENABLED": "maybe"})


def test_non_ember_variables_are_ignored():
    assert no_warnings_from_env({"PATH": "/bin", "MAX_INLINE_BYTES": "1", "ember_x": "1"}) == Config()


@pytest.mark.parametrize("var,raw", [
    ("EMBER_MAX_INLINE_BYTES", "lots"),
    ("EMBER_MAX_INLINE_BYTES", "1.5"),
    ("EMBER_TASK_MAX_RETRIES", ""),
    ("EMBER_HEARTBEAT_PERIOD_S", "fast"),
    ("EMBER_INFEASIBLE_TIMEOUT_S", "10s"),
])
def test_invalid_values_rejected_naming_the_variable(var, raw):
    with pytest.raises(ValueError, match=var) as ei:
        Config.from_env({var: raw})
    assert repr(raw) in str(ei.value)


def test_unknown_ember_variable_warns():
    with pytest.warns(RuntimeWarning, match="EMBER_MAX_INLINE_BYTE\\b"):
        cfg = Config.from_env({"EMBER_MAX_INLINE_BYTE": "10"})  # typo: missing S
    assert cfg == Config()


def test_each_unknown_variable_warns_once():
    with pytest.warns(RuntimeWarning) as record:
        Config.from_env({"EMBER_FOO": "1", "EMBER_BAR": "2", "EMBER_HEARTBEAT_PERIOD_S": "1"})
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 2
    assert "EMBER_BAR" in messages[0] and "EMBER_FOO" in messages[1]


@pytest.mark.parametrize("var", ["EMBER_ADDRESS", "EMBER_SESSION_DIR", "EMBER_NODE_ID",
                                 "EMBER_RAYLET_ADDRESS", "EMBER_GCS_ADDRESS", "EMBER_WORKER_ID",
                                 "EMBER_TEST_ANYTHING"])
def test_known_non_tunable_and_test_variables_do_not_warn(var):
    assert no_warnings_from_env({var: "x"}) == Config()


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_inline_bytes = 1  # type: ignore[misc]


def test_keepalive_options_follow_the_config_and_refuse_negative(monkeypatch):
    from ember_common import config, rpc

    monkeypatch.setattr(config, "_config", config.Config.from_env({"EMBER_GRPC_KEEPALIVE_S": "3"}))
    opts = dict(rpc.keepalive_options())
    assert opts["grpc.keepalive_time_ms"] == 3000 and opts["grpc.http2.ping_timeout_ms"] == 3000
    assert opts["grpc.http2.max_ping_strikes"] == 0  # servers never GOAWAY our pings
    assert dict(rpc.server_options())["grpc.keepalive_time_ms"] == 3000
    monkeypatch.setattr(config, "_config", config.Config.from_env({"EMBER_GRPC_KEEPALIVE_S": "0"}))
    assert rpc.keepalive_options() == []
    monkeypatch.setattr(config, "_config", config.Config.from_env({"EMBER_GRPC_KEEPALIVE_S": "-1"}))
    with pytest.raises(ValueError, match="EMBER_GRPC_KEEPALIVE_S"):
        rpc.keepalive_options()


def test_pull_stall_timeout_must_be_positive(monkeypatch):
    from ember_common import config
    from ember_objmgr import transfer

    monkeypatch.setattr(config, "_config", config.Config.from_env({"EMBER_PULL_STALL_TIMEOUT_S": "2.5"}))
    assert transfer.stall_timeout_s() == 2.5
    monkeypatch.setattr(config, "_config", config.Config.from_env({"EMBER_PULL_STALL_TIMEOUT_S": "0"}))
    with pytest.raises(ValueError, match="EMBER_PULL_STALL_TIMEOUT_S"):
        transfer.stall_timeout_s()
