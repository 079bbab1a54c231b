"""Turning a `param_space` into concrete configs: grid expansion and sampling, pure functions.

A param space is a dict, possibly nested (dicts and lists), whose leaves are constants, `Domain`s
(sampled per trial) or `{"grid_search": [...]}` markers. `grid_variants(space)` yields every
combination of the grid values (the first grid key varies slowest, like nested for-loops in dict
order); `resolve(space, rng)` then samples the domains, `sample_from` functions last so they can
read the other values through `spec.config`.
"""
from __future__ import annotations

import copy
import itertools
from typing import Any, Iterator

import numpy as np

from .sample import Domain, Function

Path = tuple[Any, ...]


class _Spec:
    """What a `sample_from` function receives: `spec.config` is the config resolved so far."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def __getitem__(self, key: str) -> Any:
        if key == "config":
            return self.config
        raise KeyError(key)


def is_grid(value: Any) -> bool:
    """True for a `{"grid_search": [...]}` marker (a bad marker raises ValueError)."""
    if isinstance(value, dict) and "grid_search" in value:
        if len(value) != 1:
            raise ValueError(f"a grid_search entry must be exactly {{'grid_search': [...]}}, got keys "
                             f"{sorted(map(str, value))}")
        vals = value["grid_search"]
        if isinstance(vals, (str, bytes, dict)) or not isinstance(vals, (list, tuple)) or not vals:
            raise ValueError(f"grid_search expects a non-empty list of values, got {vals!r}")
        return True
    return False


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        yield from node.items()
    elif isinstance(node, list):
        yield from enumerate(node)


def find(space: Any, prefix: Path = ()) -> tuple[list[tuple[Path, list[Any]]], list[tuple[Path, Domain]]]:
    """(grid markers, domains) in `space`, each with its key path, in dict order. Grid values that
    are themselves spaces are not searched (they are resolved once chosen)."""
    grids: list[tuple[Path, list[Any]]] = []
    domains: list[tuple[Path, Domain]] = []
    for k, v in _children(space):
        path = prefix + (k,)
        if is_grid(v):
            grids.append((path, list(v["grid_search"])))
        elif isinstance(v, Domain):
            domains.append((path, v))
        elif isinstance(v, (dict, list)):
            g, d = find(v, path)
            grids += g
            domains += d
    return grids, domains


def validate_space(space: Any) -> None:
    """Raises ValueError naming the problem for a param space Tune cannot use."""
    if space is None:
        return
    if not isinstance(space, dict):
        raise ValueError(f"param_space must be a dict, got {type(space).__name__}")
    for k in space:
        if not isinstance(k, str):
            raise ValueError(f"param_space keys must be strings, got {k!r}")
    find(space)


def count_grid(space: dict[str, Any]) -> int:
    """How many grid combinations `space` has (1 without grids; nested grids inside chosen grid
    values are counted when they are expanded)."""
    n = 1
    for _, values in find(space)[0]:
        n *= len(values)
    return n


def set_path(config: Any, path: Path, value: Any) -> None:
    """Sets the value at a key path in a nested config."""
    node = config
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


def get_path(config: Any, path: Path) -> Any:
    """The value at a key path in a nested config."""
    node = config
    for k in path:
        node = node[k]
    return node


def grid_variants(space: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every grid combination of `space` (grid markers replaced by values; domains left in place).
    Grid values that contain grids themselves are expanded in turn."""
    grids, _ = find(space)
    if not grids:
        yield copy.deepcopy(space)
        return
    paths = [p for p, _ in grids]
    for combo in itertools.product(*[vals for _, vals in grids]):
        cfg = copy.deepcopy(space)
        for path, value in zip(paths, combo, strict=False):
            set_path(cfg, path, copy.deepcopy(value))
        yield from grid_variants(cfg)


def resolve(space: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """Samples every domain of a grid-free space: plain domains first, `sample_from` functions
    after (in order, each seeing the values resolved before it)."""
    cfg = copy.deepcopy(space)
    for _ in range(8):  # a domain may sample another space (choice of dicts)
        grids, domains = find(cfg)
        if grids:
            raise ValueError("grid_search inside a sampled value is not supported; put the grid at the "
                             f"top of the space (found at {'/'.join(map(str, grids[0][0]))})")
        if not domains:
            return cfg
        for path, dom in domains:
            if not isinstance(dom, Function):
                set_path(cfg, path, dom.sample(random_state=rng))
        for path, dom in domains:
            if isinstance(dom, Function):
                set_path(cfg, path, dom.sample(spec=_Spec(cfg), random_state=rng))
    raise ValueError("param_space nests sampled spaces more than 8 levels deep")


def flatten_dict(d: dict[str, Any], delimiter: str = "/", prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a/b": 1} (empty dicts kept as values)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{delimiter}{k}" if prefix else str(k)
        if isinstance(v, dict) and v and not is_grid(v):
            out.update(flatten_dict(v, delimiter, key))
        else:
            out[key] = v
    return out


def unflatten_dict(d: dict[str, Any], delimiter: str = "/") -> dict[str, Any]:
    """The inverse of flatten_dict."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        parts = k.split(delimiter)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return out


def merge_dicts(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of base with update merged in recursively."""
    out = copy.deepcopy(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not is_grid(out[k]):
            out[k] = merge_dicts(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def format_vars(config: dict[str, Any], space: dict[str, Any] | None) -> str:
    """A short tag of the searched values (`lr=0.0012,layers=3`) for trial names and the table."""
    if not space:
        return ""
    grids, domains = find(space)
    parts = []
    for path in [p for p, _ in grids] + [p for p, _ in domains]:
        try:
            v = get_path(config, path)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(v, float):
            v = f"{v:.4g}"
        parts.append(f"{path[-1]}={v}")
    return ",".join(parts)
