"""`ember.data.llm`: batch inference with an LLM over a Dataset, as Ray's `ray.data.llm`.

    from ember.data.llm import vLLMEngineProcessorConfig, build_processor

    config = vLLMEngineProcessorConfig(model_source="/models/tiny", batch_size=64, concurrency=1)
    processor = build_processor(
        config,
        preprocess=lambda row: {"messages": [{"role": "user", "content": row["question"]}],
                                "sampling_params": {"max_tokens": 32, "temperature": 0.0}},
        postprocess=lambda row: {"answer": row["generated_text"], **row})
    ds = processor(ember.data.from_items([{"question": "..."}, ...]))

A processor is three stages: `preprocess` (Dataset.map), the engine stage (Dataset.map_batches on
an actor pool of `concurrency` engines; every row of a batch goes to the engine at once, so its
continuous batching fills each decode step) and `postprocess` (Dataset.map). The engine is
vLLM's `LLM` where `vllm` imports and a GPU exists, else Ember's continuous-batching torch engine
(`ember.serve.llm.LLM`, a Hugging Face causal LM from a local directory). A row gives the engine
`messages` (turned into the prompt by the tokenizer's chat template; `chat_template_stage=False`
to give `prompt` instead) and optionally `sampling_params`; the engine stage adds Ray's output
columns `prompt`, `generated_text`, `num_generated_tokens`, `num_input_tokens`,
`time_taken_llm` and `request_id`, and carries every input column over. Ray's parameters this
engine does not implement raise an error naming them.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import ember

_REFUSED = {  # Ray's parameters the engine stage does not implement: (value that is fine, why)
    "task_type": ("generate", "only text generation is implemented"),
    "prepare_multimodal_stage": (False, "multimodal inputs are not implemented"),
    "has_image": (False, "multimodal inputs are not implemented"),
    "dynamic_lora_loading_path": (None, "LoRA adapters are not implemented"),
    "placement_group_config": (None, "engines spanning several devices need vLLM's Serve path"),
    "max_pending_requests": (None, "the engine takes a whole batch at once"),
    "chat_template": (None, "the tokenizer's own chat template is used"),
}


class ProcessorConfig:
    """What every processor shares (Ray's `ProcessorConfig`): rows per engine call
    (`batch_size`), engines (`concurrency`: n, or (min, max) for an autoscaling pool), their
    `runtime_env` and `accelerator_type`, and whether a row that fails is kept with its error in
    `__inference_error__` (`should_continue_on_error`) instead of failing the dataset."""

    def __init__(self, *, batch_size: int = 32, concurrency: int | tuple[int, int] = 1,
                 runtime_env: dict[str, Any] | None = None, accelerator_type: str | None = None,
                 max_concurrent_batches: int = 8, max_tasks_in_flight_per_actor: int | None = None,
                 should_continue_on_error: bool = False, **unknown: Any) -> None:
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected parameter(s): {', '.join(sorted(unknown))}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        for name, v in (("max_concurrent_batches", max_concurrent_batches),
                        ("max_tasks_in_flight_per_actor", max_tasks_in_flight_per_actor)):
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.runtime_env = runtime_env
        self.accelerator_type = accelerator_type
        # Upper bounds: an engine works on one batch at a time, all of its rows at once.
        self.max_concurrent_batches = max_concurrent_batches
        self.max_tasks_in_flight_per_actor = max_tasks_in_flight_per_actor
        self.should_continue_on_error = should_continue_on_error


class vLLMEngineProcessorConfig(ProcessorConfig):  # noqa: N801 (Ray's name)
    """An engine processor (Ray's `vLLMEngineProcessorConfig`): `model_source` (a local model
    directory), `engine_kwargs` for the engine, and whether rows carry chat `messages`
    (`chat_template_stage`, default) or a `prompt`. Tokenizing and detokenizing happen inside the
    engine, so `tokenize_stage`/`detokenize_stage` may be on or off with the same result."""

    def __init__(self, *, model_source: str, engine_kwargs: dict[str, Any] | None = None,
                 chat_template_stage: bool = True, apply_chat_template: bool | None = None,
                 tokenize_stage: bool = True, detokenize_stage: bool = True, tokenize: bool | None = None,
                 detokenize: bool | None = None, log_engine_metrics: bool = True, **rest: Any) -> None:
        for name, (fine, why) in _REFUSED.items():
            if name in rest:
                value = rest.pop(name)
                if value != fine:
                    raise ValueError(f"{name}={value!r} is not supported by Ember's engine stage: {why}")
        super().__init__(**rest)
        if not isinstance(model_source, str) or not model_source:
            raise ValueError(f"model_source must be a non-empty string, got {model_source!r}")
        for name, v in (("chat_template_stage", chat_template_stage), ("tokenize_stage", tokenize_stage),
                        ("detokenize_stage", detokenize_stage)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} takes True or False here (per-stage configs are not implemented), got {v!r}")
        self.model_source = model_source
        self.engine_kwargs = dict(engine_kwargs or {})
        self.chat_template_stage = chat_template_stage if apply_chat_template is None else apply_chat_template
        self.tokenize_stage = tokenize_stage if tokenize is None else tokenize
        self.detokenize_stage = detokenize_stage if detokenize is None else detokenize
        self.log_engine_metrics = log_engine_metrics


class Processor:
    """preprocess -> the engine stage -> postprocess; call it on a Dataset."""

    def __init__(self, config: vLLMEngineProcessorConfig, preprocess: Callable[..., Any] | None = None,
                 postprocess: Callable[..., Any] | None = None,
                 preprocess_map_kwargs: dict[str, Any] | None = None,
                 postprocess_map_kwargs: dict[str, Any] | None = None) -> None:
        if not isinstance(config, vLLMEngineProcessorConfig):
            raise TypeError(f"config must be a vLLMEngineProcessorConfig, got {type(config).__name__}")
        self.config = config
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.preprocess_map_kwargs = dict(preprocess_map_kwargs or {})
        self.postprocess_map_kwargs = dict(postprocess_map_kwargs or {})

    def __call__(self, ds: Any) -> Any:
        c = self.config
        if self.preprocess is not None:
            ds = ds.map(self.preprocess, **self.preprocess_map_kwargs)
        options: dict[str, Any] = {}
        if c.runtime_env:
            options["runtime_env"] = c.runtime_env
        if c.accelerator_type:
            options["resources"] = {f"accelerator_type:{c.accelerator_type}": 0.001}
        if _vllm_usable():
            options["num_gpus"] = 1
        ds = ds.map_batches(_EngineStage, fn_constructor_args=(c,), batch_size=c.batch_size,
                            batch_format="pyarrow", concurrency=c.concurrency, **options)
        if self.postprocess is not None:
            ds = ds.map(self.postprocess, **self.postprocess_map_kwargs)
        return ds


def build_processor(config: vLLMEngineProcessorConfig, preprocess: Callable[..., Any] | None = None,
                    postprocess: Callable[..., Any] | None = None,
                    preprocess_map_kwargs: dict[str, Any] | None = None,
                    postprocess_map_kwargs: dict[str, Any] | None = None,
                    builder_kwargs: dict[str, Any] | None = None) -> Processor:
    """A Processor for `config` (Ray's `build_processor`; `build_llm_processor` is its older name)."""
    if builder_kwargs:
        raise ValueError(f"builder_kwargs {sorted(builder_kwargs)} are not supported by Ember's processors")
    return Processor(config, preprocess, postprocess, preprocess_map_kwargs, postprocess_map_kwargs)


build_llm_processor = build_processor


def _vllm_usable(here: bool = False) -> bool:
    """Whether vLLM runs the engines: it imports and the cluster (here: this actor) has a GPU."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    return bool(ember.get_gpu_ids()) if here else ember.cluster_resources().get("GPU", 0) > 0


_OUTPUTS = ("prompt", "generated_text", "num_generated_tokens", "num_input_tokens", "request_id")


class _EngineStage:
    """One engine (an actor of the pool): each call generates for every row of a batch at once."""

    def __init__(self, config: vLLMEngineProcessorConfig) -> None:
        self.config = config
        self.done = 0
        if _vllm_usable(here=True):  # vLLM's offline LLM on this actor's GPU
            from vllm import LLM as VllmLLM
            from vllm import SamplingParams as VllmSamplingParams

            self.vllm = VllmLLM(model=config.model_source, **config.engine_kwargs)
            self.sampling: Any = VllmSamplingParams
            self.tokenizer = self.vllm.get_tokenizer()
            return
        from ember.serve.llm import LLM, SamplingParams

        self.vllm = None
        self.loop = asyncio.new_event_loop()
        self.sampling = SamplingParams
        self.llm = LLM(model=config.model_source, **config.engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        rows = batch.to_pylist()
        t0 = time.perf_counter()
        if self.vllm is not None:
            results = self._generate_vllm(rows)
        else:
            results = self.loop.run_until_complete(self._rows(rows))
        took = time.perf_counter() - t0
        out = []
        for row, res in zip(rows, results, strict=True):
            if isinstance(res, BaseException):
                if not self.config.should_continue_on_error or not isinstance(res, Exception):
                    raise res
                out.append({**row, **dict.fromkeys(_OUTPUTS), "time_taken_llm": took,
                            "__inference_error__": f"{type(res).__name__}: {res}"})
            else:
                out.append({**row, **res, "time_taken_llm": took,
                            **({"__inference_error__": None} if self.config.should_continue_on_error else {})})
        return pa.Table.from_pylist(out)

    def _request(self, row: dict[str, Any]) -> tuple[str, Any]:
        """(prompt, sampling params) of a row; ValueError naming what is wrong with it."""
        prompt = self._prompt(row)
        params = {k: v for k, v in (row.get("sampling_params") or {}).items() if v is not None}
        if params.get("n", 1) != 1:
            raise ValueError("sampling_params.n must be 1: a row gets one generated_text")
        if isinstance(params.get("stop"), (list, str)):
            params["stop"] = tuple([params["stop"]] if isinstance(params["stop"], str) else params["stop"])
        try:
            return prompt, self.sampling(**params)
        except TypeError as e:
            raise ValueError(f"sampling_params: {e}") from None

    def _output(self, prompt: str, text: str, generated: int, prompt_tokens: int) -> dict[str, Any]:
        self.done += 1
        return {"prompt": prompt, "generated_text": text, "num_generated_tokens": generated,
                "num_input_tokens": prompt_tokens, "request_id": self.done - 1}

    async def _rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any] | BaseException]:
        """Every row's request in flight at once on the actor's one loop (the engine batches them)."""
        results: list[dict[str, Any] | BaseException] = await asyncio.gather(
            *[self._row(r) for r in rows], return_exceptions=True)
        return results

    async def _row(self, row: dict[str, Any]) -> dict[str, Any]:
        prompt, sp = self._request(row)
        (res,) = await self.llm.generate([prompt], sp)
        return self._output(prompt, res.outputs[0].text, res.outputs[0].num_tokens, len(res.prompt_token_ids))

    def _generate_vllm(self, rows: list[dict[str, Any]]) -> list[Any]:
        requests: list[Any] = []
        for row in rows:
            try:
                requests.append(self._request(row))
            except ValueError as e:
                requests.append(e)
        ok = [r for r in requests if not isinstance(r, BaseException)]
        outs = iter(self.vllm.generate([p for p, _ in ok], [sp for _, sp in ok]) if ok else [])
        results: list[Any] = []
        for r in requests:
            if isinstance(r, BaseException):
                results.append(r)
            else:
                o = next(outs)
                results.append(self._output(r[0], o.outputs[0].text, len(o.outputs[0].token_ids),
                                            len(o.prompt_token_ids)))
        return results

    def _prompt(self, row: dict[str, Any]) -> str:
        if self.config.chat_template_stage:
            messages = row.get("messages")
            if not messages:
                raise ValueError("a row needs `messages` (or set chat_template_stage=False and give `prompt`)")
            return str(self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                          add_generation_prompt=True))
        prompt = row.get("prompt")
        if not isinstance(prompt, str):
            raise ValueError("a row needs a string `prompt` when chat_template_stage=False")
        return prompt


__all__ = ["Processor", "ProcessorConfig", "build_llm_processor", "build_processor", "vLLMEngineProcessorConfig"]
