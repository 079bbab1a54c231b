"""NodeResources: pure bookkeeping of scalar resources and fractional GPU instances."""
from __future__ import annotations

import pytest

from ember_raylet.resources import Allocation, NodeResources, validate_request


def test_totals_drop_zero_entries_and_start_fully_available():
    node = NodeResources({"CPU": 4, "GPU": 2, "memory": 1000, "custom": 0})
    assert node.total == {"CPU": 4.0, "GPU": 2.0, "memory": 1000.0}
    assert node.available == node.total
    assert node.available is not node.total
    assert node.gpus == [1.0, 1.0]


def test_fits_total_and_fits_now_for_cpus():
    node = NodeResources({"CPU": 4})
    assert node.fits_total({"CPU": 4})
    assert not node.fits_total({"CPU": 5})
    assert node.fits_now({"CPU": 4})
    a = node.allocate({"CPU": 3})
    assert a is not None and a.resources == {"CPU": 3}
    assert node.available["CPU"] == pytest.approx(1.0)
    assert node.fits_now({"CPU": 1})
    assert not node.fits_now({"CPU": 2})
    # fits_total ignores what is currently allocated.
    assert node.fits_total({"CPU": 4})


def test_allocate_returns_none_and_changes_nothing_when_it_does_not_fit():
    node = NodeResources({"CPU": 2, "GPU": 1})
    assert node.allocate({"CPU": 3}) is None
    assert node.allocate({"CPU": 1, "GPU": 2}) is None
    assert node.available == {"CPU": 2.0, "GPU": 1.0}
    assert node.gpus == [1.0]


def test_release_restores_availability():
    node = NodeResources({"CPU": 4, "GPU": 1, "memory": 100})
    a = node.allocate({"CPU": 2, "GPU": 1, "memory": 60})
    assert a is not None
    assert node.available == pytest.approx({"CPU": 2.0, "GPU": 0.0, "memory": 40.0})
    assert node.gpus == [0.0]
    node.release(a)
    assert node.available == pytest.approx({"CPU": 4.0, "GPU": 1.0, "memory": 100.0})
    assert node.gpus == [1.0]


def test_release_never_exceeds_total():
    node = NodeResources({"CPU": 2})
    node.release(Allocation({"CPU": 5}))
    assert node.available["CPU"] == pytest.approx(2.0)


def test_zero_request_always_fits_and_takes_nothing():
    node = NodeResources({"CPU": 1})
    a = node.allocate({"CPU": 1})
    assert a is not None
    assert node.fits_now({})
    assert node.fits_now({"CPU": 0, "GPU": 0})
    b = node.allocate({"CPU": 0})
    assert b is not None and b.gpu_ids == []
    assert node.available["CPU"] == pytest.approx(0.0)


def test_two_half_gpu_requests_share_one_gpu():
    node = NodeResources({"CPU": 8, "GPU": 2})
    a = node.allocate({"GPU": 0.5})
    b = node.allocate({"GPU": 0.5})
    assert a is not None and b is not None
    assert a.gpu_ids == b.gpu_ids == [0]
    assert a.gpu_shares == b.gpu_shares == [0.5]
    assert node.gpus == pytest.approx([0.0, 1.0])
    assert node.available["GPU"] == pytest.approx(1.0)


def test_half_and_whole_gpu_need_two_gpus():
    two = NodeResources({"GPU": 2})
    half = two.allocate({"GPU": 0.5})
    whole = two.allocate({"GPU": 1})
    assert half is not None and whole is not None
    assert half.gpu_ids != whole.gpu_ids
    assert sorted(half.gpu_ids + whole.gpu_ids) == [0, 1]
    assert whole.gpu_shares == [1.0]

    one = NodeResources({"GPU": 1})
    assert one.allocate({"GPU": 0.5}) is not None
    # 0.5 of GPU 0 is still free, but a whole GPU needs an entirely free one.
    assert not one.fits_now({"GPU": 1})
    assert one.allocate({"GPU": 1.0}) is None
    assert one.fits_total({"GPU": 1})


def test_whole_gpu_requests_need_entirely_free_gpus():
    node = NodeResources({"GPU": 3})
    assert node.allocate({"GPU": 0.25}) is not None  # GPU 0 partly used
    two = node.allocate({"GPU": 2})
    assert two is not None
    assert two.gpu_ids == [1, 2]
    assert two.gpu_shares == [1.0, 1.0]
    assert node.gpus == pytest.approx([0.75, 0.0, 0.0])
    # 0.75 free on GPU 0 is not a whole GPU.
    assert node.allocate({"GPU": 1}) is None
    node.release(two)
    assert node.gpus == pytest.approx([0.75, 1.0, 1.0])
    assert node.allocate({"GPU": 3}) is None
    assert node.allocate({"GPU": 2}).gpu_ids == [1, 2]


