"""The built-in model's prompt cache holds no more than its capacity, counting
the logits each saved state carries (the stock count leaves them out)."""

from __future__ import annotations

import numpy as np
import pytest

llama = pytest.importorskip("llama_cpp.llama")
from llama_cpp.llama_cache import LlamaRAMCache  # noqa: E402

from localmodel.prompt_cache import PromptCache, state_bytes  # noqa: E402

VOCAB = 151_936  # Qwen2.5's vocabulary: one float per entry per kept token


def saved_state(tokens: int) -> object:
    """A state as ``Llama.save_state`` leaves it after ``tokens`` tokens: a small
    llama.cpp state, and ``tokens`` rows of logits."""
    return llama.LlamaState(
        input_ids=np.arange(tokens, dtype=np.intc),
        scores=np.zeros((tokens, VOCAB), dtype=np.single),
        n_tokens=tokens,
        llama_state=b"\0" * 1024,
        llama_state_size=1024,
        seed=0,
    )


def fill(cache: LlamaRAMCache, states: int, tokens: int) -> None:
    for number in range(states):
        cache[[number, *range(100, 100 + tokens)]] = saved_state(tokens)


def test_a_state_counts_its_logits():
    state = saved_state(10)
    assert state_bytes(state) == 1024 + 10 * VOCAB * 4 + 10 * 4


def test_the_cache_keeps_only_what_fits_its_capacity_the_oldest_going_first():
    one = state_bytes(saved_state(20))  # about 12 MB
    cache = PromptCache(capacity_bytes=2 * one + one // 2)
    fill(cache, states=5, tokens=20)
    assert len(cache.cache_state) == 2
    assert cache.cache_size <= cache.capacity_bytes
    # The two newest are the ones kept.
    assert [key[0] for key in cache.cache_state] == [3, 4]


def test_the_stock_cache_would_have_kept_them_all():
    # Why PromptCache exists: counting llama.cpp's state alone, five states of
    # 12 MB each fit a 30 MB capacity (the server grew past 22 GB this way).
    one = state_bytes(saved_state(20))
    stock = LlamaRAMCache(capacity_bytes=2 * one + one // 2)
    fill(stock, states=5, tokens=20)
    assert len(stock.cache_state) == 5
