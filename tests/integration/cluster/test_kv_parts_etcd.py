"""Values bigger than etcd's request limit (1.5 MiB by default) through a GCS on a real etcd:
a function capturing 3 MiB and a 3 MiB runtime-env working_dir reach the function table and
the package store in 1 MiB parts (ember_common.kv_parts), so both run; one put each would be
refused by etcd."""
from __future__ import annotations

import os

import pytest

import ember
from ember.testing import EtcdProcess, LocalCluster

pytestmark = pytest.mark.etcd
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster():
    with EtcdProcess() as etcd, LocalCluster(gcs_storage=etcd.url) as c:
        c.add_node({"CPU": 1}, is_head=True)
        ember.init(address=c.gcs_address)
        try:
            yield c
        finally:
            ember.shutdown()


def test_a_function_over_etcds_request_limit_runs(cluster):
    captured = os.urandom(3 * MIB)

    @ember.remote
    def digest() -> int:
        return sum(captured[::4096])

    assert ember.get(digest.remote(), timeout=120) == sum(captured[::4096])


def test_a_package_over_etcds_request_limit_arrives_whole(cluster, tmp_path):
    blob = os.urandom(3 * MIB)
    (tmp_path / "data.bin").write_bytes(blob)

    @ember.remote(runtime_env={"working_dir": str(tmp_path)})
    def read() -> bytes:
        with open("data.bin", "rb") as f:
            return f.read()

    assert ember.get(read.remote(), timeout=120) == blob
