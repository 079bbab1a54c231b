"""The small interface every engine behind LLMServer implements, and what flows through it.

    engine.start()                               load the model (in the replica's constructor)
    async for deltas in engine.generate(req):    lists of GenerationDelta as tokens are produced
    await engine.abort(request_id)               the client went away: free its batch slot
    engine.stats()                               EngineStats for metrics and autoscaling
    engine.shutdown()

plus the prompt side every engine needs from its tokenizer: `encode`, `apply_chat_template`,
`max_model_len`. Implementations: TorchEngine (torch_engine.py, Ember's own; its step loop in a
thread) and EngineCoreClient (core_client.py: the same step loop in an engine-core process), and
VLLMEngine (vllm_engine.py).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, AsyncIterator

from .params import SamplingParams


@dataclass
class GenerationRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


@dataclass
class GenerationDelta:
    """New output of one of a request's n sequences since its previous delta."""

    index: int
    text: str
    num_output_tokens: int  # produced so far by this sequence
    finish_reason: str | None = None  # "stop", "length" or "abort" on its last delta
    num_prompt_tokens: int = 0


@dataclass
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0  # 0..1
    num_preemptions: int = 0
    generated_tokens: int = 0    # since start
    num_steps: int = 0           # forward passes since start (torch engine: those that decode)
    num_prefills: int = 0        # passes that admit new sequences (torch engine: alone or mixed)
    # The torch engine's step counters (0 for the other engines): where a step's time goes.
    num_mixed: int = 0           # steps whose one forward carried newcomers' prefill and decodes
    prefill_rows: int = 0        # sequences admitted (a preempted one again when it is recomputed)
    decode_rows: int = 0         # tokens decoded for running rows (first tokens not counted)
    prefill_s: float = 0.0       # seconds in prefill-only forwards (with sampling)
    decode_s: float = 0.0        # seconds in decode-only forwards (with sampling)
    mixed_s: float = 0.0         # seconds in mixed forwards (with sampling)
    step_s: float = 0.0          # seconds in steps in all (forwards, batch upkeep, detokenizing, hand-off)
    idle_s: float = 0.0          # seconds the step loop waited with no work
    slot_refills: int = 0        # admissions that took a batch slot a finished or aborted sequence left
    slot_wait_s: float = 0.0     # seconds those slots stayed empty (each admission takes the oldest)


class LLMEngine(abc.ABC):
    """One model's engine inside one replica."""

    model_id: str

    @abc.abstractmethod
    def start(self) -> None:
        """Loads the model; ready to generate when it returns (called in the replica's
        constructor)."""

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[list[GenerationDelta]]:
        """Streams the request's output: each item holds the deltas produced since the previous
        one (every sequence ends with a delta that has a finish_reason)."""

    @abc.abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stops the request and frees its slot in the batch and its KV cache."""

    @abc.abstractmethod
    def stats(self) -> EngineStats:
        ...

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        ...

    @abc.abstractmethod
    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str:
        ...

    @property
    @abc.abstractmethod
    def max_model_len(self) -> int:
        ...

    async def check_health(self) -> None:  # noqa: B027 (optional hook: engines override it)
        """Raises if the engine cannot serve."""

    def shutdown(self) -> None:  # noqa: B027 (optional hook)
        """Stops the engine's threads or workers."""
