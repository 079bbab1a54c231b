"""A tiny causal language model built locally, for tests, the demo and the benchmarks.

No model can be downloaded here, so `build_tiny_model(path)` makes one the way a real one is
shipped: a byte-level BPE tokenizer trained with the `tokenizers` package on a small built-in
corpus (with special tokens and a chat template), and a randomly initialised Llama (or GPT-2)
configuration, both written with `save_pretrained` into `path`. The serving code then loads the
directory through the same `from_pretrained` path as any Hugging Face checkpoint. The weights are
random (seeded; a wide initialisation, so greedy decoding wanders instead of repeating one
token), so the text is gibberish, but generation is deterministic under greedy sampling and
the model emits EOS rarely, which suits length and streaming tests.

    from ember.serve.llm.testing import build_tiny_model
    path = build_tiny_model(tmp_path / "tiny-llama")        # returns the directory
"""
from __future__ import annotations

import json
import os
from typing import Any

_CORPUS = """\
Ray is a unified framework for scaling AI and Python applications. It has a core distributed
runtime and a set of AI libraries for simplifying machine learning compute. A task is a function
that runs remotely; an actor is a stateful worker; an object is an immutable value in the
distributed store. Serve is a scalable model serving library for building online inference APIs.
Data loads and transforms datasets in a streaming fashion; Train scales model training; Tune
searches hyperparameters. The scheduler places work where resources are free, and the object
store shares memory between processes on a node. Large language models generate text one token
at a time: each step reads the key and value cache of every earlier token and writes one more.
Continuous batching lets new requests join the running batch between decode steps, and finished
requests leave it, so the accelerator stays busy. Hello world, how are you today? I am fine,
thank you. The quick brown fox jumps over the lazy dog. One two three four five six seven eight
nine ten. Tell me a story about a small robot that learned to paint the sea at night.
"""

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def build_tokenizer(path: str, vocab_size: int = 512) -> Any:
    """Trains a byte-level BPE tokenizer on the built-in corpus and saves it (with a chat
    template) as a Hugging Face fast tokenizer in path; returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # unannotated in transformers
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def build_tiny_model(path: str, *, arch: str = "llama", hidden_size: int = 64, num_layers: int = 2,
                     num_heads: int = 4, vocab_size: int = 512, max_position_embeddings: int = 1024,
                     seed: int = 0) -> str:
    """Writes a tokenizer and a randomly initialised causal LM (arch "llama" or "gpt2") into
    path (created if needed) with save_pretrained; returns path. Does nothing if path already
    holds a model built with the same arguments."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    args = {"arch": arch, "hidden_size": hidden_size, "num_layers": num_layers, "num_heads": num_heads,
            "vocab_size": vocab_size, "max_position_embeddings": max_position_embeddings, "seed": seed}
    marker = os.path.join(path, "ember_tiny_model.json")
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f) == args:
                return path
    os.makedirs(path, exist_ok=True)
    tok = build_tokenizer(path, vocab_size)
    ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    if arch == "llama":
        config: Any = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                                  num_hidden_layers=num_layers, num_attention_heads=num_heads,
                                  num_key_value_heads=max(1, num_heads // 2),
                                  max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
                                  initializer_range=0.2, **ids)
    elif arch == "gpt2":
        config = GPT2Config(vocab_size=len(tok), n_embd=hidden_size, n_layer=num_layers, n_head=num_heads,
                            n_positions=max_position_embeddings, initializer_range=0.2, **ids)
    else:
        raise ValueError(f"arch must be 'llama' or 'gpt2', not {arch!r}")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]  # unannotated in transformers
    model.generation_config.max_length = max_position_embeddings
    model.save_pretrained(path)
    with open(marker, "w") as f:
        json.dump(args, f)
    return path
