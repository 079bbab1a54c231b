"""`TorchCheckpoint` (Ray's `ray.train.torch.TorchCheckpoint`, deprecated there in favour of
`Checkpoint`): a checkpoint directory holding `model.pt`, a state dict (`from_state_dict`) or a
whole pickled module (`from_model`); `get_model` loads it back. Constructing one warns with
DeprecationWarning as Ray does. The deprecated AMP helpers `accelerate`, `prepare_optimizer` and
`backward` raise DeprecationWarning, as in Ray Train 2.60 (use `torch.autocast` / `torch.amp`).
"""
from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

import pyarrow.fs

from ember.air.checkpoint import TEMP_PREFIX, Checkpoint

AMP_DEPRECATED = ("{}() is deprecated, as in Ray Train 2.60: use torch's own mixed precision "
                  "(torch.autocast and torch.amp.GradScaler) in the training function")


def _no_preprocessor(preprocessor: Any) -> None:
    if preprocessor is not None:
        raise NotImplementedError("TorchCheckpoint(preprocessor=...) is not supported by Ember: Ray Data "
                                  "preprocessors are not implemented; save it in the checkpoint directory")


class TorchCheckpoint(Checkpoint):
    """A Checkpoint whose `model.pt` holds a torch model or its state dict."""

    MODEL_FILENAME = "model.pt"

    def __init__(self, path: str | os.PathLike[str], filesystem: pyarrow.fs.FileSystem | None = None) -> None:
        warnings.warn("TorchCheckpoint is deprecated (as in Ray): use ember.train.Checkpoint",
                      DeprecationWarning, stacklevel=2)
        super().__init__(path, filesystem)

    @classmethod
    def _save(cls, obj: Any) -> TorchCheckpoint:
        import torch

        path = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        torch.save(obj, os.path.join(path, cls.MODEL_FILENAME))
        return cls.from_directory(path)  # type: ignore[return-value]

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Any], *, preprocessor: Any = None) -> TorchCheckpoint:
        """A checkpoint of a model's state dict (DDP's `module.` prefixes removed)."""
        _no_preprocessor(preprocessor)
        if not isinstance(state_dict, dict):
            raise TypeError(f"from_state_dict expects a state dict, got {type(state_dict).__name__}")
        prefix = "module."
        if state_dict and all(k.startswith(prefix) for k in state_dict):
            state_dict = {k[len(prefix):]: v for k, v in state_dict.items()}
        return cls._save(state_dict)

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TorchCheckpoint:
        """A checkpoint of a whole pickled module (Ray warns: loading runs pickled code)."""
        _no_preprocessor(preprocessor)
        warnings.warn("TorchCheckpoint.from_model is deprecated (as in Ray): save a state dict",
                      DeprecationWarning, stacklevel=2)
        return cls._save(model)

    def get_model(self, model: Any = None) -> Any:
        """The stored module; for a stored state dict, `model` with it loaded."""
        import torch

        with self.as_directory() as d:
            saved = torch.load(os.path.join(d, self.MODEL_FILENAME), map_location="cpu", weights_only=False)
        if isinstance(saved, torch.nn.Module):
            return saved
        if model is None:
            raise ValueError("this TorchCheckpoint holds a state dict: pass get_model(model) the module to load it into")
        model.load_state_dict(saved)
        return model


def accelerate(amp: bool = False) -> None:
    """Deprecated in Ray Train 2.60: raises DeprecationWarning."""
    raise DeprecationWarning(AMP_DEPRECATED.format("accelerate"))


def prepare_optimizer(optimizer: Any) -> Any:
    """Deprecated in Ray Train 2.60: raises DeprecationWarning."""
    raise DeprecationWarning(AMP_DEPRECATED.format("prepare_optimizer"))


def backward(tensor: Any) -> None:
    """Deprecated in Ray Train 2.60: raises DeprecationWarning."""
    raise DeprecationWarning(AMP_DEPRECATED.format("backward"))
