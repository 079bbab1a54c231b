"""LLMConfig and friends: what one served model is, as Ray Serve LLM spells it.

    LLMConfig(model_loading_config={"model_id": "tiny", "model_source": "/models/tiny"},
              llm_engine="auto" | "torch" | "vLLM", engine_kwargs={...},
              deployment_config={"autoscaling_config": {...}, "max_ongoing_requests": 64, ...},
              accelerator_type="A10G", runtime_env=None, log_engine_metrics=True)

`llm_engine="auto"` (the default) picks vLLM where `vllm` imports and the cluster has GPUs, and
Ember's torch engine elsewhere. `deployment_config` holds `@serve.deployment` options;
`get_serve_options()` turns the whole config into them (name, replicas or autoscaling, the
replica's resources: GPUs for vLLM's tensor-parallel size, an accelerator type as a custom
resource, as Ray does).
"""
from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_ENGINES = ("auto", "torch", "vLLM")


class ModelLoadingConfig(BaseModel):
    """model_id: the name clients use (`"model"` in requests); model_source: a local directory
    (or any name the engine's loader accepts); defaults to model_id."""

    model_config = ConfigDict(extra="forbid")
    model_id: str
    model_source: str | None = None

    @field_validator("model_id")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model_id must not be empty")
        return v


class LLMConfig(BaseModel):
    """The configuration of one model's deployment."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, protected_namespaces=())
    model_loading_config: ModelLoadingConfig
    llm_engine: Literal["auto", "torch", "vLLM"] = "auto"
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    deployment_config: dict[str, Any] = Field(default_factory=dict)
    accelerator_type: str | None = None
    runtime_env: dict[str, Any] | None = None
    log_engine_metrics: bool = True

    @property
    def model_id(self) -> str:
        return self.model_loading_config.model_id

    @property
    def model_source(self) -> str:
        return self.model_loading_config.model_source or self.model_loading_config.model_id

    def resolved_engine(self) -> str:
        """"torch" or "vLLM" for this config ("auto" looks for vllm and GPUs)."""
        if self.llm_engine != "auto":
            return self.llm_engine
        return "vLLM" if vllm_available() and _gpus_available() else "torch"

    @property
    def tensor_parallel_size(self) -> int:
        return int(self.engine_kwargs.get("tensor_parallel_size", 1))

    def get_serve_options(self, name_prefix: str = "LLMServer:") -> dict[str, Any]:
        """@serve.deployment options for this model's LLMServer."""
        opts = dict(self.deployment_config)
        opts.setdefault("name", name_prefix + _safe(self.model_id))
        if "autoscaling_config" not in opts and "num_replicas" not in opts:
            opts["num_replicas"] = 1
        opts.setdefault("max_ongoing_requests", 64)
        actor = dict(opts.pop("ray_actor_options", None) or {})
        if self.resolved_engine() == "vLLM":
            # tensor_parallel_size > 1: the engine's workers are actors of their own (one GPU
            # each, see vllm_executor.py); the replica holds the engine and no GPU.
            actor.setdefault("num_gpus", 1 if self.tensor_parallel_size == 1 else 0)
        if self.accelerator_type:
            res = dict(actor.get("resources") or {})
            res.setdefault(f"accelerator_type:{self.accelerator_type}", 0.001)
            actor["resources"] = res
        if self.runtime_env:
            actor["runtime_env"] = self.runtime_env
        if actor:
            opts["ray_actor_options"] = actor
        return opts


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _gpus_available() -> bool:
    try:
        import ember

        if ember.is_initialized():
            return ember.cluster_resources().get("GPU", 0) > 0
    except Exception:  # noqa: BLE001 - best effort: fall back to this machine
        pass
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _safe(model_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)


def as_llm_config(c: LLMConfig | dict[str, Any]) -> LLMConfig:
    """An LLMConfig from itself or a dict (ValueError naming the problem)."""
    if isinstance(c, LLMConfig):
        return c
    if isinstance(c, dict):
        try:
            return LLMConfig(**c)
        except Exception as e:
            raise ValueError(f"invalid LLMConfig: {e}") from None
    raise TypeError(f"expected an LLMConfig or a dict, got {type(c).__name__}")


class LLMServingArgs(BaseModel):
    """`build_openai_app`'s argument: the models the app serves."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    llm_configs: list[LLMConfig | dict[str, Any]]
    ingress_deployment: bool = False  # an OpenAiIngress even for one model
    ingress_deployment_config: dict[str, Any] = Field(default_factory=dict)  # its @serve.deployment options

    def configs(self) -> list[LLMConfig]:
        cs = [as_llm_config(c) for c in self.llm_configs]
        if not cs:
            raise ValueError("llm_configs is empty: give at least one LLMConfig")
        ids = [c.model_id for c in cs]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"model_id given twice in llm_configs: {sorted(dup)}")
        return cs
