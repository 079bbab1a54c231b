"""BundleTable: prepare (all or none), commit into named resources, cancel; idempotent."""
from __future__ import annotations

import pytest

from ember_common.rpc import Infeasible, InvalidArgument
from ember_raylet.bundles import BundleTable, translate
from ember_raylet.resources import NodeResources

PG = bytes.fromhex("ab" * 18)
G = PG.hex()


def test_prepare_commit_cancel_cycle():
    node = NodeResources({"CPU": 4, "GPU": 2})
    t = BundleTable(node)
    assert t.prepare(PG, [(0, {"CPU": 2}), (1, {"CPU": 1, "GPU": 1})])
    assert node.available["CPU"] == 1 and node.gpus.count(1.0) == 1
    assert t.prepare(PG, [(0, {"CPU": 2})])  # idempotent
    assert node.available["CPU"] == 1
    t.commit(PG, [0, 1])
    t.commit(PG, [0])  # idempotent
    assert node.total[f"CPU_group_0_{G}"] == 2 and node.total[f"CPU_group_{G}"] == 3
    assert node.total[f"GPU_group_1_{G}"] == 1 and node.total[f"bundle_group_{G}"] == 2000
    assert t.gpu_ids(PG, 1) == [i for i, free in enumerate(node.gpus) if free < 1]
    req = translate({"CPU": 1}, PG, 0)
    assert req == {f"CPU_group_0_{G}": 1, f"bundle_group_0_{G}": 0.001}
    assert node.fits_now(req) and not node.fits_now(translate({"CPU": 3}, PG, -1) | {"x": 1})
    assert len(t.cancel(PG, [])) == 2
    assert t.cancel(PG, []) == []
    assert node.available == {"CPU": 4, "GPU": 2} and node.total == {"CPU": 4, "GPU": 2}
    assert node.gpus == [1.0, 1.0]


def test_prepare_is_all_or_nothing():
    node = NodeResources({"CPU": 2})
    t = BundleTable(node)
    assert not t.prepare(PG, [(0, {"CPU": 1}), (1, {"CPU": 2})])
    assert node.available["CPU"] == 2 and list(t.reservations()) == []


def test_commit_of_an_unprepared_bundle_and_conflicting_prepare_fail():
    t = BundleTable(NodeResources({"CPU": 2}))
    with pytest.raises(Infeasible, match="not prepared"):
        t.commit(PG, [0])
    assert t.prepare(PG, [(0, {"CPU": 1})])
    with pytest.raises(InvalidArgument, match="already reserved"):
        t.prepare(PG, [(0, {"CPU": 2})])
    with pytest.raises(InvalidArgument, match="placement_group_id is required"):
        t.prepare(b"", [(0, {"CPU": 1})])


def test_partial_cancel_keeps_the_other_bundles():
    node = NodeResources({"CPU": 4})
    t = BundleTable(node)
    t.prepare(PG, [(0, {"CPU": 1}), (1, {"CPU": 1})])
    t.commit(PG, [0, 1])
    t.cancel(PG, [1])
    assert node.total[f"CPU_group_{G}"] == 1 and f"CPU_group_1_{G}" not in node.total
    assert node.available["CPU"] == 3


def test_slices_cut_between_groups_by_bundle_count():
    from ember_raylet.bundles import slices

    sizes = [400, 400, 400, 3000, 1, 1]
    runs = [list(r) for r in slices(sizes, lambda n: n, budget=1000)]
    assert runs == [[400, 400, 400], [3000], [1, 1]]  # a group is never cut
    assert [list(r) for r in slices([], lambda n: n)] == []
