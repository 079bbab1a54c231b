"""DataContext: per-driver settings of Ember Data, with Ray Data's names.

    ctx = ember.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.execution_options.resource_limits.object_store_memory = 256 * 2**20
    ctx.enable_progress_bars = False
    ctx.max_errored_blocks = 2

Setting a name the context does not have raises AttributeError naming it (Ray knobs Ember does
not implement are refused rather than silently ignored); `set_config` holds free-form keys.
"""
from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

DEFAULT_TARGET_MAX_BLOCK_SIZE = 128 * 1024 * 1024
DEFAULT_TARGET_MIN_BLOCK_SIZE = 1 * 1024 * 1024


def _checked_setattr(obj: Any, name: str, value: Any) -> None:
    """Refuses a setting the class does not have, naming it (a typo or a Ray knob Ember does
    not implement would otherwise be accepted and have no effect)."""
    fields = {f.name for f in dataclasses.fields(obj)}
    if not name.startswith("_") and name not in fields:
        raise AttributeError(f"{type(obj).__name__} has no setting {name!r} in Ember; the "
                             f"settings are {sorted(f for f in fields if not f.startswith('_'))}")
    object.__setattr__(obj, name, value)


@dataclasses.dataclass
class ExecutionResources:
    """Resource amounts (Ray's ExecutionResources): None means "no limit given"."""

    cpu: float | None = None
    gpu: float | None = None
    object_store_memory: float | None = None
    memory: float | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("cpu", "gpu", "object_store_memory", "memory") and value is not None and \
                (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"ExecutionResources.{name} must be a number >= 0 or None, got "
                             f"{value!r}")
        _checked_setattr(self, name, value)


@dataclasses.dataclass
class ExecutionOptions:
    """How the streaming executor runs a dataset (Ray's ExecutionOptions)."""

    resource_limits: ExecutionResources = dataclasses.field(default_factory=ExecutionResources)
    exclude_resources: ExecutionResources = dataclasses.field(default_factory=ExecutionResources)
    preserve_order: bool = False
    actor_locality_enabled: bool = True
    verbose_progress: bool | None = None
    label_selector: dict[str, str] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("resource_limits", "exclude_resources") and \
                not isinstance(value, ExecutionResources):
            raise TypeError(f"ExecutionOptions.{name} must be an ExecutionResources, got "
                            f"{type(value).__name__}")
        if name == "label_selector" and value:
            raise ValueError("ember.data does not support ExecutionOptions.label_selector")
        _checked_setattr(self, name, value)


@dataclasses.dataclass
class DataContext:
    """Global settings read when a dataset executes (Ray's DataContext)."""

    # None: blocks are not cut by size (each task's output stays one block), as in Ray.
    target_max_block_size: int | None = DEFAULT_TARGET_MAX_BLOCK_SIZE
    target_min_block_size: int = DEFAULT_TARGET_MIN_BLOCK_SIZE
    execution_options: ExecutionOptions = dataclasses.field(default_factory=ExecutionOptions)
    enable_progress_bars: bool = True
    enable_operator_progress_bars: bool = True
    max_errored_blocks: int = 0
    # Share of the object store the executor's budget may use (Ray: 0.5 by default).
    object_store_memory_limit_fraction: float = 0.5
    # Upper bound of tasks in flight per operator (besides the budget and the CPUs).
    max_tasks_in_flight_per_operator: int = 16
    max_tasks_in_flight_per_actor: int = 2
    read_op_min_num_blocks: int = 8
    wait_for_min_actors_s: float = 600.0
    actor_init_max_retries: int = 3
    max_map_retries: int = 3
    use_push_based_shuffle: bool = False
    enable_auto_log_stats: bool = False
    # Anything else a user sets (Ray's DataContext.set_config / get_config).
    _config: dict[str, Any] = dataclasses.field(default_factory=dict)

    _lock = threading.Lock()
    _current: DataContext | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "target_max_block_size" and value is not None and \
                (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"target_max_block_size must be an int >= 1 (bytes) or None, got "
                             f"{value!r}")
        if name == "target_min_block_size" and \
                (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"target_min_block_size must be an int >= 1 (bytes), got {value!r}")
        if name in ("enable_progress_bars", "enable_operator_progress_bars") and \
                not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        if name == "execution_options" and not isinstance(value, ExecutionOptions):
            raise TypeError(f"execution_options must be an ExecutionOptions, got "
                            f"{type(value).__name__}")
        _checked_setattr(self, name, value)

    @staticmethod
    def get_current() -> DataContext:
        """The driver's context (created on first use)."""
        with DataContext._lock:
            if DataContext._current is None:
                DataContext._current = DataContext()
            return DataContext._current

    @staticmethod
    def _set_current(ctx: DataContext) -> None:
        """Installs ctx as the current context (tasks get the driver's copy)."""
        with DataContext._lock:
            DataContext._current = ctx

    def copy(self) -> DataContext:
        """A deep copy (what each execution snapshots)."""
        return copy.deepcopy(self)

    def set_config(self, key: str, value: Any) -> None:
        """Sets a free-form setting."""
        self._config[key] = value

    def get_config(self, key: str, default: Any = None) -> Any:
        """Reads a free-form setting."""
        return self._config.get(key, default)

    def remove_config(self, key: str) -> None:
        """Removes a free-form setting."""
        self._config.pop(key, None)
