"""Search space primitives, with Ray Tune's names and semantics.

    {"lr": tune.loguniform(1e-5, 1e-3), "layers": tune.randint(2, 8),
     "act": tune.choice(["relu", "tanh"]), "seed": tune.grid_search([0, 1])}

A `Domain` samples values (`sample(spec=None, size=1, random_state=None)`); `grid_search` is not a
domain but a marker the variant generator expands (every grid point is crossed with every other
and with each of `num_samples`). `sample_from(fn)` calls `fn(spec)` where `spec.config` is the
partially resolved config, as in Ray. Bounds are checked when a domain is built, so a bad space
fails at `Tuner(...)` with a message naming the problem. `randint(lower, upper)` excludes `upper`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

__all__ = [
    "Categorical", "Domain", "Float", "Function", "Integer", "choice", "grid_search", "lograndint",
    "loguniform", "qlograndint", "qloguniform", "qrandint", "qrandn", "quniform", "randint", "randn",
    "sample_from", "uniform",
]


def _rng(random_state: Any) -> np.random.Generator:
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    return np.random.default_rng(random_state)


def _quantize(x: float, q: float) -> float:
    return float(np.round(np.divide(x, q)) * q)


class Domain:
    """A set of values to sample from."""

    def sample(self, spec: Any = None, size: int = 1, random_state: Any = None) -> Any:
        """One value (size=1) or a list of `size` values."""
        rng = _rng(random_state)
        out = [self._one(spec, rng) for _ in range(size)]
        return out[0] if size == 1 else out

    def _one(self, spec: Any, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in the domain."""
        raise NotImplementedError

    def domain_str(self) -> str:
        """A short description of the domain."""
        return repr(self)


