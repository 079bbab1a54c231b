"""Pure placement checks shared by Train's worker group and Tune's trials (no sockets).

- `infeasible_reason(bundles, strategy, nodes)`: why no placement group of these bundles could
  ever be placed on the cluster's nodes as they are (None when it could). PACK and SPREAD are
  best effort, so each bundle only has to fit on some node and the bundles together on the
  cluster; STRICT_PACK needs one node holding all of them; STRICT_SPREAD one distinct node per
  bundle. The GCS would leave such a group pending forever (Ray prints a warning about it);
  failing at once names the problem.
- `missing_now(bundles, available)`: what the cluster lacks right now to place them (used in
  the error of a group that did not become ready within its timeout).
- `worker_bundle_offset(bundles, need, num_workers)`: where a trainer's workers go inside the
  placement group it already runs in (a Tune trial's): the last `num_workers` bundles, each
  holding `need`; None when the group cannot hold them.
"""
from __future__ import annotations

from typing import Any

_EPS = 1e-9


def _fits(need: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + _EPS >= v for k, v in need.items() if v > 0)


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items())) or "nothing"


def infeasible_reason(bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, Any]]) -> str | None:
    """Why the group can never be placed on these nodes (`ember.nodes()` rows); None if it can."""
    alive = [dict(n.get("Resources") or {}) for n in nodes if n.get("Alive")]
    if not alive:
        return "the cluster has no alive node"
    for i, b in enumerate(bundles):
        if not any(_fits(b, have) for have in alive):
            largest = _largest(alive, b)
            short = [f"{k}={v:g} (largest node has {largest[k]:g})" for k, v in sorted(b.items())
                     if largest[k] + _EPS < v] or ["no node has all of them at once"]
            return f"bundle {i} asks for {_fmt(b)}: " + ", ".join(short)
    if strategy == "STRICT_PACK":
        total = _sum(bundles)
        if not any(_fits(total, have) for have in alive):
            return (f"STRICT_PACK needs one node with {_fmt(total)}, the largest has "
                    f"{_fmt(_largest(alive, total))}")
    elif strategy == "STRICT_SPREAD":
        if _max_matching(bundles, alive) < len(bundles):
            return (f"STRICT_SPREAD needs {len(bundles)} distinct nodes, one per bundle, but only "
                    f"{_max_matching(bundles, alive)} of the {len(alive)} alive nodes can take one")
    else:
        placed = _first_fit(bundles, alive)
        if placed < len(bundles):
            return (f"the cluster's nodes can hold at most {placed} of the {len(bundles)} bundles "
                    f"({_fmt(_sum(bundles))} in all)")
    return None


def _first_fit(bundles: list[dict[str, float]], alive: list[dict[str, float]]) -> int:
    """How many bundles fit on the nodes together, largest first, each on the first node with
    room (exact for equal bundles, the usual case)."""
    free = [dict(h) for h in alive]
    placed = 0
    for b in sorted(bundles, key=lambda b: -sum(b.values())):
        for have in free:
            if _fits(b, have):
                for k, v in b.items():
                    have[k] = have.get(k, 0.0) - v
                placed += 1
                break
    return placed


def _largest(alive: list[dict[str, float]], need: dict[str, float]) -> dict[str, float]:
    return {k: max(have.get(k, 0.0) for have in alive) for k in need}


def _max_matching(bundles: list[dict[str, float]], alive: list[dict[str, float]]) -> int:
    """How many bundles can sit on distinct nodes at once (bipartite matching, small sizes)."""
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for n, have in enumerate(alive):
            if n in seen or not _fits(bundles[i], have):
                continue
            seen.add(n)
            if n not in owner or place(owner[n], seen):
                owner[n] = i
                return True
        return False

    return sum(1 for i in range(len(bundles)) if place(i, set()))


def missing_now(bundles: list[dict[str, float]], available: dict[str, float]) -> str:
    """'CPU: need 2, available 0' for every resource the bundles need more of than is free."""
    total = _sum(bundles)
    short = [f"{k}: need {v:g}, available {available.get(k, 0.0):g}" for k, v in sorted(total.items())
             if available.get(k, 0.0) + _EPS < v]
    if short:
        return "; ".join(short)
    return (f"the cluster has {_fmt(total)} free in all, but not on nodes that fit the bundles "
            f"and the strategy")


def worker_bundle_offset(bundles: list[dict[str, float]], need: dict[str, float], num_workers: int) -> int | None:
    """Index of the first of the last `num_workers` bundles when each of them holds `need`."""
    if num_workers < 1 or len(bundles) < num_workers:
        return None
    offset = len(bundles) - num_workers
    if all(_fits(need, b) for b in bundles[offset:]):
        return offset
    return None
