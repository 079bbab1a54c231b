"""Serve's declarative config without a cluster: the schema's validation (every refusal names the
field), app builders called with args as Ray calls them, per-deployment overrides, and the
config `serve build` writes for an application."""
from __future__ import annotations

import pytest

from ember import serve
from ember.serve._private.app_build import apply_overrides, call_builder, import_attr
from ember.serve.build import app_config
from ember.serve.schema import DeploymentSchema, SchemaError, ServeDeploySchema
from ember.serve.scripts import CLIError, parse_args_list


def _cfg(**app):
    return {"applications": [{"import_path": "mod:app", **app}]}


def test_a_full_config_round_trips_only_the_fields_given():
    raw = {"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": 8123},
           "applications": [{"name": "a", "route_prefix": "/a", "import_path": "pkg.mod:app",
                             "runtime_env": {"env_vars": {"X": "1"}}, "args": {"k": "v"},
                             "deployments": [{"name": "D", "num_replicas": 2, "user_config": {"t": 1},
                                              "max_ongoing_requests": 7,
                                              "ray_actor_options": {"num_cpus": 0.5}}]}]}
    cfg = ServeDeploySchema.model_validate(raw)
    assert cfg.model_dump(exclude_unset=True) == raw
    assert cfg.applications[0].deployments[0].options() == {"num_replicas": 2, "user_config": {"t": 1},
                                                            "max_ongoing_requests": 7,
                                                            "ray_actor_options": {"num_cpus": 0.5}}
    full = ServeDeploySchema.model_validate({"applications": [{"import_path": "m.app"}]}).model_dump()
    assert full["applications"][0]["name"] == "default" and full["applications"][0]["route_prefix"] == "/"
    assert full["http_options"]["port"] == 8000 and full["proxy_location"] == "EveryNode"


@pytest.mark.parametrize("raw, named", [
    ({"applications": [], "bogus": 1}, "bogus"),
    (_cfg(imprt_path="x"), "imprt_path"),
    ({"applications": [{"name": "x"}]}, "import_path is required"),
    (_cfg(import_path="nocolon"), "nocolon"),
    (_cfg(import_path="a:b:c"), "at most one colon"),
    (_cfg(route_prefix="noslash"), "route_prefix"),
    (_cfg(deployments=[{"name": "D", "num_replicas": -1}]), "num_replicas"),
    (_cfg(deployments=[{"name": "D", "max_ongoing_requests": 0}]), "max_ongoing_requests"),
    (_cfg(deployments=[{"name": "D", "num_replicaz": 1}]), "num_replicaz"),
    (_cfg(deployments=[{"num_replicas": 1}]), "name is required"),
    (_cfg(deployments=[{"name": "D"}, {"name": "D"}]), "more than once"),
    (_cfg(deployments=[{"name": "D", "autoscaling_config": {"min_replicas": 3, "max_replicas": 1}}]),
     "min_replicas"),
    (_cfg(deployments=[{"name": "D", "ray_actor_options": {"num_cpu": 1}}]), "num_cpu"),
    (_cfg(deployments=[{"name": "D", "placement_group_bundles": []}]), "placement_group_bundles"),
    (_cfg(deployments=[{"name": "D", "placement_group_strategy": "PACK"}]), "placement_group_bundles"),
    (_cfg(deployments=[{"name": "D", "placement_group_bundles": [{"CPU": 1}],
                        "placement_group_strategy": "TIGHT"}]), "TIGHT"),
    (_cfg(deployments=[{"name": "D", "max_replicas_per_node": 0}]), "max_replicas_per_node"),
    (_cfg(deployments=[{"name": "D", "max_replicas_per_node": 2, "placement_group_bundles": [{"CPU": 1}]}]),
     "max_replicas_per_node is not allowed"),
    (_cfg(logging_config={"log_level": "DEBUG"}), "logging_config"),
    (_cfg(args=[1]), "args must be dict"),
    ({"applications": [{"import_path": "a:b"}, {"import_path": "c:d"}]}, "application name(s) ['default']"),
    ({"applications": [{"name": "a", "import_path": "a:b"}, {"name": "b", "import_path": "c:d"}]}, "route_prefix"),
    ({"proxy_location": "Everywhere", "applications": []}, "proxy_location"),
    ({"http_options": {"port": "80"}, "applications": []}, "http_options.port"),
    ({"http_options": {"root_path": "/x"}, "applications": []}, "root_path"),
    ({"http_options": {"request_timeout_s": 5}, "applications": []}, "request_timeout_s"),
    ({"http_options": {"ssl_keyfile": "k.pem"}, "applications": []}, "ssl_keyfile"),
    ({"http_options": {"hots": "x"}, "applications": []}, "hots"),
    ({"target_capacity": 50, "applications": []}, "target_capacity"),
    ({"grpc_options": {"grpc_servicer_functions": ["a.b"]}, "applications": []}, "grpc"),
])
def test_bad_configs_are_refused_naming_the_field(raw, named):
    with pytest.raises(SchemaError) as e:
        ServeDeploySchema.model_validate(raw)
    assert named in str(e.value)


