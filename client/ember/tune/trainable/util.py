"""`with_resources`, `with_parameters` and `PlacementGroupFactory`, with Ray Tune's signatures.

`PlacementGroupFactory(bundles, strategy)` is accepted wherever Ray accepts it, and a resources
dict is a one-bundle factory (as Ray converts it). Each trial gets a real placement group of
the factory's bundles (see `tune/_internal/trial_placement.py`): the trial actor runs in
bundle 0 holding its resources (none when the first bundle is empty, which is then left out of
the group, as Ray does), and tasks and actors it starts are captured into the group.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from .trainable import Trainable

__all__ = ["PlacementGroupFactory", "normalize_resources", "request_of", "resources_of",
           "with_parameters", "with_resources"]


class PlacementGroupFactory:
    """Bundles of resources a trial needs (`[{"CPU": 1}, {"CPU": 2, "GPU": 1}]`) and their strategy."""

    def __init__(self, bundles: list[dict[str, float]], strategy: str = "PACK", *args: Any, **kwargs: Any) -> None:
        if not isinstance(bundles, list) or not bundles or not all(isinstance(b, dict) for b in bundles):
            raise ValueError("PlacementGroupFactory expects a non-empty list of resource dicts (bundles)")
        if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"strategy must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, got {strategy!r}")
        self.bundles = [normalize_resources(b) for b in bundles]
        self.strategy = strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle asks for nothing."""
        return not any(self.bundles[0].values())

    @property
    def required_resources(self) -> dict[str, float]:
        """The sum of all bundles."""
        out: dict[str, float] = {}
        for b in self.bundles:
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PlacementGroupFactory) and other.bundles == self.bundles
                and other.strategy == self.strategy)

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles}, strategy={self.strategy!r})"


_ALIASES = {"cpu": "CPU", "gpu": "GPU", "CPU": "CPU", "GPU": "GPU", "memory": "memory"}


def normalize_resources(res: dict[str, Any]) -> dict[str, float]:
    """{"cpu": 2, "gpu": 1, "custom": 1} → {"CPU": 2.0, "GPU": 1.0, "custom": 1.0}, checked."""
    if not isinstance(res, dict):
        raise ValueError(f"resources must be a dict, got {type(res).__name__}")
    out: dict[str, float] = {}
    for k, v in res.items():
        if not isinstance(k, str):
            raise ValueError(f"resource names must be strings, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"resource {k!r} must be a number >= 0, got {v!r}")
        key = _ALIASES.get(k, k)
        out[key] = out.get(key, 0.0) + float(v)
    return out


def request_of(trainable: Any, config: dict[str, Any]) -> PlacementGroupFactory:
    """The PlacementGroupFactory one trial asks for (a resources dict becomes one bundle).

    Defaults: 1 CPU for functions and Trainable classes (`default_resource_request`), the
    trainer's ScalingConfig for a Train trainer."""
    spec = getattr(trainable, "__tune_resources__", None)
    if spec is None and inspect.isclass(trainable) and issubclass(trainable, Trainable):
        spec = trainable.default_resource_request(config)
    if spec is None:
        spec = getattr(trainable, "__tune_default_resources__", None)
    if callable(spec) and not isinstance(spec, PlacementGroupFactory):
        spec = spec(config)
    if spec is None:
        return PlacementGroupFactory([{"CPU": 1.0}])
    if isinstance(spec, PlacementGroupFactory):
        return spec
    return PlacementGroupFactory([normalize_resources(spec)])


def resources_of(trainable: Any, config: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(what the trial actor holds, what the trial needs in all) for one trial."""
    pgf = request_of(trainable, config)
    return pgf.bundles[0], pgf.required_resources


def with_resources(trainable: Any, resources: dict[str, float] | PlacementGroupFactory | Callable[[dict[str, Any]], Any]) -> Any:
    """The trainable, asking for `resources` per trial (a dict, a PlacementGroupFactory, or a
    function of the config returning either)."""
    if isinstance(resources, dict):
        normalize_resources(resources)  # fail now on bad input
    elif not isinstance(resources, PlacementGroupFactory) and not callable(resources):
        raise ValueError(f"with_resources expects a dict, a PlacementGroupFactory or a callable, "
                         f"got {type(resources).__name__}")
    if inspect.isclass(trainable):
        return type(trainable.__name__, (trainable,), {"__tune_resources__": resources})
    if not callable(trainable):
        raise TypeError(f"with_resources expects a trainable, got {type(trainable).__name__}")

    @functools.wraps(trainable)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return trainable(*args, **kwargs)

    wrapped.__tune_resources__ = resources  # type: ignore[attr-defined]
    return wrapped


class _Parameters:
    """Values given to with_parameters: put into the object store once, fetched in each trial."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values: dict[str, Any] | None = values
        self.refs: dict[str, Any] | None = None
        import ember

        if ember.is_initialized():
            self.put()

    def put(self) -> None:
        """Puts every value (once) and drops the driver's copies from what gets pickled."""
        if self.refs is None:
            import ember

            self.refs = {k: ember.put(v) for k, v in (self._values or {}).items()}
            self._values = None

    def get(self) -> dict[str, Any]:
        """The values (fetched from the object store)."""
        if self.refs is None:
            return dict(self._values or {})
        import ember

        keys = list(self.refs)
        return dict(zip(keys, ember.get([self.refs[k] for k in keys]), strict=False))

    def __getstate__(self) -> dict[str, Any]:
        if self.refs is None:
            self.put()
        return {"_values": None, "refs": self.refs}


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """The trainable, called with extra keyword arguments: `fn(config, **kwargs)` or
    `setup(config, **kwargs)`. Each value is put into the object store once and shared by all trials."""
    params = _Parameters(kwargs)
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError("with_parameters expects a function or a tune.Trainable subclass")
        base_setup = trainable.setup

        def setup(self: Any, config: dict[str, Any]) -> None:
            base_setup(self, config, **params.get())

        return type(trainable.__name__, (trainable,), {"setup": setup, "__tune_parameters__": params})
    if not callable(trainable):
        raise TypeError(f"with_parameters expects a trainable, got {type(trainable).__name__}")

    @functools.wraps(trainable)
    def inner(config: dict[str, Any]) -> Any:
        return trainable(config, **params.get())

    inner.__tune_parameters__ = params  # type: ignore[attr-defined]
    return inner
