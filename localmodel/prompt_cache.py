"""The built-in model's prompt cache, bounded by what its states really hold.

llama-cpp-python keeps the state after each completion by its tokens, so that
the next request with the same prefix (the agent's system prompt and tools)
starts from it. Its RAM cache counts only llama.cpp's own state (the KV cache)
against its capacity. Each saved state also carries a copy of the logits of its
tokens (``scores``: a row of the vocabulary's 151,936 floats per token for
Qwen2.5, 0.6 MB a token, up to ``n_batch`` rows without ``logits_all``), which
that count leaves out: a cache of "1 GB" grew past 22 GB under ``make eval``
until the kernel killed the server.

Imported only by :mod:`localmodel.server`, once llama-cpp-python is known to be
installed.
"""

from __future__ import annotations

from llama_cpp.llama_cache import LlamaRAMCache


def state_bytes(state: object) -> int:
    """What one saved state holds: llama.cpp's state, the logits and the tokens."""
    return int(
        state.llama_state_size  # type: ignore[attr-defined]
        + state.scores.nbytes  # type: ignore[attr-defined]
        + state.input_ids.nbytes  # type: ignore[attr-defined]
    )


class PromptCache(LlamaRAMCache):  # type: ignore[misc]
    """``LlamaRAMCache`` whose size is every byte its states hold, so that its
    capacity bounds the server's memory (the oldest states go first)."""

    @property
    def cache_size(self) -> int:
        return sum(state_bytes(state) for state in self.cache_state.values())
