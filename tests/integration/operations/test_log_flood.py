"""A flood of calls without the token (issue 45 item 6) against a real GCS: every call is
refused, and the GCS's log gets a handful of lines, the later ones counting the calls they
stand for, instead of one line per call."""
from __future__ import annotations

import os
import re
import time

import grpc

from ember.testing import LocalCluster
from ember_common.proto import gcs_pb2

WRONG = (("authorization", "Bearer not-the-token"),)
CALLS = 500


def _read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def test_an_unauthenticated_flood_writes_a_few_log_lines():
    with LocalCluster() as c, grpc.insecure_channel(c.gcs_address) as ch:
        call = ch.unary_unary("/ember.NodeInfoGcsService/GetAllNodeInfo",
                              request_serializer=gcs_pb2.GetAllNodeInfoRequest.SerializeToString,
                              response_deserializer=lambda b: b)
        refused = 0
        for _ in range(CALLS):  # a bounded flood
            try:
                call(gcs_pb2.GetAllNodeInfoRequest(), timeout=10, metadata=WRONG)
            except grpc.RpcError as e:
                refused += e.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused == CALLS
        time.sleep(1.2)  # a second's budget back: the next rejection is logged with the count
        try:
            call(gcs_pb2.GetAllNodeInfoRequest(), timeout=10, metadata=WRONG)
        except grpc.RpcError:
            pass
        path = os.path.join(c.session_dir, "logs", "gcs.err")
        deadline = time.monotonic() + 10
        while "more rejected calls not logged" not in _read(path):
            assert time.monotonic() < deadline, _read(path)[-2000:]
            time.sleep(0.1)
        lines = [ln for ln in _read(path).splitlines() if "rejected /ember." in ln]
        assert len(lines) <= 20, len(lines)  # the burst and about one a second, not 501
        counted = sum(int(m) for m in re.findall(r"\((\d+) more rejected calls not logged\)", "\n".join(lines)))
        assert len(lines) + counted == CALLS + 1
