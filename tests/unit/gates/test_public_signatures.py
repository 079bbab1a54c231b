"""No public callable swallows keyword arguments: every `**kwargs` catch-all of a public function,
class constructor or public method of ember, ember.serve, ember.util, ember.train, ember.tune and
ember.data is listed below with why it is legitimate (forwarded, or validated against a known
set), and a forwarded/validated one really uses its catch-all. A Ray parameter Ember does not
implement must raise naming it, never be accepted and dropped.

KNOWN_GAPS lists catch-alls that do drop what they get, in modules owned elsewhere; each must
still be a gap (so fixing one fails here until its entry is removed)."""
from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any, Callable

MODULES = ("ember", "ember.serve", "ember.util", "ember.train", "ember.tune", "ember.data")

# name -> why its **kwargs is legitimate. Each one's catch-all is used in its body.
ALLOWED = {
    "ember.init": "Ray's private init arguments: unknown ones raise RuntimeError as in Ray, the "
                  "known ones are honoured or raise ValueError (api/init_args.check_extras)",
    "ember.remote": "task/actor options, validated by the option checker (unknown ones raise)",
    "ember.method": "actor method options, validated (unknown ones raise)",
    "ember.serve.deployment": "deployment options, validated by build_config (unknown ones raise TypeError)",
    "ember.serve.Deployment.options": "deployment options, validated by build_config",
    "ember.serve.Deployment.bind": "the constructor's arguments, forwarded to the replicas",
    "ember.serve.DeploymentHandle.remote": "the method's arguments, forwarded to the replica",
    "ember.tune.with_parameters": "the trainable's arguments, forwarded",
    "ember.tune.run": "tune.run's legacy arguments: unsupported ones raise naming them",
    "ember.tune.CLIReporter.setup": "Ray's reporter setup keywords, forwarded to the base setup",
    "ember.data.Dataset.map": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.map_batches": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.flat_map": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.filter": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.add_column": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.with_column": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.with_columns": "ray_remote_args, forwarded to the map tasks",
    "ember.data.Dataset.random_shuffle": "ray_remote_args, forwarded to the shuffle tasks",
    "ember.data.Dataset.write_parquet": "arrow_parquet_args, forwarded to pyarrow's writer",
    "ember.data.read_parquet": "arrow_parquet_args, forwarded to pyarrow",
    "ember.data.read_csv": "arrow_csv_args, forwarded to pyarrow",
    "ember.data.read_json": "arrow_json_args, forwarded to pyarrow",
    "ember.data.Dataset.write_csv": "arrow_csv_args, forwarded to pyarrow's CSV writer",
    "ember.data.Dataset.write_json": "pandas_json_args, forwarded to pandas' to_json",
    "ember.data.read_numpy": "numpy_load_args, checked against numpy.load's names and forwarded",
    "ember.data.read_datasource": "Ray's read_args for the deprecated create_reader, refused naming them",
}

# Base-class hooks meant to be overridden: Ray's own signatures end in **info/**kwargs and the
# base does nothing with them (a subclass receives them).
HOOKS = {f"ember.tune.Callback.{h}" for h in (
    "setup", "on_step_begin", "on_step_end", "on_trial_start", "on_trial_restore", "on_trial_save",
    "on_trial_result", "on_trial_complete", "on_trial_recover", "on_trial_error", "on_checkpoint",
    "on_experiment_end")} | {"ember.tune.ProgressReporter.setup"}

# Catch-alls that drop what they are given, in modules other helpers own (issue 40): each must
# still drop (remove its entry when it is fixed).
KNOWN_GAPS = {
    "ember.data.Dataset.drop_columns": "Ray's compute/concurrency/ray_remote_args dropped",
    "ember.data.Dataset.rename_columns": "Ray's concurrency/ray_remote_args dropped",
    "ember.data.Dataset.select_columns": "Ray's compute/concurrency/ray_remote_args dropped",
    "ember.data.GroupedData.map_groups": "Ray's compute/fn args/ray_remote_args dropped",
    "ember.tune.PlacementGroupFactory.__init__": "Ray's placement_group() arguments dropped",
}


def _public(mod: Any) -> Iterator[tuple[str, Any]]:
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    for n in names:
        yield n, getattr(mod, n)


