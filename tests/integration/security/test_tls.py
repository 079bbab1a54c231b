"""Mutual TLS with real processes: certificates from `ember tls generate`, a LocalCluster whose
services and driver all run with EMBER_USE_TLS=1 runs tasks; a client holding a certificate from
another CA, or speaking plaintext, is refused at the handshake; a TLS setting naming a missing
file stops a service with one clear line."""
from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest

import ember
from ember._tools.cli import main as cli_main
from ember.testing import LocalCluster
from ember_common import tls
from ember_common.proto import gcs_pb2


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    good, other = tmp_path_factory.mktemp("tls"), tmp_path_factory.mktemp("other-ca")
    assert cli_main(["tls", "generate", str(good), "--hostname", "ember-head"]) == 0
    assert cli_main(["tls", "generate", str(other)]) == 0
    return good, other


@pytest.fixture(scope="module")
def tls_cluster(certs):
    good, _ = certs
    mp = pytest.MonkeyPatch()
    mp.setenv(tls.USE_ENV, "1")
    mp.setenv(tls.CERT_ENV, str(good / "node.crt"))
    mp.setenv(tls.KEY_ENV, str(good / "node.key"))
    mp.setenv(tls.CA_ENV, str(good / "ca.crt"))
    tls.reset()
    try:
        with LocalCluster() as c:
            c.add_node({"CPU": 2}, is_head=True)
            ember.init(address=c.gcs_address)
            try:
                yield c
            finally:
                ember.shutdown()
    finally:
        mp.undo()
        tls.reset()


def test_generated_files(certs):
    good, _ = certs
    assert oct(os.stat(good / "node.key").st_mode & 0o777) == "0o600"
    assert oct(os.stat(good / "ca.key").st_mode & 0o777) == "0o600"
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((good / "node.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "ember-head"} <= set(sans.get_values_for_type(x509.DNSName))
    assert "127.0.0.1" in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def test_a_tls_cluster_runs_tasks_and_actors(tls_cluster):
    @ember.remote
    def square(x):
        return x * x

    @ember.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    assert ember.get([square.remote(i) for i in range(20)], timeout=120) == [i * i for i in range(20)]
    c = Counter.remote()
    assert ember.get([c.add.remote(1) for _ in range(5)], timeout=120)[-1] == 5
    assert ember.get(ember.put(b"x" * 2_000_000), timeout=60) == b"x" * 2_000_000


def _get_nodes(channel: grpc.Channel) -> None:
    call = channel.unary_unary("/ember.NodeInfoGcsService/GetAllNodeInfo",
                               request_serializer=gcs_pb2.GetAllNodeInfoRequest.SerializeToString,
                               response_deserializer=gcs_pb2.GetAllNodeInfoReply.FromString)
    call(gcs_pb2.GetAllNodeInfoRequest(), timeout=10)


def test_a_client_with_a_certificate_from_another_ca_is_refused(tls_cluster, certs):
    good, other = certs
    creds = grpc.ssl_channel_credentials(root_certificates=(good / "ca.crt").read_bytes(),
                                         private_key=(other / "node.key").read_bytes(),
                                         certificate_chain=(other / "node.crt").read_bytes())
    with grpc.secure_channel(tls_cluster.gcs_address, creds) as ch, pytest.raises(grpc.RpcError) as err:
        _get_nodes(ch)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(tls_cluster.gcs_address) as ch, pytest.raises(grpc.RpcError) as err:
        _get_nodes(ch)  # plaintext
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    from ember_common import rpc

    with rpc.sync_channel(tls_cluster.gcs_address) as ch:  # the right CA, certificate and token
        _get_nodes(ch)


def test_tls_on_with_a_missing_file_is_one_clear_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_TLS")}
    env.update({tls.USE_ENV: "1", tls.CERT_ENV: str(tmp_path / "none.crt"),
                tls.KEY_ENV: str(tmp_path / "none.key"), tls.CA_ENV: str(tmp_path / "none.crt")})
    r = subprocess.run([sys.executable, "-m", "ember_gcs", "--port", "0", "--session-dir", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                       errors="replace")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error: cannot read {tls.CERT_ENV}={tmp_path / 'none.crt'}" in r.stderr, r.stderr
