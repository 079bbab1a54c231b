"""The raylet's runtime-env module: sets up a lease request's runtime env on this node before a
worker is started in it (Ray's runtime env agent, inside the raylet).

A serialized env (TaskSpec.serialized_runtime_env: canonical JSON, local paths already replaced
by `gcs://_ray_pkg_<hash>.zip|.whl` URIs) is set up once per node and kept as an `EnvContext`:
- `working_dir` / `py_modules`: each package is fetched from the GCS internal KV (namespace
  "runtime_env") and unpacked into the per-node cache (<dir>/pkgs/<name>), once per URI;
  the working_dir becomes the worker's cwd and the first sys.path entry, py_modules follow
  (a wheel is put on sys.path as it is: pure-Python wheels import from the zip);
- `pip`: one virtualenv per distinct requirement set (<dir>/pip/<hash>), created with
  `--system-site-packages` and a .pth that adds this raylet's own site directories, so the base
  packages (ember itself, editable installs included) are inherited; pip runs from the venv's
  python with the env's `pip_install_options`; the worker runs on the venv's python;
- `env_vars`: set in the worker's environment, with EMBER_RUNTIME_ENV (the env itself, which
  the worker's own children inherit).

`OnceTable` (pure) is the build-once state: concurrent requests for the same env, package or
requirement set wait for one build; a failure is reported to every waiter and forgotten (the
next request tries again). The whole set-up is bounded by `config.setup_timeout_seconds`; a
failure's message (pip's output tail included) goes back to the caller as RuntimeEnvSetupError.
"""
from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import site
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, TypeVar

from . import unpack

log = logging.getLogger(__name__)
T = TypeVar("T")
NAMESPACE = "runtime_env"
DEFAULT_TIMEOUT_S = 600
PIP_TAIL_LINES = 25


class SetupFailed(Exception):
    """A runtime env could not be set up; the message says what and why."""


@dataclass
class EnvContext:
    """How to start a worker in an env."""

    python: str = sys.executable
    cwd: str | None = None
    pythonpath: list[str] = field(default_factory=list)
    env_vars: dict[str, str] = field(default_factory=dict)

    def worker_env(self, serialized: str) -> dict[str, str]:
        """The variables a worker in this env is started with (on top of the node's)."""
        out = dict(self.env_vars)
        if self.pythonpath:
            rest = os.environ.get("PYTHONPATH", "")
            out["PYTHONPATH"] = os.pathsep.join(self.pythonpath + ([rest] if rest else []))
        out["EMBER_RUNTIME_ENV"] = serialized
        return out


class OnceTable(Generic[T]):
    """Build-once state per key (pure): absent -> building -> ready(value); a failure goes
    back to absent. `begin` says whether the caller must build."""

    def __init__(self) -> None:
        self.ready: dict[str, T] = {}
        self.building: set[str] = set()
        self.last_error: dict[str, str] = {}

    def begin(self, key: str) -> bool:
        """True: the caller builds key now; False: it is ready or being built."""
        if key in self.ready or key in self.building:
            return False
        self.building.add(key)
        return True

    def succeeded(self, key: str, value: T) -> None:
        """The build of key finished."""
        self.building.discard(key)
        self.last_error.pop(key, None)
        self.ready[key] = value

    def failed(self, key: str, error: str) -> None:
        """The build of key failed: forgotten, so a later request builds again."""
        self.building.discard(key)
        self.last_error[key] = error


class _Once(Generic[T]):
    """OnceTable plus the futures its waiters await (the asyncio shell)."""

    def __init__(self) -> None:
        self.table: OnceTable[T] = OnceTable()
        self.futures: dict[str, asyncio.Future[T]] = {}

    async def get(self, key: str, build: Callable[[], Awaitable[T]]) -> T:
        if key in self.table.ready:
            return self.table.ready[key]
        if not self.table.begin(key):
            return await asyncio.shield(self.futures[key])
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.futures[key] = fut
        try:
            value = await build()
        except BaseException as e:
            self.table.failed(key, str(e))
            self.futures.pop(key, None)
            if not fut.done():
                fut.set_exception(e if isinstance(e, Exception) else SetupFailed("cancelled"))
                fut.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        self.table.succeeded(key, value)
        self.futures.pop(key, None)
        fut.set_result(value)
        return value


KvGet = Callable[[str], Awaitable["bytes | None"]]


