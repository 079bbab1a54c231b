"""The torch engine's batch scheduler, block accounting and stop strings, without torch or I/O."""
from __future__ import annotations

import pytest

from ember.serve.llm._internal.params import SamplingParams
from ember.serve.llm._internal.scheduler import BatchScheduler, BlockManager, SeqState, Sequence, StopChecker

EOS = 2


def seq(rid: str, prompt_len: int = 4, index: int = 0, **params) -> Sequence:
    return Sequence(f"{rid}/{index}", rid, index, list(range(10, 10 + prompt_len)),
                    SamplingParams(**{"max_tokens": 100, **params}), arrival=0.0)


def sched(num_blocks: int = 64, block_size: int = 4, **kw) -> BatchScheduler:
    args = {"max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 64, **kw}
    return BatchScheduler(BlockManager(num_blocks, block_size), eos_token_ids=[EOS], **args)


def test_block_manager_counts_blocks_per_sequence():
    b = BlockManager(4, 4)
    b.allocate("a", 5)  # 2 blocks
    assert b.held["a"] == 2 and b.free == 2 and b.usage == 0.5
    assert b.grow("a", 8)  # still 2
    assert b.used == 2
    assert b.grow("a", 9)  # crosses into a third
    assert b.used == 3
    assert not b.can_allocate(5)
    b.release("a")
    assert b.used == 0 and b.free == 4
    with pytest.raises(MemoryError):
        b.allocate("x", 17)


def test_fifo_admission_bounded_by_max_num_seqs():
    s = sched(max_num_seqs=2)
    s.add([seq("a")])
    s.add([seq("b")])
    s.add([seq("c")])
    plan = s.schedule()
    assert [x.request_id for x in plan.prefill] == ["a", "b"]
    assert plan.decode == [] and s.num_waiting == 1
    plan = s.schedule()
    assert plan.prefill == [] and [x.request_id for x in plan.decode] == ["a", "b"]


def test_requests_join_and_leave_between_steps():
    s = sched(max_num_seqs=2)
    a, b, c = seq("a"), seq("b"), seq("c")
    s.add([a, b])
    s.schedule()
    s.add([c])
    assert s.append_token(a, 50) is None
    assert s.append_token(b, EOS) == "stop"  # b finishes: its slot frees up
    s.finish(b, "stop")
    plan = s.schedule()
    assert plan.removed == [b]
    assert plan.prefill == [c]  # c joins as soon as b left, while a keeps decoding
    assert plan.decode == [a]
    assert s.blocks.held.get("b/0") is None


def test_prefill_token_budget_per_step():
    s = sched(max_num_batched_tokens=10)
    s.add([seq("a", 6)])
    s.add([seq("b", 6)])
    assert [x.request_id for x in s.schedule().prefill] == ["a"]  # b would exceed the budget
    assert [x.request_id for x in s.schedule().prefill] == ["b"]
    big = sched(max_num_batched_tokens=4)
    big.add([seq("long", 20)])  # longer than the budget alone: admitted alone, never starved
    assert [x.request_id for x in big.schedule().prefill] == ["long"]


def test_newcomers_ride_in_the_running_rows_decode():
    s = sched(max_num_seqs=8)
    s.add([seq("a", 4)])
    first = s.schedule()
    assert first.prefill and not first.decode and not first.mixed  # nothing runs yet: a prefill alone
    assert not s.schedule().mixed  # decode only
    s.add([seq("b", 6)])
    s.add([seq("c", 3)])
    plan = s.schedule()
    assert [x.request_id for x in plan.prefill] == ["b", "c"] and [x.request_id for x in plan.decode] == ["a"]
    assert plan.mixed  # one forward: 3 rows x 6 columns = 18 tokens <= 64
    # a preempted sequence comes back with what it produced: the width is its whole context
    assert s.mixes([seq("d", 5)], [seq("e", 2)])
    long = seq("long", 30)
    long.output_ids = [1, 2, 3]
    assert not s.mixes([long], [seq("f", 2)])  # 2 x 33 = 66 > 64 padded tokens


def test_mixed_step_bounded_by_the_padded_pass():
    s = sched(max_num_seqs=8, max_num_batched_tokens=24)
    for i in range(3):
        s.add([seq(f"r{i}", 2)])
    s.schedule()  # 3 running
    s.add([seq("wide", 6)])  # 4 rows x 6 = 24 tokens: mixed
    assert s.schedule().mixed
    s.add([seq("wider", 7)])  # 5 rows x 7 = 35 > 24: its own prefill pass, then the decode
    plan = s.schedule()
    assert [x.request_id for x in plan.prefill] == ["wider"] and len(plan.decode) == 4
    assert not plan.mixed


def test_admission_waits_for_kv_blocks():
    s = sched(num_blocks=3, block_size=4)
    s.add([seq("a", 7)])  # 7 + 1 tokens → 2 blocks
    s.add([seq("b", 7)])
    assert [x.request_id for x in s.schedule().prefill] == ["a"]
    assert s.num_waiting == 1  # only 1 block left
    s.abort("a")
    plan = s.schedule()
    assert [x.request_id for x in plan.removed] == ["a"]
    assert [x.request_id for x in plan.prefill] == ["b"]


def test_full_cache_preempts_the_newest_and_recomputes_it():
    s = sched(num_blocks=4, block_size=4)
    a, b = seq("a", 3), seq("b", 3)
    s.add([a])
    s.add([b])
    s.schedule()  # each holds 1 block (3 + 1 tokens)
    assert s.blocks.used == 2
    for t in range(5):  # a grows to 8 tokens: 3 blocks with the next token's slot
        assert s.append_token(a, 100 + t) is None
    assert s.blocks.held["a/0"] == 3 and s.blocks.free == 0
    assert s.append_token(b, 200) is None  # b needs a second block: none free
    assert b.state is SeqState.WAITING and b.num_preemptions == 1
    plan = s.schedule()
    assert plan.preempted == [b] and plan.decode == [a] and plan.prefill == []
    assert b.context_ids() == list(range(10, 13)) + [200]  # recomputed with what it produced
    s.abort("a")
    plan = s.schedule()
    assert plan.prefill == [b]


def test_preempting_itself_when_it_is_the_newest():
    s = sched(num_blocks=2, block_size=2)
    a = seq("a", 1)
    s.add([a])
    s.schedule()  # 1 + 1 tokens: 1 block
    assert s.append_token(a, 7) is None  # 3 tokens with the next: 2 blocks
    assert s.append_token(a, 8) is None  # 3 tokens, 4 with the next: still 2 blocks
    assert a.state is SeqState.RUNNING
    assert s.append_token(a, 9) is None  # 5 with the next: a 3rd block, none free
    assert a.state is SeqState.WAITING and s.blocks.used == 0
    assert s.schedule().preempted == [a]


def test_stop_conditions():
    s = sched(max_model_len=10)
    a = seq("a", 4, max_tokens=3)
    b = seq("b", 4, stop_token_ids=(77,))
    c = seq("c", 4, ignore_eos=True)
    d = seq("d", 8)
    for x in (a, b, c, d):
        s.add([x])
    s.schedule()
    assert s.append_token(a, 5) is None and s.append_token(a, 5) is None
    assert s.append_token(a, 5) == "length"  # max_tokens
    assert s.append_token(b, 77) == "stop"  # a stop token
    assert s.append_token(c, EOS) is None  # ignore_eos
    assert s.append_token(d, 5) is None
    assert s.append_token(d, 5) == "length"  # the context is full (10 tokens)


def test_prompt_that_can_never_fit_is_refused():
    s = sched(max_model_len=8)
    with pytest.raises(ValueError, match="context is 8 tokens"):
        s.add([seq("a", 8)])
    small = sched(num_blocks=2, block_size=2)
    with pytest.raises(ValueError, match="KV cache"):
        small.add([seq("b", 6)])
    assert not small.has_work()


def test_n_sequences_of_one_request_abort_together():
    s = sched()
    seqs = [seq("r", 4, index=i, n=3) for i in range(3)]
    s.add(seqs)
    s.schedule()
    assert s.num_running == 3
    assert len(s.abort("r")) == 3
    assert s.num_running == 0 and s.blocks.used == 0
    assert all(x.finish_reason == "abort" for x in seqs)


def test_stop_checker_holds_back_partial_stop_strings():
    st = StopChecker(("END", "\n\n"))
    assert st.check("hello E", 0) == ("hello", False)  # "E"... may become END
    assert st.check("hello EN", 5) == (" ", False)  # the last 2 characters are held back
    assert st.check("hello ENx", 6) == ("E", False)
    assert st.check("hello ENx and END more", 7) == ("Nx and ", True)  # cut before the stop string
    assert st.check("a\n\nb", 0) == ("a", True)
    assert st.flush("abc", 1) == "bc"
    assert StopChecker(()).check("abc", 1) == ("bc", False)


def test_sampling_params_validation():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=3)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="stop"):
        SamplingParams.from_openai({"stop": 5}, 16)
    p = SamplingParams.from_openai({"stop": "x", "max_tokens": 5, "temperature": 0, "seed": 3, "n": 2}, 16)
    assert p.stop == ("x",) and p.max_tokens == 5 and p.greedy and p.seed == 3 and p.n == 2
    assert SamplingParams.from_openai({}, 16).max_tokens == 16
    assert SamplingParams.from_openai({"max_completion_tokens": 9}, 16).max_tokens == 9
