"""The running batch of the torch engine: one row per sequence over a shared, left-padded KV cache.

Every row's keys and values live in one tensor per layer, [rows, kv_heads, T, head_dim], with
the row's tokens right-aligned and zeros on the left; `mask` [rows, T] marks the real ones.
A decode step feeds each row its pending token (sampled, not yet in the cache) at its own
position, so rows of different lengths advance together in one forward pass. Rows join (a
prefill of new sequences is merged in, the shorter side padded on the left) and leave (rows
dropped, then columns that are padding in every remaining row trimmed) only between steps:
continuous batching. A mixed step (`mixed`) runs the newcomers' prefill in the same forward
as the running rows' decode. Uses transformers' DynamicCache, whose layers hold `keys` and `values`.
A padded decode pass gets its 4D boolean mask from here (one op) rather than from transformers'
mask creation, a visible share of a small model's decode step; the mask, and so the logits, are
the same.
"""
from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch
from transformers import DynamicCache


def cache_arg(model: Any) -> str:
    """The forward() keyword that takes the KV cache (transformers renamed past_key_values)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def takes_4d_mask() -> bool:
    """Whether this transformers takes a prepared 4D boolean mask as it is (masking_utils, 4.53+:
    `create_causal_mask` returns a 4D mask unchanged); older ones get the 2D mask."""
    try:
        from transformers import masking_utils  # noqa: F401
    except ImportError:
        return False
    return True


def last_logits_arg(model: Any) -> dict[str, int]:
    """{"logits_to_keep": 1} where forward() takes it: a multi-token pass (prefill, mixed)
    then computes the vocabulary projection for the last position only."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


class _LMOutput(Protocol):
    """What KVBatch reads of a causal LM's forward output."""

    logits: torch.Tensor  # [rows, positions, vocab]