class RuntimeEnvManager:
    """Sets up envs on this node (see the module doc); `ensure` is the entry point."""

    def __init__(self, cache_dir: str, kv_get: KvGet | None = None) -> None:
        self.cache_dir = cache_dir
        self.kv_get = kv_get
        self.envs: _Once[EnvContext] = _Once()
        self.packages: _Once[str] = _Once()
        self.venvs: _Once[str] = _Once()
        self.failures: list[tuple[str, str]] = []  # (env hash, message), the latest last
        # Called after a failed set-up (the server publishes the latest failures for `ember status`).
        self.on_failure: Callable[[], object] | None = None

    def context(self, key: str) -> EnvContext | None:
        """The set-up env of that hash, or None."""
        return self.envs.table.ready.get(key)

    async def ensure(self, key: str, serialized: str) -> EnvContext:
        """Sets up the env (once; concurrent callers wait for the same set-up) within its
        setup_timeout_seconds. SetupFailed with the reason."""
        return await self.envs.get(key, lambda: self._setup(key, serialized))

    async def _setup(self, key: str, serialized: str) -> EnvContext:
        try:
            env = json.loads(serialized)
        except ValueError as e:
            raise SetupFailed(f"the runtime env is not valid JSON: {e}") from None
        timeout = (env.get("config") or {}).get("setup_timeout_seconds", DEFAULT_TIMEOUT_S)
        try:
            return await asyncio.wait_for(self._build(env), None if timeout == -1 else timeout)
        except asyncio.TimeoutError:
            msg = (f"Setting up the runtime env timed out after {timeout}s "
                   f"(config['setup_timeout_seconds']); env: {_short(serialized)}")
        except SetupFailed as e:
            msg = str(e)
        except Exception as e:  # an unexpected I/O error: still the env's failure, said plainly
            msg = f"{type(e).__name__}: {e}"
        self.failures.append((key, msg))
        del self.failures[:-20]
        log.error("runtime env %s could not be set up: %s", key, msg)
        if self.on_failure is not None:
            self.on_failure()
        raise SetupFailed(msg)

    async def _build(self, env: dict[str, Any]) -> EnvContext:
        ctx = EnvContext(env_vars=dict(env.get("env_vars") or {}))
        if env.get("working_dir"):
            ctx.cwd = await self.package(env["working_dir"])
            ctx.pythonpath.append(ctx.cwd)
        for uri in env.get("py_modules") or []:
            ctx.pythonpath.append(await self.package(uri))
        if env.get("pip"):
            ctx.python = await self.venv(env["pip"])
        return ctx

    # ---------------------------------------------------------------- packages
    async def package(self, uri: str) -> str:
        """The local path of a package (unpacked directory, or the wheel file), fetched once."""
        return await self.packages.get(uri, lambda: self._fetch(uri))

    async def _fetch(self, uri: str) -> str:
        name = uri.rsplit("/", 1)[-1]
        dest = os.path.join(self.cache_dir, "pkgs", name if name.endswith(".whl") else name[:-4])
        if os.path.exists(dest):
            return dest  # unpacked earlier (by this or another raylet sharing the cache)
        if self.kv_get is None:
            raise SetupFailed("this raylet has no GCS connection to fetch packages from")
        data = await self.kv_get(uri)
        if data is None:
            raise SetupFailed(f"package {uri} is not in the GCS (uploaded to another cluster, or "
                              f"the GCS lost it); submit the task again to re-upload it")
        await asyncio.to_thread(_install_package, data, dest)
        return dest

    # ---------------------------------------------------------------- pip
    async def venv(self, pip: dict[str, Any]) -> str:
        """The python of the virtualenv for this requirement set, built once per node."""
        spec = json.dumps(pip, sort_keys=True)
        key = hashlib.sha1(spec.encode()).hexdigest()[:16]
        return await self.venvs.get(key, lambda: self._build_venv(key, pip))

    async def _build_venv(self, key: str, pip: dict[str, Any]) -> str:
        for p in pip.get("packages") or []:  # the client checks too; a raw client may not have
            if not isinstance(p, str) or p.strip().startswith("-"):
                raise SetupFailed(f"pip: {p!r} is not a requirement specifier (pip options "
                                  f"go in 'pip_install_options' only)")
        root = os.path.join(self.cache_dir, "pip", key)
        python = os.path.join(root, "bin", "python")
        ready = os.path.join(root, ".ember-ready")
        os.makedirs(os.path.dirname(root), exist_ok=True)
        lock = await asyncio.to_thread(_lock, root + ".lock")  # raylets sharing the cache
        try:
            if os.path.exists(ready):
                return python
            shutil.rmtree(root, ignore_errors=True)  # a build that died half way
            await _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                        root], "creating the virtualenv")
            _inherit_base(root)
            packages = list(pip.get("packages") or [])
            await _run([python, "-m", "pip", "install", *pip.get("pip_install_options", []),
                        *packages], f"pip install {' '.join(packages)}")
            if pip.get("pip_check"):
                await _run([python, "-m", "pip", "check"], "pip check")
            with open(ready, "w") as f:
                f.write(json.dumps(pip, sort_keys=True))
            return python
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        finally:
            os.close(lock)


def _install_package(data: bytes, dest: str) -> None:
    """Writes a wheel, or unpacks a zip, into dest (atomically: a temporary name, renamed)."""
    tmp = f"{dest}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        if dest.endswith(".whl"):
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
        else:
            os.makedirs(tmp, 0o755)  # an empty package (everything excluded) is still a directory
            os.chmod(tmp, 0o755)
            try:
                unpack.unpack_zip(io.BytesIO(data), tmp, os.path.basename(dest))
            except unpack.UnpackError as e:
                raise SetupFailed(str(e)) from None
        try:
            os.rename(tmp, dest)
        except OSError:
            if not os.path.exists(dest):  # else: someone else won the race with equal content
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.unlink(tmp)


def _inherit_base(root: str) -> None:
    """Makes the venv see this raylet's site directories (a venv made from a venv only sees
    the base interpreter's): a .pth whose import line runs site.addsitedir on each, after the
    venv's own site-packages (installed packages win)."""
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = os.path.join(root, "lib", ver, "site-packages")
    os.makedirs(target, exist_ok=True)
    lines = "; ".join(f"site.addsitedir({d!r})" for d in dirs)
    with open(os.path.join(target, "_ember_base_site.pth"), "w") as f:
        f.write(f"import site; {lines}\n")


def _lock(path: str) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


async def _run(argv: list[str], what: str) -> None:
    """Runs a set-up command; SetupFailed with its output's tail when it fails. Killed when
    the set-up is cancelled (timeout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL, env=env)
    try:
        out, _ = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        tail = "\n".join(out.decode(errors="replace").rstrip().splitlines()[-PIP_TAIL_LINES:])
        raise SetupFailed(f"{what} failed (exit code {proc.returncode}):\n{tail}")


def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else s[:n] + "..."
