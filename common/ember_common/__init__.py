"""ember_common: the kit every Ember process shares. It imports neither `ember` (the client) nor
any service; services import only this (tests/unit/test_import_boundaries.py checks both).

    proto          generated gRPC stubs (scripts/gen_protos.py; a test fails on drift)
    rpc            channels, the server builder, the one error <-> status-code table
    backoff        the one retry policy (exponential, jitter, cap, deadline)
    gcs_client     GcsClient (asyncio) / SyncGcsClient: one method per GCS RPC
    raylet_client  RayletClient: one method per raylet RPC; leases follow spillback
    resources      the one parse/validate of resource amounts and dicts
    service        what every service's main() shares (flags, set-up, graceful stop)
    tracing (+ tracing_spans, tracing_light, tracing_export, tracing_files, tracing_submit,
    tracing_exec), otlp_encoding (+ otlp_templates), metrics, config, ids

Imports inside the kit form no circle: metrics and tracing import nothing of the kit but
their own modules; rpc imports them (server interceptors); the clients import rpc and backoff;
service imports them all.
"""
