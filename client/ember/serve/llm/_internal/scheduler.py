"""The continuous-batching policy of Ember's torch engine: pure classes, no torch, no I/O.

    BlockManager     KV-cache accounting in blocks of `block_size` tokens: a sequence holds
                     ceil(len / block_size) blocks; admission needs its prompt's blocks, each
                     decode step may need one more.
    Sequence         one output stream (a request with n=2 has two), its tokens and state.
    BatchScheduler   between two decode steps: which waiting sequences join the running batch
                     (FIFO, up to max_num_seqs, max_num_batched_tokens of prompt per step and the
                     free KV blocks), which running ones must be preempted when the cache is
                     full (the newest first; it goes back to the head of the queue and is
                     recomputed from its prompt and the tokens it already produced), and which
                     leave (finished or aborted) — their blocks are freed at once; and whether
                     the newcomers' prefill rides in the same forward as the running rows'
                     decode (a mixed step, as vLLM V1 mixes them) or runs before it.

The engine loop calls `schedule()` once per step, runs the forward passes it returns, and reports
every sampled token with `append_token()`, which does the block accounting and says whether the
sequence must stop (max_tokens, the context length, EOS or a stop token; stop strings are
text-level and checked by the engine with StopChecker).
"""
from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field
from typing import Iterable

from .params import SamplingParams


