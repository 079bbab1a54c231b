"""`TBXLoggerCallback`: TensorBoard event files in each trial's directory, one scalar per numeric
metric per result (tagged `ray/tune/<name>`, as Ray tags them), at step `training_iteration`.
Needs the `tensorboardX` package (`pip install 'ember[tune]'`)."""
from __future__ import annotations

from typing import Any

from .logger import LoggerCallback, flatten, trial_location

_SKIP = {"config", "done", "trial_id", "date", "hostname", "node_ip", "pid", "experiment_tag"}


def _summary_writer() -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        raise ImportError("TBXLoggerCallback needs the tensorboardX package: "
                          "pip install tensorboardX (or 'ember[tune]')") from e
    return SummaryWriter


class TBXLoggerCallback(LoggerCallback):
    """Writes each trial's numeric results as TensorBoard scalars under the trial's directory
    (local storage only: event files are appended as the run goes)."""

    def __init__(self) -> None:
        self._writer_cls = _summary_writer()
        self._writers: dict[Any, Any] = {}

    def log_trial_start(self, trial: Any) -> None:
        if trial in self._writers:
            return
        fs, path = trial_location(trial)
        if type(fs).__name__ != "LocalFileSystem":
            raise ValueError(f"TBXLoggerCallback writes event files on a local disk; the trial "
                             f"directory {path} is on {fs.type_name}")
        self._writers[trial] = self._writer_cls(logdir=path, flush_secs=30)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._writers:
            self.log_trial_start(trial)
        step = int(result.get("training_iteration", iteration))
        w = self._writers[trial]
        for k, v in flatten({k: v for k, v in result.items() if k not in _SKIP and not k.startswith("__")}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                w.add_scalar(f"ray/tune/{k}", v, global_step=step)
        w.flush()

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        w = self._writers.pop(trial, None)
        if w is not None:
            w.close()
