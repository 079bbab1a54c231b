"""Where a placement group's bundles go: bundles -> nodes for the four strategies, given the
cluster view. Pure (no I/O).

- STRICT_PACK: every bundle on one node (the one left with the most room).
- PACK: on as few nodes as possible: one node if any can hold them all, else each bundle on a
  node already used when it fits there, else on the node with the most room.
- STRICT_SPREAD: every bundle on a different node (largest bundles first).
- SPREAD: on different nodes when possible, else the least used node that fits.

A bundle with a label selector (Ray's `bundle_label_selector`) goes only to the nodes `allowed`
names for its index (those whose labels match; the caller matches them).

`place` answers with a Placement (node per bundle index) or NoPlacement with a reason that
says whether the group is infeasible (no set of nodes could ever hold it, judged on the nodes'
totals) or only waits for resources to free up.
"""
from __future__ import annotations

from dataclasses import dataclass

EPS = 1e-9

PACK, SPREAD, STRICT_PACK, STRICT_SPREAD = "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"
STRATEGIES = (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)


@dataclass(frozen=True)
class Placement:
    """bundle index -> node id, for the bundles that were asked for."""

    nodes: dict[int, str]


@dataclass(frozen=True)
class NoPlacement:
    """Not now (infeasible=False: resources may free up) or never on these nodes."""

    reason: str
    infeasible: bool


def _fits(have: dict[str, float], need: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + EPS >= v for k, v in need.items() if v > 0)


def _take(have: dict[str, float], need: dict[str, float]) -> None:
    for k, v in need.items():
        if v > 0:
            have[k] = have.get(k, 0.0) - v


def _room(have: dict[str, float], need: dict[str, float]) -> float:
    """The scarcest requested resource left after taking need (higher: more room)."""
    return min((have.get(k, 0.0) - v for k, v in need.items() if v > 0), default=sum(have.values()))


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            total[k] = total.get(k, 0.0) + v
    return total


Allowed = dict[int, frozenset[str]]  # bundle index -> the nodes its label selector matches


def _ok(allowed: Allowed, i: int, node: str) -> bool:
    return i not in allowed or node in allowed[i]


def _assign(strategy: str, bundles: dict[int, dict[str, float]], nodes: dict[str, dict[str, float]],
            fixed: dict[int, str], allowed: Allowed) -> dict[int, str] | None:
    left = {n: dict(r) for n, r in sorted(nodes.items())}
    used: dict[str, int] = {}
    for node in fixed.values():
        used[node] = used.get(node, 0) + 1
    out: dict[int, str] = {}
    if strategy == STRICT_PACK:
        if fixed and len(set(fixed.values())) == 1:
            candidates = [next(iter(fixed.values()))]
        elif fixed:
            return None
        else:
            candidates = list(left)
        need = _sum(list(bundles.values()))
        fit = [n for n in candidates if n in left and _fits(left[n], need)
               and all(_ok(allowed, i, n) for i in bundles)]
        if not fit:
            return None
        best = max(fit, key=lambda n: _room(left[n], need))
        return {i: best for i in bundles}
    if strategy == PACK and not fixed:
        need = _sum(list(bundles.values()))
        fit = [n for n in left if _fits(left[n], need) and all(_ok(allowed, i, n) for i in bundles)]
        if fit:
            best = max(fit, key=lambda n: _room(left[n], need))
            return {i: best for i in bundles}
    order = sorted(bundles, key=lambda i: (-sum(bundles[i].values()), i))
    for i in order:
        need = bundles[i]
        fit = [n for n in left if _fits(left[n], need) and _ok(allowed, i, n)]
        if strategy == STRICT_SPREAD:
            fit = [n for n in fit if n not in used]
        if not fit:
            return None
        if strategy == PACK:
            best = max(fit, key=lambda n: (used.get(n, 0), _room(left[n], need)))
        else:  # SPREAD, STRICT_SPREAD: the least used node, then the most room
            best = max(fit, key=lambda n: (-used.get(n, 0), _room(left[n], need)))
        _take(left[best], need)
        used[best] = used.get(best, 0) + 1
        out[i] = best
    return out


def place(strategy: str, bundles: dict[int, dict[str, float]], available: dict[str, dict[str, float]],
          total: dict[str, dict[str, float]], fixed: dict[int, str] | None = None,
          allowed: Allowed | None = None) -> Placement | NoPlacement:
    """Places `bundles` (index -> resources) on alive nodes (`available` now, `total` ever), next
    to the group's bundles already placed (`fixed`: index -> node, which STRICT_PACK must join
    and STRICT_SPREAD must avoid), each bundle with an `allowed` entry on one of those nodes."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown placement strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    fixed = fixed or {}
    allowed = allowed or {}
    got = _assign(strategy, bundles, available, fixed, allowed)
    if got is not None:
        return Placement(got)
    ever = _assign(strategy, bundles, total, fixed, allowed)
    if ever is not None:
        return NoPlacement(f"waiting for resources: the {strategy} group's bundles "
                           f"{[bundles[i] for i in sorted(bundles)]} do not fit the nodes' available "
                           "resources now", infeasible=False)
    return NoPlacement(_why(strategy, bundles, total, fixed, allowed), infeasible=True)


def _why(strategy: str, bundles: dict[int, dict[str, float]], total: dict[str, dict[str, float]],
         fixed: dict[int, str], allowed: Allowed) -> str:
    shown = [bundles[i] for i in sorted(bundles)]
    if not total:
        return "infeasible: there are no alive nodes"
    for i in sorted(bundles):
        if i in allowed and not allowed[i] & set(total):
            return f"infeasible: no alive node has labels matching the label selector of bundle {i}"
        if i in allowed and not any(_fits(total[n], bundles[i]) for n in allowed[i] if n in total):
            return (f"infeasible: no node whose labels match the label selector of bundle {i} could "
                    f"ever hold {bundles[i]}")
    if strategy == STRICT_SPREAD and len(bundles) + len(set(fixed.values())) > len(total):
        return (f"infeasible: STRICT_SPREAD needs {len(bundles) + len(set(fixed.values()))} different "
                f"nodes and the cluster has {len(total)} alive")
    for b in shown:
        if not any(_fits(t, b) for t in total.values()):
            return f"infeasible: no node could ever hold the bundle {b} (nodes' totals: {list(total.values())})"
    if strategy == STRICT_PACK:
        return f"infeasible: STRICT_PACK needs one node with {_sum(shown)} and none has that much in total"
    return f"infeasible: the {strategy} group's bundles {shown} do not fit the nodes' totals together"
