"""Ember's own engine: a Hugging Face causal LM with continuous batching, on CPU or one GPU.

One engine thread runs the loop; the replica's event loop only submits and reads:

    submit(request) ─► inbox ─► [engine thread] scheduler.schedule()
                                 drop rows that left (finished, aborted, preempted)
                                 mixed step: ONE forward decodes every running row and
                                   prefills the sequences that join (their first tokens), or
                                 prefill the sequences that join → their first tokens, then
                                 decode one token for every other row (one forward pass)
                                 append tokens (block accounting, stop checks), detokenize
                      ◄─ one call_soon_threadsafe per step delivers every request's deltas
                         (none while the previous one has not run: it takes these too)

The policy (admission, KV blocks, preemption, stop conditions, mixed or separate prefill) is
BatchScheduler; the cache is KVBatch. EngineStats counts steps by kind, rows and seconds. A request's output arrives as lists of deltas, so a consumer slower than the engine
gets several tokens at once instead of a backlog. `abort` takes the sequence out before the
next step. `submit(request, callback)` is the push form: the callback runs inside the step's
hand-off for each delta, so no task wakes per token (LLMServer's SSEStream, sse_stream.py).
The event-loop side (generate, submit, cancel, the tokenizer) is frontend.py's, shared with
EngineCoreClient, which runs this class's step loop in a child process instead (engine_core.py).

engine_kwargs: max_num_seqs (16), max_num_batched_tokens (2048), max_model_len (the model's),
block_size (16), num_kv_blocks (enough for every sequence at full length), device ("cuda" when
available, else "cpu"), dtype ("float32" on CPU, "float16" on GPU), num_threads,
trust_remote_code, engine_process (True: LLMServer's make_engine runs the step loop in an
engine-core process; this class itself ignores it), mixed_steps (True: newcomers' prefill rides in
the decode forward when the padded pass fits max_num_batched_tokens; False: a prefill pass of its
own before the decode).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

from .engine import EngineStats, GenerationDelta, GenerationRequest, LLMEngine
from .frontend import EngineFrontend
from .scheduler import BatchScheduler, BlockManager, SeqState, Sequence, StepPlan, StopChecker

log = logging.getLogger(__name__)
_KNOWN_KWARGS = {"max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "num_kv_blocks",
                 "device", "dtype", "num_threads", "trust_remote_code", "engine_process", "mixed_steps"}


def check_engine_kwargs(engine_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of the torch engine's engine_kwargs; an unknown key raises ValueError naming it."""
    kw = dict(engine_kwargs or {})
    unknown = set(kw) - _KNOWN_KWARGS
    if unknown:
        raise ValueError(f"unknown engine_kwargs for the torch engine: {sorted(unknown)} "
                         f"(known: {sorted(_KNOWN_KWARGS)})")
    return kw


def load_tokenizer(model_source: str, trust_remote_code: bool = False) -> Any:
    """The model's Hugging Face tokenizer (no progress bars)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
    return AutoTokenizer.from_pretrained(model_source, trust_remote_code=trust_remote_code)


def make_sequences(request: GenerationRequest) -> list[Sequence]:
    """The request's n sequences, as the scheduler takes them."""
    now = time.monotonic()
    return [Sequence(f"{request.request_id}/{i}", request.request_id, i, list(request.prompt_token_ids),
                     request.params, now) for i in range(request.params.n)]


