"""Serve the local model as an OpenAI-compatible endpoint on loopback.

``python -m localmodel.server --model PATH --host 127.0.0.1 --port N
[--n-ctx 4096] [--threads 2] [--model-alias NAME]`` loads the verified GGUF weights
into the llama-cpp-python server with the ``reach-tools`` chat format, serves
``/v1/chat/completions`` and ``/v1/models``, sends itself one warm-up request and then
prints exactly one line to stdout, ``READY http://HOST:PORT/v1``, for a supervisor to
wait on (``--port 0`` picks a free port, shown in that line). Everything else goes to
stderr. SIGTERM or SIGINT stops it with exit code 0.

Exit codes: 0 after a signal, 1 when the server or its warm-up fails, 2 when it
refuses to start (weights missing or not verified, runtime not installed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from localmodel import CHAT_FORMAT, MODEL_ALIAS
from localmodel.install import model_problem

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
WARMUP_TIMEOUT_SECONDS = 300.0
INSTALL_HINT = "install it with: python -m localmodel.install"


#: What the prompt cache may hold, every byte counted (localmodel.prompt_cache):
#: about six prompt states of the 1.5B model, each mostly its copy of the logits.
PROMPT_CACHE_BYTES = 2 << 30


def log(message: str) -> None:
    """Write one line to stderr (stdout carries only the READY line)."""
    print(f"local model server: {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m localmodel.server",
        description="Serve the local model as an OpenAI-compatible endpoint.",
    )
    parser.add_argument("--model", type=Path, required=True, help="the GGUF weights")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads")
    parser.add_argument("--model-alias", default=MODEL_ALIAS, help="the model's id")
    return parser.parse_args(argv)


def url_host(host: str) -> str:
    """The host to put in a URL for a listen address."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def warm_up(base_url: str, model: str) -> float:
    """Send one small tool-offering chat request; return how long it took."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello!"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_time",
                    "description": "Return the current time",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 8,
    }
    started = time.monotonic()
    response = httpx.post(
        f"{base_url}/chat/completions", json=body, timeout=WARMUP_TIMEOUT_SECONDS
    )
    response.raise_for_status()
    if not response.json().get("choices"):
        raise RuntimeError(f"warm-up answer has no choices: {response.text[:300]}")
    return time.monotonic() - started


def _serve_models_without_lock(app: Any, alias: str) -> None:
    """Answer ``/v1/models`` without waiting for a running generation.

    The stock route takes the model lock, so a health check would wait behind a
    long completion.
    """
    app.router.routes[:] = [
        route
        for route in app.router.routes
        if getattr(route, "path", "") != "/v1/models"
    ]

    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": alias, "object": "model", "owned_by": "me", "permissions": []}
            ],
        }

    app.add_api_route("/v1/models", models, methods=["GET"], summary="Models")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; return the exit code."""
    args = parse_args(argv)
    problem = model_problem(args.model)
    if problem is not None:
        log(f"refusing to start: {problem}; {INSTALL_HINT}")
        return EXIT_REFUSED

    servers: list[Any] = []
    warmup_failed = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if servers:
            servers[0].should_exit = True
        else:
            raise SystemExit(EXIT_OK)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        # llama-cpp-python[server] is optional (installed by localmodel.install):
        # without it the server refuses to start with a hint, instead of crashing.
        import uvicorn
        from llama_cpp.server import app as llama_server
        from llama_cpp.server.settings import ModelSettings, ServerSettings

        from localmodel import handler  # noqa: F401 - registers reach-tools
        from localmodel.prompt_cache import PromptCache
    except ImportError as error:
        log(
            f"refusing to start: llama-cpp-python is not installed ({error}); "
            f"{INSTALL_HINT}"
        )
        return EXIT_REFUSED

    started = time.monotonic()
    # model_construct: take these values only, never the environment's (pydantic
    # settings would read variables such as API_KEY or VERBOSE).
    server_settings = ServerSettings.model_construct(
        host=args.host, port=args.port, api_key=None, interrupt_requests=False
    )
    model_settings = ModelSettings.model_construct(
        model=str(args.model),
        model_alias=args.model_alias,
        chat_format=CHAT_FORMAT,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_gpu_layers=0,
        # The prompt cache is set below (PromptCache): the stock one undercounts.
        cache=False,
        # No logits kept for every token: nothing asks for logprobs, and each
        # cached state copies them (n_ctx x 151,936 floats were 2.5 GB).
        logits_all=False,
        verbose=False,
    )
    try:
        app = llama_server.create_app(
            server_settings=server_settings, model_settings=[model_settings]
        )
        # Prompt states kept in RAM by their tokens: a conversation that comes
        # back after another one ran still starts from its longest known prefix
        # (the agent's system prompt and tools, read once at warm-up). The app
        # holds its one model in a module global (no public accessor).
        llama = llama_server._llama_proxy(args.model_alias)
        llama.set_cache(PromptCache(capacity_bytes=PROMPT_CACHE_BYTES))
    except Exception as error:  # noqa: BLE001 - report any load failure plainly
        log(f"could not load {args.model}: {error}")
        return EXIT_FAILED
    _serve_models_without_lock(app, args.model_alias)
    log(f"model loaded in {time.monotonic() - started:.1f}s")

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    )
    servers.append(server)

    def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        base_url = f"http://{url_host(args.host)}:{port}/v1"
        try:
            seconds = warm_up(base_url, args.model_alias)
        except Exception as error:  # noqa: BLE001 - any failure means not ready
            log(f"warm-up request failed: {error}")
            warmup_failed.set()
            server.should_exit = True
            return
        log(
            f"warm-up request took {seconds:.1f}s; ready after "
            f"{time.monotonic() - started:.1f}s"
        )
        print(f"READY {base_url}", flush=True)

    threading.Thread(target=announce, name="warm-up", daemon=True).start()
    server.run()
    code = EXIT_FAILED if warmup_failed.is_set() else EXIT_OK
    sys.stdout.flush()
    sys.stderr.flush()
    busy = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.main_thread() and not thread.daemon
    ]
    if busy:
        # A generation still running in a worker thread cannot be interrupted.
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
