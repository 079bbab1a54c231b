"""Choosing the next token of every row of a batch from its logits.

Greedy rows (temperature 0, or top_k 1) take the argmax, all at once. The other rows are scaled
by their temperature, cut to their top_k and top_p (nucleus), and sampled; a row whose request
has a seed uses its own torch.Generator (seeded once per sequence: seed + output index), so a
seeded request gives the same tokens whatever else is in the batch.
"""
from __future__ import annotations

from typing import Any

import torch

from .params import SamplingParams


def make_generator(params: SamplingParams, index: int) -> torch.Generator | None:
    """The generator of a seeded sequence (None: the global one)."""
    if params.seed is None:
        return None
    g = torch.Generator()
    g.manual_seed((params.seed + index) % (2 ** 63))
    return g


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """One row's logits (float32, [vocab]) after temperature, top_k and top_p; removed tokens
    get -inf."""
    x = logits / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        cum = torch.cumsum(probs, dim=-1)
        drop = cum - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_x = sorted_x.masked_fill(drop, float("-inf"))
        x = torch.empty_like(x).scatter_(0, order, sorted_x)
    return x


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[Any]) -> list[int]:
    """The next token of each row: logits [rows, vocab]."""
    logits = logits.float()
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if len(greedy) == len(params):  # the common case: one argmax, no row gather
        return list(logits.argmax(dim=-1).tolist())
    out = [0] * len(params)
    if greedy:
        best = logits[greedy].argmax(dim=-1).tolist()
        for i, t in zip(greedy, best, strict=False):
            out[i] = t
    if len(greedy) < len(params):
        for i, p in enumerate(params):
            if p.greedy:
                continue
            x = filter_logits(logits[i], p.temperature, p.top_k, p.top_p)
            probs = torch.softmax(x, dim=-1)
            out[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
    return out
