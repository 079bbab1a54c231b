"""@serve.deployment, Deployment.options/.bind, Application and @serve.ingress."""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from .config import DeploymentConfig, build_config


class Application:
    """A bound deployment: the deployment plus the arguments its replicas are built with. Bound
    applications passed as arguments become DeploymentHandles inside the replicas."""

    def __init__(self, deployment: Deployment, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.deployment = deployment
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Application({self.deployment.name})"


class Deployment:
    """What @serve.deployment makes of a class or function."""

    def __init__(self, func_or_class: Any, name: str, config: DeploymentConfig,
                 version: str | None = None, route_prefix: str | None = None,
                 init_args: tuple[Any, ...] | None = None, init_kwargs: dict[str, Any] | None = None) -> None:
        self.func_or_class = func_or_class
        self.name = name
        self.config = config
        self.version = version
        self.route_prefix = route_prefix
        self._init_args = tuple(init_args or ())
        self._init_kwargs = dict(init_kwargs or {})

    @property
    def init_args(self) -> tuple[Any, ...]:
        """The positional arguments the replicas' constructor gets: those of .bind(...) on the
        deployment of a bound Application (app.deployment), () on an unbound one (as Ray)."""
        return self._init_args

    @property
    def init_kwargs(self) -> dict[str, Any]:
        """The keyword arguments the replicas' constructor gets (as init_args)."""
        return dict(self._init_kwargs)

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        """An Application of this deployment built with these arguments (its deployment's
        init_args/init_kwargs are them, as in Ray)."""
        bound = Deployment(self.func_or_class, self.name, self.config, self.version, self.route_prefix,
                           args, kwargs)
        return Application(bound, args, kwargs)

    def options(self, **options: Any) -> Deployment:
        name = options.pop("name", self.name)
        version = options.pop("version", self.version)
        route_prefix = options.pop("route_prefix", self.route_prefix)
        cfg = build_config(options, self.config)
        return Deployment(self.func_or_class, name, cfg, version, route_prefix, self._init_args,
                          self._init_kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"Deployment {self.name!r} cannot be called directly; use "
                           f"{self.name}.bind(...) and serve.run(...)")

    @property
    def num_replicas(self) -> int | None:
        return self.config.num_replicas

    @property
    def max_ongoing_requests(self) -> int:
        return self.config.max_ongoing_requests

    @property
    def ray_actor_options(self) -> dict[str, Any]:
        return dict(self.config.ray_actor_options)

    @property
    def user_config(self) -> Any:
        return self.config.user_config

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r})"


def deployment(_func_or_class: Any = None, **options: Any) -> Any:
    """`@serve.deployment` or `@serve.deployment(num_replicas=2, ray_actor_options={...}, ...)`."""
    if _func_or_class is not None and options:
        raise TypeError("@serve.deployment takes keyword arguments only")

    def decorate(target: Any) -> Deployment:
        if not (inspect.isclass(target) or inspect.isfunction(target)):
            raise TypeError(f"@serve.deployment expects a class or a function, got {type(target).__name__}")
        opts = dict(options)
        name = opts.pop("name", None) or target.__name__
        version = opts.pop("version", None)
        route_prefix = opts.pop("route_prefix", None)
        cfg = build_config(opts)
        if inspect.isfunction(target) and cfg.user_config is not None:
            raise ValueError("user_config needs a class deployment with a reconfigure() method")
        return Deployment(target, name, cfg, version, route_prefix)

    if _func_or_class is not None:
        return decorate(_func_or_class)
    return decorate


def _make_state_picklable() -> None:
    """starlette's State (app.state) recurses in __getattr__ when unpickled; pickle its dict."""
    import copyreg

    try:
        from starlette.datastructures import State
    except ImportError:
        return
    copyreg.pickle(State, lambda s: (State, (dict(s._state),)))


def ingress(app: Any) -> Callable[[type], type]:
    """`@serve.ingress(fastapi_app)` on a deployment class: the app's routes serve its HTTP
    traffic, and routes defined as methods of the class run on the replica's instance."""
    _make_state_picklable()
    if not callable(app):
        raise TypeError(f"@serve.ingress expects an ASGI app (e.g. FastAPI()), got {type(app).__name__}")

    def decorate(cls: type) -> type:
        if not inspect.isclass(cls):
            raise TypeError("@serve.ingress must decorate a class (below @serve.deployment)")
        cls.__serve_ingress__ = app  # type: ignore[attr-defined]
        return cls

    return decorate


def replace_config(d: Deployment, **changes: Any) -> Deployment:
    return Deployment(d.func_or_class, d.name, dataclasses.replace(d.config, **changes), d.version, d.route_prefix,
                      d.init_args, d.init_kwargs)