class BlockManager:
    """Counts KV-cache blocks per sequence."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.held: dict[str, int] = {}
        self.used = 0

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) <= self.free

    def allocate(self, seq_id: str, num_tokens: int) -> None:
        need = self.blocks_for(num_tokens)
        if seq_id in self.held:
            raise ValueError(f"sequence {seq_id} already holds blocks")
        if need > self.free:
            raise MemoryError(f"{need} KV blocks needed, {self.free} free")
        self.held[seq_id] = need
        self.used += need

    def grow(self, seq_id: str, num_tokens: int) -> bool:
        """The sequence now holds num_tokens; takes a block if it crossed a boundary. False
        (and nothing taken) when no block is free."""
        need = self.blocks_for(num_tokens) - self.held[seq_id]
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.held[seq_id] += need
        self.used += need
        return True

    def release(self, seq_id: str) -> None:
        self.used -= self.held.pop(seq_id, 0)

    @property
    def usage(self) -> float:
        """Fraction of the cache in use, 0..1."""
        return self.used / self.num_blocks


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    seq_id: str
    request_id: str
    index: int  # which of the request's n outputs
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float
    output_ids: list[int] = field(default_factory=list)
    state: SeqState = SeqState.WAITING
    finish_reason: str | None = None
    num_preemptions: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def context_ids(self) -> list[int]:
        """What a (re)prefill feeds the model: the prompt and every token produced so far."""
        return self.prompt_ids + self.output_ids


@dataclass
class StepPlan:
    """What one engine step does."""

    prefill: list[Sequence]      # join the batch now (their context is run through the model)
    decode: list[Sequence]       # already in the batch: one token each
    preempted: list[Sequence]    # leave the batch now, back to the queue (their rows are dropped)
    removed: list[Sequence]      # left since the previous step (finished or aborted): drop rows
    mixed: bool = False          # prefill and decode in ONE forward (see BatchScheduler.mixes)

    @property
    def empty(self) -> bool:
        return not (self.prefill or self.decode)


class BatchScheduler:
    """FIFO admission into a running batch bounded by sequences, prompt tokens per step and
    KV blocks; preemption by recomputation when the cache is full."""

    def __init__(self, blocks: BlockManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, eos_token_ids: Iterable[int] = (), mixed_steps: bool = True) -> None:
        if max_num_seqs < 1 or max_num_batched_tokens < 1 or max_model_len < 2:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1, max_model_len >= 2")
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.eos = frozenset(eos_token_ids)
        self.mixed_steps = mixed_steps
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self._removed: list[Sequence] = []
        self._by_request: dict[str, list[Sequence]] = {}

    # -------------------------------------------------------------- events in
    def add(self, seqs: list[Sequence]) -> None:
        """A new request's sequences join the queue. Raises ValueError when its prompt can never
        fit (longer than the context, or than the whole KV cache)."""
        for s in seqs:
            if len(s.prompt_ids) >= self.max_model_len:
                raise ValueError(f"the prompt has {len(s.prompt_ids)} tokens; this model's context is "
                                 f"{self.max_model_len} tokens (prompt plus at least one generated token)")
            if self.blocks.blocks_for(len(s.prompt_ids) + 1) > self.blocks.num_blocks:
                raise ValueError(f"the prompt has {len(s.prompt_ids)} tokens, more than the KV cache holds")
        for s in seqs:
            self.waiting.append(s)
            self._by_request.setdefault(s.request_id, []).append(s)

    def abort(self, request_id: str) -> list[Sequence]:
        """The request's client went away: its sequences leave at the next step."""
        seqs = self._by_request.pop(request_id, [])
        for s in seqs:
            if s.state is not SeqState.FINISHED:
                self._finish(s, "abort")
        return seqs

    def append_token(self, seq: Sequence, token: int) -> str | None:
        """Records a sampled token; returns the finish reason if the sequence must stop now."""
        seq.output_ids.append(token)
        p = seq.params
        reason = None
        if not p.ignore_eos and token in self.eos:
            reason = "stop"
        elif token in p.stop_token_ids:
            reason = "stop"
        elif len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= self.max_model_len:
            reason = "length"
        if reason is None and not self.blocks.grow(seq.seq_id, seq.num_tokens + 1):
            self._preempt_for(seq)
        return reason

    def finish(self, seq: Sequence, reason: str) -> None:
        """The engine stops a sequence (a stop reason from append_token, or a stop string)."""
        if seq.state is not SeqState.FINISHED:
            self._finish(seq, reason)

    # -------------------------------------------------------------- decisions out
    def schedule(self) -> StepPlan:
        removed, self._removed = self._removed, []
        preempted = [s for s in removed if s.state is SeqState.WAITING]
        removed = [s for s in removed if s.state is SeqState.FINISHED]
        decode = list(self.running)
        prefill: list[Sequence] = []
        budget = self.max_num_batched_tokens
        while self.waiting and len(self.running) < self.max_num_seqs:
            s = self.waiting[0]
            n = s.num_tokens
            if (n > budget and prefill) or not self.blocks.can_allocate(n + 1):
                break
            self.waiting.popleft()
            self.blocks.allocate(s.seq_id, n + 1)
            s.state = SeqState.RUNNING
            self.running.append(s)
            prefill.append(s)
            budget -= n
        return StepPlan(prefill=prefill, decode=decode, preempted=preempted, removed=removed,
                        mixed=self.mixes(prefill, decode))

    def mixes(self, prefill: list[Sequence], decode: list[Sequence]) -> bool:
        """Whether newcomers' prefill rides in the running rows' decode forward (one pass of
        rows x the longest new context, each running row's one token right-aligned in it) instead
        of a prefill pass of its own before the decode: when both are there and that padded pass
        holds at most max_num_batched_tokens tokens. A newcomer then costs the batch a slightly
        wider forward instead of a whole extra one."""
        if not prefill or not decode or not self.mixed_steps:
            return False
        width = max(s.num_tokens for s in prefill)
        return (len(prefill) + len(decode)) * width <= self.max_num_batched_tokens

    # -------------------------------------------------------------- helpers
    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        was_running = seq.state is SeqState.RUNNING
        seq.state = SeqState.FINISHED
        self.blocks.release(seq.seq_id)
        if was_running:
            self.running.remove(seq)
            self._removed.append(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        left = self._by_request.get(seq.request_id)
        if left is not None and all(s.state is SeqState.FINISHED for s in left):
            self._by_request.pop(seq.request_id, None)

    def _preempt_for(self, seq: Sequence) -> None:
        """No block for seq's next token: preempt the newest running sequences (seq itself if it
        is the newest) until one is free."""
        while True:
            victim = self.running[-1]
            self.running.pop()
            self.blocks.release(victim.seq_id)
            victim.state = SeqState.WAITING
            victim.num_preemptions += 1
            self.waiting.appendleft(victim)
            self._removed.append(victim)
            if victim is seq or self.blocks.grow(seq.seq_id, seq.num_tokens + 1):
                return

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self._removed)


class StopChecker:
    """Stop strings on the output text: finds the first one and holds back any tail of the text
    that could still become one, so no partial stop string is ever streamed."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1

    def check(self, text: str, emitted: int) -> tuple[str, bool]:
        """(new text that may be sent now, whether a stop string was found) given the whole
        output text and how many characters were sent already."""
        if not self.stop:
            return text[emitted:], False
        first = -1
        for s in self.stop:
            i = text.find(s, max(0, emitted - len(s) + 1))
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            return text[emitted:first] if first > emitted else "", True
        safe = max(emitted, len(text) - self.hold)
        return text[emitted:safe], False

    def flush(self, text: str, emitted: int) -> str:
        """The held-back tail, when the sequence ends for another reason."""
        return text[emitted:]
