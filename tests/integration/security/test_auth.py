"""Token authentication against real processes: a LocalCluster (GCS, raylet, objmgr) plus an
actor's worker, each service called on its own port with no token, a wrong token and the right
one; health checks stay open; the embedded `ember.init()` makes its token file on first use
under a fresh HOME; unusable token configurations fail in one clear line; a driver with the
wrong token gets ember.exceptions.AuthenticationError naming its token source."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import ember
from ember.testing import LocalCluster
from ember_common import auth, rpc
from ember_common.proto import (
    core_worker_pb2,
    gcs_pb2,
    objmgr_pb2,
    raylet_pb2,
)

WRONG = (("authorization", "Bearer not-the-token"),)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as c:
        c.add_node({"CPU": 2}, is_head=True)
        ember.init(address=c.gcs_address)
        try:
            yield c
        finally:
            ember.shutdown()


@ember.remote
class Probe:
    def core_port(self) -> int:
        from ember._private.worker import global_worker

        return global_worker().core.port


def _targets(c) -> dict[str, tuple[str, str, object]]:
    """service -> (address, method path, request) of a harmless read RPC."""
    node = c.nodes[0].record
    probe = Probe.remote()
    c.probe = probe  # an actor lives while a handle does (Ray's lifetime): keep its worker up
    worker = f"127.0.0.1:{ember.get(probe.core_port.remote(), timeout=60)}"
    return {
        "gcs": (c.gcs_address, "/ember.NodeInfoGcsService/GetAllNodeInfo", gcs_pb2.GetAllNodeInfoRequest()),
        "raylet": (node.raylet_address, "/ember.Raylet/GetNodeStats", raylet_pb2.GetNodeStatsRequest()),
        "objmgr": (node.objmgr_address, "/ember.ObjectManager/GetStoreStats",
                   objmgr_pb2.GetStoreStatsRequest()),
        "core worker": (worker, "/ember.CoreWorker/CancelTask",
                        core_worker_pb2.CancelTaskRequest(task_id=b"\0" * 16)),
    }


def _call(channel: grpc.Channel, method: str, request, metadata=None):
    call = channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                               response_deserializer=lambda b: b)
    return call(request, timeout=30, metadata=metadata)


def test_every_service_rejects_a_missing_or_wrong_token_and_accepts_the_right_one(cluster):
    for name, (address, method, request) in _targets(cluster).items():
        with grpc.insecure_channel(address) as raw:  # no kit: no token
            for md, what in ((None, "no token"), (WRONG, "wrong token")):
                with pytest.raises(grpc.RpcError) as err:
                    _call(raw, method, request, md)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, (name, what)
                assert what in err.value.details(), (name, err.value.details())
                assert auth.load().token not in err.value.details()
            health = health_pb2_grpc.HealthStub(raw).Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert health.status == health_pb2.HealthCheckResponse.SERVING, name  # stays open
        with rpc.sync_channel(address) as ch:  # the kit's channel sends the token
            _call(ch, method, request)


def test_object_transfer_stream_needs_the_token(cluster):
    address = cluster.nodes[0].record.objmgr_address
    with grpc.insecure_channel(address) as raw:
        stream = raw.unary_stream("/ember.ObjectTransfer/ReadRange",
                                  request_serializer=objmgr_pb2.ReadRangeRequest.SerializeToString)
        with pytest.raises(grpc.RpcError) as err:
            list(stream(objmgr_pb2.ReadRangeRequest(object_id=b"\1" * 28, length=1), timeout=30))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_rejections_are_logged_with_the_peer_never_the_token(cluster):
    address, method, request = _targets(cluster)["gcs"]
    with grpc.insecure_channel(address) as raw, pytest.raises(grpc.RpcError):
        _call(raw, method, request, WRONG)
    with open(os.path.join(cluster.session_dir, "logs", "gcs.err")) as f:
        log = f.read()
    assert "rejected /ember.NodeInfoGcsService/GetAllNodeInfo from ipv4:127.0.0.1:" in log
    assert auth.load().token not in log and "not-the-token" not in log


def _driver(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_AUTH")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, errors="replace")


def test_a_driver_with_the_wrong_token_gets_authentication_error(cluster):
    code = f"""
        import ember
        from ember.exceptions import AuthenticationError, RayError
        try:
            ember.init(address={cluster.gcs_address!r})
        except AuthenticationError as e:
            assert isinstance(e, RayError)
            print("REFUSED:", e)
        else:
            print("CONNECTED")
            ember.shutdown()
    """
    r = _driver(code, {"EMBER_AUTH_TOKEN": "wrong"})
    assert "REFUSED:" in r.stdout, r.stdout + r.stderr
    assert "$EMBER_AUTH_TOKEN" in r.stdout and "ember get-auth-token" in r.stdout
    r = _driver(code, {"EMBER_AUTH_TOKEN": auth.load().token or ""})
    assert "CONNECTED" in r.stdout, r.stdout + r.stderr


def test_embedded_init_creates_the_token_file_on_first_use(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code = """
        import ember
        ember.init(num_cpus=1, object_store_memory=64 * 2**20)
        print("SUM", ember.get(ember.remote(lambda x: x + 1).remote(41)))
        ember.shutdown()
    """
    r = _driver(code, {"HOME": str(home)})
    assert "SUM 42" in r.stdout, r.stdout + r.stderr
    path = home / ".ember" / "auth_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) == 64
    first = path.read_text()
    r = _driver(code, {"HOME": str(home)})  # the second run reuses it
    assert "SUM 42" in r.stdout and path.read_text() == first


@pytest.mark.parametrize("setting, expected", [
    ("missing", "cannot read the auth token file EMBER_AUTH_TOKEN_PATH="),
    ("empty", "is empty"),
    ("mode", "EMBER_AUTH_MODE='tokn': must be 'token' or 'disabled'"),
])
def test_unusable_token_configuration_is_one_clear_line(tmp_path, setting, expected):
    env = {"HOME": str(tmp_path)}
    if setting == "missing":
        env["EMBER_AUTH_TOKEN_PATH"] = str(tmp_path / "nope")
    elif setting == "empty":
        (tmp_path / "empty").write_text("\n")
        env["EMBER_AUTH_TOKEN_PATH"] = str(tmp_path / "empty")
    else:
        env["EMBER_AUTH_MODE"] = "tokn"
    r = _driver("from ember._tools.cli import main; raise SystemExit(main(['get-auth-token']))", env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("ember: error:")] == [r.stderr.strip()]
    assert expected in r.stderr, r.stderr
    # a service refuses to start the same way
    r = subprocess.run([sys.executable, "-m", "ember_gcs", "--port", "0", "--session-dir", str(tmp_path)],
                       env={**{k: v for k, v in os.environ.items() if not k.startswith("EMBER_AUTH")}, **env},
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, errors="replace")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert expected in r.stderr, r.stderr


def test_get_auth_token_generate(tmp_path):
    r = _driver("from ember._tools.cli import main; raise SystemExit(main(['get-auth-token']))",
                {"HOME": str(tmp_path)})
    assert r.returncode == 1 and "--generate" in r.stderr
    r = _driver("from ember._tools.cli import main; raise SystemExit(main(['get-auth-token', '--generate']))",
                {"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (tmp_path / ".ember" / "auth_token").read_text().strip()
