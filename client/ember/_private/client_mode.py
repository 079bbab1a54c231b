"""Client mode's side of the core: this process's connection to a client proxy, when
`ember.init` was given a `ray://` or `ember://` address (the connection itself, its stubs and the
proxy live in `ember.util.client`). The public API checks `active` first and hands its call to
the connection; an API without a client-mode path raises NotImplementedError naming itself."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

if TYPE_CHECKING:
    from .node import ServiceProcess

SCHEMES = ("ray://", "ember://")
PROXY_MODULE = "ember.util.client.proxy"
active: Any = None  # the ClientConnection while this process is in client mode


def is_client_address(address: Any) -> TypeGuard[str]:
    return isinstance(address, str) and address.startswith(SCHEMES)


def connect(address: str, given: dict[str, Any]) -> Any:
    """Connects (the caller holds the init lock); returns what `ember.init` returns."""
    global active
    from ember.util.client import client as client_mod

    bad = [k for k, v in given.items() if v is not None and k not in client_mod.INIT_OPTIONS]
    if bad:
        raise client_mod.unsupported(f"ember.init({'=..., '.join(bad)}=...)")
    active = client_mod.ClientConnection(address, {k: v for k, v in given.items() if v is not None})
    return client_mod.ClientInfo(active)


def info() -> Any:
    """What `ember.init(..., ignore_reinit_error=True)` returns while connected."""
    from ember.util.client import client as client_mod

    return client_mod.ClientInfo(active)


def disconnect() -> bool:
    """Ends the session, if this process has one (True then)."""
    global active
    conn, active = active, None
    if conn is None:
        return False
    conn.disconnect()
    return True


def unsupported_here() -> NoReturn:
    """Raises NotImplementedError naming the public function that called our caller."""
    from ember.util.client import client as client_mod

    raise client_mod.unsupported(f"{sys._getframe(2).f_code.co_name}()")


def start_proxy(session_dir: str, gcs_address: str, *, host: str, port: int,
                die_with_parent: bool = False) -> ServiceProcess:
    """Starts the client proxy for a cluster (`ember start --head --ray-client-server-port`, or
    the embedded cluster's `_ray_client_server_port`); RuntimeError when it cannot listen."""
    from . import node as node_mod

    if not 0 <= port <= 65535:
        raise ValueError(f"ray client server port must be in 0..65535, got {port}")
    return node_mod.start_service(PROXY_MODULE, ["--gcs-address", gcs_address, "--host", host,
                                                 "--port", str(port)],
                                  session_dir, "client_proxy", timeout_s=60.0, die_with_parent=die_with_parent)


def start_embedded_proxy(cluster: Any, port: int) -> None:
    """`ember.init(_ray_client_server_port=N)`: the embedded cluster's client proxy on loopback,
    a child process stopped first with the cluster; its address in `cluster.client_server_address`
    (and init()'s returned context). A failed start stops the cluster and raises."""
    try:
        proc = start_proxy(cluster.session_dir, cluster.gcs_address, host="127.0.0.1", port=port,
                           die_with_parent=True)
    except Exception:
        cluster.stop()
        raise
    cluster.procs.insert(1, proc)  # EmbeddedCluster.stop: procs[1:] first, the GCS last
    cluster.client_server_address = f"ember://127.0.0.1:{proc.port}"
