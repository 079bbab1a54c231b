"""AutoscalingPolicy: the pure decision core (no cluster)."""
from __future__ import annotations

import pytest

from ember.serve._private.autoscaling import AutoscalingPolicy
from ember.serve.config import AutoscalingConfig


def policy(**kw) -> AutoscalingPolicy:
    base = dict(min_replicas=0, max_replicas=10, target_ongoing_requests=2, upscale_delay_s=3,
                downscale_delay_s=10, downscale_to_zero_delay_s=20)
    base.update(kw)
    return AutoscalingPolicy(AutoscalingConfig(**base))


def test_desired_is_ongoing_over_target_clipped():
    p = policy(min_replicas=1, max_replicas=4)
    assert [p.desired(x) for x in (0, 1, 2, 3, 4, 7, 100)] == [1, 1, 1, 2, 2, 4, 4]


def test_upscale_waits_for_the_delay():
    p = policy()
    assert p.decide(0.0, 1, 8) == 1
    assert p.decide(2.9, 1, 8) == 1
    assert p.decide(3.0, 1, 8) == 4


def test_a_dip_resets_the_upscale_timer():
    p = policy()
    assert p.decide(0.0, 1, 8) == 1
    assert p.decide(2.0, 1, 2) == 1  # back to the target: the timer restarts
    assert p.decide(4.0, 1, 8) == 1
    assert p.decide(7.0, 1, 8) == 4


def test_cold_start_from_zero_is_immediate():
    p = policy(upscale_delay_s=100)
    assert p.decide(0.0, 0, 1) == 1
    assert p.decide(0.0, 0, 7) == 4


def test_downscale_goes_to_the_peak_of_the_window_no_oscillation():
    p = policy()
    assert p.decide(0.0, 5, 2) == 5  # wants 1
    assert p.decide(5.0, 5, 6) == 5  # wants 3 within the window
    assert p.decide(10.0, 5, 2) == 3  # the window's peak, not the last sample
    # a load that flips between two levels faster than the delay never changes the target
    q = policy(upscale_delay_s=5, downscale_delay_s=5)
    current = 2
    for i in range(100):
        current = q.decide(i * 1.0, current, 8 if i % 2 else 2)
    assert current == 2


def test_down_to_one_then_to_zero_after_its_own_delay():
    p = policy()
    assert p.decide(0.0, 3, 0) == 3
    assert p.decide(10.0, 3, 0) == 1
    assert p.decide(11.0, 1, 0) == 1
    assert p.decide(30.9, 1, 0) == 1
    assert p.decide(31.0, 1, 0) == 0


def test_bounds_are_enforced_at_once():
    p = policy(min_replicas=2, max_replicas=3)
    assert p.decide(0.0, 0, 0) == 2
    assert p.decide(0.0, 9, 0) == 3


@pytest.mark.parametrize("kw,msg", [
    (dict(min_replicas=-1), "min_replicas"),
    (dict(min_replicas=3, max_replicas=2), "must be <="),
    (dict(target_ongoing_requests=0), "target_ongoing_requests"),
    (dict(upscale_delay_s=-1), "upscale_delay_s"),
])
def test_bad_config_names_the_option(kw, msg):
    with pytest.raises(ValueError, match=msg):
        AutoscalingConfig(**kw)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown autoscaling_config"):
        AutoscalingConfig.from_any({"min_replica": 1})
    c = AutoscalingConfig.from_any({"max_replicas": 3, "target_num_ongoing_requests_per_replica": 5})
    assert c is not None and c.target_ongoing_requests == 5
