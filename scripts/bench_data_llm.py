"""LLM batch inference, side by side: `ember.data.llm`'s processor against the limit, a direct
engine loop over the same prompts (Ember's continuous-batching torch engine, `ember.serve.llm.LLM`,
driven by one process with every prompt in flight at once).

    .venv/bin/python scripts/bench_data_llm.py --prompts 384 --max-tokens 32 --rounds 3

Each system runs in a fresh process per round, the order alternating (ABBA) so that a drift of the
machine's speed hits both alike; the tiny model (build_tiny_model, random weights, greedy decoding
with ignore_eos) is written once to a temporary directory. Two figures per system:

- generation tokens/s, the engine up: the direct loop's clock starts after its engine is built and
  stops when the last output is back; the processor's starts when its engine actor began the first
  batch (the first batch's arrival at the driver less that batch's `time_taken_llm`) and stops when
  the last batch reaches the driver, so it counts every gap between batches and every hop of the
  Dataset pipeline, but not the engine actor's start;
- end to end tokens/s from the process's start (imports, engine build or actor start included;
  the processor's cluster is started before its clock).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _direct(a: argparse.Namespace) -> dict[str, float]:
    t0 = time.perf_counter()
    from ember.serve.llm import LLM, SamplingParams

    prompts = [f"question number {i}" for i in range(a.prompts)]
    llm = LLM(model=a.model_dir, max_num_seqs=a.max_num_seqs)
    t1 = time.perf_counter()
    outs = asyncio.run(llm.generate(prompts, SamplingParams(max_tokens=a.max_tokens, temperature=0.0,
                                                            ignore_eos=True)))
    t2 = time.perf_counter()
    llm.shutdown()
    tokens = sum(o.outputs[0].num_tokens for o in outs)
    return {"generation": tokens / (t2 - t1), "end_to_end": tokens / (t2 - t0)}


def _processor(a: argparse.Namespace) -> dict[str, float]:
    import ember
    from ember.data.llm import build_processor, vLLMEngineProcessorConfig

    ember.init(num_cpus=2)
    config = vLLMEngineProcessorConfig(model_source=a.model_dir, batch_size=a.batch_size, concurrency=1,
                                       chat_template_stage=False,
                                       engine_kwargs={"max_num_seqs": a.max_num_seqs})
    sampling = {"max_tokens": a.max_tokens, "temperature": 0.0, "ignore_eos": True}
    processor = build_processor(config, preprocess=lambda row: {"prompt": row["q"], "sampling_params": sampling})
    ds = ember.data.from_items([{"q": f"question number {i}"} for i in range(a.prompts)])
    t0 = time.perf_counter()
    tokens, engine_began = 0, None
    for batch in processor(ds).iter_batches(batch_size=None, batch_format="pyarrow"):
        if engine_began is None:
            engine_began = time.perf_counter() - max(batch.column("time_taken_llm").to_pylist())
        tokens += sum(batch.column("num_generated_tokens").to_pylist())
    t2 = time.perf_counter()
    ember.shutdown()
    assert engine_began is not None and tokens == a.prompts * a.max_tokens, tokens
    return {"generation": tokens / (t2 - engine_began), "end_to_end": tokens / (t2 - t0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=384)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=128, help="the processor's rows per engine call")
    p.add_argument("--max-num-seqs", type=int, default=32, help="the engine's batch (both systems)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--one", choices=["direct", "processor"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps((_direct if a.one == "direct" else _processor)(a)))
        return

    from ember.serve.llm.testing import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(os.path.join(tmp, "llama"))
        ratios, rates, e2e = [], {"direct": [], "processor": []}, {"direct": [], "processor": []}
        for rnd in range(a.rounds):
            order = ["direct", "processor"] if rnd % 2 == 0 else ["processor", "direct"]
            got = {}
            for name in order:
                cmd = [sys.executable, __file__, "--one", name, "--model-dir", model_dir,
                       "--prompts", str(a.prompts), "--max-tokens", str(a.max_tokens),
                       "--batch-size", str(a.batch_size), "--max-num-seqs", str(a.max_num_seqs)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
                got[name] = json.loads(out.strip().splitlines()[-1])
            for name, r in got.items():
                rates[name].append(r["generation"])
                e2e[name].append(r["end_to_end"])
            ratios.append(rates["processor"][-1] / rates["direct"][-1])
            print(f"round {rnd + 1}: generation tok/s (end to end): direct "
                  f"{rates['direct'][-1]:,.0f} ({e2e['direct'][-1]:,.0f}), processor "
                  f"{rates['processor'][-1]:,.0f} ({e2e['processor'][-1]:,.0f}), ratio {ratios[-1]:.3f}",
                  flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"median generation tok/s: direct {med['direct']:,.0f}, processor {med['processor']:,.0f}, "
              f"ratio of medians {med['processor'] / med['direct']:.3f}, median of round ratios "
              f"{statistics.median(ratios):.3f}; end to end: direct {statistics.median(e2e['direct']):,.0f}, "
              f"processor {statistics.median(e2e['processor']):,.0f}")


if __name__ == "__main__":
    main()
