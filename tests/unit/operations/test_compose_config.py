"""docker-compose.yml read as data (no Docker here): every container's output log is bounded,
and the dashboard reads the trace sink's volume read-only."""
from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _services() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def test_every_containers_log_rotates():
    for name, svc in _services().items():
        logging = svc.get("logging") or {}
        opts = logging.get("options") or {}
        assert logging.get("driver") == "json-file" and opts.get("max-size") and int(opts.get("max-file", 0)) >= 1, name


def test_the_dashboard_reads_the_trace_sinks_volume():
    dash, sink = _services()["dashboard"], _services()["otlp"]
    assert "traces:/var/lib/ember/traces:ro" in dash["volumes"]
    assert "traces:/var/lib/ember/traces" in sink["volumes"]
    assert "EMBER_TRACE_DIR=/var/lib/ember/traces" in dash["command"]