class Float(Domain):
    """A float in [lower, upper): uniform, log-uniform (`base`) or normal; optionally quantized."""

    def __init__(self, lower: float | None, upper: float | None, *, dist: str = "uniform",
                 base: float = 10.0, q: float | None = None, mean: float = 0.0, sd: float = 1.0) -> None:
        if dist in ("uniform", "loguniform"):
            if not isinstance(lower, (int, float)) or not isinstance(upper, (int, float)):
                raise ValueError(f"{dist} needs numeric lower and upper bounds, got {lower!r}, {upper!r}")
            if not lower < upper:
                raise ValueError(f"{dist}: lower bound {lower} must be less than upper bound {upper}")
            if dist == "loguniform" and lower <= 0:
                raise ValueError(f"loguniform: lower bound must be > 0, got {lower}")
        if dist == "normal" and (not isinstance(sd, (int, float)) or sd <= 0):
            raise ValueError(f"randn: sd must be > 0, got {sd!r}")
        if q is not None and (not isinstance(q, (int, float)) or q <= 0):
            raise ValueError(f"quantization q must be a number > 0, got {q!r}")
        self.lower, self.upper, self.dist, self.base, self.q = lower, upper, dist, base, q
        self.mean, self.sd = mean, sd

    def _bounds(self) -> tuple[float, float]:
        """The bounds of a uniform or log-uniform domain (__init__ checked they are numbers)."""
        assert self.lower is not None and self.upper is not None, f"{self.dist} domain without bounds"
        return self.lower, self.upper

    def _one(self, spec: Any, rng: np.random.Generator) -> float:
        if self.dist == "uniform":
            lower, upper = self._bounds()
            v = float(rng.uniform(lower, upper))
        elif self.dist == "loguniform":
            lower, upper = self._bounds()
            lb = math.log(lower) / math.log(self.base)
            ub = math.log(upper) / math.log(self.base)
            v = float(self.base ** rng.uniform(lb, ub))
        else:
            v = float(rng.normal(self.mean, self.sd))
        if self.q is not None:
            v = _quantize(v, self.q)
            if self.lower is not None:
                lower, upper = self._bounds()
                v = min(max(v, lower), upper)
        return v

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in the domain."""
        if self.dist == "normal":
            return isinstance(value, (int, float))
        if not isinstance(value, (int, float)):
            return False
        lower, upper = self._bounds()
        return lower <= value <= upper

    def __repr__(self) -> str:
        if self.dist == "normal":
            return f"Float(normal, mean={self.mean}, sd={self.sd}, q={self.q})"
        return f"Float({self.dist}, {self.lower}, {self.upper}, q={self.q})"


class Integer(Domain):
    """An int in [lower, upper) (upper excluded, as Ray's randint), uniform or log-uniform."""

    def __init__(self, lower: int, upper: int, *, dist: str = "uniform", base: float = 10.0,
                 q: int = 1) -> None:
        for name, v in (("lower", lower), ("upper", upper)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise ValueError(f"randint: {name} bound must be an int, got {v!r}")
        if not lower < upper:
            raise ValueError(f"randint: lower bound {lower} must be less than upper bound {upper}")
        if dist == "loguniform" and lower <= 0:
            raise ValueError(f"lograndint: lower bound must be > 0, got {lower}")
        if not isinstance(q, int) or q < 1:
            raise ValueError(f"quantization q must be an int >= 1, got {q!r}")
        self.lower, self.upper, self.dist, self.base, self.q = int(lower), int(upper), dist, base, q

    def _one(self, spec: Any, rng: np.random.Generator) -> int:
        if self.dist == "uniform":
            v = int(rng.integers(self.lower, self.upper))
        else:
            lb = math.log(self.lower) / math.log(self.base)
            ub = math.log(self.upper) / math.log(self.base)
            v = int(self.base ** rng.uniform(lb, ub))
        if self.q > 1:
            v = int(round(v / self.q) * self.q)
            v = min(max(v, self.lower), self.upper)
        return min(max(v, self.lower), self.upper - 1 if self.q == 1 else self.upper)

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in the domain."""
        return isinstance(value, (int, np.integer)) and bool(self.lower <= value <= self.upper)

    def __repr__(self) -> str:
        return f"Integer({self.dist}, {self.lower}, {self.upper}, q={self.q})"


class Categorical(Domain):
    """One of a list of values (which may themselves be domains or dicts, resolved after)."""

    def __init__(self, categories: Sequence[Any]) -> None:
        if isinstance(categories, (str, bytes, dict)) or not hasattr(categories, "__len__"):
            raise ValueError(f"choice expects a list of categories, got {categories!r}")
        if len(categories) == 0:
            raise ValueError("choice expects a non-empty list of categories")
        self.categories = list(categories)

    def _one(self, spec: Any, rng: np.random.Generator) -> Any:
        return self.categories[int(rng.integers(0, len(self.categories)))]

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in the domain."""
        return value in self.categories

    def __len__(self) -> int:
        return len(self.categories)

    def __repr__(self) -> str:
        return f"Categorical({self.categories!r})"


class Function(Domain):
    """`sample_from(fn)`: `fn(spec)` (or `fn()`), where `spec.config` is the resolved config so far."""

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise ValueError(f"sample_from expects a callable, got {type(func).__name__}")
        self.func = func
        import inspect

        try:
            self._takes_spec = len(inspect.signature(func).parameters) > 0
        except (TypeError, ValueError):
            self._takes_spec = True

    def _one(self, spec: Any, rng: np.random.Generator) -> Any:
        return self.func(spec) if self._takes_spec else self.func()

    def is_valid(self, value: Any) -> bool:
        """Whether `value` lies in the domain."""
        return True

    def __repr__(self) -> str:
        return f"Function({getattr(self.func, '__name__', self.func)!r})"


def uniform(lower: float, upper: float) -> Float:
    """A float sampled uniformly between lower and upper."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """A uniform float rounded to a multiple of q."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float sampled uniformly in log space (lower > 0)."""
    return Float(lower, upper, dist="loguniform", base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """A log-uniform float rounded to a multiple of q."""
    return Float(lower, upper, dist="loguniform", base=base, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    """A float from a normal distribution."""
    return Float(None, None, dist="normal", mean=mean, sd=sd)


def qrandn(mean: float, sd: float, q: float) -> Float:
    """A normal float rounded to a multiple of q."""
    return Float(None, None, dist="normal", mean=mean, sd=sd, q=q)


def randint(lower: int, upper: int) -> Integer:
    """An int in [lower, upper) (upper excluded)."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """An int in [lower, upper] rounded to a multiple of q (upper included, as Ray's)."""
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An int in [lower, upper) sampled uniformly in log space."""
    return Integer(lower, upper, dist="loguniform", base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """A log-uniform int rounded to a multiple of q."""
    return Integer(lower, upper, dist="loguniform", base=base, q=q)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of `categories`, uniformly."""
    return Categorical(categories)


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by `func(spec)`; `spec.config` holds the other resolved parameters."""
    return Function(func)


def grid_search(values: Sequence[Any]) -> dict[str, list[Any]]:
    """Every value is tried (crossed with the other grids and with each of num_samples)."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"grid_search expects a list of values, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError("grid_search expects a non-empty list of values")
    return {"grid_search": values}
