"""Ember has the names Ray's docs use most, with Ray's parameter names (issue 40's public-API walk).

`ray_common_api.json` lists the names Ray 2.60's quick starts and user guides use (Core,
`ray.util`, `ray.dag`, exceptions, job submission, Serve) and the options of the `ray` and `serve`
commands they use, picked by hand, and what Ray offers under each name (its kind, and a
function's or class's parameter names), written from Ray itself by `scripts/ray_api_snapshot.py`
(which also checks that Ray has every listed command option). The commands are looked up in
`ember`'s and `serve`'s argument parsers. Here each is looked up under `ember`: the name must resolve, and
each of Ray's parameters must be one Ember names (it may refuse a value it does not implement,
by name; test_public_signatures checks that a catch-all never swallows one) or go to a `**kwargs`
that is checked. At least 95% of the names and of their parameters must be there; the gaps are
printed."""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pathlib
from typing import Any

SNAPSHOT = json.loads((pathlib.Path(__file__).parent / "ray_common_api.json").read_text())
MIN_SHARE = 0.95
# The classes Ray's docs have users construct; the others (handles, refs, exceptions, the
# deployment and application objects) users receive, so only their names count here.
CONSTRUCTED = {"ray.LoggingConfig", "ray.runtime_env.RuntimeEnv", "ray.job_config.JobConfig", "ray.util.ActorPool",
               "ray.util.queue.Queue", "ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy",
               "ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy", "ray.util.multiprocessing.Pool",
               "ray.util.metrics.Counter", "ray.util.metrics.Gauge", "ray.util.metrics.Histogram",
               "ray.dag.InputNode", "ray.dag.MultiOutputNode", "ray.job_submission.JobSubmissionClient",
               "ray.serve.config.HTTPOptions", "ray.serve.config.AutoscalingConfig"}


def _resolve(dotted: str) -> Any:
    """As scripts/ray_api_snapshot.py resolves Ray's side: an attribute of the longest importable
    module prefix, else the module."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            return obj
        except (ImportError, AttributeError):
            continue
    return importlib.import_module(dotted)


def _accepts(obj: Any) -> tuple[set[str], bool]:
    """The parameter names a call may pass, and whether a **kwargs takes others."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return names, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def _walk() -> tuple[list[str], list[str], int]:
    """(names missing in Ember, parameters missing as "name(param)", parameters looked at)."""
    missing_names, missing_params, n_params = [], [], 0
    for ray_name, ray_side in SNAPSHOT["ray"].items():
        try:
            obj = _resolve("ember" + ray_name[len("ray"):])
        except (ImportError, AttributeError):
            missing_names.append(ray_name)
            continue
        ray_params = [p for p in ray_side["params"] or () if not p.startswith("_")]
        if not ray_params or (ray_side["kind"] == "class" and ray_name not in CONSTRUCTED):
            continue
        names, takes_kwargs = _accepts(obj)
        for p in ray_params:
            n_params += 1
            if p not in names and not takes_kwargs:
                missing_params.append(f"{ray_name}({p})")
    return missing_names, missing_params, n_params


def test_the_snapshot_is_ray_2_60s_and_covers_every_listed_name():
    assert SNAPSHOT["ray_version"] == "2.60.0"
    assert sorted(SNAPSHOT["ray"]) == sorted(SNAPSHOT["names"])
    assert len(SNAPSHOT["names"]) >= 100


def test_ember_has_rays_common_names_and_their_parameters():
    missing_names, missing_params, n_params = _walk()
    n_names = len(SNAPSHOT["names"])
    print(f"names: {n_names - len(missing_names)}/{n_names}; parameters: {n_params - len(missing_params)}/{n_params}")
    print("missing names:", missing_names)
    print("missing parameters:", missing_params)
    assert (n_names - len(missing_names)) / n_names >= MIN_SHARE, missing_names
    assert (n_params - len(missing_params)) / n_params >= MIN_SHARE, missing_params


def _commands(parser: argparse.ArgumentParser, prefix: str) -> dict[str, set[str]]:
    """Every command of an argparse CLI ("ember job submit") with its option strings."""
    out = {prefix: set(parser._option_string_actions)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_commands(sub, f"{prefix} {name}"))
    return out


def test_ember_has_rays_common_commands_and_their_options():
    from ember._tools.cli import build_parser
    from ember.serve.scripts import _parser as serve_parser

    ours = {**_commands(build_parser(), "ray"), **_commands(serve_parser(), "serve")}
    missing_commands = [c for c in SNAPSHOT["cli"] if c not in ours]
    missing_options = [f"{c} {o}" for c, opts in SNAPSHOT["cli"].items() if c in ours
                       for o in opts if o not in ours[c]]
    n_options = sum(len(o) for o in SNAPSHOT["cli"].values())
    print(f"commands: {len(SNAPSHOT['cli']) - len(missing_commands)}/{len(SNAPSHOT['cli'])}; "
          f"options: {n_options - len(missing_options)}/{n_options}")
    print("missing:", missing_commands, missing_options)
    assert (len(SNAPSHOT["cli"]) - len(missing_commands)) / len(SNAPSHOT["cli"]) >= MIN_SHARE, missing_commands
    assert (n_options - len(missing_options)) / n_options >= MIN_SHARE, missing_options