def test_ray_fields_at_their_unset_value_and_empty_grpc_options_are_accepted():
    cfg = ServeDeploySchema.model_validate({"grpc_options": {"port": 9000, "grpc_servicer_functions": []},
                                            "target_capacity": None, "applications": [_cfg()["applications"][0]],
                                            "http_options": {"keep_alive_timeout_s": 90, "root_path": ""}})
    assert cfg.applications[0].import_path == "mod:app"


@serve.deployment(num_replicas=2, user_config={"g": "hi"})
class Leaf:
    def __call__(self):
        return "leaf"


@serve.deployment
class Root:
    def __init__(self, leaf, greeting="hello"):
        self.leaf, self.greeting = leaf, greeting


def builder(args):
    return Root.bind(Leaf.bind(), greeting=args["greeting"])


def test_app_builders_get_the_args_and_bound_apps_take_none():
    app = call_builder(builder, {"greeting": "yo"})
    assert app.deployment.name == "Root" and app.kwargs["greeting"] == "yo"
    bound = Root.bind(Leaf.bind())
    assert call_builder(bound, {}) is bound
    with pytest.raises(ValueError, match="application builder"):
        call_builder(bound, {"x": "1"})
    with pytest.raises(TypeError, match="exactly one parameter"):
        call_builder(lambda: None, {})
    with pytest.raises(TypeError, match="must return an Application"):
        call_builder(lambda args: 3, {})


def test_import_attr_both_forms_and_errors_name_the_path():
    assert import_attr("os.path:join") is import_attr("os.path.join")
    with pytest.raises(ImportError, match="no_such_module_xyz"):
        import_attr("no_such_module_xyz:app")
    with pytest.raises(ImportError, match="nothing_here"):
        import_attr("os:nothing_here")


def test_overrides_apply_by_name_and_unknown_names_are_refused():
    app = builder({"greeting": "x"})
    over = {"Leaf": DeploymentSchema.model_validate({"name": "Leaf", "num_replicas": 3}).options()}
    apply_overrides(app, over, {"env_vars": {"A": "1"}})
    leaf = app.kwargs["leaf"] if "leaf" in app.kwargs else app.args[0]
    assert leaf.deployment.config.num_replicas == 3
    assert leaf.deployment.config.user_config == {"g": "hi"}  # not overridden: as the code says
    assert app.deployment.config.ray_actor_options["runtime_env"] == {"env_vars": {"A": "1"}}
    with pytest.raises(ValueError, match=r"\['Nope'\]"):
        apply_overrides(builder({"greeting": "x"}), {"Nope": {"num_replicas": 1}}, None)


