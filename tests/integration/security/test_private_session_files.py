"""What a real service writes in its session dir is private: a GCS started by
`node.start_gcs` (umask 077, logs opened 0600) leaves 0600 logs and port file in 0700 dirs."""
from __future__ import annotations

import os
import stat

from ember._private import node as node_mod


def test_started_service_files_are_private(tmp_path, monkeypatch):
    monkeypatch.setattr(node_mod, "EMBER_TMP", str(tmp_path / "root"))
    session = node_mod.new_session_dir()
    gcs = node_mod.start_gcs(session, die_with_parent=True)
    try:
        files = [os.path.join(session, "gcs.port"), os.path.join(session, "logs", "gcs.out"),
                 os.path.join(session, "logs", "gcs.err")]
        modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in files}
        assert modes == {p: 0o600 for p in files}
        assert stat.S_IMODE(os.stat(session).st_mode) == 0o700
    finally:
        node_mod.stop_process(gcs.pid, popen=gcs.popen)
