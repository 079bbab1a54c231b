"""Fixtures shared by the integration modules."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def serve_url():
    """An embedded cluster (2 CPUs) with Serve's HTTP proxy on a free loopback port; yields the
    proxy's base URL and stops Serve and the cluster when the module ends."""
    import ember
    from ember import serve
    from ember.serve import api as serve_api

    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    host, port = serve_api.proxy_address()
    yield f"http://{host}:{port}"
    serve.shutdown()
    ember.shutdown()


@pytest.fixture(scope="module")
def data_cluster():
    """An embedded cluster (4 CPUs, a 256 MiB store) for Data modules, progress bars off."""
    import ember

    ember.init(num_cpus=4, object_store_memory=256 * 2**20)
    ember.data.DataContext.get_current().enable_progress_bars = False
    yield ember
    ember.shutdown()