def test_fractional_packing_prefers_the_fullest_gpu():
    node = NodeResources({"GPU": 3})
    a = node.allocate({"GPU": 0.25})
    assert a.gpu_ids == [0]
    b = node.allocate({"GPU": 0.5})  # GPU 0 (0.75 free) is fuller than GPU 1/2 (1.0 free)
    assert b.gpu_ids == [0]
    c = node.allocate({"GPU": 0.5})  # GPU 0 has only 0.25 left
    assert c.gpu_ids == [1]
    d = node.allocate({"GPU": 0.25})  # GPU 0 (0.25 free) is fuller than GPU 1 (0.5 free)
    assert d.gpu_ids == [0]
    e = node.allocate({"GPU": 0.5})  # only GPU 1 (0.5) and GPU 2 (1.0) have room: pick GPU 1
    assert e.gpu_ids == [1]
    assert node.gpus == pytest.approx([0.0, 0.0, 1.0])


def test_fractional_release_frees_the_share_on_the_right_gpu():
    node = NodeResources({"GPU": 2})
    a = node.allocate({"GPU": 0.5})
    b = node.allocate({"GPU": 1})
    assert (a.gpu_ids, b.gpu_ids) == ([0], [1])
    node.release(a)
    assert node.gpus == pytest.approx([1.0, 0.0])
    assert node.fits_now({"GPU": 1})
    node.release(b)
    assert node.gpus == pytest.approx([1.0, 1.0])
    assert node.available["GPU"] == pytest.approx(2.0)


def test_many_small_fractions_release_back_to_a_whole_gpu():
    node = NodeResources({"GPU": 1})
    allocs = [node.allocate({"GPU": 0.1}) for _ in range(10)]
    assert all(a is not None and a.gpu_ids == [0] for a in allocs)
    assert node.allocate({"GPU": 0.1}) is None
    for a in allocs:
        node.release(a)
    assert node.fits_now({"GPU": 1})
    assert node.allocate({"GPU": 1}).gpu_ids == [0]


def test_gpu_request_on_node_without_gpus():
    node = NodeResources({"CPU": 4})
    assert node.gpus == []
    assert not node.fits_total({"GPU": 0.5})
    assert not node.fits_now({"GPU": 0.5})
    assert not node.fits_now({"GPU": 1})
    assert node.allocate({"CPU": 1, "GPU": 0.5}) is None
    assert node.available["CPU"] == pytest.approx(4.0)


def test_custom_resources():
    node = NodeResources({"CPU": 4, "accel": 2})
    assert node.fits_total({"accel": 2})
    assert not node.fits_total({"accel": 3})
    assert not node.fits_total({"other": 1})
    a = node.allocate({"CPU": 1, "accel": 1.5})
    assert a is not None
    assert node.available["accel"] == pytest.approx(0.5)
    assert not node.fits_now({"accel": 1})
    assert node.fits_now({"accel": 0.5})
    assert node.allocate({"other": 1}) is None
    node.release(a)
    assert node.available["accel"] == pytest.approx(2.0)


def test_memory_is_a_scalar_resource():
    node = NodeResources({"CPU": 4, "memory": 2 * 1024**3})
    a = node.allocate({"CPU": 1, "memory": 1.5 * 1024**3})
    assert a is not None
    assert not node.fits_now({"CPU": 1, "memory": 1024**3})
    assert node.fits_now({"CPU": 1, "memory": 0.5 * 1024**3})
    assert not node.fits_total({"memory": 3 * 1024**3})
    node.release(a)
    assert node.fits_now({"memory": 2 * 1024**3})


def test_lend_and_reclaim():
    node = NodeResources({"CPU": 2})
    blocked = node.allocate({"CPU": 2})
    assert blocked is not None
    assert not node.fits_now({"CPU": 1})
    node.lend({"CPU": 2})  # blocked in ember.get: its CPUs go to others
    assert node.fits_now({"CPU": 2})
    other = node.allocate({"CPU": 1})
    assert other is not None
    assert not node.can_reclaim({"CPU": 2})  # only 1 is free: a resuming worker waits
    assert node.can_reclaim({"CPU": 1})
    node.reclaim({"CPU": 2})  # its lease ends while blocked: below zero until released
    assert node.available["CPU"] == pytest.approx(-1.0)
    assert not node.fits_now({"CPU": 0.5})
    assert node.snapshot_available() == {"CPU": 0.0}
    node.release(other)
    node.release(blocked)
    assert node.available["CPU"] == pytest.approx(2.0)


def test_snapshot_available_is_rounded_and_clamped():
    node = NodeResources({"CPU": 1, "GPU": 1})
    for _ in range(3):
        node.allocate({"CPU": 0.1})
    snap = node.snapshot_available()
    assert snap["CPU"] == 0.7
    assert snap["GPU"] == 1.0


@pytest.mark.parametrize("request_", [{"CPU": -1}, {"GPU": -0.5}, {"memory": -1}, {"custom": -2}])
def test_negative_resources_rejected(request_):
    name = next(iter(request_))
    with pytest.raises(ValueError, match=repr(name)):
        validate_request(request_)
    with pytest.raises(ValueError):
        NodeResources(request_)


@pytest.mark.parametrize("gpus", [1.5, 2.25, 3.9])
def test_non_whole_gpus_above_one_rejected(gpus):
    with pytest.raises(ValueError, match="whole number"):
        validate_request({"GPU": gpus})


@pytest.mark.parametrize("gpus", [0, 0.25, 0.5, 1, 1.0, 2, 4.0])
def test_valid_gpu_requests_accepted(gpus):
    validate_request({"CPU": 1, "GPU": gpus})
