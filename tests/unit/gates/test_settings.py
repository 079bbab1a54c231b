"""One settings object per service: command line, environment and container entry point agree.

to_argv -> from_argv round-trips; a missing required key fails naming it; malformed values name
the flag or variable; unknown EMBER_* variables warn; docker/entrypoint.py's commands parse
back into the settings the container's environment describes."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import warnings

import pytest

from ember_common.settings import (
    SERVICES,
    DashboardSettings,
    GcsSettings,
    ObjmgrSettings,
    RayletSettings,
    ServeProxySettings,
    SettingsError,
    known_env_vars,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

RAYLET = RayletSettings(gcs_address="10.0.0.1:6379", objmgr_address="10.0.0.2:8076", node_id="n" * 28,
                        store_dir="/dev/shm/s", session_dir="/tmp/sess", resources={"CPU": 4, "GPU": 1},
                        object_store_memory_bytes=2**20, node_ip="10.0.0.2", port=8077, head=True,
                        num_prestart_workers=0, metrics_export_port=9000, die_with_parent=True)
EXAMPLES = [GcsSettings(port=0, storage="etcd://e:2379", cluster_name="c1", session_dir="/s",
                        port_file="/tmp/p"),
            RAYLET,
            ObjmgrSettings(store_dir="/dev/shm/x", capacity_bytes=4096, spill_dir="s3://b/p",
                           gcs_address="g:1", node_id="n1", port=1),
            ServeProxySettings(gcs_address="g:1", port=0, connect_timeout_s=5.0, metrics_export_port=9103,
                               log_level="DEBUG"),
            DashboardSettings(gcs_address="g:1", host="0.0.0.0", log_dir="/l", trace_dir="/t", port_file="/p")]


@pytest.mark.parametrize("s", EXAMPLES, ids=lambda s: type(s).__name__)
def test_to_argv_from_argv_round_trip(s):
    assert type(s).from_argv(s.to_argv()) == s


def test_services_parse_their_command_line_with_their_settings():
    from ember_gcs.server import parse_args as gcs_args
    from ember_objmgr.server import parse_args as objmgr_args
    from ember_raylet.server import parse_args as raylet_args

    assert raylet_args(RAYLET.to_argv()) == RAYLET
    assert isinstance(gcs_args([]), GcsSettings) and gcs_args([]).port == 6379
    assert objmgr_args(["--store-dir", "/x"]).capacity_bytes == 0


def test_missing_required_flag_names_it(capsys):
    with pytest.raises(SystemExit) as e:
        RayletSettings.from_argv(["--gcs-address", "g:1"])
    assert e.value.code == 2
    assert "--node-id" in capsys.readouterr().err


def test_malformed_flag_value_names_the_flag(capsys):
    with pytest.raises(SettingsError, match="--port='x' is not a valid int"):
        GcsSettings.from_argv(["--port", "x"])
    with pytest.raises(SystemExit):
        RayletSettings.from_argv_or_exit([*RAYLET.to_argv(), "--resources", '{"CPU": -1}'])
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'CPU'" in err


def test_from_env_reads_each_field_and_names_missing_variables():
    env = {"EMBER_STORE_DIR": "/dev/shm/a", "EMBER_OBJECT_STORE_BYTES": "512", "EMBER_OBJMGR_PORT": "7"}
    s = ObjmgrSettings.from_env(env, node_id="n2")
    assert (s.store_dir, s.capacity_bytes, s.port, s.node_id) == ("/dev/shm/a", 512, 7, "n2")
    with pytest.raises(SettingsError, match="missing required setting EMBER_STORE_DIR"):
        ObjmgrSettings.from_env({})
    with pytest.raises(SettingsError, match="missing required setting EMBER_GCS_ADDRESS"):
        RayletSettings.from_env({})
    with pytest.raises(SettingsError, match="EMBER_GCS_PORT='-3' is negative"):
        GcsSettings.from_env({"EMBER_GCS_PORT": "-3"})
    with pytest.raises(SettingsError, match="EMBER_HEAD='maybe'"):
        RayletSettings.from_env({"EMBER_HEAD": "maybe", "EMBER_GCS_ADDRESS": "g:1",
                                 "EMBER_OBJMGR_ADDRESS": "o:1", "EMBER_NODE_ID": "n",
                                 "EMBER_STORE_DIR": "/s", "EMBER_SESSION_DIR": "/t"})
    with pytest.raises(TypeError, match="no settings"):
        GcsSettings.from_env({}, prot=1)


def test_unknown_ember_variables_warn_known_ones_do_not():
    with pytest.warns(RuntimeWarning, match="EMBER_GCS_PROT"):
        GcsSettings.from_env({"EMBER_GCS_PROT": "1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GcsSettings.from_env({"EMBER_RAYLET_PORT": "1", "EMBER_HEARTBEAT_PERIOD_S": "1",
                              "EMBER_TEST_X": "1", "EMBER_NUM_CPUS": "2"}, extra_known=["EMBER_NUM_CPUS"])
    every = {f.metadata["env"] for cls in SERVICES for f in dataclasses.fields(cls) if f.metadata["env"]}
    assert every <= known_env_vars()


def test_constructing_bad_settings_fails_naming_the_field():
    with pytest.raises(SettingsError, match="--port must be at most 65535"):
        GcsSettings(port=70000)
    with pytest.raises(ValueError, match="'GPU'"):
        dataclasses.replace(RAYLET, resources={"GPU": float("nan")})


def _entrypoint():
    spec = importlib.util.spec_from_file_location("ember_entrypoint", os.path.join(ROOT, "docker", "entrypoint.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_container_commands_parse_back_into_settings(monkeypatch):
    for name in list(os.environ):
        if name.startswith("EMBER_"):
            monkeypatch.delenv(name)
    ep = _entrypoint()
    ep.SETTINGS.update({"EMBER_GCS_ADDRESS": "127.0.0.1:6379", "EMBER_NODE_IP": "127.0.0.1",
                        "EMBER_NUM_CPUS": "3", "EMBER_RESOURCES": '{"disk": 1}', "EMBER_HEAD": "1",
                        "EMBER_METRICS_EXPORT_PORT": "9100", "EMBER_CLUSTER_NAME": "c9"})
    cmd = ep.command("raylet")
    assert cmd[0] == "ember-raylet"
    r = RayletSettings.from_argv(cmd[1:])
    assert r.resources == {"CPU": 3.0, "disk": 1.0} and r.head and r.port == 8077
    assert r.objmgr_address == "127.0.0.1:8076" and r.metrics_export_port == 9100
    assert r.store_dir == f"/dev/shm/ember-store/c9/{r.node_id}" and r.port_file == ep.PORT_FILE
    o = ObjmgrSettings.from_argv(ep.command("objmgr")[1:])
    assert o.node_id == r.node_id and o.capacity_bytes == 256 * 2**20 and o.metrics_export_port == 9101
    g = GcsSettings.from_argv(ep.command("gcs")[1:])
    assert g.storage == "etcd://etcd:2379" and g.cluster_name == "c9" and g.metrics_export_port == 9102
    monkeypatch.setenv("EMBER_NODE_IP", "127.0.0.1")  # the serve-proxy role sets it: restored after
    proxy = ep.command("serve-proxy")
    assert proxy[1:3] == ["-m", "ember_serve_proxy"]
    p = ServeProxySettings.from_argv(proxy[3:])
    assert (p.gcs_address, p.host, p.port, p.metrics_export_port, p.port_file) == (
        "127.0.0.1:6379", "0.0.0.0", 8000, 9103, None)
    ep.SETTINGS.update({"EMBER_HTTP_PORT": "8100", "EMBER_DASHBOARD_PORT": "8300", "EMBER_LOG_LEVEL": "DEBUG"})
    assert ServeProxySettings.from_argv(ep.command("serve-proxy")[3:]).port == 8100
    dash = ep.command("dashboard")
    assert dash[1:3] == ["-m", "ember_dashboard"]
    d = DashboardSettings.from_argv(dash[3:])
    assert (d.gcs_address, d.host, d.port, d.port_file, d.metrics_export_port, d.log_level) == (
        "127.0.0.1:6379", "0.0.0.0", 8300, ep.PORT_FILE, 0, "DEBUG")


def test_driver_services_take_unset_flags_from_the_environment():
    env = {"EMBER_ADDRESS": "h:1", "EMBER_LOG_LEVEL": "DEBUG", "EMBER_TRACE_DIR": "/spans", "EMBER_GCS_PORT": "1"}
    d = DashboardSettings.from_argv([], env_defaults=env)
    assert (d.gcs_address, d.log_level, d.trace_dir, d.port) == ("h:1", "DEBUG", "/spans", 8265)
    assert DashboardSettings.from_argv(["--gcs-address", "g:2"], env_defaults=env).gcs_address == "g:2"
    assert ServeProxySettings.from_argv([], env_defaults={"EMBER_ADDRESS": ""}).gcs_address == ""
    assert ServeProxySettings.from_argv([]).log_level == "INFO"
    # gcs/raylet/objmgr parse their command line alone, as before
    assert GcsSettings.from_argv([]).port == 6379


@pytest.mark.parametrize("module", ["ember_serve_proxy.__main__", "ember_dashboard.__main__"])
def test_driver_services_without_a_gcs_address_exit_2_naming_it(module, monkeypatch, capsys):
    import importlib

    monkeypatch.delenv("EMBER_ADDRESS", raising=False)
    assert importlib.import_module(module).main([]) == 2
    assert "--gcs-address (or EMBER_ADDRESS) is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(["--gcs-address", "g:1", "--port", "70000"])
    assert e.value.code == 2 and "--port must be at most 65535" in capsys.readouterr().err
