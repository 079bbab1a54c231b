"""The Docker node provider's commands without a Docker engine (a recording runner stands in for
the docker CLI): the two containers of a node on the compose network with the compose file's
hardening, the token passed by name only, removal, and listing from `docker ps` JSON lines.
tests/e2e/test_autoscaler_docker.py runs it against a real engine."""
from __future__ import annotations

import json

import pytest

from ember.autoscaler._private.providers.base import LaunchError
from ember.autoscaler._private.providers.docker import DockerProvider


class Docker:
    def __init__(self, ps: str = "", fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.ps = ps
        self.fail_on = fail_on

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(argv)
        if self.fail_on and self.fail_on in argv:
            raise LaunchError(f"docker {argv[0]} failed (125): no such image")
        return self.ps if argv[0] == "ps" else "c0ffee\n"


def test_a_node_is_an_objmgr_and_a_raylet_in_its_namespaces(monkeypatch):
    monkeypatch.setenv("EMBER_AUTH_TOKEN", "secret-token-value")
    d = Docker()
    p = DockerProvider({"type": "docker", "project": "proj", "image_tag": "t1"}, "demo", "unused", run=d)
    p.create_node("small", {"CPU": 2.0, "accel": 1.0}, {"shm_size": "256m"})
    objmgr, raylet = d.calls
    assert objmgr[:2] == ["run", "-d"] and "ember-objmgr:t1" in objmgr
    name = objmgr[objmgr.index("--name") + 1]
    assert name.startswith("demo-small-") and name.endswith("-objmgr")
    assert objmgr[objmgr.index("--network") + 1] == "proj_default"
    assert objmgr[objmgr.index("--shm-size") + 1] == "256m"
    assert raylet[raylet.index("--network") + 1] == f"container:{name}"
    assert raylet[raylet.index("--ipc") + 1] == f"container:{name}"
    for argv in (objmgr, raylet):
        assert "--read-only" in argv and argv[argv.index("--cap-drop") + 1] == "ALL"
        assert argv[argv.index("-e") + 1] == "EMBER_AUTH_TOKEN"  # by name only
        assert not any("secret-token-value" in a for a in argv)
        assert "EMBER_GCS_ADDRESS=gcs:6379" in argv
    settings = raylet[raylet.index("ember-raylet:t1") + 2:]
    assert "EMBER_NUM_CPUS=2" in settings and 'EMBER_RESOURCES={"accel": 1.0}' in settings
    node_id = next(a.split("=", 1)[1] for a in settings if a.startswith("EMBER_NODE_ID="))
    assert f"ember.autoscaler.node-id={node_id}" in raylet and f"EMBER_NODE_ID={node_id}" in objmgr


def test_a_raylet_that_cannot_start_takes_its_objmgr_with_it():
    d = Docker(fail_on="ember-raylet:latest")
    p = DockerProvider({"type": "docker"}, "demo", "unused", run=d)
    with pytest.raises(LaunchError, match="no such image"):
        p.create_node("small", {"CPU": 1.0}, {})
    assert d.calls[-1][:2] == ["rm", "-f"] and d.calls[-1][2].endswith("-objmgr")


def test_listing_and_terminating():
    def line(name: str, node_id: str, state: str) -> str:
        return json.dumps({"Names": name, "State": state, "Labels": (
            f"ember.autoscaler.cluster=demo,ember.autoscaler.node-type=small,ember.autoscaler.node-id={node_id}")})

    ps = "\n".join([line("demo-small-a-objmgr", "na", "running"), line("demo-small-a-raylet", "na", "running"),
                    line("demo-small-b-objmgr", "nb", "running"),  # raylet not created yet: launching
                    line("demo-small-c-objmgr", "nc", "running"), line("demo-small-c-raylet", "nc", "exited")])
    d = Docker(ps=ps)
    p = DockerProvider({"type": "docker"}, "demo", "unused", run=d)
    nodes = p.non_terminated_nodes()
    assert [(n.provider_id, n.node_type, n.node_id) for n in nodes] == [
        ("demo-small-a", "small", "na"), ("demo-small-b", "small", "nb")]
    assert d.calls[0][:3] == ["ps", "-a", "--filter"] and d.calls[0][3] == "label=ember.autoscaler.cluster=demo"
    assert d.calls[-1] == ["rm", "-f", "demo-small-c-raylet", "demo-small-c-objmgr"]  # its raylet exited
    p.terminate_node("demo-small-a")
    assert d.calls[-2:] == [["stop", "-t", "15", "demo-small-a-raylet"],
                            ["rm", "-f", "demo-small-a-raylet", "demo-small-a-objmgr"]]
    with pytest.raises(ValueError, match="provider.region: unknown key"):
        DockerProvider({"type": "docker", "region": "x"}, "demo", "unused", run=d)