def _callables(obj: Any, qual: str) -> Iterator[tuple[str, Callable]]:
    if inspect.isclass(obj):
        if not (obj.__module__ or "").startswith("ember"):
            return
        for n, m in vars(obj).items():
            if n.startswith("_") and n != "__init__":
                continue
            f = m.__func__ if isinstance(m, (classmethod, staticmethod)) else m
            if inspect.isfunction(f):
                yield f"{qual}.{n}", f
    elif inspect.isfunction(obj) and (obj.__module__ or "").startswith("ember"):
        yield qual, obj


def catch_alls() -> dict[str, tuple[Callable, str]]:
    """Every public callable with a **kwargs parameter: name -> (function, the parameter's name)."""
    found: dict[str, tuple[Callable, str]] = {}
    seen: set[int] = set()
    for mn in MODULES:
        mod = importlib.import_module(mn)
        for n, obj in _public(mod):
            for qual, f in _callables(obj, f"{mn}.{n}"):
                if id(f) in seen:
                    continue
                seen.add(id(f))
                try:
                    params = inspect.signature(f).parameters.values()
                except (TypeError, ValueError):
                    continue
                var = [p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
                if var:
                    found[qual] = (f, var[0])
    return found


def uses(f: Callable, name: str) -> bool:
    """Whether f's body reads its parameter `name` (forwards or checks it)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
    fn = tree.body[0]
    return any(isinstance(x, ast.Name) and x.id == name for stmt in fn.body for x in ast.walk(stmt))  # type: ignore[attr-defined]


def test_every_public_kwargs_catch_all_is_accounted_for():
    found = catch_alls()
    listed = set(ALLOWED) | HOOKS | set(KNOWN_GAPS)
    unlisted = sorted(set(found) - listed)
    assert not unlisted, (f"public callables taking **kwargs that are not accounted for: {unlisted}. Give them "
                          "Ray's explicit parameters (an unimplemented one raises naming it), or list why the "
                          "catch-all is legitimate")
    stale = sorted(listed - set(found))
    assert not stale, f"listed but no longer public with a **kwargs catch-all (remove them): {stale}"


def test_allowed_catch_alls_are_used_and_known_gaps_still_drop():
    found = catch_alls()
    unused = sorted(q for q in ALLOWED if q in found and not uses(*found[q]))
    assert not unused, f"listed as forwarded/validated but the catch-all is never read: {unused}"
    fixed = sorted(q for q in KNOWN_GAPS if q in found and uses(*found[q]))
    assert not fixed, f"known gaps now read their catch-all; check and move them to ALLOWED: {fixed}"


def test_serve_entry_points_have_rays_explicit_parameters():
    from ember import serve
    from ember.serve.handle import DeploymentHandle

    expected = {
        serve.run: {"target", "blocking", "name", "route_prefix", "logging_config", "_local_testing_mode",
                    "external_scaler_enabled"},
        serve.start: {"proxy_location", "http_options", "grpc_options", "logging_config"},
        DeploymentHandle.options: {"method_name", "multiplexed_model_id", "stream", "use_new_handle_api",
                                   "_prefer_local_routing", "_by_reference", "request_serialization",
                                   "response_serialization"},
        serve.batch: {"max_batch_size", "batch_wait_timeout_s", "max_concurrent_batches", "batch_size_fn"},
        serve.multiplexed: {"func", "max_num_models_per_replica"},
    }
    for f, names in expected.items():
        params = inspect.signature(f).parameters
        assert names <= set(params), (f.__qualname__, sorted(names - set(params)))
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), f.__qualname__


def test_train_configs_have_rays_parameters():
    from ember import train

    expected = {
        train.RunConfig: {"name", "storage_path", "storage_filesystem", "failure_config", "checkpoint_config",
                          "callbacks", "worker_runtime_env", "logging_config", "sync_config", "verbose", "stop",
                          "progress_reporter", "log_to_file"},
        train.LoggingConfig: {"log_level"},
        train.ScalingConfig: {"num_workers", "use_gpu", "resources_per_worker", "placement_strategy",
                              "trainer_resources", "accelerator_type"},
        train.CheckpointConfig: {"num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order",
                                 "checkpoint_frequency", "checkpoint_at_end"},
        train.DataConfig: {"datasets_to_split", "execution_options", "enable_shard_locality"},
    }
    for cls, names in expected.items():
        params = inspect.signature(cls).parameters
        assert names <= set(params), (cls.__qualname__, sorted(names - set(params)))
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), cls.__qualname__
