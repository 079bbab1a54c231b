"""Mutual TLS on every gRPC server and channel the kit builds (Ray's TLS variables, EMBER_ names).

    EMBER_USE_TLS=1            turn it on (default off)
    EMBER_TLS_SERVER_CERT      this node's certificate (PEM), served and presented as client cert
    EMBER_TLS_SERVER_KEY       its private key (PEM)
    EMBER_TLS_CA_CERT          the CA that signs every node's certificate (PEM)

With TLS on, servers require a client certificate signed by the CA (a peer with a certificate
from another CA fails the handshake) and channels verify the server's certificate against the
CA; the token check (auth.py) still runs inside. A missing or unreadable file is one clear
error. `generate(dir, hostnames)` (the `ember tls generate DIR` command) writes a CA and one node
certificate whose subject alternative names cover 127.0.0.1, localhost and the given names.
Health checks (docker/healthcheck.py) read the same variables.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

import grpc

from . import envvars

USE_ENV = "EMBER_USE_TLS"
CERT_ENV = "EMBER_TLS_SERVER_CERT"
KEY_ENV = "EMBER_TLS_SERVER_KEY"
CA_ENV = "EMBER_TLS_CA_CERT"


class TLSConfigError(ValueError):
    """TLS is on but its files are missing or unreadable (one line naming the variable)."""


@dataclass(frozen=True)
class TLSFiles:
    """The PEM bytes of this node's certificate, key and CA."""

    cert: bytes
    key: bytes
    ca: bytes


_cached: TLSFiles | None = None


def enabled() -> bool:
    """EMBER_USE_TLS is 1/true/yes."""
    return envvars.get(USE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _read(var: str) -> bytes:
    path = envvars.get(var)
    if not path:
        raise TLSConfigError(f"{USE_ENV}=1 but {var} is not set; set it to a PEM file "
                             "(`ember tls generate DIR` makes them)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TLSConfigError(f"cannot read {var}={path}: {e.strerror or e}") from None
    if b"-----BEGIN" not in data:
        raise TLSConfigError(f"{var}={path} is not a PEM file")
    return data


def files() -> TLSFiles:
    """This process's certificate, key and CA (read once). Raises TLSConfigError."""
    global _cached
    if _cached is None:
        _cached = TLSFiles(_read(CERT_ENV), _read(KEY_ENV), _read(CA_ENV))
    return _cached


def reset() -> None:
    """Forgets the cached files (after the environment changed)."""
    global _cached
    _cached = None


def server_credentials() -> grpc.ServerCredentials:
    """Mutual TLS for a server: its certificate, and client certificates required from the CA."""
    f = files()
    return grpc.ssl_server_credentials([(f.key, f.cert)], root_certificates=f.ca,
                                       require_client_auth=True)


def channel_credentials() -> grpc.ChannelCredentials:
    """Mutual TLS for a channel: the CA to verify the server, this node's certificate as client."""
    f = files()
    return grpc.ssl_channel_credentials(root_certificates=f.ca, private_key=f.key,
                                        certificate_chain=f.cert)


def generate(directory: str, hostnames: list[str] | None = None, days: int = 365) -> dict[str, str]:
    """Writes ca.crt/ca.key and node.crt/node.key (keys 0600) into directory; the node
    certificate is signed by the CA, valid for server and client use, with SANs 127.0.0.1,
    localhost and `hostnames` (names or IP addresses). Returns {name: path}."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise TLSConfigError("`ember tls generate` needs the cryptography package: "
                             "pip install 'ember[tls]'") from None

    now = datetime.datetime.now(datetime.timezone.utc)
    valid_from, valid_to = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Ember"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("Ember CA")).issuer_name(name("Ember CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(valid_from).not_valid_after(valid_to)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                    x509.DNSName("localhost")]
    for host in hostnames or []:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    node_key = ec.generate_private_key(ec.SECP256R1())
    node_cert = (x509.CertificateBuilder().subject_name(name("ember-node")).issuer_name(ca_cert.subject)
                 .public_key(node_key.public_key()).serial_number(x509.random_serial_number())
                 .not_valid_before(valid_from).not_valid_after(valid_to)
                 .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                 .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                       ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                 .sign(ca_key, hashes.SHA256()))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    out: dict[str, str] = {}

    def write(fname: str, data: bytes, private: bool) -> None:
        path = os.path.join(directory, fname)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        out[fname] = path

    pem = serialization.Encoding.PEM
    for fname, key in (("ca.key", ca_key), ("node.key", node_key)):
        write(fname, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()), private=True)
    write("ca.crt", ca_cert.public_bytes(pem), private=False)
    write("node.crt", node_cert.public_bytes(pem), private=False)
    return out
