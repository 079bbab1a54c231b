"""Ember Serve LLM: OpenAI-compatible LLM serving with Ray Serve LLM's API.

    from ember import serve
    from ember.serve.llm import LLMConfig, build_openai_app

    config = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": "/models/tiny"},
                       deployment_config={"autoscaling_config": {"min_replicas": 1, "max_replicas": 2}})
    serve.run(build_openai_app({"llm_configs": [config]}))
    # OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x").chat.completions.create(...)

Each model is an `LLMServer` deployment holding an engine: vLLM where `vllm` imports and GPUs
exist (tensor-parallel workers as Ember actors), else Ember's continuous-batching torch engine
(a Hugging Face causal LM from a local directory). `build_openai_app` puts an `OpenAiIngress`
in front (/v1/models, /v1/completions, /v1/chat/completions, SSE streaming);
`build_llm_deployment` gives one model's LLMServer alone (call it with a handle, or over HTTP:
it answers the same routes for its model). `LLM` puts the torch engine in a deployment of your
own, shaped like vLLM's `LLM`. See docs/llm.md.
"""
from __future__ import annotations

from typing import Any

from ._internal.config import LLMConfig, LLMServingArgs, ModelLoadingConfig, as_llm_config
from ._internal.ingress import OpenAiIngress
from ._internal.params import SamplingParams
from ._internal.server import LLMServer


def __getattr__(name: str) -> Any:
    if name == "LLM":  # imports torch: only when asked for
        from ._internal.offline import LLM

        return LLM
    raise AttributeError(name)


__all__ = ["LLM", "LLMConfig", "LLMServingArgs", "LLMServer", "ModelLoadingConfig", "OpenAiIngress", "SamplingParams",
           "build_llm_deployment", "build_openai_app"]


def build_llm_deployment(llm_config: LLMConfig | dict[str, Any], *, name_prefix: str | None = None,
                         bind_kwargs: dict[str, Any] | None = None,
                         override_serve_options: dict[str, Any] | None = None,
                         deployment_cls: type | None = None) -> Any:
    """One model's LLMServer deployment, bound (an Application for serve.run)."""
    from ember import serve

    config = as_llm_config(llm_config)
    opts = config.get_serve_options(name_prefix or "LLMServer:")
    opts.update(override_serve_options or {})
    cls = deployment_cls or LLMServer
    return serve.deployment(cls).options(**opts).bind(config, **(bind_kwargs or {}))


def build_openai_app(llm_serving_args: LLMServingArgs | dict[str, Any]) -> Any:
    """An OpenAI-compatible application: an OpenAiIngress over one LLMServer per model. With a
    single model the LLMServer is the ingress itself (it serves the same routes), unless
    `ingress_deployment=True` asks for the OpenAiIngress anyway."""
    from ember import serve

    if isinstance(llm_serving_args, dict):
        try:
            llm_serving_args = LLMServingArgs(**llm_serving_args)
        except Exception as e:
            raise ValueError(f"invalid llm_serving_args: {e}") from None
    configs = llm_serving_args.configs()
    servers = [build_llm_deployment(c) for c in configs]
    if len(configs) == 1 and not llm_serving_args.ingress_deployment and not llm_serving_args.ingress_deployment_config:
        # One model: its LLMServer answers the OpenAI routes itself, one hop fewer per token.
        return servers[0]
    opts = {"name": "OpenAiIngress", "max_ongoing_requests": 256, **llm_serving_args.ingress_deployment_config}
    return serve.deployment(OpenAiIngress).options(**opts).bind(servers)
