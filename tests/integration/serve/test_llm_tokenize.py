"""The replica's prompt encoder (frontend.fast_encoder): the fast tokenizer's backend called
directly gives exactly the tokenizer's ids, and is refused when it could differ. In the
integration tier for its weight (torch and transformers), not for processes."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")

from ember.serve.llm._internal.frontend import TokenizerSide, fast_encoder  # noqa: E402
from ember.serve.llm._internal.torch_engine import load_tokenizer  # noqa: E402
from ember.serve.llm.testing import build_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama")))


def test_the_backend_encodes_as_the_tokenizer(tokenizer):
    enc = fast_encoder(tokenizer)
    assert enc is not False  # the tiny model's tokenizer is a plain fast one
    rng = random.Random(7)
    alphabet = "abcdefghij XYZ,.!?\n\t0123456789éü世🙂<>/"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(300)]
    texts += [f"{t} {tokenizer.eos_token} {t}" for t in texts[:20] if tokenizer.eos_token]
    for t in texts:
        assert enc(t) == list(tokenizer(t, add_special_tokens=False).input_ids), repr(t)


def test_refused_when_it_could_differ(tokenizer):
    class Slow:
        is_fast = False
    assert fast_encoder(Slow()) is False
    backend = tokenizer.backend_tokenizer
    backend.enable_truncation(max_length=3)
    try:
        assert fast_encoder(tokenizer) is False
    finally:
        backend.no_truncation()


def test_the_engine_side_uses_it_once_resolved(tokenizer):
    side = TokenizerSide()
    side.tokenizer = tokenizer
    assert side.encode("Tell me a story") == list(tokenizer("Tell me a story", add_special_tokens=False).input_ids)
    assert callable(side.__dict__["_encode_fast"])


def test_the_chat_template_still_applies(tokenizer):
    side = TokenizerSide()
    side.tokenizer = tokenizer
    assert tokenizer.chat_template  # build_tiny_model gives its tokenizer one
    text = side.apply_chat_template([{"role": "user", "content": "hi"}])
    assert "hi" in text and side.encode(text)
