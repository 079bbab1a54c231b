"""`ember.train.torch.TorchCheckpoint` round-trips a state dict (DDP prefixes removed) and a whole
module through real files, warning as Ray's deprecated class does; the deprecated AMP helpers
raise DeprecationWarning as in Ray Train 2.60."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from ember.train.torch import TorchCheckpoint, accelerate, backward, prepare_optimizer  # noqa: E402


def test_state_dict_round_trip_strips_ddp_prefix():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    wrapped = {f"module.{k}": v for k, v in model.state_dict().items()}
    with pytest.warns(DeprecationWarning, match="TorchCheckpoint is deprecated"):
        ckpt = TorchCheckpoint.from_state_dict(wrapped)
    assert os.path.isfile(os.path.join(ckpt.path, "model.pt"))
    fresh = torch.nn.Linear(3, 2)
    loaded = ckpt.get_model(fresh)
    assert loaded is fresh and torch.equal(loaded.weight, model.weight)
    with pytest.raises(ValueError, match="holds a state dict: pass get_model\\(model\\)"):
        ckpt.get_model()


def test_whole_model_round_trip_and_bad_input():
    model = torch.nn.Linear(2, 1)
    with pytest.warns(DeprecationWarning):
        ckpt = TorchCheckpoint.from_model(model)
    assert torch.equal(ckpt.get_model().weight, model.weight)
    with pytest.raises(NotImplementedError, match="preprocessor"):
        TorchCheckpoint.from_state_dict({}, preprocessor=object())
    with pytest.raises(TypeError, match="expects a state dict, got Linear"):
        TorchCheckpoint.from_state_dict(model)


def test_amp_helpers_raise_as_ray():
    for call, name in ((lambda: accelerate(amp=True), "accelerate"), (lambda: prepare_optimizer(None), "prepare_optimizer"),
                       (lambda: backward(None), "backward")):
        with pytest.raises(DeprecationWarning, match=f"{name}\\(\\) is deprecated"):
            call()
