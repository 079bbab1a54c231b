#!/opt/ember/bin/python
"""Container healthcheck: `ember-healthcheck [HOST:PORT [SERVICE]]`.

With no arguments it checks the service this container runs (written by ember-container): the
port comes from the service's port file, which the service writes once it is serving. gRPC
services are asked through grpc.health.v1 (SERVING for their own service name); HTTP ones
(serve-proxy, dashboard, otlp) must answer an HTTP request. Exit 0 = healthy, 1 = not, with one line why.
Health checks need no auth token; with EMBER_USE_TLS=1 they use the node's TLS files.
Imports only grpc and the settings registry (ember_common.envvars), so it costs little every few
seconds.
"""
from __future__ import annotations

import sys

SERVICES = {"gcs": "ember.Gcs", "raylet": "ember.Raylet", "objmgr": "ember.ObjectManager"}


def check_grpc(address: str, service: str) -> str | None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ember_common import envvars

    if envvars.get("EMBER_USE_TLS", "").strip().lower() in ("1", "true", "yes", "on"):
        def pem(var: str) -> bytes:
            with open(envvars.require(var), "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(pem("EMBER_TLS_CA_CERT"), pem("EMBER_TLS_SERVER_KEY"),
                                             pem("EMBER_TLS_SERVER_CERT"))
        channel = grpc.secure_channel(address, creds)
    else:
        channel = grpc.insecure_channel(address)
    with channel as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=3)
        except grpc.RpcError as e:
            return f"{address} {service or '(server)'}: {e.code().name} {e.details()}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address} {service}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def check_http(address: str, path: str = "/-/healthz") -> str | None:
    import http.client

    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=3)
    try:
        conn.request("GET", path)
        conn.getresponse().read()  # any HTTP answer means the server is up
    except OSError as e:
        return f"{address}: {e}"
    finally:
        conn.close()
    return None


def main(argv: list[str]) -> int:
    from ember_common import envvars

    if argv:
        problem = check_grpc(argv[0], argv[1] if len(argv) > 1 else "")
    else:
        try:
            with open("/tmp/ember-service.role") as f:
                role = f.read().strip()
        except OSError:
            print("unhealthy: the service has not started", file=sys.stderr)
            return 1
        if role == "serve-proxy":
            problem = check_http(f"127.0.0.1:{envvars.get('EMBER_HTTP_PORT') or 8000}")
        else:
            try:
                with open("/tmp/ember-service.port") as f:
                    port = int(f.read())
            except (OSError, ValueError):
                print(f"unhealthy: {role} is not serving yet (no port file)", file=sys.stderr)
                return 1
            problem = (check_http(f"127.0.0.1:{port}") if role == "otlp"
                       else check_http(f"127.0.0.1:{port}", "/api/healthz") if role == "dashboard"
                       else check_grpc(f"127.0.0.1:{port}", SERVICES.get(role, "")))
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
