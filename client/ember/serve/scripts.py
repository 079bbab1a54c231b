"""The `serve` command line, as Ray Serve's:

    serve run CONFIG_OR_IMPORT_PATH [key=value ...]   deploy here and block; Ctrl-C shuts Serve down
    serve deploy CONFIG_OR_IMPORT_PATH [key=value ...] PUT the config to the dashboard's REST API
    serve status [-n NAME]                            applications and deployments, as YAML
    serve config [-n NAME]                            the deployed configs, as YAML
    serve build IMPORT_PATH ... [-o FILE]             a config file for the applications
    serve shutdown [-y]                               delete every application

`run` connects as a driver (`--address` is the cluster's GCS address; none: the running cluster
or a new local one). The others talk HTTP to the dashboard (`--address http://HOST:8265`; without
it RAY_DASHBOARD_ADDRESS as Ray's, then the dashboard of the cluster `ember start` runs here),
sending the cluster's token.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from ember_common import envvars

SERVE_PATH = "/api/serve/applications/"


class CLIError(Exception):
    """An error the CLI prints (without a traceback) before exiting with status 1."""


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise CLIError("the serve CLI needs PyYAML: pip install 'ember[serve]'") from None
    return yaml


def _dump(doc: Any) -> str:
    """YAML with a blank line between top-level keys (as Ray's CLI prints)."""
    yaml = _yaml()
    if not isinstance(doc, dict) or not doc:
        return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    parts = [yaml.safe_dump({k: v}, sort_keys=False, default_flow_style=False) for k, v in doc.items()]
    return "\n".join(parts)


def parse_args_list(items: list[str]) -> dict[str, str]:
    """Application builder arguments `key=value` (Ray's form; the value is a string)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CLIError(f"invalid application argument {item!r}: must be of the form <key>=<value>")
        out[key] = value
    return out


def _runtime_env(a: argparse.Namespace) -> dict[str, Any]:
    env: dict[str, Any] = {}
    if a.runtime_env:
        with open(a.runtime_env) as f:
            env = _yaml().safe_load(f) or {}
    if a.runtime_env_json:
        if env:
            raise CLIError("give --runtime-env or --runtime-env-json, not both")
        env = json.loads(a.runtime_env_json)
    if a.working_dir:
        env["working_dir"] = a.working_dir
    return env


def _config_from(target: str, args: dict[str, str], name: str | None, env: dict[str, Any]) -> dict[str, Any]:
    """A config file's contents, or a one-application config for an import path."""
    if os.path.isfile(target):
        if args:
            raise CLIError("application arguments cannot be given with a config file (put them in its args)")
        with open(target) as f:
            cfg = _yaml().safe_load(f)
        if not isinstance(cfg, dict):
            raise CLIError(f"{target}: a Serve config is a mapping (proxy_location, http_options, applications)")
        return cfg
    app: dict[str, Any] = {"import_path": target, "args": args}
    if env:
        app["runtime_env"] = env
    if name is not None:
        app["name"] = name
    return {"applications": [app]}


# ---------------------------------------------------------------------------- REST client
def _dashboard(address: str | None) -> str:
    """--address, else RAY_DASHBOARD_ADDRESS (Ray's), else what `ember job` uses: its variables,
    then the dashboard of the cluster `ember start` runs here, then http://localhost:8265."""
    if address:
        return address
    from ember.job_submission import _resolve

    return os.environ.get("RAY_DASHBOARD_ADDRESS") or _resolve(None)


def _request(address: str | None, method: str, body: Any = None) -> Any:
    from ember_common import auth

    address = _dashboard(address)

    if "://" not in address or not address.startswith(("http://", "https://")):
        raise CLIError(f"--address {address!r} must be the dashboard's HTTP address, e.g. http://127.0.0.1:8265")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **auth.http_headers()}
    req = urllib.request.Request(address.rstrip("/") + SERVE_PATH, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        raise CLIError(f"{method} {SERVE_PATH} failed ({e.code}): {e.read().decode(errors='replace')}") from None
    except OSError as e:
        raise CLIError(f"cannot reach the dashboard at {address}: {e}") from None
    return json.loads(text) if text.strip() else None


# ---------------------------------------------------------------------------- commands
def cmd_deploy(a: argparse.Namespace) -> int:
    """PUT the config; the dashboard builds and deploys it."""
    from .schema import ServeDeploySchema

    cfg = _config_from(a.config_or_import_path, parse_args_list(a.arguments), a.name, _runtime_env(a))
    ServeDeploySchema.model_validate(cfg)  # refuse here, naming the field, before any request
    _request(a.address, "PUT", cfg)
    print("Sent deploy request successfully.\n * Use `serve status` to check applications' statuses.\n"
          " * Use `serve config` to see the current application config(s).")
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    """Ray's status document."""
    from .declarative import status_from_details

    st = status_from_details(_request(a.address, "GET"))
    if a.name is None:
        print(_dump(st), end="")
    elif a.name not in st["applications"]:
        print(f'Application "{a.name}" does not exist.', file=sys.stderr)
        return 1
    else:
        print(_dump(st["applications"][a.name]), end="")
    return 0


def cmd_config(a: argparse.Namespace) -> int:
    """The configs the applications were deployed from."""
    apps = _request(a.address, "GET")["applications"]
    yaml = _yaml()
    if a.name is not None:
        cfg = (apps.get(a.name) or {}).get("deployed_app_config")
        print(yaml.safe_dump(cfg, sort_keys=False) if cfg else f'No config has been deployed for application "{a.name}".',
              end="" if cfg else "\n")
        return 0
    docs = [yaml.safe_dump(x["deployed_app_config"], sort_keys=False) for x in apps.values()
            if x.get("deployed_app_config")]
    print("\n---\n\n".join(docs) if docs else "No configuration was found.", end="" if docs else "\n")
    return 0


def cmd_shutdown(a: argparse.Namespace) -> int:
    """DELETE: every application, the proxy and the controller."""
    if not a.yes:
        answer = input(f'This will shut down Serve on the cluster at "{_dashboard(a.address)}" and delete all applications '
                       "there. Do you want to continue? [y/N]: ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborted!")
            return 1
    _request(a.address, "DELETE")
    print("Sent shutdown request; applications will be deleted asynchronously.")
    return 0


def _connect(address: str | None, env: dict[str, Any]) -> None:
    """The cluster at address; none given: EMBER_ADDRESS/RAY_ADDRESS, else the one `ember start`
    runs on this machine, else a new local one (Ray's `serve run` finds a running cluster too)."""
    import ember

    if address is None and not (envvars.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS")):
        try:
            ember.init(address="auto", runtime_env=env or None)
            return
        except ConnectionError:
            pass  # none running here: start one
    ember.init(address=address, runtime_env=env or None)


def cmd_start(a: argparse.Namespace) -> int:
    """Starts Serve (its controller and HTTP proxy) on a running cluster and returns; Serve stays
    up after this command ends, as Ray's `serve start`."""
    import ember
    from ember import serve

    for flag, value in (("--grpc-port", a.grpc_port), ("--grpc-servicer-functions", a.grpc_servicer_functions)):
        if value:
            print(f"serve: error: {flag} is not implemented by Ember (no gRPC proxy)", file=sys.stderr)
            return 2
    try:
        ember.init(address=a.address or "auto", log_to_driver=False)
    except ConnectionError as e:
        print(f"serve: error: {e}", file=sys.stderr)
        return 1
    try:
        serve.start(proxy_location=a.proxy_location, http_options={"host": a.http_host, "port": a.http_port})
        print(f"Started Serve with its HTTP proxy at http://{a.http_host}:{a.http_port}")
    finally:
        ember.shutdown()
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    """Deploys in this process (a driver) and blocks until Ctrl-C, which shuts Serve down."""
    import ember
    from ember import serve

    from . import declarative
    from ._private.app_build import call_builder, import_attr

    if a.reload:
        raise CLIError("--reload is not implemented by Ember's serve run")
    sys.path.insert(0, os.path.abspath(a.app_dir))
    args = parse_args_list(a.arguments)
    env = _runtime_env(a)
    is_config = os.path.isfile(a.config_or_import_path)
    if is_config:
        cfg = _config_from(a.config_or_import_path, args, None, {})
        from .schema import ServeDeploySchema

        schema = ServeDeploySchema.model_validate(cfg)
    else:
        app = call_builder(import_attr(a.config_or_import_path), args)
    _connect(a.address, env)
    try:
        if is_config:
            names = declarative.deploy_config(schema, wait=True)
            print(f"Deployed application(s) {names}.", flush=True)
        else:
            serve.run(app, name=a.name, route_prefix=a.route_prefix)
            print(f"Deployed app {a.name!r}.", flush=True)
        addr = serve.api.proxy_address()
        if addr is not None:
            print(f"Serving HTTP at http://{addr[0]}:{addr[1]}", flush=True)
        while a.blocking:
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("Got KeyboardInterrupt, shutting down...", flush=True)
        serve.shutdown()
        ember.shutdown()
    return 0


def cmd_build(a: argparse.Namespace) -> int:
    """Writes a config for the given applications (names app1, app2, ...)."""
    from . import schema
    from ._private.app_build import import_attr
    from .build import app_config

    sys.path.insert(0, os.path.abspath(a.app_dir))
    apps = []
    for i, path in enumerate(a.import_paths):
        target = import_attr(path)
        name = f"app{i + 1}"
        apps.append(app_config(target, path, name, "/" if len(a.import_paths) == 1 else f"/{name}"))
    cfg = {"proxy_location": "EveryNode", "http_options": {"host": schema.DEFAULT_HTTP_HOST,
                                                           "port": schema.DEFAULT_HTTP_PORT}, "applications": apps}
    schema.ServeDeploySchema.model_validate(cfg)
    text = "# This file was generated using the `serve build` command on Ember.\n\n" + _dump(cfg)
    if a.output_path:
        with open(a.output_path, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _parser() -> argparse.ArgumentParser:
    default_dash = None  # _dashboard() finds it
    p = argparse.ArgumentParser(prog="serve", description="Manage Serve applications on an Ember cluster.")
    sub = p.add_subparsers(dest="command", required=True)

    def app_target(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("config_or_import_path", help="a config file (YAML) or an import path module:app")
        sp.add_argument("arguments", nargs="*", help="application builder arguments key=value")
        sp.add_argument("--runtime-env", default=None, help="a YAML file with the runtime_env")
        sp.add_argument("--runtime-env-json", default=None, help="the runtime_env as JSON")
        sp.add_argument("--working-dir", default=None, help="the runtime_env's working_dir")

    r = sub.add_parser("run", help="deploy and block until Ctrl-C")
    app_target(r)
    r.add_argument("--app-dir", "-d", default=".", help="added to the import path (default: .)")
    r.add_argument("--address", "-a", default=None, help="the cluster's address (default: a running or new one)")
    r.add_argument("--blocking", dest="blocking", action="store_true", default=True)
    r.add_argument("--non-blocking", dest="blocking", action="store_false")
    r.add_argument("--reload", "-r", action="store_true", help="(Ray's; not implemented by Ember)")
    r.add_argument("--route-prefix", default="/")
    r.add_argument("--name", default="default")
    r.set_defaults(fn=cmd_run)

    d = sub.add_parser("deploy", help="deploy a config through the dashboard")
    app_target(d)
    d.add_argument("--name", default=None)
    d.add_argument("--address", "-a", default=default_dash)
    d.set_defaults(fn=cmd_deploy)

    for name, fn, text in (("status", cmd_status, "the applications' statuses"),
                           ("config", cmd_config, "the deployed configs")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--address", "-a", default=default_dash)
        s.add_argument("--name", "-n", default=None)
        s.set_defaults(fn=fn)

    sh = sub.add_parser("shutdown", help="delete every application")
    sh.add_argument("--address", "-a", default=default_dash)
    sh.add_argument("--yes", "-y", action="store_true")
    sh.set_defaults(fn=cmd_shutdown)

    st = sub.add_parser("start", help="start Serve on a running cluster (it stays up)")
    st.add_argument("--address", "-a", default=None, help="the cluster's address (default: the one running here)")
    st.add_argument("--http-host", default="127.0.0.1")
    st.add_argument("--http-port", type=int, default=8000)
    st.add_argument("--proxy-location", default=None, help="EveryNode (default), HeadOnly or Disabled")
    st.add_argument("--grpc-port", type=int, default=None, help="(Ray's; not implemented by Ember)")
    st.add_argument("--grpc-servicer-functions", action="append", default=None,
                    help="(Ray's; not implemented by Ember)")
    st.set_defaults(fn=cmd_start)

    b = sub.add_parser("build", help="write a config for applications")
    b.add_argument("import_paths", nargs="+")
    b.add_argument("--app-dir", "-d", default=".")
    b.add_argument("--output-path", "-o", default=None)
    b.set_defaults(fn=cmd_build)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `serve` console script."""
    a = _parser().parse_args(argv)
    try:
        return int(a.fn(a))
    except (CLIError, ValueError, TypeError, ImportError, OSError, RuntimeError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
