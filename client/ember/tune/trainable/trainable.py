"""`Trainable`: the class API of a Tune trainable (Ray Tune's), run inside a trial actor.

    class MyTrainable(tune.Trainable):
        def setup(self, config): self.w = 0.0
        def step(self): self.w += self.config["lr"]; return {"score": self.w}
        def save_checkpoint(self, checkpoint_dir): return {"w": self.w}
        def load_checkpoint(self, checkpoint): self.w = checkpoint["w"]

`train()` calls `step()` once and adds Tune's automatic result fields (training_iteration,
time_this_iter_s, time_total_s, timestamp, done, trial_id, pid, hostname, node_ip, config, ...).
`save()` writes a checkpoint into the trial's directory in the run's storage (local or remote);
`restore(checkpoint)` loads one. The iteration count and total time travel with the checkpoint
(`.tune_state.json`), so a restored trial keeps counting where it left off.
"""
from __future__ import annotations

import datetime
import json
import os
import pickle
import platform
import shutil
import socket
import tempfile
import time
from typing import Any

from ember.air import storage
from ember.train import Checkpoint

__all__ = ["Trainable", "TrialInfo"]

TUNE_STATE_FILE = ".tune_state.json"
DICT_STATE_FILE = ".tune_dict_checkpoint.pkl"


