"""Sampling parameters of one generation request, checked when the request arrives.

Names and meanings follow OpenAI's API (and vLLM's SamplingParams): `max_tokens`, `temperature`
(0 = greedy), `top_p`, `top_k` (-1 or 0 = off), `stop` (strings that end the output, not included
in it), `stop_token_ids`, `seed` (a request with a seed samples reproducibly), `n` (completions
per prompt), `ignore_eos`. A bad value raises InvalidParameter (a ValueError) naming the
parameter, which the OpenAI app answers as 400 with that name in the error's `param`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_STOP_STRINGS = 8
MAX_N = 16


class InvalidParameter(ValueError):
    """A bad value of one request parameter; `param` names it (OpenAI's error field)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    n: int = 1
    ignore_eos: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _check_int("max_tokens", self.max_tokens, 1)
        _check_num("temperature", self.temperature, 0.0, 2.0)
        _check_num("top_p", self.top_p, 0.0, 1.0)
        if self.top_p == 0.0:
            raise InvalidParameter("top_p", "top_p must be in (0, 1], got 0")
        _check_int("top_k", self.top_k, -1)
        _check_int("n", self.n, 1, MAX_N)
        if self.seed is not None:
            _check_int("seed", self.seed, -(2 ** 63), 2 ** 63 - 1)
        if len(self.stop) > MAX_STOP_STRINGS:
            raise InvalidParameter("stop", f"stop may hold at most {MAX_STOP_STRINGS} strings, got {len(self.stop)}")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise InvalidParameter("stop", f"stop must be a string or a list of non-empty strings, got {s!r}")
        for t in self.stop_token_ids:
            _check_int("stop_token_ids", t, 0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @classmethod
    def from_openai(cls, body: dict[str, Any], default_max_tokens: int) -> SamplingParams:
        """The sampling parameters of an OpenAI completions/chat request body."""
        stop = body.get("stop")
        if stop is None:
            stop_t: tuple[str, ...] = ()
        elif isinstance(stop, str):
            stop_t = (stop,)
        elif isinstance(stop, list):
            stop_t = tuple(stop)
        else:
            raise InvalidParameter("stop", f"stop must be a string or a list of strings, got {type(stop).__name__}")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        return cls(
            max_tokens=default_max_tokens if max_tokens is None else max_tokens,
            temperature=_get(body, "temperature", 1.0), top_p=_get(body, "top_p", 1.0),
            top_k=_get(body, "top_k", -1), stop=stop_t, stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            seed=body.get("seed"), n=_get(body, "n", 1), ignore_eos=bool(body.get("ignore_eos", False)))


def _get(body: dict[str, Any], key: str, default: Any) -> Any:
    v = body.get(key)
    return default if v is None else v


def _check_int(name: str, v: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidParameter(name, f"{name} must be an integer, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        raise InvalidParameter(name, f"{name} must be {'>= ' + str(lo) if hi is None else f'in [{lo}, {hi}]'}, got {v}")


def _check_num(name: str, v: Any, lo: float, hi: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidParameter(name, f"{name} must be a number, got {v!r}")
    if not lo <= v <= hi:
        raise InvalidParameter(name, f"{name} must be in [{lo}, {hi}], got {v}")