def test_placement_options_come_from_the_config_and_are_checked_against_the_code():
    over = DeploymentSchema.model_validate({"name": "Leaf", "placement_group_bundles": [{"CPU": 1}, {"GPU": 1}],
                                            "placement_group_strategy": "STRICT_PACK"}).options()
    app = builder({"greeting": "x"})
    apply_overrides(app, {"Leaf": over}, None)
    leaf = app.args[0]
    cfg = leaf.deployment.config
    assert cfg.placement_group_bundles == [{"CPU": 1}, {"GPU": 1}] and cfg.placement_group_strategy == "STRICT_PACK"
    assert cfg.ray_actor_options == {"num_cpus": 1}  # the replica (one CPU, Ray's default) fits bundle 0
    entry = app_config(leaf, "m:leaf", "a", "/")["deployments"][0]
    assert entry["placement_group_bundles"] == [{"CPU": 1}, {"GPU": 1}] and "ray_actor_options" not in entry
    # the schema cannot know the code's ray_actor_options; applying the override checks them
    gpu_only = DeploymentSchema.model_validate({"name": "Leaf", "placement_group_bundles": [{"GPU": 1}]}).options()
    with pytest.raises(ValueError, match="`num_cpus` for the actor is 1 but the bundle only has 0 `CPU`"):
        apply_overrides(builder({"greeting": "x"}), {"Leaf": gpu_only}, None)


def test_build_writes_each_deployment_once_with_its_options():
    cfg = app_config(Root.bind(Leaf.bind()), "m:app", "app1", "/")
    assert cfg["import_path"] == "m:app" and cfg["route_prefix"] == "/"
    deps = {d["name"]: d for d in cfg["deployments"]}
    assert deps["Leaf"]["num_replicas"] == 2 and deps["Leaf"]["user_config"] == {"g": "hi"}
    assert deps["Root"] == {"name": "Root", "num_replicas": 1, "max_ongoing_requests": 5}
    ServeDeploySchema.model_validate({"applications": [cfg]})
    with pytest.raises(TypeError, match="Application"):
        app_config(builder, "m:builder", "app1", "/")


def test_cli_args_are_key_value():
    assert parse_args_list(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    for bad in ("a", "=1", "a="):
        with pytest.raises(CLIError, match="key"):
            parse_args_list([bad])


def test_config_versions_follow_the_code_not_the_tunables():
    from ember.serve._private.app_build import pin_versions

    def versions(app):
        pin_versions(app, "m:builder", {"greeting": "x"})
        return {n.deployment.name: n.deployment.version for n in (app, app.args[0])}

    a = versions(builder({"greeting": "x"}))
    tuned = builder({"greeting": "x"})
    apply_overrides(tuned, {"Leaf": {"num_replicas": 5, "user_config": {"g": "other"}, "max_ongoing_requests": 9}},
                    None)
    assert versions(tuned) == a
    moved = builder({"greeting": "x"})
    apply_overrides(moved, {}, {"working_dir": "gcs://_ray_pkg_other.zip"})
    assert versions(moved)["Leaf"] != a["Leaf"]


def test_status_document_has_rays_shape():
    from ember.serve.declarative import status_from_details

    details = {"proxies": {"host:8000": {"status": "HEALTHY", "node_id": "host:8000"}}, "target_capacity": None,
               "applications": {"a": {"status": "DEPLOYING", "message": "", "last_deployed_time_s": 12.5,
                                      "route_prefix": "/", "deployments": {"D": {
                                          "status": "UPDATING", "status_trigger": "CONFIG_UPDATE_STARTED",
                                          "message": "", "replicas": [{"state": "RUNNING"}, {"state": "STARTING"},
                                                                      {"state": "RUNNING"}]}}}}}
    assert status_from_details(details) == {
        "proxies": {"host:8000": "HEALTHY"}, "target_capacity": None,
        "applications": {"a": {"status": "DEPLOYING", "message": "", "last_deployed_time_s": 12.5,
                               "deployments": {"D": {"status": "UPDATING", "status_trigger": "CONFIG_UPDATE_STARTED",
                                                     "replica_states": {"RUNNING": 2, "STARTING": 1},
                                                     "message": ""}}}}}
    assert status_from_details({"proxies": {}, "applications": {}}) == {"proxies": {}, "applications": {},
                                                                         "target_capacity": None}
