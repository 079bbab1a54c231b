"""`ember trace show TRACE_ID`: one trace (from the ember_file exporter) as a tree of spans."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ember_common import envvars


def add_parser(sub: Any) -> None:
    """`trace show`."""
    tr = sub.add_parser("trace", help="show a trace")
    tr.add_argument("action", choices=["show"])
    tr.add_argument("trace_id")
    tr.add_argument("--dir", default=envvars.get("EMBER_TRACE_DIR"),
                    help="span directory of the ember_file exporter (default $EMBER_TRACE_DIR)")
    tr.set_defaults(func=cmd_trace)


def cmd_trace(ns: argparse.Namespace) -> int:
    """Prints the trace as an indented tree; 1 when there is no such trace."""
    from ember_common import tracing

    if not ns.dir or not os.path.isdir(ns.dir):
        print("ember: error: no span directory: run with OTEL_TRACES_EXPORTER=ember_file and "
              "EMBER_TRACE_DIR=<dir>, then pass --dir <dir>", file=sys.stderr)
        return 1
    trace_id = ns.trace_id.lower().replace("-", "")
    spans = tracing.read_trace(ns.dir, trace_id)
    if not spans:
        print(f"ember: error: no spans of trace {trace_id} in {ns.dir}", file=sys.stderr)
        return 1
    services = sorted({s["service"] for s in spans})
    print(f"trace {trace_id}: {len(spans)} spans from {', '.join(services)}")
    for line in tracing.render_tree(spans):
        print(line)
    return 0
