"""The experiment's persistent state under `storage_path/name` (local disk or any pyarrow.fs URI):

    tuner.pkl              what Tuner.restore needs besides the trainable: param_space,
                           TuneConfig, RunConfig, the trainable's name
    experiment_state.pkl   the trials (configs, results, checkpoints, failures), the search
                           algorithm and the scheduler, pickled together so they agree
    <trial dir>/           each trial's checkpoints, params.json and result.json

Also the pure rule for which checkpoints a trial keeps (`checkpoints_to_delete`).
"""
from __future__ import annotations

import json
from typing import Any

import cloudpickle
import pyarrow.fs

from ember.air import storage
from ember.train import Checkpoint

from ..experiment.trial import Trial
from ..trainable.trainable import json_safe

STATE_FILE = "experiment_state.pkl"
TUNER_FILE = "tuner.pkl"
STATE_VERSION = 1


def checkpoints_to_delete(checkpoints: list[tuple[Checkpoint, dict[str, Any]]], num_to_keep: int | None,
                          score_attribute: str | None, score_order: str) -> list[int]:
    """Indices (into `checkpoints`, oldest first) of the ones to delete: all but the
    `num_to_keep` best by `score_attribute` (the most recent when None), never the latest."""
    if num_to_keep is None or len(checkpoints) <= num_to_keep:
        return []
    latest = len(checkpoints) - 1

    def score(i: int) -> tuple[int, float]:
        if score_attribute is None:
            return (1, float(i))
        v = checkpoints[i][1].get(score_attribute)
        if not isinstance(v, (int, float)):
            return (0, float(i))  # unscored ones go first
        return (1, float(v) if score_order == "max" else -float(v))

    ranked = sorted(range(len(checkpoints)), key=score, reverse=True)
    keep = set(ranked[:num_to_keep]) | {latest}
    return [i for i in range(len(checkpoints)) if i not in keep]


def _picklable_error(e: BaseException | None) -> BaseException | None:
    if e is None:
        return None
    try:
        cloudpickle.dumps(e)
        return e
    except Exception:  # noqa: BLE001 - some user exceptions cannot be pickled
        return RuntimeError(f"{type(e).__name__}: {e}")


def save_experiment_state(fs: pyarrow.fs.FileSystem, exp_path: str, trials: list[Trial],
                          search_alg: Any, scheduler: Any, extra: dict[str, Any]) -> None:
    """Writes experiment_state.pkl (whole, replacing the previous one)."""
    saved = []
    for t in trials:
        err = _picklable_error(t.error)
        if err is not t.error:
            t.error = err
        saved.append(t)
    blob = cloudpickle.dumps({"version": STATE_VERSION, "trials": saved, "search_alg": search_alg,
                              "scheduler": scheduler, **extra})
    storage.write_bytes(fs, storage.join(exp_path, STATE_FILE), blob)


def load_experiment_state(fs: pyarrow.fs.FileSystem, exp_path: str) -> dict[str, Any]:
    """What save_experiment_state wrote."""
    import pickle

    state: dict[str, Any] = pickle.loads(storage.read_bytes(fs, storage.join(exp_path, STATE_FILE)))
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"{exp_path}/{STATE_FILE} has state version {state.get('version')}, "
                         f"this Ember reads version {STATE_VERSION}")
    return state


def save_tuner(fs: pyarrow.fs.FileSystem, exp_path: str, data: dict[str, Any]) -> None:
    """Writes tuner.pkl."""
    storage.write_bytes(fs, storage.join(exp_path, TUNER_FILE), cloudpickle.dumps(data))


def load_tuner(fs: pyarrow.fs.FileSystem, exp_path: str) -> dict[str, Any]:
    """Reads tuner.pkl."""
    import pickle

    data: dict[str, Any] = pickle.loads(storage.read_bytes(fs, storage.join(exp_path, TUNER_FILE)))
    return data


def can_restore(fs: pyarrow.fs.FileSystem, exp_path: str) -> bool:
    """Whether both tuner.pkl and experiment_state.pkl exist under exp_path."""
    return storage.exists(fs, storage.join(exp_path, TUNER_FILE)) and \
        storage.exists(fs, storage.join(exp_path, STATE_FILE))


def write_trial_files(fs: pyarrow.fs.FileSystem, trial: Trial, params_only: bool = False) -> None:
    """params.json (the config) and result.json (one JSON line per reported result, with the
    config under "config", as Ray's JsonLoggerCallback writes it)."""
    if not trial.path:
        return
    storage.write_bytes(fs, storage.join(trial.path, "params.json"),
                        json.dumps(json_safe(trial.config), indent=2).encode())
    if params_only:
        return
    lines = "".join(json.dumps(json_safe({**{k: v for k, v in r.items() if not k.startswith("__")},
                                          "config": r.get("config", trial.config)})) + "\n"
                    for r in trial.metric_history)
    storage.write_bytes(fs, storage.join(trial.path, "result.json"), lines.encode())
