"""ember_common: the kit every Ember process shares. It imports neither `ember` (the client) nor
any service; services import only this (tests/unit/gates/test_import_boundaries.py checks both).

    proto          generated gRPC stubs (scripts/gen_protos.py; a test fails on drift)
    rpc            channels, the server builder, the one error <-> status-code table
    backoff        the one retry policy (exponential, jitter, cap, deadline)
    gcs_client     GcsClient (asyncio) / SyncGcsClient: one method per GCS RPC
    raylet_client  RayletClient: one method per raylet RPC; leases follow spillback
    resources      the one parse/validate of resource amounts and dicts
    envvars        the settings registry: every EMBER_* variable (envvars_table); the one
                   reader of the environment's EMBER_* names (docs/settings.md)
    service        what every service's main() shares (set-up, graceful stop)
    tracing        OpenTelemetry: one package, its face in tracing/__init__.py (tracing/README.md)
    metrics, config, ids

Imports inside the kit form no circle: metrics and tracing import nothing of the kit but
their own modules; rpc imports them (server interceptors); the clients import rpc and backoff;
service imports them all.
"""
