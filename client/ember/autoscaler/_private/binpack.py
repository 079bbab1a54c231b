"""Resource arithmetic for the autoscaling policy, pure: does a shape fit, fitting a list of
shapes onto nodes (first fit, largest first), and how well one node type packs a demand (the
score Ray's resource_demand_scheduler ranks node types by, in spirit: no GPU node for CPU work,
then the node's resources used most fully)."""
from __future__ import annotations

Resources = dict[str, float]
EPS = 1e-9


def fits(shape: Resources, free: Resources) -> bool:
    """Whether `shape` fits in `free`."""
    return all(free.get(k, 0.0) + EPS >= v for k, v in shape.items() if v > 0)


def take(shape: Resources, free: Resources) -> None:
    """Subtracts `shape` from `free` (in place)."""
    for k, v in shape.items():
        free[k] = free.get(k, 0.0) - v


def _size(shape: Resources) -> tuple[float, float]:
    return (shape.get("GPU", 0.0), sum(shape.values()))


def fit_onto(shapes: list[Resources], nodes: list[Resources], *, distinct: bool = False) -> list[Resources]:
    """Places shapes on the nodes' free resources (mutated), largest first, each on the first
    node it fits; with `distinct` every shape on a different node (STRICT_SPREAD). Returns the
    shapes that fit nowhere, in their given order."""
    order = sorted(range(len(shapes)), key=lambda i: _size(shapes[i]), reverse=True)
    used: set[int] = set()
    left: list[int] = []
    for i in order:
        for j, free in enumerate(nodes):
            if distinct and j in used:
                continue
            if fits(shapes[i], free):
                take(shapes[i], free)
                used.add(j)
                break
        else:
            left.append(i)
    return [shapes[i] for i in sorted(left)]


def score(node: Resources, shapes: list[Resources]) -> tuple[bool, float, float, int]:
    """How well one empty node of resources `node` serves `shapes`, higher is better: (it wastes
    no GPU on work that needs none, the least-used fraction of its resources, the mean used
    fraction, how many shapes fit). Fuller nodes win, so small demand gets a small node type."""
    free = dict(node)
    left = fit_onto(list(shapes), [free])
    n = len(shapes) - len(left)
    if n == 0:
        return (False, 0.0, 0.0, 0)
    fractions = [1.0 - free[k] / v for k, v in node.items() if v > 0]
    gpu_ok = node.get("GPU", 0.0) <= 0 or any(s.get("GPU", 0.0) > 0 for s in shapes)
    return (gpu_ok, min(fractions, default=0.0), sum(fractions) / len(fractions) if fractions else 0.0, n)