class _Detokenizer:
    """Incremental decoding: only the last few tokens are decoded each step; text that ends in
    an incomplete UTF-8 sequence waits for the next token."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...]) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0
        self.text = ""
        self.sent = 0
        self.stop = StopChecker(stop)

    def add(self, token: int) -> None:
        self.ids.append(token)
        before = self.tok.decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        after = self.tok.decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before):]
            self.prefix, self.read = self.read, len(self.ids)


class TorchEngine(EngineFrontend, LLMEngine):
    def __init__(self, model_id: str, model_source: str, engine_kwargs: dict[str, Any] | None = None) -> None:
        kw = check_engine_kwargs(engine_kwargs)
        self._init_frontend()
        self.model_id = model_id
        self.model_source = model_source
        self.kw = kw
        self._inbox: collections.deque[tuple[str, Any]] = collections.deque()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._stats = EngineStats()
        self._pending: list[tuple[str, Any]] = []  # outputs handed to the loop, not delivered yet
        self._pending_lock = threading.Lock()

    # -------------------------------------------------------------- loading
    def start(self) -> None:
        if self._thread is None:
            self._load()
            self._thread = threading.Thread(target=self._run, name=f"ember-llm-{self.model_id}", daemon=True)
            self._thread.start()

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM
        device = self.kw.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        # On CPU one intra-op thread by default: with more, torch's threads spin against the
        # replica's event loop and the other processes of a small machine, and a decode step
        # gets slower, not faster.
        threads = self.kw.get("num_threads") or (1 if device == "cpu" else None)
        if threads:
            torch.set_num_threads(int(threads))
        dtype = getattr(torch, self.kw.get("dtype") or ("float16" if device.startswith("cuda") else "float32"))
        trust = bool(self.kw.get("trust_remote_code", False))
        self.tokenizer = load_tokenizer(self.model_source, trust)
        model = AutoModelForCausalLM.from_pretrained(self.model_source, dtype=dtype, trust_remote_code=trust)
        # @wraps on PreTrainedModel.to hides the method's self from mypy, which takes `device` for it
        self.model = model.to(device).eval()  # type: ignore[arg-type]
        self.device = torch.device(device)
        cfg = self.model.config
        limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048
        self._max_len = int(self.kw.get("max_model_len") or limit)
        if self._max_len > limit:
            raise ValueError(f"max_model_len={self._max_len} exceeds the model's {limit} positions")
        max_seqs = int(self.kw.get("max_num_seqs", 16))
        block = int(self.kw.get("block_size", 16))
        blocks = int(self.kw.get("num_kv_blocks") or max_seqs * -(-self._max_len // block))
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.scheduler = BatchScheduler(BlockManager(blocks, block), max_num_seqs=max_seqs,
                                        max_num_batched_tokens=int(self.kw.get("max_num_batched_tokens", 2048)),
                                        max_model_len=self._max_len, eos_token_ids=eos_ids,
                                        mixed_steps=bool(self.kw.get("mixed_steps", True)))
        from .kv_batch import KVBatch

        self.batch = KVBatch(self.model, self.device)
        self._seqs: dict[str, tuple[Sequence, _Detokenizer, Any]] = {}
        # when batch slots were freed (finish, abort), oldest first: how long a slot stays empty
        # before a newcomer takes it (in a closed loop, the client's round trip)
        self._freed: collections.deque[float] = collections.deque(maxlen=max_seqs)

    # -------------------------------------------------------------- event-loop side
    def _post_add(self, request: GenerationRequest) -> None:
        self._post("add", make_sequences(request))

    def _post_abort(self, request_id: str) -> None:
        self._post("abort", request_id)

    def _post(self, kind: str, arg: Any) -> None:
        with self._cv:
            self._inbox.append((kind, arg))
            self._cv.notify()

    def stats(self) -> EngineStats:
        return self._stats

    def shutdown(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(10)

    # -------------------------------------------------------------- engine thread
    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                with self._cv:
                    if not self._inbox and not self.scheduler.has_work() and not self._stop:
                        t = time.perf_counter()
                        while not self._inbox and not self.scheduler.has_work() and not self._stop:
                            self._cv.wait(1.0)
                        self._stats.idle_s += time.perf_counter() - t
                    if self._stop:
                        return
                    inbox, self._inbox = self._inbox, collections.deque()
                self._iteration(inbox)

    def _iteration(self, inbox: collections.deque[tuple[str, Any]]) -> None:
        """Takes the new requests and aborts, then runs one step (with the core process, the
        same on its main thread)."""
        try:
            self._take(inbox)
            self._step()
        except Exception as e:  # a bug or an out-of-memory: fail every request, keep going
            log.exception("engine step failed")
            self._fail_all(e)

    def _take(self, inbox: collections.deque[tuple[str, Any]]) -> None:
        from .sampling import make_generator

        failed: list[tuple[str, Any]] = []
        for kind, arg in inbox:
            if kind == "add":
                try:
                    self.scheduler.add(arg)
                except ValueError as e:
                    failed.append((arg[0].request_id, e))
                    continue
                for s in arg:
                    self._seqs[s.seq_id] = (s, _Detokenizer(self.tokenizer, s.params.stop),
                                            make_generator(s.params, s.index))
            else:
                for s in self.scheduler.abort(arg):
                    if self._seqs.pop(s.seq_id, None) is not None:
                        self._freed.append(time.perf_counter())
        if failed:
            self._send(failed)

    def _step(self) -> None:
        from .sampling import sample

        st = self._stats
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        self._update_stats()  # before any token of this step is delivered
        gone = {s.seq_id for s in plan.removed} | {s.seq_id for s in plan.preempted}
        if gone:
            self.batch.remove(gone)
        st.num_preemptions += len(plan.preempted)
        if plan.prefill:
            st.num_prefills += 1
            st.prefill_rows += len(plan.prefill)
            for _ in range(min(len(plan.prefill), len(self._freed))):
                st.slot_refills += 1
                st.slot_wait_s += t0 - self._freed.popleft()
        if plan.mixed and len(self.batch):
            # one forward: the running rows decode while the newcomers' prefill rides along
            st.num_steps += 1
            st.num_mixed += 1
            st.decode_rows += len(self.batch)
            t = time.perf_counter()
            logits = self.batch.mixed([s.seq_id for s in plan.prefill], [s.context_ids() for s in plan.prefill])
            seqs = [self._seqs[sid][0] for sid in self.batch.seq_ids]
            tokens = sample(logits, [s.params for s in seqs], [self._seqs[s.seq_id][2] for s in seqs])
            self.batch.pending = tokens
            st.mixed_s += time.perf_counter() - t
            self._send(self._emit(seqs, tokens))
        else:
            self._separate(plan)
        self._update_stats()
        st.step_s += time.perf_counter() - t0
        if not self.scheduler.has_work():
            self._freed.clear()  # idle: no newcomer was waiting to take these slots

    def _separate(self, plan: StepPlan) -> None:
        """The newcomers' prefill in a pass of its own (their first tokens sent at once), then
        one decode pass for the running rows."""
        from .sampling import sample

        st = self._stats
        if plan.prefill:
            t = time.perf_counter()
            rows, logits = self.batch.prefill([s.seq_id for s in plan.prefill],
                                              [s.context_ids() for s in plan.prefill])
            tokens = sample(logits, [s.params for s in plan.prefill],
                            [self._seqs[s.seq_id][2] for s in plan.prefill])
            rows.pending = tokens
            st.prefill_s += time.perf_counter() - t
            self._send(self._emit(plan.prefill, tokens))
        decode = [s for s in plan.decode if s.state is SeqState.RUNNING]
        if decode and len(self.batch):
            st.num_steps += 1
            st.decode_rows += len(self.batch)
            t = time.perf_counter()
            logits = self.batch.decode()
            seqs = [self._seqs[sid][0] for sid in self.batch.seq_ids]
            tokens = sample(logits, [s.params for s in seqs], [self._seqs[s.seq_id][2] for s in seqs])
            self.batch.pending = tokens
            st.decode_s += time.perf_counter() - t
            self._send(self._emit(seqs, tokens))
        if plan.prefill:
            self.batch.merge(rows)

    def _update_stats(self) -> None:
        st = self._stats
        st.running, st.waiting = self.scheduler.num_running, self.scheduler.num_waiting
        st.kv_cache_usage = self.scheduler.blocks.usage

    def _emit(self, seqs: list[Sequence], tokens: list[int]) -> list[tuple[str, Any]]:
        out = []
        for s, t in zip(seqs, tokens, strict=False):
            if s.state is not SeqState.RUNNING:
                continue
            reason = self.scheduler.append_token(s, t)
            _, det, _ = self._seqs[s.seq_id]
            det.add(t)
            text, hit = det.stop.check(det.text, det.sent)
            if hit:
                reason = "stop"
            elif reason is not None:
                text = det.stop.flush(det.text, det.sent)
            det.sent += len(text)
            self._stats.generated_tokens += 1
            if reason is not None:
                self.scheduler.finish(s, reason)
                self._seqs.pop(s.seq_id, None)
                self._freed.append(time.perf_counter())
            elif not text and s.state is SeqState.RUNNING:
                continue  # nothing printable yet (part of a character, or a held-back stop prefix)
            out.append((s.request_id, GenerationDelta(s.index, text, len(s.output_ids), reason, len(s.prompt_ids))))
        return out

    def _send(self, batch: list[tuple[str, Any]]) -> None:
        """Hands a step's outputs to the loop: one call_soon_threadsafe (a self-pipe write and a
        loop wake-up), skipped when the previous hand-off has not run yet (it takes these too)."""
        if not batch or self._loop is None:
            return
        with self._pending_lock:
            wake = not self._pending
            self._pending.extend(batch)
        if wake:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._pending_lock:
            batch, self._pending = self._pending, []
        self._deliver(batch)

    def _fail_all(self, e: BaseException) -> None:
        rids = {s.request_id for s, _, _ in self._seqs.values()}
        for rid in rids:
            self.scheduler.abort(rid)
        self._seqs.clear()
        self.batch.remove(set(self.batch.seq_ids))
        self._send([(rid, RuntimeError(f"the engine failed: {e!r}")) for rid in rids])