class KVBatch:
    """Rows of sequences sharing one cache. Engine thread only."""

    def __init__(self, model: Any, device: torch.device, like: KVBatch | None = None) -> None:
        self.model = model
        self.device = device
        # the forward's keywords: from `like` when given, so a prefill does not inspect the model again
        self._kw: str = like._kw if like is not None else cache_arg(model)
        self._last: dict[str, int] = like._last if like is not None else last_logits_arg(model)
        self._mask4d: bool = like._mask4d if like is not None else takes_4d_mask()
        self._clear()

    def _clear(self) -> None:
        """No rows."""
        device = self.device
        self.seq_ids: list[str] = []
        self.pending: list[int] = []
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self.pos = torch.zeros((0,), dtype=torch.long, device=device)
        self.cache: Any = None

    def __len__(self) -> int:
        return len(self.seq_ids)

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def _layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    def _set_layers(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Puts these keys and values in the cache's layers in place (DynamicCache(layers) would
        copy each one into a new cache)."""
        for layer, (key, val) in zip(self.cache.layers, layers, strict=True):
            layer.keys, layer.values = key, val

    # -------------------------------------------------------------- forward passes
    def prefill(self, seq_ids: list[str], contexts: list[list[int]]) -> tuple[KVBatch, torch.Tensor]:
        """Runs the contexts (left-padded into one batch) through the model; returns the new
        rows (their pending tokens still to be set) and the last position's logits."""
        width = max(len(c) for c in contexts)
        ids = torch.zeros((len(contexts), width), dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
            mask[i, width - len(c):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out: _LMOutput = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         **{self._kw: cache}, **self._last)
        rows = KVBatch(self.model, self.device, like=self)
        rows.seq_ids = list(seq_ids)
        rows.pending = [0] * len(seq_ids)
        rows.mask = mask
        rows.pos = mask.sum(-1)
        rows.cache = cache
        return rows, out.logits[:, -1, :]

    def decode(self) -> torch.Tensor:
        """Feeds every row its pending token; returns the next-token logits [rows, vocab]."""
        n = len(self.seq_ids)
        ids = torch.tensor(self.pending, dtype=torch.long, device=self.device).view(n, 1)
        self.mask = torch.cat([self.mask, torch.ones((n, 1), dtype=torch.long, device=self.device)], dim=1)
        out: _LMOutput = self.model(input_ids=ids, attention_mask=self._decode_mask(), position_ids=self.pos.view(n, 1),
                         use_cache=True, **{self._kw: self.cache})
        self.pos = self.pos + 1
        return out.logits[:, -1, :]

    def _decode_mask(self) -> torch.Tensor:
        """The decode pass's attention mask. With padding in the batch, the 4D boolean mask
        [rows, 1, 1, width] the model would build from the 2D one (one query per row: the
        padding mask is the whole of it), built here in one op: transformers' mask creation
        (a dozen Python calls per forward, a visible share of a small model's step) is skipped, and
        the attention gets the same mask, so the logits are the same. Without padding the 2D mask,
        which the model turns into no mask at all."""
        if not self._mask4d or bool(self.mask.all()):
            return self.mask
        return self.mask.bool()[:, None, None, :]

    def mixed(self, seq_ids: list[str], contexts: list[list[int]]) -> torch.Tensor:
        """One forward for the running rows' decode and the newcomers' prefill together (a mixed
        step): the newcomers join as rows (their pending tokens still to be set); returns every
        row's next-token logits, the running rows first.

        The pass is [rows, L] for L the longest new context: a running row feeds its pending
        token in the last column (the L - 1 before it masked), a new row its context right-
        aligned. The cache grows L columns, so the running rows get L - 1 masked columns in the
        middle (keys are stored after the rotary embedding and every row has its own positions,
        so a key's column does not matter, only the mask). They stay until rows leave (`remove`
        realigns every row's real tokens to the right in the same copy that drops the rows), or
        until they are half the width (`_realign` then)."""
        if not self.seq_ids:
            raise ValueError("a mixed step needs running rows")
        r, k = len(self.seq_ids), len(contexts)
        width = max(len(c) for c in contexts)
        ids = torch.zeros((r + k, width), dtype=torch.long)
        new_mask = torch.zeros((r + k, width), dtype=torch.long)
        ids[:r, -1] = torch.tensor(self.pending, dtype=torch.long)
        new_mask[:r, -1] = 1
        for i, c in enumerate(contexts):
            ids[r + i, width - len(c):] = torch.tensor(c, dtype=torch.long)
            new_mask[r + i, width - len(c):] = 1
        ids, new_mask = ids.to(self.device), new_mask.to(self.device)
        new_pos = new_mask[r:].sum(-1)
        positions = torch.cat([self.pos.view(r, 1).expand(r, width),
                               (new_mask[r:].cumsum(-1) - 1).clamp(min=0)])
        old = self.width
        self._set_layers([(torch.cat([key, key.new_zeros((k,) + tuple(key.shape[1:]))]),
                           torch.cat([val, val.new_zeros((k,) + tuple(val.shape[1:]))])) for key, val in self._layers()])
        mask = torch.cat([torch.cat([self.mask, self.mask.new_zeros((k, old))]), new_mask], dim=1)
        out: _LMOutput = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         **{self._kw: self.cache}, **self._last)
        self.mask = mask
        self.pos = torch.cat([self.pos + 1, new_pos])
        self.seq_ids = self.seq_ids + list(seq_ids)
        self.pending = self.pending + [0] * k
        if 2 * int(self.mask.sum(-1).max()) < self.width:
            self._realign(None)
        return out.logits[:, -1, :]

    def _realign(self, rows: torch.Tensor | None) -> None:
        """Keeps these rows (all: None), each row's real tokens moved to the right end in order,
        and drops the columns that are then padding in every row: one copy of the cache (a
        stable sort of the mask puts a row's padding first)."""
        mask = self.mask if rows is None else self.mask.index_select(0, rows)
        keep = int(mask.sum(-1).max())
        cols = torch.sort(mask, dim=1, stable=True).indices[:, mask.shape[1] - keep:]
        self.mask = mask.gather(1, cols)
        r = (rows if rows is not None else torch.arange(mask.shape[0], device=self.device))[:, None]

        def take(t: torch.Tensor) -> torch.Tensor:
            got: torch.Tensor = t[r, :, cols]  # [rows, keep, heads, dim]
            return got.transpose(1, 2)

        self._set_layers([(take(key), take(val)) for key, val in self._layers()])

    # -------------------------------------------------------------- joining and leaving
    def merge(self, other: KVBatch) -> None:
        """Appends other's rows (both sides padded on the left to one width)."""
        if not other.seq_ids:
            return
        if not self.seq_ids:
            self.seq_ids, self.pending, self.mask, self.pos, self.cache = (
                other.seq_ids, other.pending, other.mask, other.pos, other.cache)
            return
        w = max(self.width, other.width)
        a, b = self._layers(), other._layers()
        layers = [(torch.cat([_lpad(ka, w), _lpad(kb, w)]), torch.cat([_lpad(va, w), _lpad(vb, w)]))
                  for (ka, va), (kb, vb) in zip(a, b, strict=False)]
        self.mask = torch.cat([_lpad(self.mask, w), _lpad(other.mask, w)])
        self.pos = torch.cat([self.pos, other.pos])
        self.seq_ids = self.seq_ids + other.seq_ids
        self.pending = self.pending + other.pending
        self._set_layers(layers)

    def remove(self, seq_ids: set[str]) -> None:
        """Drops the rows of these sequences (others are ignored), realigns the others' tokens
        to the right (the masked columns mixed steps left) and trims common padding."""
        keep = [i for i, s in enumerate(self.seq_ids) if s not in seq_ids]
        if len(keep) == len(self.seq_ids):
            return
        if not keep:
            self._clear()
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._realign(idx)
        self.pos = self.pos.index_select(0, idx)
        self.seq_ids = [self.seq_ids[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]


def _lpad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pads the sequence dimension (the last for a mask, the third for keys/values) on the
    left up to width."""
    dim = 1 if t.dim() == 2 else 2
    extra = width - t.shape[dim]
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)