class TrialInfo:
    """Where a trial's files go and who it is (handed to the trainable by the controller)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.trial_id: str = info.get("trial_id", "default")
        self.trial_name: str = info.get("trial_name", self.trial_id)
        self.experiment_name: str = info.get("experiment_name", "")
        self.trial_dir: str = info.get("trial_dir", "")
        self.filesystem = info.get("filesystem")
        self.storage_path: str = info.get("storage_path", "")
        self.resources: dict[str, float] = dict(info.get("resources") or {})
        self.checkpoint_index: int = int(info.get("checkpoint_index", 0))
        self.checkpoint_frequency: int = int(info.get("checkpoint_frequency", 0))
        self.checkpoint_at_end: bool = bool(info.get("checkpoint_at_end", False))


def persist_checkpoint(info: TrialInfo, local_dir: str, state: dict[str, Any],
                       dir_name: str | None = None) -> Checkpoint:
    """Uploads a local checkpoint directory to the trial's next checkpoint directory in storage
    and records the iteration state beside its files."""
    name = dir_name or f"checkpoint_{info.checkpoint_index:06d}"
    info.checkpoint_index += 1
    if not info.trial_dir or info.filesystem is None:
        raise RuntimeError("this trainable has no trial directory to save checkpoints to")
    dest = storage.join(info.trial_dir, name)
    storage.upload_dir(local_dir, info.filesystem, dest)
    storage.write_bytes(info.filesystem, storage.join(dest, TUNE_STATE_FILE), json.dumps(state).encode())
    return Checkpoint(dest, info.filesystem)


def read_tune_state(checkpoint: Checkpoint | None) -> dict[str, Any]:
    """The iteration state stored with a checkpoint ({} when it has none)."""
    if checkpoint is None:
        return {}
    target = storage.join(checkpoint.path, TUNE_STATE_FILE)
    if not storage.exists(checkpoint.filesystem, target):
        return {}
    state: dict[str, Any] = json.loads(storage.read_bytes(checkpoint.filesystem, target).decode())
    return state


class Trainable:
    """Subclass and implement setup/step (and save_checkpoint/load_checkpoint to checkpoint)."""

    def __init__(self, config: dict[str, Any] | None = None, logger_creator: Any = None,
                 storage: Any = None, *, trial_info: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self._info = TrialInfo(trial_info or {})
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: int | None = None
        self._episodes_total: int | None = None
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._restored = False
        self._last_checkpoint: Checkpoint | None = None
        self._start = time.time()
        self.setup(dict(self.config))

    # ---- what subclasses implement --------------------------------------------------------
    def setup(self, config: dict[str, Any]) -> None:
        """Called once with the trial's config."""

    def step(self) -> dict[str, Any]:
        """One training iteration; returns the result dict."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Writes state into checkpoint_dir (or returns a dict to be stored for you)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement save_checkpoint()")

    def load_checkpoint(self, checkpoint: dict[str, Any] | str) -> None:
        """Loads what save_checkpoint wrote (the dict it returned, or the directory)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement load_checkpoint()")

    def cleanup(self) -> None:
        """Called when the trial ends."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Re-initialize for a new config when the actor is reused; return True if done."""
        return False

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """The resources a trial of this trainable needs (None: 1 CPU)."""
        return None

    # ---- what Tune calls -----------------------------------------------------------------
    @property
    def iteration(self) -> int:
        """Iterations run so far (restored ones included)."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        """Same as iteration (Ray's name in results)."""
        return self._iteration

    @property
    def trial_id(self) -> str:
        """The trial's id."""
        return self._info.trial_id

    @property
    def trial_name(self) -> str:
        """The trial's name."""
        return self._info.trial_name

    @property
    def logdir(self) -> str:
        """The trial's directory in the run's storage."""
        return self._info.trial_dir

    @property
    def trial_resources(self) -> dict[str, float]:
        """The resources the trial reserved."""
        return dict(self._info.resources)

    def get_config(self) -> dict[str, Any]:
        """The trial's config."""
        return dict(self.config)

    def train(self) -> dict[str, Any]:
        """Runs one step and returns its result with Tune's automatic fields."""
        t0 = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict, got {type(result).__name__}")
        return self._finish_result(dict(result), time.time() - t0)

    def _reset_for_trial(self, trial_info: dict[str, Any]) -> None:
        """Starts counting afresh for another trial reusing this object (after reset_config)."""
        self._info = TrialInfo(trial_info)
        self._iteration = 0
        self._time_total = 0.0
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._last_checkpoint = None

    def _finish_result(self, result: dict[str, Any], dt: float) -> dict[str, Any]:
        self._iteration += 1
        self._iterations_since_restore += 1
        dt = float(result.get("time_this_iter_s", dt))
        self._time_total += dt
        self._time_since_restore += dt
        now = time.time()
        result.setdefault("done", False)
        result.update(
            training_iteration=self._iteration, time_this_iter_s=dt, time_total_s=self._time_total,
            time_since_restore=self._time_since_restore,
            iterations_since_restore=self._iterations_since_restore, timestamp=int(now),
            date=datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"), trial_id=self.trial_id,
            pid=os.getpid(), hostname=platform.node(), node_ip=_node_ip(), config=dict(self.config))
        every = self._info.checkpoint_frequency
        if every and self._iteration % every == 0 and self._implements_save():
            result["__checkpoint__"] = self.save()
        return result

    def _implements_save(self) -> bool:
        return type(self).save_checkpoint is not Trainable.save_checkpoint

    def _state(self) -> dict[str, Any]:
        return {"training_iteration": self._iteration, "time_total_s": self._time_total}

    def save(self, checkpoint_dir: str | None = None) -> Checkpoint | None:
        """Saves a checkpoint into the trial's storage and returns it (a function trainable's
        is the last one it reported: None before its first)."""
        tmp = checkpoint_dir or tempfile.mkdtemp(prefix="tune_ckpt_")
        try:
            data = self.save_checkpoint(tmp)
            if isinstance(data, dict):
                with open(os.path.join(tmp, DICT_STATE_FILE), "wb") as f:
                    pickle.dump(data, f)
            elif data is not None and not isinstance(data, str):
                raise TypeError(f"save_checkpoint must return None, a dict or the directory, got {type(data).__name__}")
            self._last_checkpoint = persist_checkpoint(self._info, tmp, self._state())
        finally:
            if checkpoint_dir is None:
                shutil.rmtree(tmp, ignore_errors=True)
        return self._last_checkpoint

    def restore(self, checkpoint: Checkpoint) -> None:
        """Loads a checkpoint written by save() (possibly by another trial: PBT)."""
        state = read_tune_state(checkpoint)
        self._iteration = int(state.get("training_iteration", 0))
        self._time_total = float(state.get("time_total_s", 0.0))
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._restored = True
        with checkpoint.as_directory() as d:
            blob = os.path.join(d, DICT_STATE_FILE)
            if os.path.exists(blob):
                with open(blob, "rb") as f:
                    self.load_checkpoint(pickle.load(f))
            else:
                self.load_checkpoint(d)

    def latest_checkpoint(self) -> Checkpoint | None:
        """The last checkpoint saved (or restored from)."""
        return self._last_checkpoint

    def stop(self) -> bool:
        """Ends the trial (cleanup); True when the process can host another trial."""
        self.cleanup()
        return True


_IP: str | None = None


def _node_ip() -> str:
    global _IP
    if _IP is None:
        try:
            _IP = socket.gethostbyname(socket.gethostname())
        except OSError:
            _IP = "127.0.0.1"
    return _IP


def json_safe(obj: Any) -> Any:
    """A JSON-writable copy of a result (non-JSON values as their repr)."""
    try:
        return json.loads(json.dumps(obj, default=repr))
    except (TypeError, ValueError):
        return repr(obj)
