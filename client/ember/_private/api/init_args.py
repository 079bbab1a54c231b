"""Ray's `ray.init` arguments outside Ember's signature: which ones Ember takes, and the checks
that refuse, by name, what it cannot honour (`ember.init` calls `check_extras`)."""
from __future__ import annotations

import os
from typing import Any


def is_loopback(host: str) -> bool:
    return host in ("localhost", "") or host.startswith("127.") or host == "::1"


# Ray's init arguments outside its signature that Ember takes (check_extras says how).
PRIVATE_INIT_ARGS = {"dashboard_host", "dashboard_port", "local_mode", "_temp_dir", "_system_config",
                     "job_config", "_node_ip_address", "_metrics_export_port", "labels",
                     "_ray_client_server_port"}
# Ray's JobConfig fields (a JobConfig's attributes, or a dict's keys): runtime_env and
# ray_namespace are honoured, the others raise when set.
JOB_CONFIG_FIELDS = ("runtime_env", "ray_namespace", "metadata", "jvm_options", "code_search_path",
                     "client_job", "default_actor_lifetime", "_default_actor_lifetime", "py_driver_sys_path",
                     "_py_driver_sys_path", "py_logging_config", "_py_logging_config")


def check_extras(kwargs: dict[str, Any], connecting: bool, include_dashboard: bool | None,
                 namespace: str | None, runtime_env: dict[str, Any] | None
                 ) -> tuple[bool | None, str | None, dict[str, Any] | None]:
    """Checks Ray's private/extra init arguments; what Ember cannot honour raises ValueError
    naming it. Returns include_dashboard, namespace and runtime_env as they apply."""
    if kwargs.get("local_mode"):
        raise ValueError("local_mode=True is not implemented by Ember (tasks always run in worker "
                         "processes; Ray deprecated local mode)")
    if kwargs.get("_system_config"):
        raise ValueError("_system_config is not implemented by Ember (its keys are Ray internals); "
                         "Ember's settings are EMBER_* environment variables")
    temp = kwargs.get("_temp_dir")
    if temp is not None:
        from .. import node as node_mod

        if os.path.realpath(str(temp)) != os.path.realpath(node_mod.EMBER_TMP):
            raise ValueError(f"_temp_dir={temp!r}: Ember's temp root is fixed when ember is imported "
                             f"({node_mod.EMBER_TMP}); set EMBER_TEMP_DIR in the environment instead")
    if kwargs.get("labels") is not None:  # the embedded node's labels (Ray's init(labels=...))
        from ember_common import labels as kit_labels

        kit_labels.validate_node_labels(kwargs["labels"], "ember.init(labels=...)")
    dash = [k for k in ("dashboard_host", "dashboard_port") if kwargs.get(k) is not None]
    if connecting:
        given = dash + [k for k in ("_metrics_export_port", "labels") if kwargs.get(k)] + [
            k for k in ("_ray_client_server_port",) if kwargs.get(k) is not None]
        if include_dashboard:
            given.insert(0, "include_dashboard")
        if given:
            raise ValueError(f"{', '.join(given)} describe a new cluster's processes; they cannot be given "
                             "when connecting to an existing one (set them in `ember start`)")
    elif dash:
        if include_dashboard is False:
            raise ValueError(f"{', '.join(dash)} given with include_dashboard=False")
        include_dashboard = True  # as Ray, which starts its dashboard when it is installed
    ip = kwargs.get("_node_ip_address")
    if ip is not None and not connecting and not is_loopback(str(ip)):
        raise ValueError(f"_node_ip_address={ip!r}: the embedded cluster listens on loopback only; "
                         "start a cluster with `ember start --head` to serve other machines")
    jc = kwargs.get("job_config")
    if jc is not None:
        if isinstance(jc, dict):
            bad = sorted(set(jc) - set(JOB_CONFIG_FIELDS))
            if bad:
                raise ValueError(f"unknown job_config field(s) {bad}")
            fields = dict(jc)
        else:
            fields = {k: getattr(jc, k) for k in JOB_CONFIG_FIELDS if hasattr(jc, k)}
        if fields.get("runtime_env"):
            if runtime_env:
                raise ValueError("runtime_env is given both to init() and in job_config; give it once")
            runtime_env = dict(fields["runtime_env"])
        if fields.get("ray_namespace"):
            if namespace is not None and namespace != fields["ray_namespace"]:
                raise ValueError(f"namespace={namespace!r} and job_config's ray_namespace="
                                 f"{fields['ray_namespace']!r} differ")
            namespace = fields["ray_namespace"]
        def is_set(v: Any) -> bool:
            if isinstance(v, (list, tuple, dict, set, str)):
                return len(v) > 0 and v != "non_detached"
            return v is not None and v is not False

        rest = sorted(k.lstrip("_") for k, v in fields.items()
                      if k not in ("runtime_env", "ray_namespace") and is_set(v))
        if rest:
            raise ValueError(f"job_config {rest} not implemented by Ember (runtime_env and ray_namespace are)")
    return include_dashboard, namespace, runtime_env
