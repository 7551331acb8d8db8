"""The offline local model: Qwen2.5-Coder-1.5B-Instruct served by llama-cpp-python.

``chatformat`` renders OpenAI-style requests into the model's ChatML prompt, builds
the grammar that constrains its output (compiled by ``grammar``) and parses that
output back (pure Python); ``handler`` is the llama-cpp-python chat handler built on
it (chat format ``reach-tools``); ``server`` serves it as an OpenAI-compatible
endpoint on loopback; ``install`` installs the runtime and assembles the verified
weights under ``var/``.
"""

from __future__ import annotations

CHAT_FORMAT = "reach-tools"
MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct"
