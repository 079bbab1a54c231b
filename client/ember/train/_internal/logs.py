"""Train's own logger, `ember.train` (Ray's `ray.train`), set up per run as Ray Train 2.60 does.

`RunConfig(logging_config=LoggingConfig(log_level))` picks what reaches the console and the
application log file; the system log file takes every level:

    logger `ember.train` (level DEBUG, not propagated)
      ├── console (stderr, the bare message)            records >= log_level
      ├── <session>/logs/train/ember-train-app-<component>-<worker_id>.log (JSON)   >= log_level
      └── <session>/logs/train/ember-train-sys-<component>-<worker_id>.log (JSON)   every level

`component` is `controller` (the driver, which runs the controller, for the length of `fit()`)
or `worker` (a rank's actor, for its life). In a worker the root logger also writes to the
application file and, when nothing else configured it, to the console at INFO, so a training
function's `logging.info(...)` is shown as in Ray. Records of other loggers are not filtered.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

LOGGER = "ember.train"
TEXT_FORMAT = "%(message)s"  # the console shows the bare message, as Ray's Train logger does


class _TrainLevel(logging.Filter):
    """Lets `ember.train` records through at `level` and up; other loggers' records pass."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        ours = record.name == LOGGER or record.name.startswith(LOGGER + ".")
        return not ours or record.levelno >= self.level


class _Context(logging.Filter):
    """Puts the run's name, the component and (in a worker) the ranks on every record."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in self.fields.items():
            setattr(record, k, v)
        return True


class _Json(logging.Formatter):
    def __init__(self, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.keys = keys

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {"asctime": self.formatTime(record), "levelname": record.levelname,
                               "name": record.name, "message": record.getMessage(),
                               "filename": record.filename, "lineno": record.lineno}
        if record.exc_info:
            obj["exc_text"] = self.formatException(record.exc_info)
        obj.update((k, getattr(record, k, None)) for k in self.keys)
        return json.dumps(obj, default=str)


class TrainLogging:
    """The handlers one component installed; `close()` removes them again."""

    def __init__(self, handlers: list[tuple[logging.Logger, logging.Handler]],
                 saved: tuple[int, bool], root_level: int | None) -> None:
        self.handlers, self._saved, self._root_level = handlers, saved, root_level

    def close(self) -> None:
        """Removes and closes the handlers; the loggers get their former levels back."""
        for logger, handler in self.handlers:
            logger.removeHandler(handler)
            handler.close()
        train = logging.getLogger(LOGGER)
        train.setLevel(self._saved[0])
        train.propagate = self._saved[1]
        if self._root_level is not None:
            logging.getLogger().setLevel(self._root_level)
        self.handlers = []


def log_dir() -> str | None:
    """`<session>/logs/train` of this node (None outside a cluster)."""
    import ember
    from ember._private.doors import driver

    if not ember.is_initialized():
        return None
    return os.path.join(driver.session_dir(), "logs", "train")


def configure(component: str, log_level: str, fields: dict[str, Any]) -> TrainLogging:
    """Installs the console and file handlers of `component` ("controller" or "worker")."""
    import ember

    level = logging.getLevelNamesMapping()[log_level.upper()]
    context = _Context({"component": component, **fields})
    keys = ("component", *fields)
    train = logging.getLogger(LOGGER)
    saved = (train.level, train.propagate)
    installed: list[tuple[logging.Logger, logging.Handler]] = []

    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(TEXT_FORMAT))
    console.addFilter(_TrainLevel(level))
    installed.append((train, console))
    directory = log_dir()
    app: logging.Handler | None = None
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        worker_id = ember.get_runtime_context().get_worker_id()
        for kind in ("sys", "app"):
            handler = logging.FileHandler(os.path.join(directory, f"ember-train-{kind}-{component}-{worker_id}.log"))
            handler.setFormatter(_Json(keys))
            handler.addFilter(context)
            if kind == "app":
                handler.addFilter(_TrainLevel(level))
                app = handler
            installed.append((train, handler))
    root_level = None
    if component == "worker":
        root = logging.getLogger()
        if app is not None:
            installed.append((root, app))
        if not root.handlers:
            installed.append((root, console))
        if root.getEffectiveLevel() > logging.INFO:
            root_level = root.level
            root.setLevel(logging.INFO)
    for logger, h in installed:
        logger.addHandler(h)
    train.setLevel(logging.DEBUG)
    train.propagate = False
    return TrainLogging(installed, saved, root_level)
