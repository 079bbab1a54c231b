"""Train across nodes of a LocalCluster (real raylets and object managers on loopback): one
rank per node (a "slot" resource each), one gloo group; when the node of the rank that is not on
the driver's node dies (its raylet and object manager SIGKILLed, its workers with them), the
group restarts from the latest checkpoint on the nodes that remain and finishes."""
from __future__ import annotations

import os
import pathlib
import threading

import pytest

torch = pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")

import ember  # noqa: E402
from ember import train  # noqa: E402
from ember.testing import LocalCluster, wait_for  # noqa: E402
from ember.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    c = LocalCluster()
    try:
        for i in range(3):
            c.add_node({"CPU": 1, "slot": 1}, is_head=i == 0, num_prestart_workers=1)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


def loop(config):
    import time

    ctx = train.get_context()
    model = train.torch.prepare_model(torch.nn.Linear(2, 1))
    start = 0
    if train.get_checkpoint() is not None:
        start = train.get_checkpoint().to_dict()["epoch"] + 1
    for epoch in range(start, 5):
        model(torch.ones(4, 2)).sum().backward()
        train.report({"epoch": epoch, "start": start, "node": ctx.get_metadata()["node_id"]},
                     checkpoint=train.Checkpoint.from_dict({"epoch": epoch}))
        node = ctx.get_metadata()["node_id"]
        if epoch == 2 and start == 0 and node != config["head"]:
            with open(config["mark"], "w") as f:
                f.write(node)
            time.sleep(60)  # its node is killed meanwhile


def test_node_loss_restarts_the_group_on_the_remaining_nodes(cluster, tmp_path):
    mark = str(tmp_path / "node_of_remote_rank")
    killed: list[str] = []

    def killer():
        node_id = wait_for(lambda: os.path.exists(mark) and pathlib.Path(mark).read_text(), timeout_s=120,
                           what="the remote rank at epoch 2")
        node = next(n for n in cluster.nodes if n.node_id == node_id)
        killed.append(node_id)
        cluster.kill_raylet(node)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    result = TorchTrainer(loop, train_loop_config={"mark": mark, "head": cluster.nodes[0].node_id}, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1, "slot": 1}),
                          run_config=RunConfig(storage_path=str(tmp_path / "r"),
                                               failure_config=FailureConfig(max_failures=1))).fit()
    t.join(timeout=5)
    assert killed, "the remote rank's node was never killed"
    assert result.metrics["epoch"] == 4 and result.metrics["start"] == 3
    rows = result.metrics_dataframe
    assert list(rows["epoch"]) == [0, 1, 2, 3, 4]
    assert killed[0] not in set(rows["node"][3:])  # rank 0 of the new group is not on the dead node
