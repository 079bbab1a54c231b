"""`ember.autoscaler.sdk`, as `ray.autoscaler.sdk`: ask the autoscaler for capacity ahead of work.

`request_resources(num_cpus=, bundles=)` stores the bundles in the GCS's internal KV (namespace
"autoscaler"); the GCS serves them with the cluster's demand and the autoscaler grows the
cluster until its nodes' *totals* hold them all at once (running work is not added on top, as
Ray's). Each call replaces the previous one; `request_resources(num_cpus=0)` clears it.
"""
from __future__ import annotations

import json
import math
from typing import Any

from ember._private.doors import internal_kv as kv
from ember_common.autoscaler_client import KV_NAMESPACE, RESOURCE_REQUEST_KEY

__all__ = ["request_resources"]


def _bundles(num_cpus: int | None, bundles: list[dict[str, float]] | None) -> list[dict[str, float]]:
    """The request as a list of resource dicts; ValueError/TypeError naming what is wrong."""
    out: list[dict[str, float]] = []
    if num_cpus is not None:
        if isinstance(num_cpus, bool) or not isinstance(num_cpus, int):
            raise TypeError(f"num_cpus must be an integer, got {num_cpus!r}")
        if num_cpus < 0:
            raise ValueError(f"num_cpus must be >= 0, got {num_cpus}")
        out += [{"CPU": 1.0} for _ in range(num_cpus)]
    if bundles is not None:
        if not isinstance(bundles, list):
            raise TypeError(f"bundles must be a list of resource dicts, got {type(bundles).__name__}")
        for i, b in enumerate(bundles):
            if not isinstance(b, dict):
                raise TypeError(f"bundles[{i}] must be a dict of resource name to amount, got {b!r}")
            clean: dict[str, float] = {}
            for name, amount in b.items():
                if not isinstance(name, str) or not name:
                    raise TypeError(f"bundles[{i}] has a resource name that is not a string: {name!r}")
                if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                        or not math.isfinite(amount) or amount < 0:
                    raise ValueError(f"bundles[{i}][{name!r}] must be a number >= 0, got {amount!r}")
                if amount > 0:
                    clean[name] = float(amount)
            if clean:
                out.append(clean)
    return out


def request_resources(num_cpus: int | None = None, bundles: list[dict[str, float]] | None = None,
                      bundle_label_selectors: Any = None) -> None:
    """Commands the autoscaler to scale the cluster so that `num_cpus` 1-CPU bundles plus
    `bundles` fit at once on its nodes' totals, bypassing the normal upscaling speed; persistent
    until the next call replaces it. Needs `ember.init()` first (or an address in
    `_initialize_internal_kv`). `bundle_label_selectors` (Ray 2.47+) is not supported: Ember's
    nodes carry no labels."""
    if bundle_label_selectors is not None:
        raise ValueError("request_resources(bundle_label_selectors=...) is not supported by Ember "
                         "(nodes carry no labels)")
    wanted = _bundles(num_cpus, bundles)
    kv._internal_kv_put(RESOURCE_REQUEST_KEY, json.dumps(wanted).encode(), overwrite=True,
                        namespace=KV_NAMESPACE)
